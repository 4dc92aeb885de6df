//! resmux-cache: the result cache (DESIGN §4). Upstream results stored in their final
//! downstream form, weighed in bytes, fresh for the upstream's clamped `ttlMs`, shared when
//! `public` and kept within one principal when `private`; concurrent misses collapse into one
//! upstream request; upstream notifications invalidate entries through epochs. No sockets:
//! what to fetch on a miss, and from where, is the proxy's router's business.
//!
//! Modules, lowest first:
//! - [`config`]: the `[cache]` section (bounds and the TTL clamps).
//! - `key`: what an entry is keyed by: method, upstream, canonical params, and the partition
//!   (shared, or one principal's).
//! - `epochs`: per-URI and per-list counters that a change notification bumps, so an entry
//!   stored before the change is never served after it.
//! - `entry`: a stored result with its TTL, and how a hit splices the `id` and `ttlMs` in.
//! - `figures`, `flight`, `watched`: hit/miss figures per scope, the single-flight table
//!   that collapses concurrent misses, and the URIs kept watched upstream while cached.
//! - `purge`, `view`: the operator's purge by URI, prefix or upstream, and the admin view of
//!   the largest entries.
//! - the crate root: [`Cache`], lookups and stores over moka.

pub mod config;
mod entry;
mod epochs;
mod figures;
mod flight;
mod key;
mod purge;
mod view;
mod watched;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use entry::{Entry, Stored, splice_ttl};
pub use epochs::{Epochs, Ticket};
pub use figures::ScopeFigures;
pub use flight::{FlightKey, Flights};
pub use key::{
    BaseKey, CacheKey, CachedMethod, KeyRef, Owner, Partition, PartitionRef, canonical_params, canonical_params_with,
};
pub use purge::{PurgeCounts, Target};
pub use view::{EntryView, TopEntries};
pub use watched::WatchedUris;

pub use crate::config::CacheConfig;

/// What a lookup found.
pub enum Lookup {
    /// A fresh entry, `age` old: serve it.
    Fresh {
        entry: Arc<Entry>,
        age: Duration,
    },
    /// An entry past its TTL (or invalidated) but inside the stale-if-error window: serve it
    /// only if a refetch fails.
    Stale(Arc<Entry>),
    Miss,
}

/// Cheap handle over the cache.
#[derive(Clone)]
pub struct Cache(Arc<Inner>);

struct Inner {
    config: CacheConfig,
    store: moka::sync::Cache<CacheKey, Arc<Entry>>,
    epochs: Epochs,
    /// URIs of cached reads, for the hub's standing listens.
    watches: Arc<WatchedUris>,
    /// Bytes and evictions per upstream and scope, for the metrics.
    figures: Arc<figures::Figures>,
    /// Operator purges applied here and entries they removed, for the metrics.
    purges: purge::Counters,
}

/// Reclaims memory of entries past their stale window. Freshness itself is decided at lookup
/// with tokio's clock (so paused-time tests see expiry), this only frees space.
struct Reclaim;

impl moka::Expiry<CacheKey, Arc<Entry>> for Reclaim {
    fn expire_after_create(&self, _k: &CacheKey, v: &Arc<Entry>, _at: std::time::Instant) -> Option<Duration> {
        Some(v.ttl + v.stale_window)
    }
}

impl Cache {
    /// A cache bounded by `config.max_bytes`, for upstream slots `0..slots`.
    pub fn new(config: CacheConfig, slots: usize) -> Self {
        let upstreams = slots;
        let watches = Arc::new(WatchedUris::new(upstreams, config.max_watched_uris));
        let released = watches.clone();
        let figures = Arc::new(figures::Figures::new(upstreams));
        let counted = figures.clone();
        let store = moka::sync::Cache::builder()
            .max_capacity(config.max_bytes)
            .weigher(|k: &CacheKey, v: &Arc<Entry>| u32::try_from(k.weight() + v.weight()).unwrap_or(u32::MAX))
            .expire_after(Reclaim)
            // A removed or replaced upstream's entries are dropped by predicate.
            .support_invalidation_closures()
            // Every removal (expiry, eviction, replacement, invalidation) releases the entry's
            // watch; every store took one.
            .eviction_listener(move |k: Arc<CacheKey>, v: Arc<Entry>, cause: moka::notification::RemovalCause| {
                if let Some(uri) = &v.watched {
                    released.release(k.base.upstream, uri);
                }
                counted.removed(&k, &v, cause.was_evicted());
            })
            .build();
        Self(Arc::new(Inner {
            config,
            store,
            epochs: Epochs::new(upstreams),
            watches,
            figures,
            purges: purge::Counters::default(),
        }))
    }

