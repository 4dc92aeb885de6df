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
//! - `header_timeout` / `idle_timeout`: [`super::watch`], a per-connection timer. hyper's own
//!   `header_read_timeout` starts when hyper begins *waiting* for a head — at accept, and on a
//!   keep-alive connection as soon as the previous response is written — so on its own it
//!   would make the idle time between requests equal to the header timeout. The watch tells
//!   the two apart: the head deadline runs from the head's first byte, the idle deadline from
//!   the end of the last response. hyper gets no timer: its header timeout would only ever
//!   fire after the watch's, and arming it costs a timer entry per request. With HTTP/2 the
//!   watch counts streams in flight, and any frame read while idle counts as a head begun.
//! - `max_connections_per_ip`: counted at accept; see [`refuse`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::Endpoint;
use super::coalesce::Coalesced;
use super::lean::{self, Lean, Takes};
use super::per_ip::{IpSlot, PerIp};
use super::quiet::Quiet;
use super::watch::{Expired, Tracked, Watch, Watched};
use crate::config::ListenConfig;
use crate::error::DownstreamError;
use crate::jsonrpc::encode_error;
use crate::telemetry::{Metrics, Rejection};

/// How long a refused connection is drained after its 429, so that closing it does not reset
/// the 429 away; and how many refused connections may be draining at once (beyond that they
/// are closed right after the 429 is written).
const REFUSE_LINGER: Duration = Duration::from_secs(1);
const MAX_LINGERING: usize = 64;

/// How long a client gets to complete the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The connection limits of `[listen]`.
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
    /// Serve clear-text HTTP/1.1 listen streams on the lean path ([`super::lean`]).
    pub lean_listens: bool,
    /// Serve other small HTTP/1.1 POSTs on the lean path too.
    pub lean_requests: bool,
}

impl From<&ListenConfig> for Limits {
    fn from(c: &ListenConfig) -> Self {
        Self {
            max_connections: c.max_connections,
            max_connections_per_ip: c.max_connections_per_ip,
            limit_loopback: c.limit_loopback,
            header_timeout: c.header_timeout,
            idle_timeout: c.idle_timeout,
            max_header_bytes: c.max_header_bytes,
            http2: c.http2,
            http2_max_concurrent_streams: c.http2_max_concurrent_streams,
            lean_listens: c.lean_listens,
            lean_requests: c.lean_requests,
        }
    }
}

