//! Unit tests of the parent module.

use super::*;

#[test]
fn renders_what_was_counted() {
    let m = Metrics::new();
    m.downstream("resources/read", "hit", 0.0002);
    m.downstream("made/up", "error", 0.001);
    m.upstream("docs", "ok");
    let meter = m.upstream_meter("docs");
    meter.request_seconds("resources/read", 0.002);
    meter.cache_hit(true);
    meter.cache_miss(false);
    meter.flight_joined();
    m.delivery().observe(0.001);
    m.list_skip("docs");
    m.rejection(Rejection::PerIp);
    m.idle_closed();
    let figures = crate::cache::ScopeFigures { bytes: [100, 20], evictions: [3, 0] };
    let text = m.render(&Snapshot {
        cache_bytes: 10,
        cache_entries: 1,
        listeners: 2,
        upstream_listens: vec![("docs".into(), 3)],
        watched_uris: vec![("docs".into(), 4)],
        watch_fallbacks: 5,
        cache_by_upstream: vec![("docs".into(), figures)],
        upstreams: vec![UpstreamState { name: "docs".into(), healthy: true, era: "modern", reconnects: 2 }],
    });
    for want in [
        r#"resmux_downstream_requests_total{method="resources/read",outcome="hit"} 1"#,
        r#"resmux_downstream_requests_total{method="other",outcome="error"} 1"#,
        r#"resmux_downstream_request_seconds_count{method="resources/read"} 1"#,
        r#"resmux_upstream_requests_total{upstream="docs",outcome="ok"} 1"#,
        r#"resmux_upstream_request_seconds_count{upstream="docs",method="resources/read"} 1"#,
        "resmux_cache_bytes 10",
        r#"resmux_upstream_listens_opened{upstream="docs"} 3"#,
        r#"resmux_cache_watched_uris{upstream="docs"} 4"#,
        "resmux_cache_watch_fallbacks_total 5",
        r#"resmux_downstream_rejections_total{reason="per_ip"} 1"#,
        r#"resmux_downstream_rejections_total{reason="auth"} 0"#,
        "resmux_downstream_idle_closed_total 1",
        r#"resmux_cache_hits_total{upstream="docs",scope="public"} 1"#,
        r#"resmux_cache_misses_total{upstream="docs",scope="private"} 1"#,
        r#"resmux_cache_flight_joins_total{upstream="docs"} 1"#,
        r#"resmux_cache_upstream_bytes{upstream="docs",scope="public"} 100"#,
        r#"resmux_cache_evictions_total{upstream="docs",scope="public"} 3"#,
        "resmux_notification_delivery_seconds_count 1",
        r#"resmux_upstream_healthy{upstream="docs"} 1"#,
        r#"resmux_upstream_era{upstream="docs",era="modern"} 1"#,
        r#"resmux_upstream_era{upstream="docs",era="legacy"} 0"#,
        r#"resmux_upstream_reconnects_total{upstream="docs"} 2"#,
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    assert_eq!(m.downstream_totals().hit, 1);
    assert_eq!(m.downstream_totals().error, 1);
}
