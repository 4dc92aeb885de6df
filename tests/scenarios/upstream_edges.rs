//! Upstream behaviours beyond the headers (issue #9): cached reads evicted by upstream changes
//! with no downstream listener (modern and legacy upstreams), the `max_watched_uris` bound,
//! one execution per tool call across unprefixed upstreams, upstream 4xx statuses relayed, and
//! legacy `initialize` version negotiation.

use serde_json::{Value, json};

use crate::interop::{full_caps, interop, request_with, requests_for};
use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::{Failure, SampleHttp, SampleSpec};

/// A proxy in front of one generated sample upstream (`docs://item/N`, public, 60 s TTL).
async fn docs_proxy(tweak: impl FnOnce(&mut resmux::config::Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    tweak(&mut cfg);
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    (p, up)
}

async fn read(c: &McpClient, uri: &str) -> Exchange {
    let ex = c.request("resources/read", json!({"uri": uri})).await;
    assert_eq!(ex.status, 200, "{}", String::from_utf8_lossy(&ex.body));
    ex
}

#[tokio::test]
async fn an_upstream_change_evicts_a_cached_read_with_no_listener_open() {
    let (p, up) = docs_proxy(|_| {}).await;
    let c = &p.client;
    let status = up.sample.status_uri().to_owned();
    let first = read(c, &status).await;
    assert_eq!((first.cache(), first.text().as_str()), ("miss", "status version 1: all systems nominal"));
    let second = read(c, &status).await;
    assert_eq!((second.cache(), second.text().as_str()), ("hit", "status version 1: all systems nominal"));

    // No downstream listen is open: the proxy's own standing listen watches the cached URI.
    upstream_subscribed(&up, &[&status]).await;
    assert_eq!(up.sample.listens_open(), 1);
    up.sample.bump();
    let fresh = eventually("the cached read is evicted", || async {
        let ex = read(c, &status).await;
        ex.text().contains("version 2").then_some(ex)
    })
    .await;
    assert_eq!(fresh.cache(), "miss");
    assert_eq!(read(c, &status).await.cache(), "hit", "the new version is cached again");
    assert_eq!(up.sample.count("resources/read"), 2, "one fetch per version");
}

#[tokio::test]
async fn past_max_watched_uris_the_oldest_read_falls_back_to_ttl_and_is_counted() {
    let (p, up) = docs_proxy(|cfg| {
        cfg.cache.max_watched_uris = 2;
        cfg.admin.addr = "127.0.0.1:0".into();
    })
    .await;
    let c = &p.client;
    for i in 0..3 {
        assert_eq!(read(c, &format!("docs://item/{i}")).await.cache(), "miss");
    }
    upstream_subscribed(&up, &["docs://item/1", "docs://item/2"]).await;
    let url = format!("http://{}/metrics", p.app.admin_addr().expect("admin listener"));
    let metrics = McpClient::new(&url);
    let text = eventually("the fallback is counted", || {
        let metrics = metrics.clone();
        async move {
            let text = String::from_utf8_lossy(&metrics.raw("GET", &[], Vec::new()).await.body).into_owned();
            text.contains("resmux_cache_watch_fallbacks_total 1\n").then_some(text)
        }
    })
    .await;
    assert!(text.contains("resmux_cache_watched_uris{upstream=\"docs\"} 2\n"), "{text}");
    // A watched one is still evicted by a change.
    up.sample.touch("docs://item/2");
    eventually("docs://item/2 is evicted", || async {
        (read(c, "docs://item/2").await.cache() == "miss").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_rejected_call_on_the_first_unprefixed_upstream_is_not_retried_on_the_second() {
    // Pages of 2: the owner's `lookup` (and its annotations) is on a later tools/list page.
    let a = sample_http(SampleSpec { page_size: 2, ..interop("a") }).await;
    let b = sample_http(SampleSpec { page_size: 2, ..interop("b") }).await;
    let mut ua = UpstreamConfig::http("a", &a.url());
    let mut ub = UpstreamConfig::http("b", &b.url());
    ua.prefix = false;
    ub.prefix = false;
    let p = Proxy::start(config(vec![ua, ub])).await;
    discovered(&p.client).await;

    // `query` is required: the first upstream in config order owns `lookup` and rejects it.
    let ex = p.client.request("tools/call", json!({"name": "lookup", "arguments": {"region": "eu"}})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (200, -32602), "{}", String::from_utf8_lossy(&ex.body));
    assert_eq!(ex.json()["error"]["message"], "Invalid arguments for lookup");
    assert_eq!(a.sample.count("tools/call"), 1);
    assert_eq!(b.sample.count("tools/call"), 0, "the second upstream never sees the call");
    // A good call goes to the owner alone too, with its annotated argument mirrored.
    let ex =
        p.client.request("tools/call", json!({"name": "lookup", "arguments": {"region": "eu", "query": "q"}})).await;
    assert_eq!(ex.result()["content"][0]["text"], "q in eu");
    assert_eq!(requests_for(&a, "tools/call", "name", "lookup")[1].header("mcp-param-region"), Some("eu"));
    assert_eq!((a.sample.count("tools/call"), b.sample.count("tools/call")), (2, 0));
    // The same for prompts/get: the first upstream's "not found" is the answer.
    let ex = p.client.request("prompts/get", json!({"name": "summarize", "arguments": {"uri": "nowhere://x"}})).await;
    assert_eq!(ex.error_code(), -32602);
    assert_eq!((a.sample.count("prompts/get"), b.sample.count("prompts/get")), (1, 0));
}

#[tokio::test]
async fn an_upstream_4xx_error_keeps_its_status_and_a_transport_failure_is_a_gateway_error() {
    let up = sample_http(interop("docs")).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("docs", &up.url())])).await;
    let c = &p.client;
    discovered(c).await;

    // The upstream answers -32021 with HTTP 400; so does the proxy.
    let ex = c.request("tools/call", json!({"name": "sample_me", "arguments": {}})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32021), "{}", String::from_utf8_lossy(&ex.body));
    assert_eq!(ex.json()["error"]["data"]["requiredCapabilities"], json!({"sampling": {}}));
    let ex = request_with(c, "tools/call", json!({"name": "sample_me", "arguments": {}}), full_caps()).await;
    assert_eq!((ex.status.as_u16(), ex.result()["content"][0]["text"].as_str()), (200, Some("sampled")));
    // A 4xx the spec's table does not tie to the code (-32021 would get its 400 from the code
    // alone): only the relayed status gives 429 and 403.
    for (status, code) in [(429, -32000), (403, -32001)] {
        up.sample.fail_next("tools/call", 1, Failure::Error { status, code });
        let ex = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "x"}})).await;
        assert_eq!((ex.status.as_u16(), ex.error_code()), (status, code), "{}", String::from_utf8_lossy(&ex.body));
        assert_eq!(ex.json()["error"]["message"], "injected failure");
    }
    assert_eq!(up.sample.count("tools/call"), 2, "the injected failures answered before the handler");
    assert_eq!(up.sample.recorded_of("tools/call").len(), 4);

    // 5xx with no JSON-RPC body, on the attempt and its retry: a gateway error, upstream side.
    up.sample.fail_next("resources/read", 2, Failure::Status(503));
    let ex = c.request("resources/read", json!({"uri": "docs://item/0"})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (502, -32603), "{}", String::from_utf8_lossy(&ex.body));
    assert_eq!(ex.json()["error"]["data"]["side"], "upstream");
    assert_eq!(ex.json()["error"]["data"]["upstream"], "docs");

    // The upstream is down.
    up.stop_and_wait().await;
    let ex = c.request("resources/read", json!({"uri": "docs://item/1"})).await;
    assert!(matches!(ex.status.as_u16(), 502 | 504), "{} {}", ex.status, String::from_utf8_lossy(&ex.body));
    assert_eq!(ex.error_code(), -32603);
    assert_eq!(ex.json()["error"]["data"]["side"], "upstream");
}

