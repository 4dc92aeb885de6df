//! Prometheus metrics, served at `[listen] metrics_path` (GET). Names say upstream and
//! downstream; label values come from bounded sets (method names the proxy knows, cache
//! statuses, configured upstream names) so cardinality cannot grow with traffic.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::mcp;

mod labels;
mod meter;
mod purge;
mod relay;

pub use labels::Rejection;
use labels::*;
pub use meter::{NarrowReason, UpstreamMeter};
pub use relay::RelayMeter;

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The proxy's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    /// `downstream_requests`, resolved ahead per method slot and outcome: the hit path
    /// increments a counter it indexes, with no label set built or hashed.
    downstream: Vec<[Counter; OUTCOMES.len()]>,
    /// `downstream_request_seconds`, per method slot.
    downstream_seconds: Vec<Histogram>,
    upstream: Family<Upstream, Counter>,
    upstream_seconds: Histograms<UpstreamMethod>,
    list_skips: Family<Named, Counter>,
    cache_bytes: Gauge,
    cache_entries: Gauge,
    listeners: Gauge,
    upstream_listens: Family<Named, Gauge>,
    watched_uris: Family<Named, Gauge>,
    watch_fallbacks: Counter,
    /// Downstream requests: all, then hit, miss, stale, bypass, error (for the admin page,
    /// without summing label sets).
    totals: [std::sync::atomic::AtomicU64; 6],
    rejections: Family<Reason, Counter>,
    idle_closed: Counter,
    cache_hits: Family<Scoped, Counter>,
    cache_misses: Family<Scoped, Counter>,
    cache_stale: Family<Scoped, Counter>,
    cache_evictions: Family<Scoped, Counter>,
    cache_upstream_bytes: Family<Scoped, Gauge>,
    scope_narrowed: Family<Narrowed, Counter>,
    ttl_clamped: Family<Named, Counter>,
    flight_joins: Family<Named, Counter>,
    delivery_seconds: Histogram,
    upstream_healthy: Family<Named, Gauge>,
    upstream_era: Family<EraLabel, Gauge>,
    upstream_reconnects: Family<Named, Counter>,
    relays: relay::RelayFamilies,
    config_reloads: Family<ReloadOutcome, Counter>,
    purges: purge::PurgeFamilies,
}

/// One upstream's state read at scrape time.
pub struct UpstreamState {
    pub name: String,
    pub healthy: bool,
    /// `modern`, `legacy` or `unknown`.
    pub era: &'static str,
    /// Reconnects since start (stdio restarts, legacy re-initializations).
    pub reconnects: u64,
}

