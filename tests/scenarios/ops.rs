//! Operations: the admin listener (health, readiness, metrics, upstream figures, the page) and
//! the shutdown order (readiness fails, in-flight requests finish, listens end with their
//! result, and only then stdio upstream children stop).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

fn admin_client(p: &Proxy, path: &str) -> McpClient {
    McpClient::new(&format!("http://{}{path}", p.app.admin_addr().expect("the admin listener is on")))
}

async fn get(p: &Proxy, path: &str) -> Exchange {
    admin_client(p, path).raw("GET", &[], Vec::new()).await
}

#[tokio::test]
async fn the_admin_listener_serves_health_readiness_metrics_and_upstream_figures() {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.admin.addr = "127.0.0.1:0".into();
    let p = Proxy::start(cfg).await;

    assert_eq!(get(&p, "/healthz").await.status, 200);
    eventually("ready once the upstream answered discovery", || {
        let p = &p;
        async move { (get(p, "/readyz").await.status == 200).then_some(()) }
    })
    .await;
    for _ in 0..3 {
        p.client.request("resources/read", json!({"uri": "docs://item/0"})).await.result();
    }

    // Metrics parse as Prometheus text and the series moved.
    let text = String::from_utf8_lossy(&get(&p, "/metrics").await.body).into_owned();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        scrape.samples.iter().find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(
            |s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            },
        )
    };
    assert_eq!(
        value("resmux_downstream_requests_total", &[("method", "resources/read"), ("outcome", "hit")]),
        Some(2.0)
    );
    assert_eq!(
        value("resmux_downstream_requests_total", &[("method", "resources/read"), ("outcome", "miss")]),
        Some(1.0)
    );
    assert!(value("resmux_upstream_requests_total", &[("upstream", "docs"), ("outcome", "ok")]).unwrap_or(0.0) >= 1.0);
    assert_eq!(value("resmux_cache_watched_uris", &[("upstream", "docs")]), Some(1.0), "the cached read is watched");
    assert!(value("resmux_cache_watch_fallbacks_total", &[]).is_some());

    let ups: Value = get(&p, "/admin/upstreams").await.json();
    let docs = &ups["upstreams"][0];
    assert_eq!(
        (docs["name"].as_str(), docs["healthy"].as_bool(), docs["era"].as_str()),
        (Some("docs"), Some(true), Some("modern"))
    );
    assert!(docs["requests"].as_u64().unwrap() >= 1, "the read miss went upstream: {docs}");
    let stats: Value = get(&p, "/admin/stats").await.json();
    assert_eq!(stats["requests"]["hit"], 2, "{stats}");
    let page = get(&p, "/").await;
    assert!(page.header("content-type").unwrap().starts_with("text/html"));
    assert!(String::from_utf8_lossy(&page.body).contains("/admin/upstreams"));

    // Not reachable under another Host, nor through the MCP listener.
    let evil = admin_client(&p, "/metrics").raw("GET", &[("host", "evil.example".into())], Vec::new()).await;
    assert_eq!(evil.status, 403);
    let via_mcp = McpClient::new(&format!("http://{}/healthz", p.app.local_addr())).raw("GET", &[], Vec::new()).await;
    assert_eq!(via_mcp.status, 404);
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

