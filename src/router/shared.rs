//! A flight leader's miss with the cluster tier, in one round trip before the upstream fetch:
//! the probe returns the shared value if another replica fetched it, or else takes the fill
//! lock, so that replicas missing together make one upstream request (the others wait for the
//! value, woken by the fill's notice, within `lock_wait`, and fetch for themselves when the
//! holder gave up or died). The caller answers first and writes the fill after (see the
//! cluster's `fill.rs`). Whenever Redis fails the request simply goes on alone.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::Routing;
use super::fetched::Fetched;
use crate::cache::{BaseKey, CachedMethod, Owner, Stored};
use crate::cluster::{Cluster, FillLock, Probe, SharedValue};
use crate::error::Error;

/// What the shared tier gave a flight leader.
pub(super) enum FromShared {
    /// Another replica's fill, fresh and current.
    Adopted(SharedValue),
    /// Fetched here, under the fill lock when `lock` is some: the answer is written through
    /// with it after it is served (dropped, it is released).
    Fetched { fetched: Fetched, lock: Option<FillLock> },
}

/// First and longest pause between probes while another replica fills, should its notice be
/// lost (the fill's notice wakes the waiter before that; see the cluster's `fillwait`).
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(200);

impl Routing {
    /// See the module comment.
    pub(super) async fn lead_shared<F, Fut>(
        &self,
        cluster: &Cluster,
        key: &BaseKey,
        uri: Option<&str>,
        principal: &Owner,
        fetch: &F,
    ) -> Result<FromShared, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let alone = async || Ok(FromShared::Fetched { fetched: fetch().await?, lock: None });
        let shared = cluster.shared_key(key, uri, principal);
        let deadline = Instant::now() + cluster.config().lock_wait;
        let mut pause = POLL_FIRST;
        let wait = cluster.fill_waiter(&shared);
        let mut waited = false;
        loop {
            match cluster.probe(&shared).await {
                Ok(Probe::Fresh(value)) => {
                    // A public value this replica would not have shared (a replica with
                    // another trust_public put it there) is not taken: the caller gets its
                    // own answer.
                    if value.public && !self.by_slot(key.upstream).config().public_policy().shares() {
                        return alone().await;
                    }
                    self.remember_adopted(key, &value);
                    return Ok(FromShared::Adopted(value));
                }
                Ok(Probe::Lead(lock)) => return fetch_under(cluster, lock, fetch).await,
                Ok(Probe::Wait) => {}
                Ok(Probe::Unusable) | Err(_) => return alone().await,
            }
            if !waited {
                cluster.note_lock_wait();
                waited = true;
            }
            if Instant::now() >= deadline {
                tracing::debug!("another replica's fill took longer than lock_wait; fetching here");
                return alone().await;
            }
            tokio::select! {
                _ = wait.notified() => {}
                _ = sleep(pause.min(deadline.saturating_duration_since(Instant::now()))) => {
                    pause = (pause * 2).min(POLL_MAX);
                }
            }
        }
    }
}

/// Fetches under the fill `lock`, extended while the fetch runs. The extension runs beside
/// the fetch, so the answer never waits for a Redis call in flight.
async fn fetch_under<F, Fut>(cluster: &Cluster, lock: FillLock, fetch: &F) -> Result<FromShared, Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Fetched, Error>>,
{
    let every = (cluster.config().lock_ttl / 3).max(Duration::from_millis(10));
    let extending = async {
        loop {
            sleep(every).await;
            let _ = lock.extend().await;
        }
    };
    let fetched = tokio::select! {
        outcome = fetch() => outcome?,
        never = extending => never,
    };
    Ok(FromShared::Fetched { fetched, lock: Some(lock) })
}

impl Routing {
    /// Another replica's list page, adopted: its passthrough URIs are remembered as if it
    /// had been fetched here.
    fn remember_adopted(&self, key: &BaseKey, value: &SharedValue) {
        let kind = match key.method {
            CachedMethod::ResourcesList => crate::mcp::List::Resources,
            CachedMethod::TemplatesList => crate::mcp::List::Templates,
            _ => return,
        };
        if let (Stored::Page { items, .. }, Some(index)) = (&value.stored, self.position(key.upstream)) {
            self.remember_page(index, kind, items);
        }
    }
}
