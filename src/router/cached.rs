//! The cache in the request path: lookup (public partition, then the caller's), single-flight
//! on a miss, store by the result's own hints, stale-if-error.

use std::sync::Arc;
use std::time::Duration;

use super::fetched::{Fetched, Got, Served};
use super::shared::FromShared;
use super::{CacheStatus, Call, Routing};
use crate::cache::{BaseKey, CachedMethod, Lookup, Owner, Partition, Stored, canonical_params_with, splice_ttl};
use crate::cluster::SharedValue;
use crate::error::Error;
use crate::jsonrpc::RawObject;
use crate::telemetry;

/// A leader's outcome, shared with the waiters of its flight.
pub(super) type Shared = Result<Arc<Outcome>, Error>;

/// What a flight's leader got, shared with its waiters: the answer, and whose it is (a
/// private answer may only be taken by the same owner).
#[derive(Debug)]
pub(super) struct Outcome {
    pub served: Served,
    pub leader: Owner,
}

/// Whether a request is an MRTR retry, whose result must never be cached (nor served from
/// cache: it carries answers the upstream has to see).
pub(super) fn is_mrtr_retry(params: &RawObject<'_>) -> bool {
    params.contains("inputResponses") || params.contains("requestState")
}

impl Routing {
    /// The base key of a request to upstream `index`: the downstream params with `key` set
    /// to the string `value` (or removed, for `None`), canonicalized. Computed without copying
    /// the params object: this runs on every hit.
    pub(super) fn cache_key(
        &self,
        call: &Call<'_>,
        index: usize,
        method: CachedMethod,
        key: &str,
        value: Option<&str>,
    ) -> BaseKey {
        BaseKey {
            upstream: self.0.upstreams[index].slot(),
            method,
            era: self.0.upstreams[index].cache_era(),
            params: canonical_params_with(call.params, key, value),
        }
    }

