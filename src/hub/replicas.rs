//! The hub on a replica of a cluster: what the other replicas announce is applied here
//! (changes invalidate the cache and reach this replica's listeners; the holder's live filter
//! acknowledges listens), and this replica's interest in each upstream is published for the
//! holder of its listen. Each upstream slot joins the cluster when the hub installs it and
//! leaves when a reload retires it, so leases, interest and the bus follow reloads.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Hub;
use super::feed::local_interest;
use crate::cluster::{Cluster, Event, Inbound, Role};
use crate::config::UpstreamConfig;
use crate::upstream::Upstream;

/// Quiet time before an interest change is published, so that a burst of listens costs one
/// write.
const INTEREST_DEBOUNCE: Duration = Duration::from_millis(5);

pub(super) fn start(hub: &Hub, cluster: &Cluster, cancel: &CancellationToken, tracker: &TaskTracker) {
    cluster.start(cancel, tracker);
    if let Some(inbox) = cluster.take_inbox() {
        tracker.spawn(receive(hub.clone(), cluster.clone(), inbox, cancel.clone()));
    }
}

/// What decides the content of `config`'s upstream, for its generation in the cluster (see
/// the cluster's `members.rs`): where it lives (URL, or program, environment and directory),
/// how the proxy authenticates to it (headers and credential, as configured: a rotated secret
/// behind the same reference is the same upstream), and what of its answers may be shared
/// (`default_scope`, `trust_public`: a value shared under a looser policy must not be served
/// under a stricter one). Timeouts, limits, TTL clamps and access rules leave the content as
/// it is, so replicas that differ only there still share.
fn identity(config: &UpstreamConfig) -> Vec<u8> {
    let c = config;
    format!("{:?}", (c.transport(), &c.env, &c.cwd, &c.headers, &c.credential, c.default_scope, c.trust_public))
        .into_bytes()
}

/// Upstream `upstream` was installed in its slot: it joins the cluster, and this replica's
/// interest in it is published (and its role followed) until `stop` (the slot retired).
pub(super) fn join(hub: &Hub, cluster: &Cluster, upstream: &Upstream, stop: &CancellationToken) {
    let slot = upstream.slot() as usize;
    cluster.install(slot, upstream.name(), &identity(upstream.config()));
    hub.0.tracker.spawn(interest(hub.clone(), cluster.clone(), slot, stop.clone()));
    hub.0.tracker.spawn(roles(hub.clone(), cluster.clone(), slot, stop.clone()));
}

/// A reload retired upstream slot `slot` (its feed and interest already stopped): it leaves
/// the cluster, releasing its lease at once. Its cleanup in Redis waits for a lost Redis, but
/// not past shutdown.
pub(super) fn leave(hub: &Hub, cluster: &Cluster, slot: usize) {
    let (cleanup, cancel) = (cluster.retire(slot), hub.0.cancel.clone());
    hub.0.tracker.spawn(async move {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = cleanup => {}
        }
    });
}

fn following(cluster: &Cluster, index: usize) -> bool {
    *cluster.role(index).borrow() == Role::Follower
}

/// Applies what the other replicas announce.
async fn receive(hub: Hub, cluster: Cluster, mut inbox: mpsc::Receiver<Inbound>, cancel: CancellationToken) {
    loop {
        let inbound = tokio::select! {
            _ = cancel.cancelled() => return,
            msg = inbox.recv() => match msg { Some(m) => m, None => return },
        };
        match inbound {
            // Routed to the session table by the bus itself.
            Inbound::SessionEnded(_) => {}
            Inbound::Gap => {
                for up in &hub.0.lineup.load().upstreams {
                    let index = up.slot() as usize;
                    if following(&cluster, index) {
                        hub.resync_local(index);
                    }
                }
            }
            Inbound::Event { upstream, event } => match event {
                // Only a follower takes changes from the bus: a holder's or a solo replica's own
                // feed already applied what it saw (taking both would deliver twice).
                Event::Change(change) if following(&cluster, upstream) => hub.apply(upstream, &change),
                Event::Lost if following(&cluster, upstream) => hub.forget(upstream),
                Event::Resync if following(&cluster, upstream) => hub.resync_local(upstream),
                Event::Change(_) | Event::Lost | Event::Resync => {}
                Event::Active(filter) => {
                    if following(&cluster, upstream) {
                        hub.0.slots[upstream].active.send_replace(filter);
                    }
                }
                // Every replica purges its own cache, whatever its role.
                Event::Purge(target) => {
                    let removed = hub.0.cache.purge(upstream as u32, &target);
                    tracing::info!(upstream, purge = target.kind(), removed, "purged as another replica asked");
                }
                Event::Interest => {
                    if let Err(e) = cluster.refresh_interest(upstream).await {
                        tracing::debug!(error = %e, "cannot read the other replicas' interest");
                    }
                }
            },
        }
    }
}

/// Publishes this replica's interest in upstream `index` when it changes, and again every
/// lease period (so that a Redis that lost it, or a new holder, has it), and the holder's
/// live filter with it.
async fn interest(hub: Hub, cluster: Cluster, index: usize, cancel: CancellationToken) {
    let mut desired = hub.0.slots[index].desired.subscribe();
    let mut watched = hub.0.cache.watched_uris().changes(index);
    let Some(upstream) = hub.upstream(index) else { return };
    let mut info = upstream.info_watch();
    let mut health = cluster.health_watch();
    let period = (cluster.config().lease_ttl / 4).max(Duration::from_millis(50));
    let mut published = None;
    loop {
        let want = local_interest(&hub, index, &desired.borrow_and_update());
        watched.mark_unchanged();
        info.mark_unchanged();
        // A change is announced to the holder; an unchanged interest is only rewritten.
        let changed = published.as_ref() != Some(&want);
        match cluster.publish_interest(index, &want, changed).await {
            Ok(()) => published = Some(want),
            Err(_) => published = None,
        }
        if matches!(*cluster.role(index).borrow(), Role::Holder(_)) {
            cluster.announce(index, Event::Active(hub.0.slots[index].active.borrow().clone()));
        }
        let changed = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = desired.changed() => true,
            _ = watched.changed() => true,
            _ = info.changed() => true,
            _ = health.changed() => true,
            _ = tokio::time::sleep(period) => false,
        };
        if changed {
            tokio::time::sleep(INTEREST_DEBOUNCE).await;
        }
    }
}

/// A replica that stops running its own listen for upstream `index` (another replica won
/// the lease when Redis came back) may have missed changes in between: its listeners resync.
async fn roles(hub: Hub, cluster: Cluster, index: usize, cancel: CancellationToken) {
    let mut role = cluster.role(index);
    let mut was = *role.borrow_and_update();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = role.changed() => if changed.is_err() { return },
        }
        let now = *role.borrow_and_update();
        if was == Role::Solo && now == Role::Follower {
            hub.resync_local(index);
        }
        was = now;
    }
}