#[tokio::test]
async fn shutdown_fails_readiness_finishes_requests_ends_listens_then_stops_children() {
    let slow = sample_http(SampleSpec { delay: Duration::from_millis(600), ..SampleSpec::docs() }).await;
    let listened = sample_http(SampleSpec { tick: None, ..SampleSpec::docs() }).await;
    let dir = tempfile::tempdir().unwrap();
    let exited = dir.path().join("child-exited");
    // A stdio upstream whose wrapper notes the time its child has exited.
    let child = vec![
        "sh".into(),
        "-c".into(),
        r#""$0" sample-upstream --profile notes; date +%s%N > "$1""#.into(),
        env!("CARGO_BIN_EXE_resmux").into(),
        exited.display().to_string(),
    ];
    let mut cfg = config(vec![
        UpstreamConfig::http("slow", &slow.url()),
        UpstreamConfig::http("docs", &listened.url()),
        UpstreamConfig::stdio("notes", child),
    ]);
    cfg.admin.addr = "127.0.0.1:0".into();
    let Proxy { app, client } = Proxy::start(cfg).await;
    let admin = McpClient::new(&format!("http://{}/readyz", app.admin_addr().unwrap()));
    eventually("ready", || {
        let admin = admin.clone();
        async move { (admin.raw("GET", &[], Vec::new()).await.status == 200).then_some(()) }
    })
    .await;
    let mut listen = client.listen(json!("L"), json!({"resourceSubscriptions": ["docs+docs://status"]})).await.unwrap();
    assert_eq!(listen.next().await["method"], "notifications/subscriptions/acknowledged");

    // A request in flight (its upstream takes 600 ms), then shutdown.
    let in_flight = {
        let client = client.clone();
        tokio::spawn(async move {
            let answer =
                client.request("tools/call", json!({"name": "slow__echo", "arguments": {"text": "late"}})).await;
            (answer, now_ns())
        })
    };
    eventually("the call reached its upstream", || {
        let n = slow.sample.count("tools/call");
        async move { (n >= 1).then_some(()) }
    })
    .await;
    let shutdown_started = now_ns();
    let shutdown = tokio::spawn(app.shutdown());

    // Readiness fails at once, while the request is still running.
    eventually("readiness fails during the drain", || {
        let admin = admin.clone();
        async move { (admin.raw("GET", &[], Vec::new()).await.status == 503).then_some(()) }
    })
    .await;
    // The listen ends with its successful result.
    let end = listen.next().await;
    let listen_ended = now_ns();
    assert_eq!((end["id"].as_str(), end.get("result").is_some()), (Some("L"), true), "{end}");
    // The in-flight request completes.
    let (answer, answered) = in_flight.await.unwrap();
    assert_eq!(answer.result()["content"][0]["text"], "late");
    tokio::time::timeout(DEADLINE, shutdown).await.expect("shutdown finishes").unwrap();
    // The child exited last.
    let child_exited: u128 = eventually("the child's exit is noted", || {
        let noted = std::fs::read_to_string(&exited).ok().and_then(|t| t.trim().parse().ok());
        async move { noted }
    })
    .await;
    assert!(answered > shutdown_started && listen_ended > shutdown_started);
    // Ordered against the upstream's own answer, not the client's receive time: the client
    // task may be scheduled late on a loaded machine, after the child has already exited,
    // while the proxy cannot have relayed the answer before its upstream gave it.
    let upstream_answered = u128::from(slow.sample.delay_ended_ns());
    assert!(upstream_answered > shutdown_started, "the slow call was answered during the drain");
    assert!(child_exited > upstream_answered, "the stdio child stopped before the in-flight request finished");
    assert!(child_exited > listen_ended, "the stdio child stopped before the listen ended");
}

/// A parsed scrape of the admin `/metrics`.
async fn scrape(p: &Proxy) -> prometheus_parse::Scrape {
    let text = String::from_utf8_lossy(&get(p, "/metrics").await.body).into_owned();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text")
}

