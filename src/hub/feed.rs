//! One upstream's feed: the standing upstream listen that carries its notifications.
//!
//! It listens for the union of what listeners want there plus, while the cache is on, every
//! `list_changed` kind the upstream declares. When that set changes it opens the new listen
//! before closing the old one (make-before-break) and drops the duplicates the overlap
//! produces; a set that only shrinks is applied after a linger. A dropped stream is re-opened
//! with jittered exponential backoff, and everything watched there is resynchronised.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

mod legacy;

use super::Hub;
use crate::cluster::Role;
use crate::mcp::Capability;
use crate::mcp::notify::{Change, Filter};
use crate::upstream::Era;
use crate::upstream::Upstream;
use crate::upstream::backoff::Backoff;
use crate::upstream::listen::{ListenEnd, ListenEvent, UpstreamListen};

/// How long after a switch a change already delivered by the old stream is dropped when the
/// new one repeats it.
const DEDUPE_WINDOW: Duration = Duration::from_secs(2);

/// What the feed of upstream `index` should listen for, given what listeners desire, what the
/// cache watches, and what the upstream declared (nothing until it has been discovered).
fn effective(hub: &Hub, index: usize, desired: &Filter, remote: &Filter) -> Filter {
    let Some(upstream) = hub.upstream(index) else { return Filter::default() };
    let Some(info) = upstream.info() else { return Filter::default() };
    let standing = hub.0.cache.enabled() && upstream.config().cache;
    let mut f = Filter::default();
    for kind in Capability::ALL {
        if info.flag(kind.name(), "listChanged") && (desired.list(kind) || remote.list(kind) || standing) {
            f.set_list(kind, true);
        }
    }
    if info.flag("resources", "subscribe") {
        f.uris = desired.uris.clone();
        f.uris.extend(remote.uris.iter().cloned());
        if standing {
            f.uris.extend(hub.0.cache.watched_uris().uris(index));
        }
    }
    f
}

/// What this replica alone wants from upstream `index` (its listeners and its cache), for the
/// replica that holds the upstream's listen.
pub(super) fn local_interest(hub: &Hub, index: usize, desired: &Filter) -> Filter {
    effective(hub, index, desired, &Filter::default())
}

/// Whether going from `have` to `want` only removes things.
fn only_shrinks(have: &Filter, want: &Filter) -> bool {
    want.uris.is_subset(&have.uris) && Capability::ALL.iter().all(|k| !want.list(*k) || have.list(*k))
}

