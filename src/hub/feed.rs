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

use super::Hub;
use crate::upstream::Upstream;
use crate::upstream::backoff::Backoff;
use crate::upstream::listen::{Change, Filter, ListKind, ListenEnd, ListenEvent, UpstreamListen};

/// How long after a switch a change already delivered by the old stream is dropped when the
/// new one repeats it.
const DEDUPE_WINDOW: Duration = Duration::from_secs(2);

/// What the feed of `upstream` should listen for, given what is desired and what the upstream
/// declared (nothing until it has been discovered).
fn effective(hub: &Hub, upstream: &Upstream, desired: &Filter) -> Filter {
    let Some(info) = upstream.info() else { return Filter::default() };
    let standing = hub.0.cache.enabled() && upstream.config().cache;
    let mut f = Filter::default();
    for kind in ListKind::ALL {
        if info.flag(kind.capability(), "listChanged") && (desired.list(kind) || standing) {
            f.set_list(kind, true);
        }
    }
    if info.flag("resources", "subscribe") {
        f.uris = desired.uris.clone();
    }
    f
}

/// Whether going from `have` to `want` only removes things.
fn only_shrinks(have: &Filter, want: &Filter) -> bool {
    want.uris.is_subset(&have.uris) && ListKind::ALL.iter().all(|k| !want.list(*k) || have.list(*k))
}

/// Opens a listen and waits for its acknowledgment.
async fn open(upstream: &Upstream, want: &Filter, ack_timeout: Duration) -> Result<UpstreamListen, String> {
    let mut stream = timeout(ack_timeout, upstream.listen(want))
        .await
        .map_err(|_| "no answer to listen".to_owned())?
        .map_err(|e| e.to_string())?;
    match timeout(ack_timeout, stream.next()).await {
        Ok(ListenEvent::Ack(_)) => Ok(stream),
        Ok(ListenEvent::Change(_)) => Err("notification before the acknowledgment".into()),
        Ok(ListenEvent::End(end)) => Err(format!("listen ended before its acknowledgment: {end:?}")),
        Err(_) => Err("no acknowledgment in time".into()),
    }
}

/// Runs the feed of upstream `index` until `cancel`.
pub(super) async fn run(hub: Hub, index: usize, cancel: CancellationToken) {
    let upstream = hub.0.upstreams[index].clone();
    let cfg = hub.0.config.clone();
    let mut desired = hub.0.desired[index].subscribe();
    let mut info = upstream.info_watch();
    let mut backoff = Backoff::new(Duration::from_millis(100), cfg.reconnect_max);
    let mut lost = false;
    let mut current: Option<(UpstreamListen, Filter)> = None;
    let mut shrink_at: Option<Instant> = None;
    let mut dedupe: Option<(HashSet<Change>, Instant)> = None;
    loop {
        let want = effective(&hub, &upstream, &desired.borrow_and_update());
        let Some((mut stream, have)) = current.take() else {
            if want.is_empty() {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = desired.changed() => {}
                    _ = info.changed() => {}
                }
                continue;
            }
            match open(&upstream, &want, cfg.ack_timeout).await {
                Ok(stream) => {
                    hub.0.opened[index].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(upstream = %upstream.name(), filter = %want.to_json(), "upstream listen open");
                    if lost {
                        tracing::info!(upstream = %upstream.name(), "upstream listen re-opened; resynchronising");
                        hub.resync(index);
                        lost = false;
                    }
                    backoff.reset();
                    current = Some((stream, want));
                }
                Err(reason) => {
                    tracing::warn!(upstream = %upstream.name(), %reason, "upstream listen failed");
                    if !lost {
                        hub.stream_lost(index);
                        lost = true;
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = sleep(backoff.next_delay()) => {}
                    }
                }
            }
            continue;
        };

        if want != have {
            let now = Instant::now();
            let due = match (only_shrinks(&have, &want), shrink_at) {
                (false, _) => true,
                (true, None) => {
                    shrink_at = Some(now + cfg.linger);
                    false
                }
                (true, Some(at)) => at <= now,
            };
            if due {
                shrink_at = None;
                if want.is_empty() {
                    drop(stream);
                    continue;
                }
                match switch(&hub, index, &mut stream, &want, cfg.ack_timeout).await {
                    Ok((next, seen)) => {
                        hub.0.opened[index].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::debug!(upstream = %upstream.name(), filter = %want.to_json(), "upstream listen switched");
                        dedupe = Some((seen, Instant::now() + DEDUPE_WINDOW));
                        current = Some((next, want));
                    }
                    Err(reason) => {
                        tracing::warn!(upstream = %upstream.name(), %reason, "could not switch upstream listen; keeping the old one");
                        shrink_at = Some(Instant::now() + backoff.next_delay());
                        current = Some((stream, have));
                    }
                }
                continue;
            }
        } else {
            shrink_at = None;
        }

        let linger = async {
            match shrink_at {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = desired.changed() => current = Some((stream, have)),
            _ = linger => current = Some((stream, have)),
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
                        hub.dispatch(index, &change);
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
                    lost = true;
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = sleep(backoff.next_delay()) => {}
                    }
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
) -> Result<(UpstreamListen, HashSet<Change>), String> {
    let upstream = &hub.0.upstreams[index];
    let opening = open(upstream, want, ack_timeout);
    tokio::pin!(opening);
    let mut seen = HashSet::new();
    let mut old_alive = true;
    loop {
        tokio::select! {
            opened = &mut opening => return opened.map(|s| (s, seen)),
            event = old.next(), if old_alive => match event {
                ListenEvent::Change(change) => {
                    hub.dispatch(index, &change);
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
