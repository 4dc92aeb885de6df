//! A legacy session's unsolicited notifications: `notifications/resources/updated` for its
//! subscribed URIs and `notifications/*/list_changed`, in the legacy shape (no
//! `subscriptionId`), written to its standalone stream (the HTTP GET stream, or stdout on
//! stdio).
//!
//! Changes wait in the session's hub listener, where repeats coalesce, so the writer's own
//! buffer stays small and a slow client costs memory bounded by its subscriptions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::{MissedTickBehavior, interval, timeout};
use tokio_util::sync::CancellationToken;

use super::session::{DownstreamSession, StreamGuard};
use crate::downstream::framing::Framing;
use crate::hub::{Listener, Notice};
use crate::jsonrpc::write_json_string;
use crate::mcp::method as m;

/// How the stream is written.
pub struct StreamOptions {
    pub framing: Framing,
    /// Interval of keep-alives, where the framing has them.
    pub keepalive: Duration,
    /// A client that accepts no write for this long is disconnected.
    pub slow: Duration,
    /// Ends the stream (shutdown, end of the stdio connection).
    pub stop: CancellationToken,
}

/// Writes `session`'s changes to `tx` until the session ends, `stop` fires, the client goes
/// away or stops reading. `guard` keeps the stream marked open meanwhile.
pub async fn pump(session: Arc<DownstreamSession>, guard: StreamGuard, tx: mpsc::Sender<Bytes>, opts: StreamOptions) {
    let _guard = guard;
    let framing = opts.framing;
    let send = |frame: Bytes| {
        let tx = &tx;
        async move { matches!(timeout(opts.slow, tx.send(frame)).await, Ok(Ok(()))) }
    };
    let keepalive_frame = framing.keepalive();
    let mut keepalive = interval(opts.keepalive.max(Duration::from_millis(10)));
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    keepalive.tick().await;
    let mut current = session.listener();
    loop {
        let listener = current.borrow_and_update().clone();
        tokio::select! {
            biased;
            _ = opts.stop.cancelled() => return,
            _ = session.ended().cancelled() => return,
            _ = tx.closed() => return,
            changed = current.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = woken(listener.as_deref()) => {
                let listener = listener.as_ref().expect("woken only with a listener");
                for change in listener.take() {
                    if !send(framing.frame(&notification(&change))).await {
                        tracing::info!("closing a legacy stream that stopped reading");
                        return;
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

async fn woken(listener: Option<&Listener>) {
    match listener {
        Some(l) => l.woken().await,
        None => std::future::pending().await,
    }
}

/// A change as a legacy notification.
pub fn notification(change: &Notice) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    match change {
        Notice::Uri(uri) => {
            write_json_string(&mut out, m::RESOURCES_UPDATED);
            out.extend_from_slice(b",\"params\":{\"uri\":");
            write_json_string(&mut out, uri);
            out.push(b'}');
        }
        Notice::List(kind) => write_json_string(&mut out, kind.changed()),
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Capability;
    use serde_json::{Value, json};

    #[test]
    fn legacy_notifications_carry_no_subscription_id() {
        let v: Value = serde_json::from_slice(&notification(&Notice::Uri("docs+docs://status".into()))).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "docs+docs://status"}})
        );
        let v: Value = serde_json::from_slice(&notification(&Notice::List(Capability::Prompts))).unwrap();
        assert_eq!(v, json!({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}));
    }
}