/// Why a feed's upstream call failed (the feed retries; the reason is logged).
#[derive(Debug, thiserror::Error)]
enum FeedError {
    #[error("no answer to listen in time")]
    NoAnswer,
    #[error("listen refused")]
    Refused(#[source] crate::error::Error),
    #[error("notification before the acknowledgment")]
    EarlyChange,
    #[error("listen ended before its acknowledgment: {0:?}")]
    Ended(ListenEnd),
    #[error("no acknowledgment in time")]
    NoAck,
    #[error("the upstream answered with an error: {0}")]
    Answered(crate::jsonrpc::RpcError),
    #[error("the request failed")]
    Failed(#[source] crate::error::Error),
    #[error("the upstream was retired by a reload")]
    Retired,
}

/// Opens a listen and waits for its acknowledgment.
async fn open(upstream: &Upstream, want: &Filter, ack_timeout: Duration) -> Result<UpstreamListen, FeedError> {
    let mut stream = timeout(ack_timeout, upstream.listen(want))
        .await
        .map_err(|_| FeedError::NoAnswer)?
        .map_err(|e| FeedError::Refused(e.into()))?;
    match timeout(ack_timeout, stream.next()).await {
        Ok(ListenEvent::Ack(_)) => Ok(stream),
        Ok(ListenEvent::Change(_)) => Err(FeedError::EarlyChange),
        Ok(ListenEvent::End(end)) => Err(FeedError::Ended(end)),
        Err(_) => Err(FeedError::NoAck),
    }
}

/// Runs the feed of upstream `index` until `cancel`, while this replica runs its listen
/// (always, on a single replica; while it holds the lease, in a cluster).
pub(super) async fn run(hub: Hub, index: usize, cancel: CancellationToken) {
    let mut role = hub.role(index);
    let mut state = FeedState::default();
    loop {
        let mut was = *role.borrow_and_update();
        while !was.listens() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = role.changed() => if changed.is_err() { return },
            }
            let now = *role.borrow_and_update();
            // Taking over from another replica's listen: whatever it saw last is unknown here.
            // (The first lease this replica knows of has no predecessor.)
            let first = matches!(now, Role::Holder(_)) && hub.0.cluster.as_ref().is_some_and(|c| !c.took_over(index));
            if was == Role::Follower && now.listens() && !first {
                state.lost = true;
            }
            was = now;
        }
        let until_following = async {
            while role.borrow_and_update().listens() {
                if role.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = until_following => {
                // Another replica holds the listen now; its filter arrives over the bus.
                hub.0.slots[index].active.send_replace(Filter::default());
            }
            _ = run_eras(&hub, index, &mut state) => return,
        }
    }
}

/// The feed through the upstream's protocol eras.
async fn run_eras(hub: &Hub, index: usize, state: &mut FeedState) {
    let Some(upstream) = hub.upstream(index) else { return };
    let mut era = upstream.era_watch();
    loop {
        let current = era.borrow_and_update().clone();
        tokio::select! {
            _ = era.changed() => {}
            _ = async {
                match current {
                    Era::Legacy(session) => legacy::run(hub, index, &session, state).await,
                    _ => run_modern(hub, index, state).await,
                }
            } => return,
        }
    }
}

/// What a feed remembers across era changes.
#[derive(Default)]
struct FeedState {
    /// Notifications may have been missed since the last time the feed was listening.
    lost: bool,
    /// The legacy session last subscribed in.
    session: Option<u64>,
}

/// A modern upstream: one standing `subscriptions/listen`, switched make-before-break.
async fn run_modern(hub: &Hub, index: usize, state: &mut FeedState) {
    let hub = hub.clone();
    let Some(upstream) = hub.upstream(index) else { return };
    let cfg = hub.0.config.clone();
    let mut desired = hub.0.slots[index].desired.subscribe();
    let mut watched = hub.0.cache.watched_uris().changes(index);
    let mut remote = hub.remote_interest(index);
    let mut info = upstream.info_watch();
    let mut backoff = Backoff::new(Duration::from_millis(100), cfg.reconnect_max);
    let lost = &mut state.lost;
    hub.set_live(index, Filter::default());
    let mut current: Option<(UpstreamListen, Filter)> = None;
    // When the listen is due to be switched to `want`: after the debounce for a growing set,
    // after the linger for a set that only shrinks, after a backoff when a switch failed.
    let mut switch_at: Option<Instant> = None;
    let mut dedupe: Option<(HashSet<Change>, Instant)> = None;
    // Recomputed only when what is desired, watched or declared changed, not on every
    // notification.
    let mut want = Filter::default();
    let mut dirty = true;
    loop {
        if dirty {
            watched.mark_unchanged();
            info.mark_unchanged();
            want = effective(&hub, index, &desired.borrow_and_update(), &remote.borrow_and_update());
            dirty = false;
        }
        let Some((mut stream, have)) = current.take() else {
            if want.is_empty() {
                tokio::select! {
                    _ = desired.changed() => {}
                    _ = watched.changed() => {}
                    _ = remote.changed() => {}
                    _ = info.changed() => {}
                }
                dirty = true;
                continue;
            }
            match open(&upstream, &want, cfg.ack_timeout).await {
                Ok(stream) => {
                    hub.0.slots[index].opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(upstream = %upstream.name(), filter = %want.to_json(), "upstream listen open");
                    if *lost {
                        tracing::info!(upstream = %upstream.name(), "upstream listen re-opened; resynchronising");
                        hub.resync(index);
                        *lost = false;
                    }
                    backoff.reset();
                    hub.set_live(index, want.clone());
                    current = Some((stream, want.clone()));
                }
                Err(reason) => {
                    tracing::warn!(upstream = %upstream.name(), reason = %crate::error::chain(&reason), "upstream listen failed");
                    if !*lost {
                        hub.stream_lost(index);
                        *lost = true;
                    }
                    sleep(backoff.next_delay()).await;
                }
            }
            continue;
        };

        if want != have {
            let now = Instant::now();
            let wait = if only_shrinks(&have, &want) { cfg.linger } else { cfg.relisten_debounce };
            // A growth shortens a pending linger; nothing lengthens a pending switch.
            let at = switch_at.map_or(now + wait, |at| at.min(now + wait));
            switch_at = Some(at);
            if at <= now {
                switch_at = None;
                if want.is_empty() {
                    drop(stream);
                    hub.set_live(index, Filter::default());
                    continue;
                }
                match switch(&hub, index, &mut stream, &want, cfg.ack_timeout).await {
                    Ok((next, seen)) => {
                        hub.0.slots[index].opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::debug!(upstream = %upstream.name(), filter = %want.to_json(), "upstream listen switched");
                        dedupe = Some((seen, Instant::now() + DEDUPE_WINDOW));
                        hub.set_live(index, want.clone());
                        current = Some((next, want.clone()));
                    }
                    Err(reason) => {
                        tracing::warn!(upstream = %upstream.name(), reason = %crate::error::chain(&reason), "could not switch upstream listen; keeping the old one");
                        switch_at = Some(Instant::now() + backoff.next_delay());
                        current = Some((stream, have));
                    }
                }
                continue;
            }
        } else {
            switch_at = None;
        }

        let pending = async {
            match switch_at {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = desired.changed() => {
                dirty = true;
                current = Some((stream, have));
            }
            _ = watched.changed() => {
                dirty = true;
                current = Some((stream, have));
            }
            _ = info.changed() => {
                dirty = true;
                current = Some((stream, have));
            }
            _ = remote.changed() => {
                dirty = true;
                current = Some((stream, have));
            }
            _ = pending => current = Some((stream, have)),
            event = stream.next() => match event {
                ListenEvent::Change(change) => {
                    let repeat = match &mut dedupe {
                        Some((seen, until)) if Instant::now() < *until => seen.remove(&change),
                        _ => {
                            dedupe = None;
                            false
                        }
                    };
                    if !repeat {
                        hub.publish(index, &change);
                    }
                    current = Some((stream, have));
                }
                ListenEvent::Ack(_) => current = Some((stream, have)),
                ListenEvent::End(end) => {
                    match &end {
                        ListenEnd::Graceful | ListenEnd::Cancelled => {
                            tracing::info!(upstream = %upstream.name(), ?end, "upstream ended its listen")
                        }
                        _ => tracing::warn!(upstream = %upstream.name(), ?end, "upstream listen lost"),
                    }
                    hub.stream_lost(index);
                    *lost = true;
                    sleep(backoff.next_delay()).await;
                }
            },
        }
    }
}

/// Make-before-break: opens the listen for `want` while still delivering what `old` carries,
/// and returns it with the changes the old stream delivered meanwhile (to drop repeats).
async fn switch(
    hub: &Hub,
    index: usize,
    old: &mut UpstreamListen,
    want: &Filter,
    ack_timeout: Duration,
) -> Result<(UpstreamListen, HashSet<Change>), FeedError> {
    let upstream = hub.upstream(index).ok_or(FeedError::Retired)?;
    let opening = open(&upstream, want, ack_timeout);
    tokio::pin!(opening);
    let mut seen = HashSet::new();
    let mut old_alive = true;
    loop {
        tokio::select! {
            opened = &mut opening => return opened.map(|s| (s, seen)),
            event = old.next(), if old_alive => match event {
                ListenEvent::Change(change) => {
                    hub.publish(index, &change);
                    seen.insert(change);
                }
                ListenEvent::Ack(_) => {}
                ListenEvent::End(_) => old_alive = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_is_told_apart_from_growing() {
        let mut a = Filter { resources_list_changed: true, ..Default::default() };
        a.uris.insert("x".into());
        a.uris.insert("y".into());
        let mut b = a.clone();
        b.uris.remove("y");
        assert!(only_shrinks(&a, &b));
        assert!(!only_shrinks(&b, &a));
        let mut c = b.clone();
        c.tools_list_changed = true;
        assert!(!only_shrinks(&a, &c));
    }
}