    /// Serves `key` from the cache or, on a miss, from `fetch` (once for all concurrent
    /// callers). `uri` names the resource of a read, for invalidation.
    pub(super) async fn through_cache<F, Fut>(
        &self,
        call: &Call<'_>,
        key: BaseKey,
        uri: Option<&str>,
        fetch: F,
    ) -> Result<Served, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let upstream = &self.by_slot(key.upstream);
        if !self.0.cache.enabled() || !upstream.config().cache || is_mrtr_retry(call.params) {
            telemetry::record_cache("bypass");
            return Ok(Served::fresh(Box::pin(fetch()).await?, CacheStatus::Bypass));
        }
        // Whose private entries these are: computed once, and only when the public partition
        // has nothing (for an anonymous caller it is a digest of the request's `_meta`).
        let owner = std::sync::OnceLock::new();
        let owner_of = || owner.get_or_init(|| call.owner());
        let stale = match self.0.cache.lookup(&key, owner_of) {
            Lookup::Fresh { entry, age } => {
                upstream.meter().cache_hit(entry.public);
                telemetry::record_cache("hit");
                return Ok(Served::from_entry(&entry, CacheStatus::Hit, age));
            }
            Lookup::Stale(entry) => Some(entry),
            Lookup::Miss => None,
        };
        let principal = owner_of().clone();
        // The miss path, boxed: the upstream fetch's future is large, and inline it would be
        // moved with every request's future (a cached hit's too).
        Box::pin(self.through_flight(key, uri, stale, principal, fetch)).await
    }

    /// A miss (or a stale entry): one flight per key fetches it for all concurrent callers.
    async fn through_flight<F, Fut>(
        &self,
        key: BaseKey,
        uri: Option<&str>,
        stale: Option<std::sync::Arc<crate::cache::Entry>>,
        principal: Owner,
        fetch: F,
    ) -> Result<Served, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let upstream = &self.by_slot(key.upstream);
        let principal = &principal;
        // One flight per key for everyone first (a public answer is shared by all callers),
        // where a public answer can be shared at all; behind a per-caller credential each
        // caller's fetch is its own (the upstream may answer each differently).
        let shares = upstream.config().public_policy().shares();
        let first = if shares { Partition::Public } else { Partition::Private(principal.clone()) };
        let (mut outcome, mut led) = self
            .0
            .shared
            .flights
            .run(key.clone().in_partition(first), || self.lead(&key, uri, principal, &fetch))
            .await;
        // A private outcome belongs to the leader's owner alone: fetch our own.
        if let Ok(shared) = &outcome
            && !shared.served.public
            && shared.leader != *principal
        {
            let flight = key.clone().in_partition(Partition::Private(principal.clone()));
            (outcome, led) = self.0.shared.flights.run(flight, || self.lead(&key, uri, principal, &fetch)).await;
        }
        match outcome {
            Ok(shared) => {
                if led {
                    upstream.meter().cache_miss(shared.served.public);
                } else {
                    upstream.meter().flight_joined();
                }
                telemetry::record_cache(if led { "miss" } else { "joined" });
                Ok(shared.served.clone())
            }
            Err(Error::Upstream(e)) if stale.as_ref().is_some_and(|s| s.servable_stale()) => {
                let entry = stale.expect("checked");
                tracing::info!(upstream = %upstream.name(), error = %e, "serving stale entry after refetch failure");
                upstream.meter().cache_stale(entry.public);
                telemetry::record_cache("stale");
                Ok(Served::from_entry(&entry, CacheStatus::Stale, entry.age()))
            }
            Err(e) => Err(e),
        }
    }

    /// The flight leader: takes the invalidation ticket, fetches (through the cluster tier
    /// when there is one), stores what is cacheable.
    async fn lead<F, Fut>(&self, key: &BaseKey, uri: Option<&str>, principal: &Owner, fetch: &F) -> Shared
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched, Error>>,
    {
        let cache = &self.0.cache;
        let ticket = cache.epochs().ticket(key.upstream, key.method, uri);
        // The TTL an answer is stored for, and whether it goes in the public partition.
        // Negative entries are kept per principal: another may be allowed to see more.
        let ttl_of = |fetched: &Fetched, stored: &Stored| match stored {
            Stored::NotFound => (cache.negative_ttl(), false),
            _ => (cache.clamp_ttl(fetched.ttl_ms), fetched.public),
        };
        let (mut fetched, lock) = match &self.0.cluster {
            Some(cluster) if cluster.healthy() => match self.lead_shared(cluster, key, uri, principal, fetch).await? {
                FromShared::Adopted(value) => return Ok(self.adopt(key, uri, principal, ticket, value)),
                FromShared::Fetched { fetched, lock } => (fetched, lock),
            },
            _ => (fetch().await?, None),
        };
        if let Some(stored) = fetched.stored.take() {
            let (ttl, public) = ttl_of(&fetched, &stored);
            let partition = if public { Partition::Public } else { Partition::Private(principal.clone()) };
            let tail = match &stored {
                Stored::Result { tail } => Some(tail.clone()),
                _ => None,
            };
            let shared = lock.map(|lock| (lock.value(stored.clone(), public, ttl.as_millis() as u64), lock));
            let watch = self.watched_uri(key, uri, &stored);
            let cache_key = key.clone().in_partition(partition);
            if cache.store_aged(cache_key.clone(), stored, ttl, ticket, watch, Duration::ZERO) {
                let ttl_ms = ttl.as_millis() as u64;
                fetched.ttl_ms = ttl_ms;
                if let Some(tail) = tail {
                    fetched.got = Got::Result(splice_ttl(&tail, ttl_ms));
                }
            }
            // Written after the local store, so that a fill refused for a change that raced
            // the fetch (one this replica has not heard of yet) takes the local copy out too.
            if let Some((value, lock)) = shared {
                let cache = cache.clone();
                lock.fill_later(value, move || cache.forget(&cache_key));
            }
        }
        Ok(Arc::new(Outcome { served: Served::fresh(fetched, CacheStatus::Miss), leader: principal.clone() }))
    }

    /// A cached read stays watched on an upstream that can tell when it changes.
    fn watched_uri<'u>(&self, key: &BaseKey, uri: Option<&'u str>, stored: &Stored) -> Option<&'u str> {
        uri.filter(|_| {
            key.method == CachedMethod::ResourcesRead
                && matches!(stored, Stored::Result { .. })
                && self.by_slot(key.upstream).info().is_some_and(|i| i.flag("resources", "subscribe"))
        })
    }

    /// Another replica's fill: stored here for what is left of its TTL, and served as a hit.
    fn adopt(
        &self,
        key: &BaseKey,
        uri: Option<&str>,
        principal: &Owner,
        ticket: crate::cache::Ticket,
        value: SharedValue,
    ) -> Arc<Outcome> {
        let now = crate::cluster::now_ms();
        let age = value.age(now);
        let ttl_ms = value.remaining(now).as_millis() as u64;
        let got = match &value.stored {
            Stored::Result { tail } => Got::Result(splice_ttl(tail, ttl_ms)),
            Stored::Page { items, next, .. } => Got::Page { items: items.clone(), next: next.clone() },
            Stored::NotFound => Got::NotFound,
        };
        let partition = if value.public { Partition::Public } else { Partition::Private(principal.clone()) };
        let watch = self.watched_uri(key, uri, &value.stored);
        let ttl = Duration::from_millis(value.ttl_ms);
        self.0.cache.store_aged(key.clone().in_partition(partition), value.stored, ttl, ticket, watch, age);
        let served = Served { got, public: value.public, ttl_ms, status: CacheStatus::Hit, age: Some(age.as_secs()) };
        Arc::new(Outcome { served, leader: principal.clone() })
    }
}