    /// The URIs of cached reads that upstream notifications must be able to evict.
    pub fn watched_uris(&self) -> &WatchedUris {
        &self.0.watches
    }

    /// Whether caching is on.
    pub fn enabled(&self) -> bool {
        self.0.config.enabled
    }

    /// The invalidation epochs (notifications bump them).
    pub fn epochs(&self) -> &Epochs {
        &self.0.epochs
    }

    /// Looks `base` up in the public partition, then in the caller's: `owner` is asked for
    /// only when the public partition has nothing (an anonymous caller's owner is a digest of
    /// its `_meta`, which a public hit does not need). Borrowed keys: nothing is cloned.
    pub fn lookup<'o>(&self, base: &BaseKey, owner: impl FnOnce() -> &'o Owner) -> Lookup {
        let public = KeyRef { base, partition: PartitionRef::Public };
        if let found @ (Lookup::Fresh { .. } | Lookup::Stale(_)) = self.lookup_one(public) {
            return found;
        }
        self.lookup_one(KeyRef { base, partition: PartitionRef::Private(owner()) })
    }

    fn lookup_one(&self, key: KeyRef<'_>) -> Lookup {
        let Some(entry) = self.0.store.get(&key) else {
            return Lookup::Miss;
        };
        let now = Instant::now();
        let age = now.saturating_duration_since(entry.stored_at);
        let current = self.0.epochs.is_current(&entry.ticket);
        if current && age < entry.ttl {
            entry.hit();
            Lookup::Fresh { entry, age }
        } else if age < entry.ttl + entry.stale_window {
            Lookup::Stale(entry)
        } else {
            self.0.store.invalidate(&key);
            Lookup::Miss
        }
    }

    /// The upper clamp of every upstream's `ttlMs` (`[cache] max_ttl`).
    pub fn max_ttl(&self) -> Duration {
        self.0.config.max_ttl
    }

    /// The TTL to store for an upstream `ttl_ms`: clamped to `[min_ttl, max_ttl]`; 0 stays 0
    /// (not cached).
    pub fn clamp_ttl(&self, ttl_ms: u64) -> Duration {
        if ttl_ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(ttl_ms).clamp(self.0.config.min_ttl, self.0.config.max_ttl)
    }

    /// Stores `stored` under `base` in `partition` (the result's scope), unless it is too
    /// large or not worth keeping. Returns whether it was stored. `watch` names the upstream
    /// URI to keep in the upstream's standing listen while it is cached.
    pub fn store(
        &self,
        base: BaseKey,
        partition: Partition,
        stored: Stored,
        ttl: Duration,
        ticket: Ticket,
        watch: Option<&str>,
    ) -> bool {
        self.store_aged(base.in_partition(partition), stored, ttl, ticket, watch, Duration::ZERO)
    }

    /// [`Cache::store`] for an answer fetched `age` ago (by another replica): it goes stale
    /// when its TTL runs out counted from the fetch, not from now.
    pub fn store_aged(
        &self,
        key: CacheKey,
        stored: Stored,
        ttl: Duration,
        ticket: Ticket,
        watch: Option<&str>,
        age: Duration,
    ) -> bool {
        let public = key.partition == Partition::Public;
        if !self.0.config.enabled || ttl.is_zero() {
            return false;
        }
        if stored.len() as u64 > self.0.config.max_entry_bytes {
            return false;
        }
        // A fill in flight while its upstream was purged may hold what the purge removed.
        if self.0.epochs.purged_since(&ticket) {
            return false;
        }
        let entry = Entry {
            stored,
            stored_at: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
            ttl,
            stale_window: self.0.config.stale_if_error,
            ticket,
            public,
            watched: watch.map(Box::from),
            hits: Default::default(),
            purged: Default::default(),
        };
        if let Some(uri) = watch {
            self.0.watches.retain(key.base.upstream, uri);
        }
        self.0.figures.stored(&key, &entry);
        let entry = Arc::new(entry);
        self.0.store.insert(key.clone(), entry.clone());
        // A purge that began since the check above may have passed this key already: the
        // entry takes itself out (the purge's count in `Epochs` is bumped before its pass).
        if self.0.epochs.purged_since(&entry.ticket) {
            self.0.store.invalidate(&key);
            return false;
        }
        true
    }

    /// Removes the entry under `key`: one stored before the shared tier told this replica
    /// that a change had raced its fetch.
    pub fn forget(&self, key: &CacheKey) {
        self.0.store.invalidate(key);
    }

    /// The largest entry stored; a read answer past it is relayed, not held.
    pub fn max_entry_bytes(&self) -> u64 {
        self.0.config.max_entry_bytes
    }

    /// Drops every entry of upstream `slot` (removed or replaced by a reload) and makes
    /// anything fetched from it before now stale, so that neither a late store of a request
    /// still in flight nor a stale-if-error serve can bring its content back.
    pub fn drop_upstream(&self, slot: u32) {
        self.0.epochs.stream_lost(slot);
        if let Err(e) = self.0.store.invalidate_entries_if(move |k, _| k.upstream() == slot) {
            tracing::warn!(slot, error = %e, "cannot drop a removed upstream's cache entries");
        }
        self.0.store.run_pending_tasks();
    }

    /// Lifetime of a negative ("resource not found") entry.
    pub fn negative_ttl(&self) -> Duration {
        self.0.config.negative_ttl
    }

    /// Bytes currently weighed by the store (after pending maintenance).
    pub fn weighted_size(&self) -> u64 {
        self.0.store.run_pending_tasks();
        self.0.store.weighted_size()
    }

    /// Bytes held and evictions since start for upstream `index`, per scope (after pending
    /// maintenance).
    pub fn figures(&self, index: usize) -> ScopeFigures {
        self.0.store.run_pending_tasks();
        self.0.figures.of(index)
    }

    /// Number of entries (after pending maintenance).
    pub fn entry_count(&self) -> u64 {
        self.0.store.run_pending_tasks();
        self.0.store.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> BaseKey {
        BaseKey { upstream: 0, method: CachedMethod::ResourcesRead, era: 0, params: r#"{"uri":"a://x"}"#.into() }
    }

    #[tokio::test(start_paused = true)]
    async fn entries_go_stale_then_miss_on_tokio_time() {
        let config = CacheConfig { stale_if_error: Duration::from_secs(2), ..CacheConfig::default() };
        let cache = Cache::new(config, 1);
        let ticket = cache.epochs().ticket(0, CachedMethod::ResourcesRead, Some("a://x"));
        let stored = Stored::result(b"{}").unwrap();
        assert!(cache.store(key(), Partition::Public, stored, Duration::from_secs(1), ticket, None));
        let owner = Owner::Anonymous([0; 16]);
        assert!(matches!(cache.lookup(&key(), || &owner), Lookup::Fresh { .. }));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(matches!(cache.lookup(&key(), || &owner), Lookup::Fresh { .. }));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(matches!(cache.lookup(&key(), || &owner), Lookup::Stale(_)), "stale at its TTL");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(matches!(cache.lookup(&key(), || &owner), Lookup::Miss), "gone past the stale window");
    }

    #[test]
    fn a_public_hit_never_asks_for_the_owner_and_a_private_entry_is_its_owners_alone() {
        let cache = Cache::new(CacheConfig::default(), 1);
        let ticket = || cache.epochs().ticket(0, CachedMethod::ResourcesRead, Some("a://x"));
        let (alice, bob) = (Owner::Anonymous([1; 16]), Owner::Anonymous([2; 16]));
        let private = BaseKey { params: r#"{"uri":"a://p"}"#.into(), ..key() };
        let stored = || Stored::result(b"{}").unwrap();
        assert!(cache.store(key(), Partition::Public, stored(), Duration::from_secs(60), ticket(), None));
        assert!(cache.store(
            private.clone(),
            Partition::Private(alice.clone()),
            stored(),
            Duration::from_secs(60),
            ticket(),
            None
        ));
        let asked = std::cell::Cell::new(0);
        let ask = |o| {
            asked.set(asked.get() + 1);
            o
        };
        assert!(matches!(cache.lookup(&key(), || ask(&bob)), Lookup::Fresh { .. }));
        assert_eq!(asked.get(), 0, "a public hit needs no owner");
        assert!(matches!(cache.lookup(&private, || ask(&alice)), Lookup::Fresh { .. }));
        assert!(matches!(cache.lookup(&private, || ask(&bob)), Lookup::Miss));
        assert_eq!(asked.get(), 2);
    }
}
