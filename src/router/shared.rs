//! A flight leader's miss with the cluster tier: the shared value if another replica fetched
//! it; otherwise the fill lock, so that replicas missing together make one upstream request
//! (the others wait for the value, woken by the fill's notice, within `lock_wait`, and fetch
//! for themselves when the holder gave up or died); the fill written through unless an epoch moved meanwhile.
//! Whenever Redis fails the request simply goes on alone.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::Routing;
use super::fetched::Fetched;
use crate::cache::{BaseKey, CachedMethod, Owner, Stored};
use crate::cluster::{Cluster, SharedKey, SharedValue};
use crate::error::Error;

/// What the shared tier gave a flight leader.
pub(super) enum FromShared {
    /// Another replica's fill, fresh and current.
    Adopted(SharedValue),
    /// Fetched here; `store` is false when a change raced the fetch, so the answer must not
    /// be cached as fresh.
    Fetched { fetched: Fetched, store: bool },
}

/// First and longest pause between probes while another replica fills, should its notice be
/// lost (the fill's notice wakes the waiter before that; see the cluster's `fillwait`).
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(200);

impl Routing {
    /// See the module comment. `ttl_of` gives the TTL a fetched answer is stored for.
    pub(super) async fn lead_shared<F, Fut>(
        &self,
        cluster: &Cluster,
        key: &BaseKey,
        uri: Option<&str>,
        principal: &Owner,
        ttl_of: impl Fn(&Fetched, &Stored) -> (Duration, bool),
        fetch: &F,
    ) -> Result<FromShared, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let alone = async || Ok(FromShared::Fetched { fetched: fetch().await?, store: true });
        let shared = cluster.shared_key(key, uri, principal);
        let deadline = Instant::now() + cluster.config().lock_wait;
        let mut pause = POLL_FIRST;
        let mut waiting = None;
        loop {
            let Ok(probe) = cluster.probe(&shared).await else { return alone().await };
            if let Some(value) = probe.fresh {
                // A public value this replica would not have shared (a replica with another
                // trust_public put it there) is not taken: the caller gets its own answer.
                if value.public && !self.by_slot(key.upstream).config().public_policy().shares() {
                    return alone().await;
                }
                self.remember_adopted(key, &value);
                return Ok(FromShared::Adopted(value));
            }
            if !probe.locked {
                match cluster.lock(&shared).await {
                    Ok(Some(token)) => {
                        return self.fetch_and_fill(cluster, &shared, &token, probe.epochs, ttl_of, fetch).await;
                    }
                    Ok(None) => {}
                    Err(_) => return alone().await,
                }
            }
            if Instant::now() >= deadline {
                tracing::debug!("another replica's fill took longer than lock_wait; fetching here");
                return alone().await;
            }
            let Some(wait) = &waiting else {
                cluster.note_lock_wait();
                match cluster.wait_for_fill(&shared).await {
                    // Probed again at once: a fill done before the mark sent no notice.
                    Ok(wait) => waiting = Some(wait),
                    Err(_) => return alone().await,
                }
                continue;
            };
            tokio::select! {
                _ = wait.notified() => {}
                _ = sleep(pause.min(deadline.saturating_duration_since(Instant::now()))) => {
                    pause = (pause * 2).min(POLL_MAX);
                }
            }
        }
    }

    /// Fetches under the fill lock `token` (extended while the fetch runs) and writes the
    /// answer through.
    async fn fetch_and_fill<F, Fut>(
        &self,
        cluster: &Cluster,
        shared: &SharedKey,
        token: &str,
        epochs: (u64, u64),
        ttl_of: impl Fn(&Fetched, &Stored) -> (Duration, bool),
        fetch: &F,
    ) -> Result<FromShared, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let fetched_at_ms = crate::cluster::now_ms();
        let fetching = fetch();
        tokio::pin!(fetching);
        let every = (cluster.config().lock_ttl / 3).max(Duration::from_millis(10));
        let outcome = loop {
            tokio::select! {
                outcome = &mut fetching => break outcome,
                _ = sleep(every) => {
                    let _ = cluster.extend(shared, token).await;
                }
            }
        };
        let fetched = match outcome {
            Ok(f) => f,
            Err(e) => {
                let _ = cluster.unlock(shared, token).await;
                return Err(e);
            }
        };
        let Some(stored) = &fetched.stored else {
            let _ = cluster.unlock(shared, token).await;
            return Ok(FromShared::Fetched { fetched, store: true });
        };
        let (ttl, public) = ttl_of(&fetched, stored);
        let value =
            SharedValue { stored: stored.clone(), public, fetched_at_ms, ttl_ms: ttl.as_millis() as u64, epochs };
        // A Redis failure here leaves the local epochs to guard the local entry.
        let store = cluster.fill(shared, &value, token).await.unwrap_or(true);
        Ok(FromShared::Fetched { fetched, store })
    }
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
