//! stdio upstreams: a supervised child process speaking newline-delimited JSON-RPC.
//!
//! A supervisor task owns the process. It publishes the live connection through a `watch`
//! channel; requests wait for one (within their deadline), register a pending slot keyed by
//! their upstream id, and write one line. When the process exits every pending request fails
//! as retryable, and the supervisor restarts it with jittered exponential backoff.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::backoff::Backoff;
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::Reply;
use crate::jsonrpc::{Incoming, Kind, encode_notification};
use crate::mcp::notify::{Change, Unsolicited, subscription_of};

/// How to start the process.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    pub name: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Longest accepted stdout line.
    pub max_line: usize,
    /// Longest wait between restarts.
    pub backoff_max: Duration,
    /// Where notifications outside any listen go (legacy servers send them unasked).
    pub unsolicited: tokio::sync::broadcast::Sender<Unsolicited>,
}

/// A live process: the writer queue and the requests awaiting an answer.
struct Conn {
    generation: u64,
    /// Lines to the process's stdin. Bounded; when full, senders wait (the in-flight limit
    /// upstream of here bounds how many can wait).
    tx: mpsc::Sender<Bytes>,
    pending: Mutex<HashMap<Box<str>, oneshot::Sender<Bytes>>>,
    /// Open listens by id: their notifications and final response go here. Bounded; a listen
    /// whose consumer falls `LISTEN_QUEUE` messages behind is dropped (and re-opened with a
    /// resync by its owner) rather than stalling the reader for every other request.
    listens: Mutex<HashMap<Box<str>, mpsc::Sender<Bytes>>>,
    closed: CancellationToken,
}

/// Handle to a supervised stdio server.
#[derive(Clone)]
pub struct StdioTransport {
    name: String,
    conn: watch::Receiver<Option<Arc<Conn>>>,
}

/// Number of queued stdin lines per process before writers wait.
const WRITE_QUEUE: usize = 1024;
/// Messages buffered per open listen before it counts as overflowing.
const LISTEN_QUEUE: usize = 256;
/// A process that ran this long before exiting restarts with the shortest backoff again.
const HEALTHY_RUN: Duration = Duration::from_secs(30);
/// How long a process gets to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

impl StdioTransport {
    /// Starts the supervisor on `tracker`; it stops when `cancel` fires.
    pub fn spawn(spec: StdioSpec, cancel: CancellationToken, tracker: &TaskTracker) -> Self {
        let (tx, rx) = watch::channel(None);
        let name = spec.name.clone();
        tracker.spawn(supervise(spec, tx, cancel));
        Self { name, conn: rx }
    }

    /// The generation of the live process, bumped on every restart (0: none yet).
    pub fn generation(&self) -> u64 {
        self.conn.borrow().as_ref().map_or(0, |c| c.generation)
    }

    /// Waits until a process with a generation other than `seen` is live.
    pub async fn wait_generation_change(&self, seen: u64) -> u64 {
        let mut rx = self.conn.clone();
        let generation = rx
            .wait_for(|c| c.as_ref().is_some_and(|c| c.generation != seen))
            .await
            .map(|c| c.as_ref().map_or(0, |c| c.generation));
        match generation {
            Ok(g) => g,
            Err(_) => std::future::pending().await,
        }
    }

