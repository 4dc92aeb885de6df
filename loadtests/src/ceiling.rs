//! The ceiling: a bare hyper HTTP/1.1 server that reads each request body and answers with
//! one fixed body, the bytes of a real `resources/read` answer. It parses no JSON and does no
//! work, so its throughput is what this machine, this client and hyper can do at all; the
//! proxy's figures are read as a fraction of it. It runs as a child process like the proxy
//! ([`CeilingProcess`]): run inside the load generator, sharing its heap and allocator with
//! the clients, it measured below the proxy's cache-hit path, which a ceiling must not.

use std::convert::Infallible;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{AbortHandle, JoinSet};

/// A running ceiling server; stopped (every connection closed) on drop.
pub struct Ceiling {
    pub addr: SocketAddr,
    accept: AbortHandle,
}

impl Drop for Ceiling {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Ceiling {
    /// Serves `body` as `application/json` on an ephemeral loopback port.
    pub async fn start(body: Bytes) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(accept(listener, body)).abort_handle();
        Ok(Self { addr, accept })
    }
}

async fn accept(listener: TcpListener, body: Bytes) {
    // Connection tasks live in this set: aborting the accept loop drops it, which aborts them.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let body = body.clone();
                conns.spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let body = body.clone();
                        async move {
                            // Read the request like a real server would, then answer.
                            let _ = req.into_body().collect().await;
                            let mut resp = Response::new(Full::new(body));
                            resp.headers_mut().insert(
                                CONTENT_TYPE,
                                HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Reap finished connections so the set does not grow with churn.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// What the child prints once it listens.
const READY_PREFIX: &str = "listening ";

/// The ceiling as a child process: `resmux-load serve-ceiling --body FILE`. It ends when its
/// stdin closes, so it cannot outlive this process.
pub struct CeilingProcess {
    pub addr: SocketAddr,
    child: Child,
    workdir: PathBuf,
}

impl CeilingProcess {
    /// Starts `exe serve-ceiling` serving `body` and waits for its address.
    pub async fn spawn(exe: &Path, body: &[u8]) -> Result<Self> {
        Self::spawn_under(&[], exe, body, Duration::from_secs(10)).await
    }

    /// The same, run by `wrapper` (e.g. `valgrind --tool=callgrind`; empty: none), allowing
    /// `ready` for the address.
    pub async fn spawn_under(wrapper: &[OsString], exe: &Path, body: &[u8], ready: Duration) -> Result<Self> {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let workdir = std::env::temp_dir().join(format!("resmux-load-ceiling-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&workdir)?;
        let file = workdir.join("body.json");
        std::fs::write(&file, body)?;
        let mut command = crate::placement::wrapped(wrapper, exe);
        let mut child = command
            .arg("serve-ceiling")
            .arg("--body")
            .arg(&file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} serve-ceiling", exe.display()))?;
        let stdout = child.stdout.take().context("child stdout")?;
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        let ready = tokio::time::timeout(ready, stdout.read_line(&mut line)).await;
        let addr = match ready {
            Ok(Ok(_)) => line.trim().strip_prefix(READY_PREFIX).and_then(|a| a.parse().ok()),
            _ => None,
        };
        let Some(addr) = addr else {
            let _ = child.kill().await;
            let _ = std::fs::remove_dir_all(&workdir);
            bail!("the ceiling process did not report its address (got {line:?})");
        };
        Ok(Self { addr, child, workdir })
    }

    /// The child's process id (`None` once it has been waited for).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the child the way it stops itself, by closing its stdin, and waits up to
    /// `within` for it to exit (a wrapper such as callgrind writes its output then); killed
    /// after that.
    pub async fn finish(mut self, within: Duration) -> Result<std::process::ExitStatus> {
        drop(self.child.stdin.take());
        let status = tokio::time::timeout(within, self.child.wait()).await;
        let _ = std::fs::remove_dir_all(&self.workdir);
        match status {
            Ok(status) => Ok(status?),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("the ceiling process did not exit within {within:?} of its stdin closing")
            }
        }
    }

    /// Stops the child.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.workdir);
    }
}

/// The `serve-ceiling` command: serves the body in `body_file` on an ephemeral loopback port,
/// prints `listening ADDR`, and ends when stdin closes or at SIGTERM or SIGINT ([`StopSignal`]).
pub async fn serve_child(body_file: &Path) -> Result<()> {
    let body = std::fs::read(body_file).with_context(|| format!("reading {}", body_file.display()))?;
    let ceiling = Ceiling::start(Bytes::from(body)).await?;
    let stop = StopSignal::install();
    let mut out = tokio::io::stdout();
    out.write_all(format!("{READY_PREFIX}{}\n", ceiling.addr).as_bytes()).await?;
    out.flush().await?;
    stop.wait().await;
    drop(ceiling);
    Ok(())
}

/// How a child is told to stop: standard input closing (the parent's signal), or SIGTERM or
/// SIGINT: a process killed by a signal's default action drops nothing, so the servers it
/// started as children of its own (`targets`) would outlive it. Made before the child says
/// it is ready, so a signal sent as soon as the parent reads that is not lost to the
/// default action.
pub struct StopSignal {
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignal {
    /// Installs the SIGTERM and SIGINT handlers (without them, stdin alone stops the child).
    pub fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => Some((term, int)),
            _ => None,
        };
        Self { signals }
    }

    /// Returns when standard input closes or one of the signals arrives.
    pub async fn wait(self) {
        let closed = async {
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 64];
            while let Ok(n) = stdin.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        };
        match self.signals {
            Some((mut term, mut int)) => {
                tokio::select! {
                    _ = closed => {}
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            None => closed.await,
        }
    }
}
