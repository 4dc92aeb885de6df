//! Prometheus metrics, served at `[listen] metrics_path` (GET). Names say upstream and
//! downstream; label values come from bounded sets (method names the proxy knows, cache
//! statuses, configured upstream names) so cardinality cannot grow with traffic.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::mcp;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Downstream {
    method: &'static str,
    /// `hit`, `miss`, `stale`, `bypass`, or `error`.
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Upstream {
    upstream: String,
    /// `ok`, `error` (a JSON-RPC error answer), or the failure kind.
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// Why a downstream connection or request was refused by a transport limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A request head did not arrive within `[listen] header_timeout`.
    HeaderTimeout,
    /// A request body did not arrive within `[listen] body_timeout`.
    BodyTimeout,
    /// A request head exceeded `[listen] max_header_bytes`.
    HeaderTooLarge,
    /// A connection over `[listen] max_connections_per_ip`.
    PerIp,
    /// A request over `[listen] requests_per_second` for its principal.
    Rate,
}

impl Rejection {
    pub const ALL: [Rejection; 5] =
        [Self::HeaderTimeout, Self::BodyTimeout, Self::HeaderTooLarge, Self::PerIp, Self::Rate];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::BodyTimeout => "body_timeout",
            Self::HeaderTooLarge => "header_too_large",
            Self::PerIp => "per_ip",
            Self::Rate => "rate",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Named {
    upstream: String,
}

fn latency() -> Histogram {
    // 100 µs .. ~13 s in powers of two: loopback hits to slow upstreams.
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// The proxy's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    downstream: Family<Downstream, Counter>,
    upstream: Family<Upstream, Counter>,
    upstream_seconds: Family<Named, Histogram, fn() -> Histogram>,
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
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("resmux");
        let downstream = Family::<Downstream, Counter>::default();
        let upstream = Family::<Upstream, Counter>::default();
        let upstream_seconds = Family::<Named, Histogram, fn() -> Histogram>::new_with_constructor(latency);
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
        registry.register(
            "downstream_requests",
            "Downstream requests answered, by method and outcome",
            downstream.clone(),
        );
        registry.register("upstream_requests", "Requests sent upstream, by upstream and outcome", upstream.clone());
        registry.register("upstream_request_seconds", "Upstream request latency", upstream_seconds.clone());
        registry.register("list_pages_skipped", "Upstream list pages skipped under fail_open", list_skips.clone());
        registry.register("cache_bytes", "Weighted size of the cache", cache_bytes.clone());
        registry.register("cache_entries", "Entries in the cache", cache_entries.clone());
        registry.register("hub_listeners", "Downstream listens open", listeners.clone());
        registry.register("upstream_listens_opened", "Upstream listens opened", upstream_listens.clone());
        registry.register(
            "cache_watched_uris",
            "URIs of cached reads kept in the upstream's standing listen",
            watched_uris.clone(),
        );
        registry.register(
            "cache_watch_fallbacks",
            "Cached reads left to TTL-only invalidation at the max_watched_uris bound",
            watch_fallbacks.clone(),
        );
        registry.register(
            "downstream_rejections",
            "Downstream connections or requests refused by a transport limit, by reason",
            rejections.clone(),
        );
        registry.register(
            "downstream_idle_closed",
            "Downstream connections closed after idle_timeout with no request in flight",
            idle_closed.clone(),
        );
        Self(Arc::new(Inner {
            registry,
            downstream,
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
        }))
    }

    /// One downstream request answered.
    pub fn downstream(&self, method: &str, outcome: &'static str) {
        let method = KNOWN.iter().find(|m| **m == method).copied().unwrap_or("other");
        self.0.downstream.get_or_create(&Downstream { method, outcome }).inc();
        let slot = match outcome {
            "hit" => Some(1),
            "miss" => Some(2),
            "stale" => Some(3),
            "bypass" => Some(4),
            "error" => Some(5),
            _ => None,
        };
        use std::sync::atomic::Ordering::Relaxed;
        self.0.totals[0].fetch_add(1, Relaxed);
        if let Some(i) = slot {
            self.0.totals[i].fetch_add(1, Relaxed);
        }
    }

    /// One upstream request finished.
    pub fn upstream(&self, upstream: &str, outcome: &'static str, seconds: f64) {
        self.0.upstream.get_or_create(&Upstream { upstream: upstream.to_owned(), outcome }).inc();
        self.0.upstream_seconds.get_or_create(&Named { upstream: upstream.to_owned() }).observe(seconds);
    }

    /// A list page skipped because its upstream failed (fail_open).
    pub fn list_skip(&self, upstream: &str) {
        self.0.list_skips.get_or_create(&Named { upstream: upstream.to_owned() }).inc();
    }

    /// A connection or request refused by a transport limit.
    pub fn rejection(&self, why: Rejection) {
        self.0.rejections.get_or_create(&Reason { reason: why.as_str() }).inc();
    }

    /// A connection closed by `idle_timeout`.
    pub fn idle_closed(&self) {
        self.0.idle_closed.inc();
    }

    /// The text exposition, with gauges set from `snapshot`.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        self.0.cache_bytes.set(snapshot.cache_bytes as i64);
        self.0.cache_entries.set(snapshot.cache_entries as i64);
        self.0.listeners.set(snapshot.listeners as i64);
        for (name, n) in &snapshot.upstream_listens {
            self.0.upstream_listens.get_or_create(&Named { upstream: name.clone() }).set(*n as i64);
        }
        for (name, n) in &snapshot.watched_uris {
            self.0.watched_uris.get_or_create(&Named { upstream: name.clone() }).set(*n as i64);
        }
        let counted = self.0.watch_fallbacks.get();
        self.0.watch_fallbacks.inc_by(snapshot.watch_fallbacks.saturating_sub(counted));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.0.registry).expect("writing to a String");
        out
    }
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
mod tests {
    use super::*;

    #[test]
    fn renders_what_was_counted() {
        let m = Metrics::new();
        m.downstream("resources/read", "hit");
        m.downstream("made/up", "error");
        m.upstream("docs", "ok", 0.002);
        m.list_skip("docs");
        m.rejection(Rejection::PerIp);
        m.idle_closed();
        let text = m.render(&Snapshot {
            cache_bytes: 10,
            cache_entries: 1,
            listeners: 2,
            upstream_listens: vec![("docs".into(), 3)],
            watched_uris: vec![("docs".into(), 4)],
            watch_fallbacks: 5,
        });
        assert!(
            text.contains(r#"resmux_downstream_requests_total{method="resources/read",outcome="hit"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"method="other""#));
        assert!(text.contains(r#"resmux_upstream_requests_total{upstream="docs",outcome="ok"} 1"#));
        assert!(text.contains("resmux_cache_bytes 10"));
        assert!(text.contains(r#"resmux_upstream_listens_opened{upstream="docs"} 3"#));
        assert!(text.contains(r#"resmux_cache_watched_uris{upstream="docs"} 4"#), "{text}");
        assert!(text.contains("resmux_cache_watch_fallbacks_total 5"), "{text}");
        assert!(text.contains(r#"resmux_downstream_rejections_total{reason="per_ip"} 1"#), "{text}");
        assert!(text.contains(r#"resmux_downstream_rejections_total{reason="body_timeout"} 0"#), "{text}");
        assert!(text.contains("resmux_downstream_idle_closed_total 1"), "{text}");
    }
}