    /// Sends one request line and waits for the response with the same id. Dropping the
    /// future before it completes tells the server with `notifications/cancelled`.
    pub async fn exchange(&self, id: &str, line: Bytes) -> Result<Reply, UpstreamError> {
        let mut rx = self.conn.clone();
        let conn = match rx.wait_for(|c| c.is_some()).await {
            Ok(c) => c.clone().expect("waited for Some"),
            Err(_) => return Err(self.unavailable("supervisor stopped")),
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        conn.pending.lock().expect("pending lock").insert(id.into(), reply_tx);
        let mut guard = PendingGuard { conn: &conn, id, done: false };
        if conn.tx.send(line).await.is_err() {
            return Err(self.disconnected("process stdin closed"));
        }
        let message = reply_rx.await.map_err(|_| self.disconnected("process exited"))?;
        guard.done = true;
        Reply::decode(&message, Some(id))
            .map_err(|e| UpstreamError::new(self.name.clone(), UpstreamErrorKind::malformed(e)))
    }

    /// Sends a `subscriptions/listen` line; its messages arrive on the returned channel until
    /// the guard is dropped (which cancels it upstream) or the process exits (channel closes).
    pub async fn open_listen(
        &self,
        id: &str,
        line: Bytes,
    ) -> Result<(mpsc::Receiver<Bytes>, ListenGuard), UpstreamError> {
        let mut rx = self.conn.clone();
        let conn = match rx.wait_for(|c| c.is_some()).await {
            Ok(c) => c.clone().expect("waited for Some"),
            Err(_) => return Err(self.unavailable("supervisor stopped")),
        };
        let (tx, messages) = mpsc::channel(LISTEN_QUEUE);
        conn.listens.lock().expect("listens lock").insert(id.into(), tx);
        let guard = ListenGuard { conn, id: id.into() };
        if guard.conn.tx.send(line).await.is_err() {
            return Err(self.disconnected("process stdin closed"));
        }
        Ok((messages, guard))
    }

    /// Writes one line (a notification) to the live process.
    pub async fn send_line(&self, line: Bytes) -> Result<(), UpstreamError> {
        let mut rx = self.conn.clone();
        let conn = match rx.wait_for(|c| c.is_some()).await {
            Ok(c) => c.clone().expect("waited for Some"),
            Err(_) => return Err(self.unavailable("supervisor stopped")),
        };
        conn.tx.send(line).await.map_err(|_| self.disconnected("process stdin closed"))
    }

    fn unavailable(&self, reason: &str) -> UpstreamError {
        UpstreamError::new(self.name.clone(), UpstreamErrorKind::Unavailable { reason: reason.into() })
    }

    fn disconnected(&self, reason: &str) -> UpstreamError {
        UpstreamError::new(self.name.clone(), UpstreamErrorKind::Disconnected { reason: reason.into() })
    }
}

/// Removes an abandoned request's slot and cancels it upstream.
struct PendingGuard<'a> {
    conn: &'a Conn,
    id: &'a str,
    done: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let removed = self.conn.pending.lock().expect("pending lock").remove(self.id).is_some();
        if removed {
            let params = format!(r#"{{"requestId":{},"reason":"cancelled downstream"}}"#, self.id);
            // Best effort: a full queue means the process is already far behind.
            let _ = self.conn.tx.try_send(encode_notification(crate::mcp::method::CANCELLED, params.as_bytes()));
        }
    }
}

/// Cancels a stdio listen when dropped.
pub struct ListenGuard {
    conn: Arc<Conn>,
    id: Box<str>,
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        let open = self.conn.listens.lock().expect("listens lock").remove(&self.id).is_some();
        if open {
            let params = format!(r#"{{"requestId":{},"reason":"listen closed"}}"#, self.id);
            let _ = self.conn.tx.try_send(encode_notification(crate::mcp::method::CANCELLED, params.as_bytes()));
        }
    }
}

