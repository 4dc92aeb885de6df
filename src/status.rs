//! The proxy's state read at scrape time, rendered as Prometheus text: shared by the admin
//! listener and the MCP listener's optional `[listen] metrics_path`.

use crate::hub::Hub;
use crate::router::Router;
use crate::telemetry::Snapshot;
use crate::telemetry::metrics::UpstreamState;

/// The Prometheus text of `router`'s metrics, with the gauges that are read at scrape time.
pub fn metrics_text(router: &Router, hub: &Hub) -> String {
    let cache = router.cache();
    let upstreams = router.upstreams();
    router.metrics().purges(&cache.purge_counts());
    let snapshot = Snapshot {
        cache_bytes: cache.weighted_size(),
        cache_entries: cache.entry_count(),
        listeners: hub.listener_count(),
        upstream_listens: (upstreams.iter())
            .map(|u| (u.name().to_owned(), hub.upstream_listens_opened(u.slot() as usize)))
            .collect(),
        watched_uris: (upstreams.iter())
            .map(|u| (u.name().to_owned(), cache.watched_uris().len(u.slot() as usize) as u64))
            .collect(),
        watch_fallbacks: cache.watched_uris().fallbacks(),
        cache_by_upstream: (upstreams.iter())
            .map(|u| (u.name().to_owned(), cache.figures(u.slot() as usize)))
            .collect(),
        upstreams: (upstreams.iter())
            .map(|u| UpstreamState {
                name: u.name().to_owned(),
                healthy: u.info().is_some(),
                era: u.era_kind(),
                reconnects: u.reconnects(),
            })
            .collect(),
    };
    router.metrics().render(&snapshot)
}
