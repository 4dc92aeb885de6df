//! A legacy upstream's feed: `resources/subscribe` and `unsubscribe` instead of a listen.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::{FeedError, FeedState, effective};
use crate::hub::Hub;
use crate::mcp::notify::Unsolicited;
use crate::upstream::{Reply, Upstream, UpstreamSession};

/// A legacy upstream: `resources/subscribe` / `unsubscribe` for the union of listeners' URIs
/// (refcounted by the hub, removals after the linger), changes arriving unsolicited.
pub(super) async fn run(hub: &Hub, index: usize, session: &UpstreamSession, state: &mut FeedState) {
    let Some(upstream) = hub.upstream(index) else { return };
    let cfg = hub.0.config.clone();
    let mut desired = hub.0.slots[index].desired.subscribe();
    let mut watched = hub.0.cache.watched_uris().changes(index);
    let mut remote = hub.remote_interest(index);
    let mut unsolicited = upstream.unsolicited();
    let mut subscribed: BTreeSet<String> = BTreeSet::new();
    let mut remove_at: Option<Instant> = None;
    let mut retry_at: Option<Instant> = None;
    if state.session.is_some_and(|s| s != session.generation) || state.lost {
        // A new session starts with no subscriptions, and what happened meanwhile is unknown.
        hub.stream_lost(index);
        hub.resync(index);
    }
    state.session = Some(session.generation);
    state.lost = false;
    hub.set_active(index, &upstream, &subscribed);
    // Recomputed only when what is desired or watched changed, not on every notification.
    let mut want = BTreeSet::new();
    let mut dirty = true;
    loop {
        if dirty {
            watched.mark_unchanged();
            want = effective(hub, index, &desired.borrow_and_update(), &remote.borrow_and_update()).uris;
            dirty = false;
        }
        for uri in want.difference(&subscribed).cloned().collect::<Vec<_>>() {
            match legacy_call(&upstream, "resources/subscribe", &uri).await {
                Ok(()) => {
                    subscribed.insert(uri);
                    hub.set_active(index, &upstream, &subscribed);
                }
                Err(reason) => {
                    tracing::warn!(upstream = %upstream.name(), %uri, reason = %crate::error::chain(&reason), "resources/subscribe failed; will retry");
                    retry_at = Some(Instant::now() + Duration::from_secs(1));
                }
            }
        }
        let gone: Vec<String> = subscribed.difference(&want).cloned().collect();
        if gone.is_empty() {
            remove_at = None;
        } else if remove_at.is_some_and(|at| at <= Instant::now()) {
            for uri in gone {
                if let Err(reason) = legacy_call(&upstream, "resources/unsubscribe", &uri).await {
                    tracing::debug!(upstream = %upstream.name(), %uri, reason = %crate::error::chain(&reason), "resources/unsubscribe failed");
                }
                subscribed.remove(&uri);
                hub.set_active(index, &upstream, &subscribed);
            }
            remove_at = None;
        } else if remove_at.is_none() {
            remove_at = Some(Instant::now() + cfg.linger);
        }
        let wake = remove_at.into_iter().chain(retry_at).min();
        let timer = async {
            match wake {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = desired.changed() => dirty = true,
            _ = watched.changed() => dirty = true,
            _ = remote.changed() => dirty = true,
            _ = timer => retry_at = None,
            msg = unsolicited.recv() => match msg {
                Ok(Unsolicited::Change(change)) => hub.publish(index, &change),
                Ok(Unsolicited::Gap) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    hub.stream_lost(index);
                    hub.resync(index);
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// A legacy `resources/subscribe` or `unsubscribe`.
async fn legacy_call(upstream: &Upstream, method: &str, uri: &str) -> Result<(), FeedError> {
    let params = serde_json::to_vec(&serde_json::json!({ "uri": uri })).expect("serializable");
    match upstream.request(method, &params).await {
        Ok(Reply::Result(_)) => Ok(()),
        Ok(Reply::Error(e)) => Err(FeedError::Answered(e)),
        Err(e) => Err(FeedError::Failed(e.into())),
    }
}