/// Serves `endpoint` on `listener` until `cancel`, then gives open connections `drain` to
/// finish their in-flight requests (listen streams end with their result at `cancel` too).
/// With `tls`, every connection is TLS (its ALPN list should offer `h2` only when `http2` is
/// set).
pub async fn serve(
    listener: TcpListener,
    endpoint: Endpoint,
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
    // Fired when the drain runs out: connections still open are dropped (closed) then.
    let force = CancellationToken::new();
    let local = listener.local_addr().ok();
    // One span for the listener, one per connection under it, one per request under that (in
    // `Endpoint::serve_from`): the shape of linkerd2-proxy's server stack.
    let listener_span = tracing::info_span!("serve", listener = "mcp", addr = ?local, tls = tls.is_some());
    let metrics = endpoint.telemetry().clone();
    // Each connection holds a permit; at the bound, accepting pauses (the kernel backlog holds
    // further connections) instead of failing them. Idle connections give theirs back after
    // `idle_timeout`, so a crowd of silent sockets cannot hold the bound forever.
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let per_ip = Arc::new(PerIp::new(limits.max_connections_per_ip, limits.limit_loopback));
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING));
    let refusal = refusal();
    // hyper rejects a buffer under 8192 bytes; config validation enforces that minimum.
    let buf = limits.max_header_bytes.max(8192);
    // No hyper timer (so no `header_read_timeout`): the watch times heads and idle connections.
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.max_header_size(limits.max_header_bytes).max_buf_size(buf);
    let mut auto = auto::Builder::new(TokioExecutor::new());
    // The dual-protocol builder has no `max_header_size`; its read-buffer cap bounds the head.
    auto.http1().max_buf_size(buf);
    auto.http2()
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.http2_max_concurrent_streams);
    // The request target every lean request has (anything else is hyper's).
    let uri = lean::target(endpoint.path());
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
            metrics.rejection(Rejection::PerIp);
            tracing::debug!(%peer, "refused: max_connections_per_ip");
            refuse(stream, refusal.clone(), &lingering, &tasks);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let span = tracing::info_span!(parent: &listener_span, "conn", peer = %peer);
        let watch = Watch::new(limits.header_timeout, limits.idle_timeout);
        let lean_endpoint = endpoint.clone();
        let endpoint = endpoint.clone();
        let service = service_fn({
            let watch = watch.clone();
            move |req| {
                let in_flight = watch.begin();
                let endpoint = endpoint.clone();
                // Boxed: hyper keeps an HTTP/2 stream's task the size of this future for the
                // stream's whole life, and a listen stream lives for hours after its request
                // was answered; boxed, the request's state is freed once it is.
                Box::pin(async move {
                    Ok::<_, Infallible>(
                        endpoint.serve_from(req, Some(peer.ip())).await.map(|b| Tracked::new(b, in_flight)),
                    )
                })
            }
        });
        let held = Held { permit, slot, peer, watch: watch.clone(), metrics: metrics.clone(), force: force.clone() };
        if let Some(acceptor) = &tls {
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
                        let io = TokioIo::new(Coalesced::new(Watched::new(stream, watch)));
                        run_connection(watcher.watch(auto.serve_connection(io, service).into_owned()), held).await;
                    } else {
                        let io = TokioIo::new(Watched::new(stream, watch));
                        run_connection(watcher.watch(http1.serve_connection(io, service)), held).await;
                    }
                }
                .instrument(span),
            );
            continue;
        }
        if (limits.lean_listens || limits.lean_requests)
            && !limits.http2
            && let Some(uri) = &uri
        {
            let lean = Lean {
                endpoint: lean_endpoint,
                takes: Takes { listens: limits.lean_listens, requests: limits.lean_requests },
                uri: uri.clone(),
                peer,
                watch: watch.clone(),
                max_head: limits.max_header_bytes,
                cancel: cancel.clone(),
                http1: http1.clone(),
                watcher: graceful.watcher(),
            };
            // Pinned in a box of its own: moved into `run_connection`'s select, it is not
            // stored twice in the connection's task.
            let conn = Box::pin(lean::serve(Watched::new(stream, watch), lean, service));
            tasks.spawn(run_connection(conn, held).instrument(span));
            continue;
        }
        if limits.http2 {
            let io = TokioIo::new(Coalesced::new(Watched::new(stream, watch)));
            tasks.spawn(
                run_connection(graceful.watch(auto.serve_connection(io, service).into_owned()), held).instrument(span),
            );
        } else {
            let io = TokioIo::new(Watched::new(stream, watch));
            tasks.spawn(run_connection(graceful.watch(http1.serve_connection(io, service)), held).instrument(span));
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => tracing::warn!("forcing shutdown with connections still open"),
    }
    // Connections still open after the drain are dropped; what remains is lingering
    // refusals, bounded by `REFUSE_LINGER`.
    force.cancel();
    tasks.close();
    if tokio::time::timeout(HANDSHAKE, tasks.wait()).await.is_err() {
        tracing::warn!(open = tasks.len(), "downstream connection tasks outlived the drain");
    }
}

/// What a connection holds until it ends.
struct Held {
    permit: OwnedSemaphorePermit,
    slot: IpSlot,
    peer: SocketAddr,
    watch: Arc<Watch>,
    metrics: Metrics,
    /// Fires when the drain is over: the connection is dropped.
    force: CancellationToken,
}

/// Runs one connection to its end (or until its watch expires, which drops it and so closes
/// the socket); its permit and per-IP slot are freed then.
async fn run_connection<C, E>(conn: C, held: Held)
where
    C: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    {
        let Held { permit, slot, peer, watch, metrics, force } = held;
        // The deadlines are polled only when they fire, not at every wake-up of the socket.
        let deadlines = Quiet::new(async {
            tokio::select! {
                why = watch.expired() => Some(why),
                _ = force.cancelled() => None,
            }
        });
        tokio::select! {
            biased;
            r = conn => if let Err(e) = r {
                let e = e.into();
                match e.downcast_ref::<hyper::Error>() {
                    Some(h) if h.is_parse_too_large() => metrics.rejection(Rejection::HeaderTooLarge),
                    _ => {}
                }
                tracing::debug!(%peer, error = %e, "downstream connection ended with error");
            },
            stop = deadlines => match stop {
                Some(why) => {
                    match why {
                        Expired::Header => metrics.rejection(Rejection::HeaderTimeout),
                        Expired::Idle => metrics.idle_closed(),
                    }
                    tracing::debug!(%peer, ?why, "downstream connection timed out");
                }
                None => tracing::debug!(%peer, "downstream connection closed at the end of the drain"),
            },
        }
        drop((permit, slot));
    }
}

/// The answer to a connection over `max_connections_per_ip`.
fn refusal() -> Bytes {
    let (status, err) =
        crate::error::Error::from(DownstreamError::LimitReached("too many connections from this address".into()))
            .to_jsonrpc();
    let body = encode_error(None, &err);
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    [head.as_bytes(), &body[..]].concat().into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_429() {
        let r = refusal();
        let text = std::str::from_utf8(&r).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"), "{head}");
        assert!(head.contains("retry-after: 1") && head.contains("connection: close"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(v["id"].is_null());
        assert_eq!(v["error"]["code"], -32600);
    }
}
