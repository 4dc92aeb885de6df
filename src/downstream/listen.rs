//! Downstream `subscriptions/listen`, over SSE (HTTP) or interleaved lines (stdio): the
//! acknowledgment first, then the changes the listener subscribed to, each tagged with the
//! listen's own id; keep-alive comments while idle on SSE; a successful result at shutdown;
//! the listener is dropped when the client goes away, cancels, or stops reading for longer
//! than the configured time.

mod stream;

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

use super::body::{self, Body};
use super::framing::Framing;
use crate::auth::Principal;
use crate::error::{DownstreamError, Error};
use crate::hub::{Hub, Notice, Subscription};
use crate::jsonrpc::{RawObject, RequestId, write_json_string};
use crate::mcp::notify::Filter;
use crate::mcp::{self, method as m};
pub use stream::ListenStream;

/// Starts a listen stream for a validated request from `peer`. Its messages are pulled by the
/// connection as it writes them (see [`ListenStream`]); over HTTP a listen is cancelled by
/// closing its stream, which drops them.
pub fn open(
    hub: &Hub,
    id: &RequestId,
    params: &RawObject<'_>,
    principal: &Principal,
    peer: Option<SocketAddr>,
) -> Result<Response<Body>, Error> {
    let subscription = subscribe(hub, id, params, principal, peer.map_or(0, conn_key))?;
    Ok(sse_response(body::pulled(Box::pin(ListenStream::sse(subscription)))))
}

/// The key of the connection from `peer` (its address and port tell it apart), which
/// groups its listens in the fan-out ([`crate::hub::Listener::conn`]).
fn conn_key(peer: SocketAddr) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(peer)
}

/// Registers the listen that a validated `subscriptions/listen` request asks for, arrived on
/// connection `conn` (0 when there is none to tell apart).
pub(super) fn subscribe(
    hub: &Hub,
    id: &RequestId,
    params: &RawObject<'_>,
    principal: &Principal,
    conn: u64,
) -> Result<Subscription, Error> {
    let bad = |m: String| Error::from(DownstreamError::InvalidParams(m));
    let raw = params.get("notifications").ok_or_else(|| bad("missing `notifications` filter".into()))?;
    let value: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
    let filter = Filter::from_json(&value).map_err(|e| bad(e.to_string()))?;
    let ns = &hub.lineup().ns;
    for uri in &filter.uris {
        ns.check_uri(uri)?;
    }
    hub.subscribe_on(principal, id.clone(), &filter, conn)
}

/// A streaming SSE response with `body`.
pub(super) fn sse_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// How a listen is written by a task of its own (stdio, where listens share the connection's
/// output channel), and how it may end besides its client going away.
pub(super) struct WriteOptions {
    pub framing: Framing,
    /// The client cancelled it (stdio `notifications/cancelled`): it ends without a response.
    pub cancelled: CancellationToken,
    /// The connection is ending: the listen ends with a successful result. (At the proxy's
    /// shutdown its stream ends with the result by itself.)
    pub finish: CancellationToken,
    /// A client that accepts no write for this long is dropped.
    pub slow: Duration,
}

/// Writes one listen's stream to `tx` until the client goes away or stops reading, it is
/// cancelled, or it is finished.
pub(super) async fn write(sub: Subscription, tx: mpsc::Sender<bytes::Bytes>, opts: WriteOptions) {
    let WriteOptions { framing, cancelled, finish, slow } = opts;
    let sid = sub.listener.subscription.as_json().to_owned();
    let id = sub.listener.id;
    let mut stream = ListenStream::new(sub, framing);
    // Made once, not per message: each registers a waiter when first polled.
    let mut cancelled = std::pin::pin!(cancelled.cancelled());
    let mut finished = std::pin::pin!(finish.cancelled());
    loop {
        tokio::select! {
            biased;
            _ = &mut cancelled => return,
            _ = &mut finished => {
                let _ = timeout(Duration::from_secs(1), tx.send(framing.build(128, |out| final_result(out, &sid)))).await;
                return;
            }
            _ = tx.closed() => return,
            frame = stream.next() => {
                let Some(frame) = frame else { return };
                // Room in the channel (the usual case): no timer is armed for the send.
                let sent = match tx.try_send(frame) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                    Err(mpsc::error::TrySendError::Full(frame)) => matches!(timeout(slow, tx.send(frame)).await, Ok(Ok(()))),
                };
                if !sent {
                    tracing::info!(listener = id, "closing a listener that stopped reading");
                    return;
                }
            }
        }
    }
}

fn meta(out: &mut Vec<u8>, sid: &str) {
    out.extend_from_slice(b"\"_meta\":{");
    write_json_string(out, mcp::META_SUBSCRIPTION_ID);
    out.push(b':');
    out.extend_from_slice(sid.as_bytes());
    out.push(b'}');
}

fn notify(out: &mut Vec<u8>, method: &str, sid: &str, rest: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    write_json_string(out, method);
    out.extend_from_slice(b",\"params\":{");
    meta(out, sid);
    rest(out);
    out.extend_from_slice(b"}}");
}

fn ack(out: &mut Vec<u8>, sid: &str, honoured: &Filter) {
    notify(out, m::ACKNOWLEDGED, sid, |out| {
        out.extend_from_slice(b",\"notifications\":");
        serde_json::to_writer(&mut *out, &honoured.to_json()).expect("writing to a Vec");
    })
}

fn notification(out: &mut Vec<u8>, sid: &str, change: &Notice) {
    match change {
        Notice::Uri(uri) => notify(out, m::RESOURCES_UPDATED, sid, |out| {
            out.extend_from_slice(b",\"uri\":");
            write_json_string(out, uri);
        }),
        Notice::List(kind) => notify(out, kind.changed(), sid, |_| {}),
    }
}

fn final_result(out: &mut Vec<u8>, sid: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(sid.as_bytes());
    out.extend_from_slice(b",\"result\":{\"resultType\":\"complete\",");
    meta(out, sid);
    out.extend_from_slice(b"}}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Capability;
    use serde_json::{Value, json};

    /// The message of one SSE frame that `write` builds, checking the framing around it.
    fn sse(write: impl FnOnce(&mut Vec<u8>)) -> Value {
        let frame = Framing::Sse.build(0, write);
        let message = frame.strip_prefix(b"data: ").and_then(|f| f.strip_suffix(b"\n\n")).expect("one SSE event");
        serde_json::from_slice(message).unwrap()
    }

    #[test]
    fn messages_carry_the_subscription_id_with_its_type() {
        let v = sse(|out| notification(out, "\"s-1\"", &Notice::Uri("docs+a://x".into())));
        assert_eq!(v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "s-1");
        assert_eq!(v["params"]["uri"], "docs+a://x");
        let v = sse(|out| notification(out, "42", &Notice::List(Capability::Tools)));
        assert_eq!(v["method"], "notifications/tools/list_changed");
        assert_eq!(v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
        let v = sse(|out| final_result(out, "42"));
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":42,"result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":42}}})
        );
        assert_eq!(&Framing::Lines.build(0, |out| out.extend_from_slice(b"{}"))[..], b"{}\n");
    }
}