async fn supervise(spec: StdioSpec, publish: watch::Sender<Option<Arc<Conn>>>, cancel: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(100), spec.backoff_max);
    let mut generation = 0;
    while !cancel.is_cancelled() {
        let started = Instant::now();
        match start(&spec) {
            Err(e) => {
                tracing::warn!(upstream = %spec.name, error = %e, "cannot start stdio upstream")
            }
            Ok(child) => {
                generation += 1;
                tracing::info!(upstream = %spec.name, generation, pid = child.id(), "stdio upstream started");
                run(&spec, child, generation, &publish, &cancel).await;
            }
        }
        if cancel.is_cancelled() {
            break;
        }
        if started.elapsed() >= HEALTHY_RUN {
            backoff.reset();
        }
        let delay = backoff.next_delay();
        tracing::info!(upstream = %spec.name, ?delay, "restarting stdio upstream after backoff");
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

fn start(spec: &StdioSpec) -> std::io::Result<Child> {
    let (program, args) = spec
        .command
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    cmd.spawn()
}

/// Runs one process until it exits or the proxy stops.
async fn run(
    spec: &StdioSpec,
    mut child: Child,
    generation: u64,
    publish: &watch::Sender<Option<Arc<Conn>>>,
    cancel: &CancellationToken,
) {
    let (Some(mut stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        tracing::error!(upstream = %spec.name, "stdio pipes missing");
        return;
    };
    let (tx, mut rx) = mpsc::channel::<Bytes>(WRITE_QUEUE);
    let conn = Arc::new(Conn {
        generation,
        tx,
        pending: Mutex::new(HashMap::new()),
        listens: Mutex::new(HashMap::new()),
        closed: CancellationToken::new(),
    });
    let closed = conn.closed.clone();
    let writer = tokio::spawn(async move {
        loop {
            let line = tokio::select! {
                _ = closed.cancelled() => break,
                line = rx.recv() => match line { Some(l) => l, None => break },
            };
            if stdin.write_all(&line).await.is_err() || stdin.write_all(b"\n").await.is_err() {
                break;
            }
            // Flush only when nothing else is queued, so bursts go out in one write.
            if rx.is_empty() && stdin.flush().await.is_err() {
                break;
            }
        }
        // Dropping stdin closes it: the server's signal to exit.
    });
    let name = spec.name.clone();
    let logger = tokio::spawn(async move {
        let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(8 * 1024));
        while let Some(line) = lines.next().await {
            match line {
                Ok(line) => tracing::info!(upstream = %name, stderr = %line, "upstream stderr"),
                Err(e) => tracing::debug!(upstream = %name, error = %e, "upstream stderr"),
            }
        }
    });
    publish.send_replace(Some(conn.clone()));

    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(spec.max_line));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            line = lines.next() => match line {
                None => break,
                Some(Ok(line)) => on_line(spec, &conn, Bytes::from(line.into_bytes())),
                Some(Err(e)) => {
                    tracing::warn!(upstream = %spec.name, error = %e, "bad stdout line from upstream");
                    if matches!(e, tokio_util::codec::LinesCodecError::Io(_)) { break }
                }
            }
        }
    }
    publish.send_replace(None);
    conn.closed.cancel();
    conn.pending.lock().expect("pending lock").clear();
    conn.listens.lock().expect("listens lock").clear();
    let _ = writer.await;
    let status = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await
        }
    };
    logger.abort();
    tracing::warn!(upstream = %spec.name, generation, ?status, "stdio upstream exited");
}

fn on_line(spec: &StdioSpec, conn: &Conn, line: Bytes) {
    let name = spec.name.as_str();
    let Ok(text) = std::str::from_utf8(&line) else {
        tracing::warn!(upstream = %name, "non-UTF-8 line from upstream");
        return;
    };
    let msg = match Incoming::parse(text) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(upstream = %name, error = %e, "unparsable line from upstream");
            return;
        }
    };
    match msg.kind {
        Kind::Response => {
            let Some(id) = msg.id.as_ref() else { return };
            let slot = conn.pending.lock().expect("pending lock").remove(id.as_json());
            if let Some(tx) = slot {
                let _ = tx.send(line.clone());
                return;
            }
            // The final response of a listen ends it.
            let listen = conn.listens.lock().expect("listens lock").remove(id.as_json());
            match listen {
                Some(tx) => {
                    let _ = tx.try_send(line.clone());
                }
                None => tracing::debug!(upstream = %name, %id, "response to no pending request"),
            }
        }
        Kind::Notification => {
            let Some(sub) = subscription_of(&msg) else {
                // Legacy servers announce changes unasked.
                if let Some(change) = Change::of(&msg) {
                    let _ = spec.unsolicited.send(Unsolicited::Change(change));
                }
                return;
            };
            let mut listens = conn.listens.lock().expect("listens lock");
            if let Some(tx) = listens.get(sub.as_str())
                && tx.try_send(line.clone()).is_err()
            {
                tracing::warn!(upstream = %name, subscription = %sub, "listen consumer fell behind; dropping it");
                listens.remove(sub.as_str());
            }
        }
        Kind::Request => {
            // Modern servers send none; legacy ones may ping or ask for things the proxy declines.
            if let Some(answer) = super::legacy::answer_server_request(&msg) {
                let _ = conn.tx.try_send(answer);
            }
        }
    }
}