/// Values read at scrape time.
pub struct Snapshot {
    pub cache_bytes: u64,
    pub cache_entries: u64,
    pub listeners: usize,
    /// Upstream listens opened so far, per upstream.
    pub upstream_listens: Vec<(String, u64)>,
    /// URIs of cached reads in each upstream's standing listen.
    pub watched_uris: Vec<(String, u64)>,
    /// Cached reads left to TTL-only invalidation at the `max_watched_uris` bound, since start.
    pub watch_fallbacks: u64,
    /// Per upstream: cached bytes and evictions since start, per scope (public, private).
    pub cache_by_upstream: Vec<(String, crate::cache::ScopeFigures)>,
    pub upstreams: Vec<UpstreamState>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("resmux");
        let downstream_family = Family::<Downstream, Counter>::default();
        let seconds_family = Histograms::<ByMethod>::new_with_constructor(latency);
        let methods = KNOWN.len() + 1;
        let downstream = (0..methods)
            .map(|m| {
                OUTCOMES.map(|outcome| {
                    downstream_family.get_or_create_owned(&Downstream { method: method_label(m), outcome })
                })
            })
            .collect();
        let downstream_seconds =
            (0..methods).map(|m| seconds_family.get_or_create_owned(&ByMethod { method: method_label(m) })).collect();
        let upstream = Family::<Upstream, Counter>::default();
        let upstream_seconds = Histograms::<UpstreamMethod>::new_with_constructor(latency);
        let list_skips = Family::<Named, Counter>::default();
        let (cache_bytes, cache_entries, listeners) = (Gauge::default(), Gauge::default(), Gauge::default());
        let upstream_listens = Family::<Named, Gauge>::default();
        let watched_uris = Family::<Named, Gauge>::default();
        let watch_fallbacks = Counter::default();
        let rejections = Family::<Reason, Counter>::default();
        // Every reason is exposed from the start (at 0), so rates need no absent-series care.
        for r in Rejection::ALL {
            let _ = rejections.get_or_create(&Reason { reason: r.as_str() });
        }
        let idle_closed = Counter::default();
        let inner = Inner {
            registry: Registry::default(),
            downstream,
            downstream_seconds,
            upstream,
            upstream_seconds,
            list_skips,
            cache_bytes,
            cache_entries,
            listeners,
            upstream_listens,
            watched_uris,
            watch_fallbacks,
            totals: Default::default(),
            rejections,
            idle_closed,
            cache_hits: Family::default(),
            cache_misses: Family::default(),
            cache_stale: Family::default(),
            cache_evictions: Family::default(),
            cache_upstream_bytes: Family::default(),
            scope_narrowed: Family::default(),
            ttl_clamped: Family::default(),
            flight_joins: Family::default(),
            delivery_seconds: delivery(),
            upstream_healthy: Family::default(),
            upstream_era: Family::default(),
            upstream_reconnects: Family::default(),
            relays: relay::RelayFamilies::default(),
            config_reloads: Family::default(),
            purges: purge::PurgeFamilies::default(),
        };
        let _ = ["applied", "unchanged", "rejected"]
            .map(|outcome| inner.config_reloads.get_or_create_owned(&ReloadOutcome { outcome }));
        let r = &mut registry;
        r.register("downstream_requests", "Downstream requests answered, by method and outcome", downstream_family);
        r.register("downstream_request_seconds", "Downstream request latency, by method", seconds_family);
        r.register("upstream_requests", "Requests sent upstream, by upstream and outcome", inner.upstream.clone());
        r.register(
            "upstream_request_seconds",
            "Upstream request latency, by upstream and method",
            inner.upstream_seconds.clone(),
        );
        r.register("list_pages_skipped", "Upstream list pages skipped under fail_open", inner.list_skips.clone());
        r.register("cache_bytes", "Weighted size of the cache", inner.cache_bytes.clone());
        r.register("cache_entries", "Entries in the cache", inner.cache_entries.clone());
        r.register("hub_listeners", "Downstream listens open", inner.listeners.clone());
        r.register("upstream_listens_opened", "Upstream listens opened", inner.upstream_listens.clone());
        r.register(
            "cache_watched_uris",
            "URIs of cached reads kept in the upstream's standing listen",
            inner.watched_uris.clone(),
        );
        r.register(
            "cache_watch_fallbacks",
            "Cached reads left to TTL-only invalidation at the max_watched_uris bound",
            inner.watch_fallbacks.clone(),
        );
        r.register(
            "downstream_rejections",
            "Downstream connections or requests refused, by reason",
            inner.rejections.clone(),
        );
        r.register(
            "downstream_idle_closed",
            "Downstream connections closed after idle_timeout with no request in flight",
            inner.idle_closed.clone(),
        );
        r.register("cache_hits", "Fresh cache hits, by upstream and scope", inner.cache_hits.clone());
        r.register(
            "cache_misses",
            "Cache misses fetched upstream, by upstream and the answer's scope",
            inner.cache_misses.clone(),
        );
        r.register(
            "cache_stale_served",
            "Stale entries served after a failed refetch, by upstream and scope",
            inner.cache_stale.clone(),
        );
        r.register(
            "cache_evictions",
            "Entries evicted for size or expiry, by upstream and scope",
            inner.cache_evictions.clone(),
        );
        r.register("cache_upstream_bytes", "Cached bytes, by upstream and scope", inner.cache_upstream_bytes.clone());
        r.register(
            "cache_scope_narrowed",
            "Answers an upstream called public that were kept per caller, by upstream and reason \
             (untrusted: trust_public; filtered: narrowed by [[upstream.allow]])",
            inner.scope_narrowed.clone(),
        );
        r.register(
            "cache_ttl_clamped",
            "Answers whose ttlMs was lowered to max_ttl (the upstream's or [cache]'s), by upstream",
            inner.ttl_clamped.clone(),
        );
        r.register(
            "cache_flight_joins",
            "Cache misses that joined a fetch already in flight (single-flight), by upstream",
            inner.flight_joins.clone(),
        );
        r.register(
            "notification_delivery_seconds",
            "From an upstream change's receipt to its notification written to a listener",
            inner.delivery_seconds.clone(),
        );
        r.register("upstream_healthy", "1 when the upstream answered discovery", inner.upstream_healthy.clone());
        r.register("config_reloads", "Config reloads, by outcome", inner.config_reloads.clone());
        r.register("upstream_era", "1 for the upstream's current protocol era", inner.upstream_era.clone());
        r.register(
            "upstream_reconnects",
            "Stdio restarts and legacy session re-initializations, by upstream",
            inner.upstream_reconnects.clone(),
        );
        inner.relays.register(r);
        inner.purges.register(r);
        Self(Arc::new(Inner { registry, ..inner }))
    }

    /// The handles of upstream `name` (its series exist, at 0, from now on).
    pub fn upstream_meter(&self, name: &str) -> UpstreamMeter {
        let i = &self.0;
        let scoped = |f: &Family<Scoped, Counter>| {
            [0, 1].map(|s| f.get_or_create_owned(&Scoped { upstream: name.to_owned(), scope: SCOPES[s] }))
        };
        UpstreamMeter {
            hits: scoped(&i.cache_hits),
            misses: scoped(&i.cache_misses),
            stale: scoped(&i.cache_stale),
            joins: i.flight_joins.get_or_create_owned(&Named { upstream: name.to_owned() }),
            narrowed: NARROW_REASONS
                .map(|reason| i.scope_narrowed.get_or_create_owned(&Narrowed { upstream: name.to_owned(), reason })),
            clamped: i.ttl_clamped.get_or_create_owned(&Named { upstream: name.to_owned() }),
            seconds: (0..=KNOWN.len())
                .map(|m| {
                    i.upstream_seconds
                        .get_or_create_owned(&UpstreamMethod { upstream: name.to_owned(), method: method_label(m) })
                })
                .collect(),
            relay: i.relays.meter(name),
        }
    }

    /// One downstream request answered after `seconds`.
    pub fn downstream(&self, method: &str, outcome: &'static str, seconds: f64) {
        let (m, o) = (method_index(method), outcome_index(outcome));
        self.0.downstream[m][o].inc();
        self.0.downstream_seconds[m].observe(seconds);
        use std::sync::atomic::Ordering::Relaxed;
        self.0.totals[0].fetch_add(1, Relaxed);
        // The admin page's totals count the cache outcomes and errors, not streams.
        if o < 5 {
            self.0.totals[o + 1].fetch_add(1, Relaxed);
        }
    }

    /// One upstream request finished (its latency goes to the upstream's
    /// [`UpstreamMeter::request_seconds`]).
    pub fn upstream(&self, upstream: &str, outcome: &'static str) {
        self.0.upstream.get_or_create(&Upstream { upstream: upstream.to_owned(), outcome }).inc();
    }

    /// A list page skipped because its upstream failed (fail_open).
    pub fn list_skip(&self, upstream: &str) {
        self.0.list_skips.get_or_create(&Named { upstream: upstream.to_owned() }).inc();
    }

    /// A connection or request refused.
    pub fn rejection(&self, why: Rejection) {
        self.0.rejections.get_or_create(&Reason { reason: why.as_str() }).inc();
    }

    /// A config reload ended with `outcome` (`applied`, `unchanged`, `rejected`).
    pub fn reloaded(&self, outcome: &'static str) {
        self.0.config_reloads.get_or_create(&ReloadOutcome { outcome }).inc();
    }

    /// A connection closed by `idle_timeout`.
    pub fn idle_closed(&self) {
        self.0.idle_closed.inc();
    }

    /// The operator purge counters, caught up with the cache's totals (before a render).
    pub fn purges(&self, counts: &[crate::cache::PurgeCounts]) {
        self.0.purges.catch_up(counts);
    }

    /// The notification delivery histogram (see [`crate::hub::Hub`]).
    pub fn delivery(&self) -> Histogram {
        self.0.delivery_seconds.clone()
    }

    /// The text exposition, with gauges set from `snapshot`.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        let i = &self.0;
        i.cache_bytes.set(snapshot.cache_bytes as i64);
        i.cache_entries.set(snapshot.cache_entries as i64);
        i.listeners.set(snapshot.listeners as i64);
        for (name, n) in &snapshot.upstream_listens {
            i.upstream_listens.get_or_create(&Named { upstream: name.clone() }).set(*n as i64);
        }
        for (name, n) in &snapshot.watched_uris {
            i.watched_uris.get_or_create(&Named { upstream: name.clone() }).set(*n as i64);
        }
        catch_up(&i.watch_fallbacks, snapshot.watch_fallbacks);
        for (name, figures) in &snapshot.cache_by_upstream {
            for (s, scope) in SCOPES.into_iter().enumerate() {
                let label = Scoped { upstream: name.clone(), scope };
                i.cache_upstream_bytes.get_or_create(&label).set(figures.bytes[s] as i64);
                catch_up(&i.cache_evictions.get_or_create(&label), figures.evictions[s]);
            }
        }
        for u in &snapshot.upstreams {
            let named = Named { upstream: u.name.clone() };
            i.upstream_healthy.get_or_create(&named).set(i64::from(u.healthy));
            catch_up(&i.upstream_reconnects.get_or_create(&named), u.reconnects);
            for era in ["modern", "legacy", "unknown"] {
                let label = EraLabel { upstream: u.name.clone(), era };
                i.upstream_era.get_or_create(&label).set(i64::from(era == u.era));
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &i.registry).expect("writing to a String");
        out
    }
}

/// Brings a counter kept elsewhere (as a running total) up to `total`.
fn catch_up(counter: &Counter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

/// Downstream requests answered since start, by how the cache took part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    pub all: u64,
    pub hit: u64,
    pub miss: u64,
    pub stale: u64,
    pub bypass: u64,
    pub error: u64,
}

impl Metrics {
    /// The downstream request counters summed over methods.
    pub fn downstream_totals(&self) -> Totals {
        let n = |i: usize| self.0.totals[i].load(std::sync::atomic::Ordering::Relaxed);
        Totals { all: n(0), hit: n(1), miss: n(2), stale: n(3), bypass: n(4), error: n(5) }
    }
}

/// Method label values: everything the proxy serves, modern and legacy.
const KNOWN: &[&str] = &[
    mcp::method::DISCOVER,
    mcp::method::RESOURCES_LIST,
    mcp::method::RESOURCES_TEMPLATES_LIST,
    mcp::method::RESOURCES_READ,
    mcp::method::TOOLS_LIST,
    mcp::method::TOOLS_CALL,
    mcp::method::PROMPTS_LIST,
    mcp::method::PROMPTS_GET,
    mcp::method::COMPLETE,
    mcp::method::LISTEN,
];

#[cfg(test)]
mod tests;
