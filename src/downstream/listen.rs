//! Downstream `subscriptions/listen`, over SSE (HTTP) or interleaved lines (stdio): the
//! acknowledgment first, then the changes the listener subscribed to, each tagged with the
//! listen's own id; keep-alive comments while idle on SSE; a successful result at shutdown;
//! the listener is dropped when the client goes away, cancels, or stops reading for longer
//! than the configured time.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response};
use tokio::sync::mpsc;
use tokio::time::{MissedTickBehavior, interval, timeout};
use tokio_util::sync::CancellationToken;

use super::body::Body;
use super::framing::Framing;
use crate::auth::Principal;
use crate::error::{DownstreamError, Error};
use crate::hub::{Hub, Notice, Subscription};
use crate::jsonrpc::{RawObject, RequestId, write_json_string};
use crate::mcp::notify::Filter;
use crate::mcp::{self, method as m};

/// SSE frames buffered per listener between the writer and the connection. Small on purpose:
/// changes wait (and coalesce) in the listener's pending set, not here; when it is full the
/// writer waits, up to the slow-listener timeout.
const FRAMES: usize = 8;

/// Starts a listen stream for a validated request.
pub fn open(hub: &Hub, id: &RequestId, params: &RawObject<'_>, principal: &Principal) -> Result<Response<Body>, Error> {
    let subscription = subscribe(hub, id, params, principal)?;
    let (tx, rx) = mpsc::channel(FRAMES);
    let opts = WriteOptions {
        framing: Framing::Sse,
        // Over HTTP a listen is cancelled by closing its stream, which the writer sees as a
        // closed channel; nothing else cancels it.
        cancelled: CancellationToken::new(),
        finish: hub.shutdown_token().clone(),
        slow: hub.config().slow_listener_timeout,
    };
    hub.tracker().spawn(write(hub.clone(), subscription, tx, opts));
    Ok(sse_response(rx))
}

/// Registers the listen that a validated `subscriptions/listen` request asks for.
pub(super) fn subscribe(
    hub: &Hub,
    id: &RequestId,
    params: &RawObject<'_>,
    principal: &Principal,
) -> Result<Subscription, Error> {
    let bad = |m: String| Error::from(DownstreamError::InvalidParams(m));
    let raw = params.get("notifications").ok_or_else(|| bad("missing `notifications` filter".into()))?;
    let value: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
    let filter = Filter::from_json(&value).map_err(|e| bad(e.to_string()))?;
    let ns = &hub.lineup().ns;
    for uri in &filter.uris {
        ns.check_uri(uri)?;
    }
    hub.subscribe(principal, id.clone(), &filter)
}

/// A streaming response whose SSE frames come from `rx`.
pub(super) fn sse_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let mut resp = Response::new(super::body::channel(rx));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// How a listen is written, and how it may end besides its client going away.
pub(super) struct WriteOptions {
    pub framing: Framing,
    /// The client cancelled it (stdio `notifications/cancelled`): it ends without a response.
    pub cancelled: CancellationToken,
    /// The proxy (or the stdio connection) is ending: the listen ends with a successful result.
    pub finish: CancellationToken,
    /// A client that accepts no write for this long is dropped.
    pub slow: Duration,
}

/// Writes one listen: the acknowledgment first, then its changes as they come, keep-alives
/// while idle (where the framing has them), until the client goes away or stops reading, it
/// is cancelled, or it is finished.
pub(super) async fn write(hub: Hub, sub: Subscription, tx: mpsc::Sender<Bytes>, opts: WriteOptions) {
    let cfg = hub.config().clone();
    let sid = sub.listener.subscription.as_json().to_owned();
    let WriteOptions { framing, cancelled, finish, slow } = opts;
    let send = |frame: Bytes| {
        let tx = &tx;
        async move {
            // Room in the channel (the usual case): no timer is armed for the send.
            match tx.try_send(frame) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Closed(_)) => false,
                Err(mpsc::error::TrySendError::Full(frame)) => {
                    matches!(timeout(slow, tx.send(frame)).await, Ok(Ok(())))
                }
            }
        }
    };
    // Acknowledge once the upstreams carry what was honoured, so no change after the
    // acknowledgment is missed (bounded: an upstream that is down resyncs when it is back).
    hub.ready(&sub.listener, cfg.ack_timeout.min(Duration::from_secs(3))).await;
    if !send(framing.build(160, |out| ack(out, &sid, &sub.honoured))).await {
        return;
    }
    let keepalive_frame = framing.keepalive();
    let mut keepalive = interval(cfg.keepalive.max(Duration::from_millis(10)));
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    keepalive.tick().await;
    // Made once, not per change: each of these registers a waiter when first polled, and
    // `finish` is shared by every listener, so waiters made per loop would have every
    // delivery lock its one waiter list twice.
    let mut cancelled = std::pin::pin!(cancelled.cancelled());
    let mut finished = std::pin::pin!(finish.cancelled());
    let mut closed = std::pin::pin!(tx.closed());
    loop {
        tokio::select! {
            biased;
            _ = &mut cancelled => return,
            _ = &mut finished => {
                let _ = timeout(Duration::from_secs(1), tx.send(framing.build(128, |out| final_result(out, &sid)))).await;
                return;
            }
            _ = &mut closed => return,
            _ = sub.listener.woken() => {
                let (changes, since) = sub.listener.take_timed();
                for change in changes {
                    if !send(framing.build(160, |out| notification(out, &sid, &change))).await {
                        tracing::info!(listener = sub.listener.id, "closing a listener that stopped reading");
                        return;
                    }
                    // From the receipt of the oldest change of this batch (an upper bound
                    // for the others, which coalesced behind it).
                    if let Some(at) = since {
                        hub.delivered(at.elapsed());
                    }
                }
            }
            _ = keepalive.tick(), if keepalive_frame.is_some() => {
                if !send(keepalive_frame.clone().expect("checked")).await {
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
