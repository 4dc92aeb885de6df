//! Accepting downstream connections: `TCP_NODELAY`, a bound on concurrent connections and on
//! connections per peer address, HTTP/1.1 keep-alive (and, when configured, HTTP/2 with prior
//! knowledge), optionally TLS (rustls, the handshake on the connection's own task, ALPN from
//! the server configuration), the transport limits of `[listen]`, and graceful shutdown on
//! cancellation.
//!
//! HTTP/1.1-only is the default because it is what MCP clients speak in clear text, and
//! because a connection served by the dual-protocol builder carries the HTTP/2 state machine
//! in its future whatever the client speaks: with 10,000 idle listen streams the proxy's RSS
//! was 304 MB with it and 212 MB without (`resmux-load run fanout-10k`).
//!
//! Limits (see `SECURITY.md`):
//! - `max_header_bytes`: hyper's `max_header_size` (checked on partial heads too, so an
//!   unfinished head cannot grow past it) and `max_buf_size` (the read buffer); hyper answers a
//!   larger head with `431` (no body) and closes.
//! - `header_timeout` / `idle_timeout`: [`crate::conn_timer`], a per-connection timer. hyper's own
//!   `header_read_timeout` starts when hyper begins *waiting* for a head — at accept, and on a
//!   keep-alive connection as soon as the previous response is written — so on its own it
//!   would make the idle time between requests equal to the header timeout. The timer tells
//!   the two apart: the head deadline runs from the head's first byte, the idle deadline from
//!   the end of the last response. hyper gets no timer: its header timeout would only ever
//!   fire after the timer's, and arming it costs a timer entry per request. With HTTP/2 the
//!   timer counts streams in flight, and any frame read while idle counts as a head begun.
//! - `max_connections_per_ip`: counted at accept; see [`refuse`].

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use slab::Slab;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::coalesce::Coalesced;
use crate::conn_timer::{ConnTimer, Expired, Expiry, Timed};
use crate::lean::{self, Lean, LeanShared, Takes, http1_builder};
use crate::per_ip::{IpSlot, PerIp};
use crate::service::{self, ConnEvent, Service};

/// How long a refused connection is drained after its 429, so that closing it does not reset
/// the 429 away; and how many refused connections may be draining at once (beyond that they
/// are closed right after the 429 is written).
const REFUSE_LINGER: Duration = Duration::from_secs(1);
const MAX_LINGERING: usize = 64;