/// The sum of the samples of `name` whose labels include `labels`; `None` when there is none.
fn sum(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let values: Vec<f64> = (scrape.samples.iter())
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[tokio::test]
async fn the_latency_cache_delivery_health_and_rejection_series_move() {
    let mut spec = SampleSpec::generated("docs", 40);
    // Slow enough that concurrent misses of one URI overlap and share one fetch.
    spec.delay = Duration::from_millis(300);
    let up = sample_http(spec).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.admin.addr = "127.0.0.1:0".into();
    // Room for a few entries only: later reads evict earlier ones.
    cfg.cache.max_bytes = 4096;
    cfg.cache.max_entry_bytes = 2048;
    cfg.hub.linger = Duration::from_millis(50);
    cfg.listen.max_body_bytes = 4096;
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;

    let before = scrape(&p).await;
    for name in ["resmux_cache_hits_total", "resmux_cache_misses_total", "resmux_cache_flight_joins_total"] {
        assert_eq!(sum(&before, name, &[("upstream", "docs")]), Some(0.0), "{name} exists from the start");
    }
    assert_eq!(sum(&before, "resmux_upstream_healthy", &[("upstream", "docs")]), Some(1.0));
    assert_eq!(sum(&before, "resmux_upstream_era", &[("upstream", "docs"), ("era", "modern")]), Some(1.0));
    assert_eq!(sum(&before, "resmux_upstream_era", &[("upstream", "docs"), ("era", "legacy")]), Some(0.0));
    assert_eq!(sum(&before, "resmux_upstream_reconnects_total", &[("upstream", "docs")]), Some(0.0));

    // Four concurrent misses of one URI: one fetch, three joins; then two hits.
    let reads = (0..4).map(|_| p.client.request("resources/read", json!({"uri": "docs://item/0"})));
    for r in futures_util::future::join_all(reads).await {
        r.result();
    }
    for _ in 0..2 {
        assert_eq!(p.client.request("resources/read", json!({"uri": "docs://item/0"})).await.cache(), "hit");
    }
    // A listener gets a change: one delivery observed.
    let mut l = p.client.listen(json!(1), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    l.next().await;
    upstream_listens(&up, vec![vec!["docs://item/0", "docs://status"]]).await;
    up.sample.bump();
    assert_eq!(l.next().await["method"], "notifications/resources/updated");
    // Refusals: a foreign Origin and Host, a body over the limit.
    let origin = p.client.raw("POST", &[("origin", "http://evil.example".into())], b"{}".to_vec()).await;
    assert_eq!(origin.status, 403);
    let host = p.client.raw("POST", &[("host", "evil.example".into())], b"{}".to_vec()).await;
    assert_eq!(host.status, 403);
    let big = p.client.raw("POST", &[], vec![b' '; 8192]).await;
    assert_eq!(big.status, 413);
    // Reads of other items fill the small cache past its bound.
    let fill = (1..40).map(|i| p.client.request("resources/read", json!({"uri": format!("docs://item/{i}")})));
    for r in futures_util::future::join_all(fill).await {
        r.result();
    }

    let after = scrape(&p).await;
    let docs = [("upstream", "docs")];
    let read = [("method", "resources/read")];
    let n = |name: &str, labels: &[(&str, &str)]| sum(&after, name, labels).unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(n("resmux_downstream_request_seconds_count", &read), 4.0 + 2.0 + 39.0);
    assert!(n("resmux_downstream_request_seconds_sum", &read) > 0.3, "the slow misses took their time");
    assert!(n("resmux_upstream_request_seconds_count", &[("upstream", "docs"), ("method", "resources/read")]) >= 40.0);
    assert_eq!(n("resmux_cache_flight_joins_total", &docs), 3.0, "three callers joined the first");
    assert_eq!(n("resmux_cache_hits_total", &docs), 2.0);
    assert_eq!(n("resmux_cache_misses_total", &docs), 40.0, "one leader per URI");
    assert!(n("resmux_cache_evictions_total", &docs) >= 1.0, "the 4 KiB cache evicted");
    let bytes = n("resmux_cache_upstream_bytes", &docs);
    assert!(bytes > 0.0 && bytes <= 4096.0, "cached bytes within the bound: {bytes}");
    assert_eq!(n("resmux_notification_delivery_seconds_count", &[]), 1.0);
    assert!(n("resmux_notification_delivery_seconds_sum", &[]) < 5.0);
    for reason in ["origin", "host", "body_too_large"] {
        assert_eq!(n("resmux_downstream_rejections_total", &[("reason", reason)]), 1.0, "{reason}");
    }
    assert_eq!(n("resmux_downstream_rejections_total", &[("reason", "auth")]), 0.0);
    assert!(!after.samples.iter().any(|s| s.labels.values().any(|v| v.contains("://"))), "no URI in any label");
}

/// Captured log output (the fmt layer's writer).
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

// A current-thread runtime: the thread-local subscriber below sees every task of the test.
#[tokio::test]
async fn requests_are_spanned_under_their_connection_with_method_upstream_cache_and_principal() {
    use tracing_subscriber::fmt::format::FmtSpan;
    let out = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(out.clone())
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE)
        .with_env_filter("resmux=info")
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    api_keys(&mut cfg, &["alice"]);
    let p = Proxy::start(cfg).await;
    let alice = p.client.as_principal("alice");
    discovered(&alice).await;
    for want in ["miss", "hit"] {
        assert_eq!(alice.request("resources/read", json!({"uri": "docs://item/0"})).await.cache(), want);
    }
    p.app.shutdown().await;

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let closed: Vec<&str> = text.lines().filter(|l| l.contains("close")).collect();
    for cache in ["miss", "hit"] {
        assert!(
            closed.iter().any(|l| l.contains("request{")
                && l.contains("method=\"resources/read\"")
                && l.contains("principal=\"alice\"")
                && l.contains("upstream=\"docs\"")
                && l.contains(&format!("cache=\"{cache}\""))
                && l.contains("conn{peer=127.0.0.1:")
                && l.contains("serve{listener=\"mcp\"")),
            "no closed request span with cache={cache} under its connection:\n{text}"
        );
    }
    assert!(
        closed
            .iter()
            .any(|l| l.contains("upstream{") && l.contains("method=\"resources/read\"") && l.contains("request{")),
        "the upstream request's span is the request span's child:\n{text}"
    );
    assert!(!text.contains("Bearer"), "no credential in any span or event");
}
