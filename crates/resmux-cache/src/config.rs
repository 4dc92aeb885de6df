//! `[cache]`: the result cache (DESIGN §4).

use std::time::Duration;

use serde::Deserialize;

/// Bounds and freshness policy of the result cache.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Whether the cache is on at all. Default true.
    pub enabled: bool,
    /// Capacity, as the sum of stored entry sizes in bytes. Default 256 MiB.
    pub max_bytes: u64,
    /// Largest single entry; a larger result is passed through, not stored. Default 4 MiB.
    pub max_entry_bytes: u64,
    /// Lower clamp for an upstream's `ttlMs` (a positive ttl below it is raised). Default 0.
    #[serde(with = "humantime_serde")]
    pub min_ttl: Duration,
    /// Upper clamp for an upstream's `ttlMs`. Default 1 h.
    #[serde(with = "humantime_serde")]
    pub max_ttl: Duration,
    /// How long past its TTL an entry may still be served when a refetch fails. Default 0
    /// (never serve stale).
    #[serde(with = "humantime_serde")]
    pub stale_if_error: Duration,
    /// Lifetime of a negative entry for "resource not found". Default 5 s; 0 disables.
    #[serde(with = "humantime_serde")]
    pub negative_ttl: Duration,
    /// Most URIs of cached reads kept in one upstream's standing listen, so that the
    /// upstream's `resources/updated` evicts them with no client listening. Past it the oldest
    /// fall back to TTL-only invalidation (counted in `resmux_cache_watch_fallbacks_total`).
    /// Default 10,000.
    pub max_watched_uris: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: 256 << 20,
            max_entry_bytes: 4 << 20,
            min_ttl: Duration::ZERO,
            max_ttl: Duration::from_secs(3600),
            stale_if_error: Duration::ZERO,
            negative_ttl: Duration::from_secs(5),
            max_watched_uris: 10_000,
        }
    }
}