/// How long a client gets to complete the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The connection limits of a listener.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    /// 0 = unlimited.
    pub max_connections_per_ip: usize,
    /// Whether loopback peers count toward `max_connections_per_ip`.
    pub limit_loopback: bool,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
    pub http2: bool,
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` of an HTTP/2 connection.
    pub http2_max_concurrent_streams: u32,
    /// Serve clear-text HTTP/1.1 streams (requests with the service's marker) on the lean
    /// path ([`crate::lean`]).
    pub lean_streams: bool,
    /// Serve other small HTTP/1.1 POSTs on the lean path too.
    pub lean_requests: bool,
}

/// Serves `service` on `listener` until `cancel`, then gives open connections `drain` to
/// finish their in-flight requests (the service ends its streams at `cancel` too).
/// With `tls`, every connection is TLS (its ALPN list should offer `h2` only when `http2` is
/// set).
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    drain: Duration,
    cancel: CancellationToken,
) {
    let tls = tls.map(TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    // Connection tasks (and refused connections' lingering) belong to this tracker, which
    // this task waits for before it ends: the listener's task stands for its whole tree.
    let tasks = TaskTracker::new();
    // The connections open, each told when the drain runs out: it is dropped (closed) then.
    let open = Arc::new(Open::default());
    let local = listener.local_addr().ok();
    // One span for the listener, one per connection under it, one per request under that (in
    // the service): the shape of linkerd2-proxy's server stack.
    let listener_span = tracing::info_span!("serve", listener = S::LABEL, addr = ?local, tls = tls.is_some());
    // Each connection holds a permit; at the bound, accepting pauses (the kernel backlog holds
    // further connections) instead of failing them. Idle connections give theirs back after
    // `idle_timeout`, so a crowd of silent sockets cannot hold the bound forever.
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let per_ip = Arc::new(PerIp::new(limits.max_connections_per_ip, limits.limit_loopback));
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING));
    let refusal = service.refusal();
    // hyper rejects a buffer under 8192 bytes; config validation enforces that minimum.
    let buf = limits.max_header_bytes.max(8192);
    let http1 = http1_builder(limits.max_header_bytes);
    let mut auto = auto::Builder::new(TokioExecutor::new());
    // The dual-protocol builder has no `max_header_size`; its read-buffer cap bounds the head.
    auto.http1().max_buf_size(buf);
    auto.http2()
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.http2_max_concurrent_streams);
    // The lean path's settings, shared by its connections; `None` when the service's path is
    // not a request target (anything else is hyper's).
    let lean_shared = lean::target(service.path()).map(|uri| {
        let (marker, marker_value) = S::STREAM_MARKER;
        Arc::new(LeanShared {
            service: service.clone(),
            takes: Takes { streams: limits.lean_streams, requests: limits.lean_requests, marker, marker_value },
            uri,
            max_head: limits.max_header_bytes,
            cancel: cancel.clone(),
            http1: http1.clone(),
        })
    });
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => break,
            p = permits.clone().acquire_owned() => p.expect("never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = per_ip.take(peer.ip()) else {
            drop(permit);
            service.observe(ConnEvent::RefusedPerIp);
            tracing::debug!(%peer, "refused: max_connections_per_ip");
            refuse(stream, refusal.clone(), &lingering, &tasks);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let span = tracing::info_span!(parent: &listener_span, "conn", peer = %peer);
        let timer = ConnTimer::new(limits.header_timeout, limits.idle_timeout);
        let held = Held {
            _permit: permit,
            _slot: slot,
            expiry: timer.expired(),
            service: service.clone(),
            _open: Open::add(&open, &timer),
        };
        if let Some(acceptor) = &tls {
            let hyper_service = service::for_hyper(service.clone(), timer.clone(), peer);
            let (acceptor, watcher, cancel) = (acceptor.clone(), graceful.watcher(), cancel.clone());
            let (http1, auto, http2) = (http1.clone(), auto.clone(), limits.http2);
            tasks.spawn(
                async move {
                    let stream = tokio::select! {
                        _ = cancel.cancelled() => return,
                        r = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)) => match r {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                        },
                    };
                    if http2 {
                        let io = TokioIo::new(Coalesced::new(Timed::new(stream, timer)));
                        run_connection(watcher.watch(auto.serve_connection(io, hyper_service).into_owned()), held)
                            .await;
                    } else {
                        let io = TokioIo::new(Timed::new(stream, timer));
                        run_connection(watcher.watch(http1.serve_connection(io, hyper_service)), held).await;
                    }
                }
                .instrument(span),
            );
            continue;
        }
        if (limits.lean_streams || limits.lean_requests)
            && !limits.http2
            && let Some(shared) = &lean_shared
        {
            let lean = Lean { shared: shared.clone(), peer, timer: timer.clone(), watcher: graceful.watcher() };
            // In the task itself, no box of its own. (hyper's service for it is made only if
            // the connection is handed to hyper.)
            let conn = lean::serve(Timed::new(stream, timer), lean);
            tasks.spawn(run_connection(conn, held).instrument(span));
            continue;
        }
        let hyper_service = service::for_hyper(service.clone(), timer.clone(), peer);
        if limits.http2 {
            let io = TokioIo::new(Coalesced::new(Timed::new(stream, timer)));
            tasks.spawn(
                run_connection(graceful.watch(auto.serve_connection(io, hyper_service).into_owned()), held)
                    .instrument(span),
            );
        } else {
            let io = TokioIo::new(Timed::new(stream, timer));
            tasks.spawn(
                run_connection(graceful.watch(http1.serve_connection(io, hyper_service)), held).instrument(span),
            );
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => tracing::warn!("forcing shutdown with connections still open"),
    }
    // Connections still open after the drain are dropped; what remains is lingering
    // refusals, bounded by `REFUSE_LINGER`.
    open.drain_ended();
    tasks.close();
    if tokio::time::timeout(HANDSHAKE, tasks.wait()).await.is_err() {
        tracing::warn!(open = tasks.len(), "downstream connection tasks outlived the drain");
    }
}

/// What a connection holds until it ends.
struct Held<S> {
    _permit: OwnedSemaphorePermit,
    _slot: IpSlot,
    /// The wait on the connection's timer (the few bytes of [`Expiry`]).
    expiry: Expiry,
    /// Counts how the connection ended.
    service: S,
    /// Its place among the listener's open connections.
    _open: Opened,
}

/// A listener's open connections, each by its timer, told when the drain runs out. A
/// connection's own wait for that (a cancellation token's) was 120 bytes of every idle
/// listener's connection; here it is a slot in a slab, and the timer's wake-up.
#[derive(Default)]
struct Open(Mutex<Slab<Weak<ConnTimer>>>);

/// A connection's slot in [`Open`], freed when the connection ends.
struct Opened {
    open: Arc<Open>,
    key: usize,
}

impl Open {
    fn timers(&self) -> MutexGuard<'_, Slab<Weak<ConnTimer>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(open: &Arc<Self>, timer: &Arc<ConnTimer>) -> Opened {
        Opened { open: open.clone(), key: open.timers().insert(Arc::downgrade(timer)) }
    }

    fn drain_ended(&self) {
        for (_, timer) in self.timers().iter() {
            if let Some(timer) = timer.upgrade() {
                timer.drain_ended();
            }
        }
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.open.timers().remove(self.key);
    }
}

pin_project_lite::pin_project! {
    /// One connection run to its end (or until its timer expires, or the drain ends, which
    /// drops it and so closes the socket), with what it holds (its permit and per-IP slot
    /// are freed then). The task's own future: the connection's future is held here once, in
    /// place (an `async` block would keep it as a capture and again where it polls it).
    struct Connection<C, S> {
        #[pin]
        conn: C,
        held: Held<S>,
    }
}

/// Runs `conn` with what it holds until it ends. (The connection's span, around it, names its
/// peer.)
fn run_connection<C, S>(conn: C, held: Held<S>) -> Connection<C, S> {
    Connection { conn, held }
}

impl<C, E, S> Future for Connection<C, S>
where
    C: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
    S: Service,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let held = this.held;
        if let Poll::Ready(r) = this.conn.poll(cx) {
            if let Err(e) = r {
                let e = e.into();
                if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_parse_too_large) {
                    held.service.observe(ConnEvent::HeaderTooLarge);
                }
                tracing::debug!(error = %e, "downstream connection ended with error");
            }
            return Poll::Ready(());
        }
        let why = std::task::ready!(Pin::new(&mut held.expiry).poll(cx));
        match why {
            Expired::Header => held.service.observe(ConnEvent::HeaderTimeout),
            Expired::Idle => held.service.observe(ConnEvent::IdleClosed),
            Expired::Drained => {}
        }
        tracing::debug!(?why, "downstream connection timed out or drained");
        Poll::Ready(())
    }
}

/// Answers a connection over `max_connections_per_ip` with `429` and `Retry-After`, and closes
/// it. A 429 rather than a bare close: a client behind a shared address (NAT, a gateway) learns
/// why and when to retry instead of seeing a reset it may retry at once. It costs no hyper
/// connection and no `max_connections` slot: the answer is written with one non-blocking write
/// (a fresh socket's send buffer holds it whole) without reading the request. The socket is then
/// half-closed and drained for at most [`REFUSE_LINGER`], so that closing it with the request
/// unread does not reset the 429 away; at most [`MAX_LINGERING`] drain at once, beyond that the
/// socket is closed at once.
fn refuse(stream: TcpStream, answer: Bytes, lingering: &Arc<Semaphore>, tasks: &TaskTracker) {
    let _ = stream.try_write(&answer);
    let Ok(permit) = lingering.clone().try_acquire_owned() else { return };
    tasks.spawn(async move {
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 512];
        let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(REFUSE_LINGER, drain).await;
        drop(permit);
    });
}
