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
    let mut text = router.metrics().render(&snapshot);
    if let Some(cluster) = router.cluster() {
        let names: Vec<(usize, &str)> = upstreams.iter().map(|u| (u.slot() as usize, u.name())).collect();
        cluster_metrics(&mut text, &cluster, &names);
    }
    text
}

/// The cluster tier's gauges and counters: whether Redis answers (a lost Redis, or a lost
/// Redis Cluster master until its replica is promoted, shows as 0), which listens this
/// replica holds, and the shared tier's and bus's counters.
fn cluster_metrics(out: &mut String, cluster: &crate::cluster::Cluster, upstreams: &[(usize, &str)]) {
    use std::fmt::Write;
    let mut put = |name: &str, kind: &str, help: &str, lines: &[(String, u64)]| {
        let _ = writeln!(out, "# HELP resmux_cluster_{name} {help}\n# TYPE resmux_cluster_{name} {kind}");
        for (labels, v) in lines {
            let _ = writeln!(out, "resmux_cluster_{name}{labels} {v}");
        }
    };
    put("redis_up", "gauge", "Whether Redis answers for every upstream.", &[(String::new(), cluster.healthy() as u64)]);
    let held: Vec<(String, u64)> = (upstreams.iter())
        .map(|&(slot, u)| {
            let holds = matches!(*cluster.role(slot).borrow(), crate::cluster::Role::Holder(_));
            (format!("{{upstream=\"{u}\"}}"), holds as u64)
        })
        .collect();
    put("listen_held", "gauge", "Whether this replica holds the upstream's listen for the fleet.", &held);
    for (name, help, value) in cluster.stats().counters() {
        put(&format!("{name}_total"), "counter", help, &[(String::new(), value)]);
    }
}
