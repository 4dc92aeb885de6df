//! Downstream `subscriptions/listen` over SSE: the acknowledgment first, then the changes the
//! listener subscribed to, each tagged with the listen's own id; keep-alive comments while
//! idle; a successful result at shutdown; the listener is dropped when the client goes away
//! or stops reading for longer than the configured time.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response};
use http_body_util::Either;
use tokio::sync::mpsc;
use tokio::time::{MissedTickBehavior, interval, timeout};

use super::body::{Body, ChannelBody};
use crate::auth::Principal;
use crate::error::{DownstreamError, Error};
use crate::hub::{Hub, Pend, Subscription};
use crate::jsonrpc::{RawObject, RequestId, write_json_string};
use crate::mcp::{self, method as m};
use crate::upstream::listen::Filter;

/// SSE frames buffered per listener between the writer and the connection. Small on purpose:
/// changes wait (and coalesce) in the listener's pending set, not here.
const FRAMES: usize = 8;

/// Starts a listen stream for a validated request.
pub fn open(hub: &Hub, id: &RequestId, params: &RawObject<'_>, principal: &Principal) -> Result<Response<Body>, Error> {
    let bad = |m: String| Error::from(DownstreamError::InvalidParams(m));
    let raw = params.get("notifications").ok_or_else(|| bad("missing `notifications` filter".into()))?;
    let value: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
    let filter = Filter::from_json(&value).map_err(bad)?;
    let subscription = hub.subscribe(principal, id.clone(), &filter)?;
    let (tx, rx) = mpsc::channel(FRAMES);
    tokio::spawn(write(hub.clone(), subscription, tx));
    let mut resp = Response::new(Either::Right(ChannelBody::new(rx)));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

async fn write(hub: Hub, sub: Subscription, tx: mpsc::Sender<Bytes>) {
    let cfg = hub.config().clone();
    let sid = sub.listener.subscription.as_json().to_owned();
    let slow = cfg.slow_listener_timeout;
    let send = |frame: Bytes| {
        let tx = &tx;
        async move { matches!(timeout(slow, tx.send(frame)).await, Ok(Ok(()))) }
    };
    if !send(frame(&ack(&sid, &sub.honoured))).await {
        return;
    }
    let mut keepalive = interval(cfg.keepalive.max(Duration::from_millis(10)));
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    keepalive.tick().await;
    let shutdown = hub.shutdown_token().clone();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let _ = timeout(Duration::from_secs(1), tx.send(frame(&final_result(&sid)))).await;
                return;
            }
            _ = tx.closed() => return,
            _ = sub.listener.woken() => {
                for change in sub.listener.take() {
                    if !send(frame(&notification(&sid, &change))).await {
                        tracing::info!(listener = sub.listener.id, "closing a listener that stopped reading");
                        return;
                    }
                }
            }
            _ = keepalive.tick() => {
                if !send(Bytes::from_static(b":\n\n")).await {
                    return;
                }
            }
        }
    }
}

fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(message);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn meta(out: &mut Vec<u8>, sid: &str) {
    out.extend_from_slice(b"\"_meta\":{");
    write_json_string(out, mcp::META_SUBSCRIPTION_ID);
    out.push(b':');
    out.extend_from_slice(sid.as_bytes());
    out.push(b'}');
}

fn notify(method: &str, sid: &str, rest: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    write_json_string(&mut out, method);
    out.extend_from_slice(b",\"params\":{");
    meta(&mut out, sid);
    rest(&mut out);
    out.extend_from_slice(b"}}");
    out
}

fn ack(sid: &str, honoured: &Filter) -> Vec<u8> {
    notify(m::ACKNOWLEDGED, sid, |out| {
        out.extend_from_slice(b",\"notifications\":");
        serde_json::to_writer(&mut *out, &honoured.to_json()).expect("writing to a Vec");
    })
}

fn notification(sid: &str, change: &Pend) -> Vec<u8> {
    match change {
        Pend::Uri(uri) => notify(m::RESOURCES_UPDATED, sid, |out| {
            out.extend_from_slice(b",\"uri\":");
            write_json_string(out, uri);
        }),
        Pend::List(kind) => notify(kind.method(), sid, |_| {}),
    }
}

fn final_result(sid: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(sid.as_bytes());
    out.extend_from_slice(b",\"result\":{\"resultType\":\"complete\",");
    meta(&mut out, sid);
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::listen::ListKind;
    use serde_json::{Value, json};

    #[test]
    fn messages_carry_the_subscription_id_with_its_type() {
        let v: Value = serde_json::from_slice(&notification("\"s-1\"", &Pend::Uri("docs+a://x".into()))).unwrap();
        assert_eq!(v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "s-1");
        assert_eq!(v["params"]["uri"], "docs+a://x");
        let v: Value = serde_json::from_slice(&notification("42", &Pend::List(ListKind::Tools))).unwrap();
        assert_eq!(v["method"], "notifications/tools/list_changed");
        assert_eq!(v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
        let v: Value = serde_json::from_slice(&final_result("42")).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":42,"result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":42}}})
        );
    }
}
