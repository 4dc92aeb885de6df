//! The cache end to end (DESIGN §4): sharing, isolation, freshness, single-flight,
//! stale-if-error, what is never cached, and the size bounds.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{Profile, SampleHttp, SampleSpec};

async fn proxy_with(spec: SampleSpec, tweak: impl FnOnce(&mut Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(spec).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    tweak(&mut cfg);
    (Proxy::start(cfg).await, up)
}

fn read(uri: &str) -> serde_json::Value {
    json!({ "uri": uri })
}

#[tokio::test]
async fn a_public_entry_is_shared_across_principals() {
    let (p, up) = proxy_with(SampleSpec::generated("docs", 5), |_| {}).await;
    let alice = p.client.as_principal("alice");
    let bob = p.client.as_principal("bob");
    let first = alice.request("resources/read", read("docs://item/1")).await;
    assert_eq!(first.cache(), "miss");
    assert_eq!(first.result()["ttlMs"], 60_000);
    let second = bob.request("resources/read", read("docs://item/1")).await;
    assert_eq!(second.cache(), "hit");
    assert_eq!(second.header("age"), Some("0"));
    assert_eq!(second.text(), first.text());
    assert!(second.result()["ttlMs"].as_u64().unwrap() <= 60_000);
    assert_eq!(second.result()["cacheScope"], "public");
    assert_eq!(up.sample.count("resources/read"), 1);
}

#[tokio::test]
async fn a_hit_answers_with_the_remaining_ttl_and_the_callers_id() {
    let (p, _up) = proxy_with(SampleSpec::generated("docs", 5), |_| {}).await;
    p.client.request("resources/read", read("docs://item/2")).await.result();
    let client = p.client.clone();
    let ttl = eventually("the remaining TTL drops below the original", || {
        let client = client.clone();
        async move {
            let ttl = client.request("resources/read", read("docs://item/2")).await.result()["ttlMs"].as_u64().unwrap();
            (ttl < 60_000).then_some(ttl)
        }
    })
    .await;
    assert!(ttl > 50_000);
    // The id is spliced in: a string id comes back as the same string.
    let body = json!({"jsonrpc": "2.0", "id": "req-α", "method": "resources/read",
                      "params": {"uri": "docs://item/2", "_meta": meta()}});
    let headers = [
        ("mcp-protocol-version", "2026-07-28".to_string()),
        ("mcp-method", "resources/read".to_string()),
        ("mcp-name", "docs://item/2".to_string()),
    ];
    let ex = p.client.raw("POST", &headers, body.to_string().into_bytes()).await;
    assert_eq!(ex.cache(), "hit");
    assert_eq!(ex.json()["id"], "req-α");
}

#[tokio::test]
async fn private_entries_stay_with_their_principal() {
    let (p, up) = proxy_with(SampleSpec::generated("docs", 1), |_| {}).await;
    let alice = p.client.as_principal("alice");
    let bob = p.client.as_principal("bob");
    let a1 = alice.request("resources/read", read("docs://me")).await;
    assert_eq!((a1.cache(), a1.result()["cacheScope"].as_str()), ("miss", Some("private")));
    let b1 = bob.request("resources/read", read("docs://me")).await;
    assert_eq!(b1.cache(), "miss", "bob must not get alice's private entry");
    assert!(b1.text().ends_with("for bob"));
    let a2 = alice.request("resources/read", read("docs://me")).await;
    assert_eq!((a2.cache(), a2.text()), ("hit", a1.text()));
    assert_eq!(up.sample.count("resources/read"), 2);
    // No credential is a principal of its own, too.
    let anon = p.client.request("resources/read", read("docs://me")).await;
    assert_eq!(anon.cache(), "miss");
}

#[tokio::test]
async fn a_thousand_concurrent_misses_make_one_upstream_read() {
    let spec = SampleSpec { delay: Duration::from_millis(300), ..SampleSpec::generated("docs", 3) };
    // A thousand connections from one address: past the per-IP default, which is not tested here.
    let (p, up) = proxy_with(spec, |c| c.listen.max_connections_per_ip = 0).await;
    let reads = (0..1000).map(|_| {
        let client = p.client.clone();
        async move { client.request("resources/read", read("docs://item/0")).await }
    });
    let answers = join_all(reads).await;
    assert_eq!(up.sample.count("resources/read"), 1);
    let first = answers[0].text();
    assert!(answers.iter().all(|a| a.status == 200 && a.text() == first));
}

#[tokio::test]
async fn stale_entries_are_served_inside_the_window_when_the_upstream_is_gone() {
    let spec = SampleSpec { ttl_ms: 200, ..SampleSpec::generated("docs", 3) };
    let (p, up) = proxy_with(spec, |c| c.cache.stale_if_error = Duration::from_secs(60)).await;
    let fresh = p.client.request("resources/read", read("docs://item/1")).await;
    assert_eq!(fresh.cache(), "miss");
    up.stop();
    let client = p.client.clone();
    let stale = eventually("the expired entry is served stale", || {
        let client = client.clone();
        async move {
            let ex = client.request("resources/read", read("docs://item/1")).await;
            (ex.cache() == "stale").then_some(ex)
        }
    })
    .await;
    assert_eq!(stale.status, 200);
    assert_eq!(stale.text(), fresh.text());
    // A resource never fetched has nothing stale to offer.
    let ex = p.client.request("resources/read", read("docs://item/2")).await;
    assert_eq!(ex.status, 502);
}

#[tokio::test]
async fn outside_the_stale_window_the_error_comes_through() {
    let spec = SampleSpec { ttl_ms: 100, ..SampleSpec::generated("docs", 3) };
    let (p, up) = proxy_with(spec, |c| c.cache.stale_if_error = Duration::from_millis(200)).await;
    p.client.request("resources/read", read("docs://item/1")).await.result();
    up.stop();
    let client = p.client.clone();
    eventually("past ttl + stale window the upstream error is returned", || {
        let client = client.clone();
        async move {
            let ex = client.request("resources/read", read("docs://item/1")).await;
            (ex.status == 502 && ex.json()["error"]["data"]["side"] == "upstream").then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn mrtr_results_and_retries_are_never_cached() {
    let (p, up) = proxy_with(SampleSpec::generated("docs", 1), |_| {}).await;
    for n in 1..=2 {
        let ex = p.client.request("resources/read", read("docs://secret")).await;
        assert_eq!(ex.result()["resultType"], "input_required");
        assert_ne!(ex.cache(), "hit");
        assert_eq!(up.sample.count("resources/read"), n);
    }
    let retry = json!({"uri": "docs://secret", "requestState": "confirm-1",
                       "inputResponses": {"confirm": {"action": "accept", "content": {"ok": true}}}});
    for n in 3..=4 {
        let ex = p.client.request("resources/read", retry.clone()).await;
        assert_eq!(ex.result()["resultType"], "complete");
        assert_eq!(ex.cache(), "bypass");
        assert_eq!(up.sample.count("resources/read"), n);
    }
}

#[tokio::test]
async fn not_found_is_cached_briefly_as_a_negative_entry() {
    let (p, up) = proxy_with(SampleSpec::generated("docs", 1), |_| {}).await;
    for _ in 0..3 {
        let ex = p.client.request("resources/read", read("docs://nope")).await;
        assert_eq!(ex.error_code(), -32602);
        assert_eq!(ex.json()["error"]["data"]["uri"], "docs://nope");
    }
    assert_eq!(up.sample.count("resources/read"), 1);
}

#[tokio::test]
async fn an_entry_over_max_entry_bytes_is_passed_through_not_stored() {
    let spec = SampleSpec { profile: Profile::Generated { count: 2, size: 4000 }, ..SampleSpec::generated("docs", 2) };
    let (p, up) = proxy_with(spec, |c| c.cache.max_entry_bytes = 2000).await;
    for _ in 0..2 {
        let ex = p.client.request("resources/read", read("docs://item/0")).await;
        // Past `max_entry_bytes` the answer is relayed as it arrives, never stored.
        assert_eq!(ex.cache(), "bypass");
        assert_eq!(ex.text().len(), 4000);
    }
    assert_eq!(up.sample.count("resources/read"), 2);
}

#[tokio::test]
async fn filling_past_max_bytes_keeps_the_weighted_size_within_the_bound() {
    let spec =
        SampleSpec { profile: Profile::Generated { count: 300, size: 1024 }, ..SampleSpec::generated("docs", 300) };
    let max = 64 * 1024;
    let (p, _up) = proxy_with(spec, |c| {
        c.cache.max_bytes = max;
        c.cache.max_entry_bytes = 8 * 1024;
    })
    .await;
    for i in 0..300 {
        p.client.request("resources/read", read(&format!("docs://item/{i}"))).await.result();
    }
    let cache = p.app.router().cache();
    let (size, entries) = (cache.weighted_size(), cache.entry_count());
    assert!(size <= max, "weighted size {size} exceeds {max}");
    assert!(entries > 10 && entries < 300, "{entries} entries");
}

#[tokio::test]
async fn list_pages_are_cached_per_upstream_page() {
    let a = sample_http(SampleSpec { page_size: 4, ..SampleSpec::generated("a", 10) }).await;
    let b = sample_http(SampleSpec { page_size: 4, ..SampleSpec::generated("b", 3) }).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), UpstreamConfig::http("b", &b.url())])).await;
    let (first, _) = p.client.list_all("resources/list", "resources").await;
    let (second, _) = p.client.list_all("resources/list", "resources").await;
    assert_eq!(first, second);
    assert_eq!((a.sample.count("resources/list"), b.sample.count("resources/list")), (3, 1));
    let hit = p.client.request("resources/list", json!({})).await;
    assert_eq!(hit.cache(), "hit");
}

#[tokio::test]
async fn an_upstream_with_cache_off_is_bypassed() {
    let (p, up) = proxy_with(SampleSpec::generated("docs", 2), |c| c.upstreams[0].cache = false).await;
    for _ in 0..2 {
        assert_eq!(p.client.request("resources/read", read("docs://item/0")).await.cache(), "bypass");
    }
    assert_eq!(up.sample.count("resources/read"), 2);
}

#[tokio::test]
async fn metrics_show_hits_misses_and_upstream_traffic() {
    let (p, _up) = proxy_with(SampleSpec::generated("docs", 2), |c| c.admin.addr = "127.0.0.1:0".into()).await;
    for _ in 0..3 {
        p.client.request("resources/read", read("docs://item/0")).await.result();
    }
    let ex = p.client.raw("GET", &[], Vec::new()).await;
    assert_eq!(ex.status, 405, "the MCP endpoint stays POST-only");
    let data_listener = format!("http://{}/metrics", p.app.local_addr());
    assert_eq!(McpClient::new(&data_listener).raw("GET", &[], Vec::new()).await.status, 404, "not on the MCP listener");
    let url = format!("http://{}/metrics", p.app.admin_addr().expect("admin listener"));
    let metrics = McpClient::new(&url).raw("GET", &[], Vec::new()).await;
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains(r#"resmux_downstream_requests_total{method="resources/read",outcome="hit"} 2"#), "{text}");
    assert!(text.contains(r#"resmux_downstream_requests_total{method="resources/read",outcome="miss"} 1"#));
    assert!(text.contains(r#"resmux_upstream_requests_total{upstream="docs",outcome="ok"}"#));
    assert!(text.contains("resmux_cache_entries 1"));
}
