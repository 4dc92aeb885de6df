//! Namespacing round trips (DESIGN §2): what a client lists it can read, call and complete,
//! and every URI in every answer is in the proxy's namespace.

use serde_json::json;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

async fn two() -> (Proxy, resmux::sample::SampleHttp, resmux::sample::SampleHttp) {
    let a = sample_http(SampleSpec::docs()).await;
    let b = sample_http(SampleSpec { page_size: 3, ..SampleSpec::notes() }).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("docs", &a.url()), UpstreamConfig::http("notes", &b.url())]))
        .await;
    (p, a, b)
}

#[tokio::test]
async fn every_listed_resource_reads_back_under_its_listed_uri() {
    let (p, a, b) = two().await;
    let (items, _) = p.client.list_all("resources/list", "resources").await;
    assert!(items.len() > 10);
    for item in &items {
        let uri = item["uri"].as_str().unwrap();
        assert!(uri.starts_with("docs+docs://") || uri.starts_with("notes+notes://"), "{uri}");
        let r = p.client.request("resources/read", json!({"uri": uri})).await.result();
        assert_eq!(r["contents"][0]["uri"], uri);
        assert!(r["contents"][0]["text"].as_str().is_some());
    }
    // Each read went to the upstream that owns it, with the prefix removed.
    assert_eq!(a.sample.count("resources/read") + b.sample.count("resources/read"), items.len() as u64);
}

#[tokio::test]
async fn tool_and_prompt_results_carry_namespaced_uris() {
    let (p, _a, _b) = two().await;
    let r = p.client.request("tools/call", json!({"name": "notes__link", "arguments": {}})).await.result();
    assert_eq!(r["content"][0]["type"], "resource_link");
    assert_eq!(r["content"][0]["uri"], "notes+notes://2026-11-02-standup");
    assert_eq!(r["content"][1]["resource"]["uri"], "notes+notes://2026-11-02-standup");
    let r = p.client.request("tools/call", json!({"name": "docs__add", "arguments": {"a": 2, "b": 40}})).await.result();
    assert_eq!(r["structuredContent"]["sum"], 42);
    // prompts/get: the prompt argument is the upstream's URI space (arguments are opaque).
    let r = p
        .client
        .request("prompts/get", json!({"name": "docs__summarize", "arguments": {"uri": "docs://faq"}}))
        .await
        .result();
    assert_eq!(r["messages"][1]["content"]["resource"]["uri"], "docs+docs://faq");
}

#[tokio::test]
async fn completion_routes_by_ref_and_unknown_names_are_refused() {
    let (p, _a, _b) = two().await;
    let r = p
        .client
        .request("completion/complete", json!({"ref": {"type": "ref/resource", "uri": "docs+docs://{path}"}, "argument": {"name": "path", "value": "api/"}}))
        .await
        .result();
    assert_eq!(r["completion"]["values"], json!(["api/auth", "api/jobs"]));
    let ex = p.client.request("tools/call", json!({"name": "nobody__echo", "arguments": {}})).await;
    assert_eq!(ex.error_code(), -32602);
    let ex = p.client.request("tools/call", json!({"name": "docs__nope", "arguments": {}})).await;
    assert_eq!(ex.error_code(), -32602);
    let ex = p.client.request("resources/read", json!({"uri": "docs+docs://missing"})).await;
    assert_eq!(ex.error_code(), -32602);
    assert_eq!(ex.json()["error"]["data"]["uri"], "docs+docs://missing");
}

#[tokio::test]
async fn one_upstream_passes_names_through_and_unprefixed_upstreams_resolve_first_wins() {
    let a = sample_http(SampleSpec::docs()).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("docs", &a.url())])).await;
    let r = p.client.request("resources/read", json!({"uri": "docs://faq"})).await.result();
    assert_eq!(r["contents"][0]["uri"], "docs://faq");
    let (tools, _) = p.client.list_all("tools/list", "tools").await;
    assert_eq!(tools[0]["name"], "echo");

    // Two unprefixed upstreams with the same scheme: the first that has the URI answers.
    let first = sample_http(SampleSpec { scheme: "shared".into(), ..SampleSpec::generated("x", 2) }).await;
    let second = sample_http(SampleSpec { scheme: "shared".into(), ..SampleSpec::generated("y", 5) }).await;
    let mut u1 = UpstreamConfig::http("x", &first.url());
    u1.prefix = false;
    let mut u2 = UpstreamConfig::http("y", &second.url());
    u2.prefix = false;
    let p = Proxy::start(config(vec![u1, u2])).await;
    p.client.request("resources/read", json!({"uri": "shared://item/1"})).await.result();
    assert_eq!((first.sample.count("resources/read"), second.sample.count("resources/read")), (1, 0));
    p.client.request("resources/read", json!({"uri": "shared://item/4"})).await.result();
    assert_eq!((first.sample.count("resources/read"), second.sample.count("resources/read")), (2, 1));
}
