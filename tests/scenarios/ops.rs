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
    assert!(child_exited > answered, "the stdio child stopped before the in-flight request finished");
    assert!(child_exited > listen_ended, "the stdio child stopped before the listen ended");
}