#[tokio::test]
async fn a_legacy_initialize_with_an_unsupported_version_negotiates_a_supported_one_that_then_works() {
    let (p, _up) = docs_proxy(|_| {}).await;
    for asked in ["1999-01-01", "2026-07-28"] {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}});
        let ex = p.client.raw("POST", &[], init.to_string().into_bytes()).await;
        assert_eq!(ex.status, 200, "{}", String::from_utf8_lossy(&ex.body));
        let version = ex.result()["protocolVersion"].as_str().expect("a version").to_owned();
        assert_eq!(version, "2025-11-25", "asked for {asked}");
        let session = ex.header("mcp-session-id").expect("a session").to_owned();

        let headers = [("mcp-session-id", session.clone()), ("mcp-protocol-version", version.clone())];
        let post = |body: Value| p.client.raw("POST", &headers, body.to_string().into_bytes());
        let ex = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(ex.status, 202);
        let ex = post(json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}})).await;
        assert_eq!(ex.result()["resources"].as_array().unwrap().len(), 6, "5 items and the status resource");
        let ex =
            post(json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "docs://item/3"}}))
                .await;
        assert!(ex.text().starts_with("item 3"));
        let ex = post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                             "params": {"name": "echo", "arguments": {"text": asked}}}))
        .await;
        assert_eq!(ex.result()["content"][0]["text"], asked);
        // The version asked for, not negotiated, is not spoken in the session.
        let wrong = [("mcp-session-id", session.clone()), ("mcp-protocol-version", asked.to_owned())];
        let ping = json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}).to_string().into_bytes();
        let ex = p.client.raw("POST", &wrong, ping).await;
        assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32022), "{}", String::from_utf8_lossy(&ex.body));
    }
}

#[tokio::test]
async fn a_legacy_upstream_change_evicts_a_cached_private_read_with_no_listener_open() {
    let up = sample_http(SampleSpec { legacy: true, ..SampleSpec::generated("docs", 3) }).await;
    let mut u = UpstreamConfig::http("docs", &up.url());
    // Legacy results carry no hints: cached for this TTL, private (the default scope).
    u.default_ttl = std::time::Duration::from_secs(60);
    let p = Proxy::start(config(vec![u])).await;
    discovered(&p.client).await;
    let status = up.sample.status_uri().to_owned();
    assert_eq!(read(&p.client, &status).await.cache(), "miss");
    assert_eq!(read(&p.client, &status).await.cache(), "hit");
    // The proxy's legacy session subscribes the cached URI.
    eventually("the legacy upstream got resources/subscribe for the cached URI", || {
        let subscribed =
            up.sample.recorded_of("resources/subscribe").iter().any(|r| r.params["uri"] == status.as_str());
        async move { subscribed.then_some(()) }
    })
    .await;
    up.sample.bump();
    let fresh = eventually("the cached read is evicted", || async {
        let ex = read(&p.client, &status).await;
        ex.text().contains("version 2").then_some(ex)
    })
    .await;
    assert_eq!(fresh.cache(), "miss");
    assert_eq!(up.sample.count("resources/read"), 2);
}
