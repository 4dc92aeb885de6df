//! Merged lists across several upstreams: every page of every upstream, exactly once, with
//! the proxy's own authenticated cursor and the per-upstream failure policy.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::{OnError, UpstreamConfig};
use resmux::sample::SampleSpec;

fn spec(name: &str, count: usize, page: usize) -> SampleSpec {
    SampleSpec { page_size: page, ..SampleSpec::generated(name, count) }
}

#[tokio::test]
async fn three_upstreams_with_uneven_pages_list_every_resource_exactly_once() {
    let a = sample_http(spec("a", 7, 3)).await;
    let b = sample_http(spec("b", 25, 10)).await;
    let c = sample_http(spec("c", 12, 5)).await;
    let p = Proxy::start(config(vec![
        UpstreamConfig::http("a", &a.url()),
        UpstreamConfig::http("b", &b.url()),
        UpstreamConfig::http("c", &c.url()),
    ]))
    .await;
    let (items, pages) = p.client.list_all("resources/list", "resources").await;
    // Each sample serves its generated items plus a `status` resource.
    assert_eq!(items.len(), 8 + 26 + 13);
    let uris: Vec<&str> = items.iter().map(|i| i["uri"].as_str().unwrap()).collect();
    let unique: HashSet<&&str> = uris.iter().collect();
    assert_eq!(unique.len(), uris.len(), "duplicates in {uris:?}");
    for (name, count) in [("a", 7), ("b", 25), ("c", 12)] {
        let mine: Vec<&str> = uris.iter().copied().filter(|u| u.starts_with(&format!("{name}+"))).collect();
        let mut want: Vec<String> = (0..count).map(|i| format!("{name}+{name}://item/{i}")).collect();
        want.push(format!("{name}+{name}://status"));
        assert_eq!(mine, want, "upstream {name}: every page, in its own order");
    }
    // b needs 3 pages: the merged walk needs as many as the longest upstream.
    assert_eq!(pages, 3);
    // Every upstream page was asked for exactly once.
    assert_eq!(a.sample.count("resources/list"), 3);
    assert_eq!(b.sample.count("resources/list"), 3);
    assert_eq!(c.sample.count("resources/list"), 3);
}

#[tokio::test]
async fn merged_pages_carry_the_shortest_ttl_and_the_pessimistic_scope() {
    let a = sample_http(SampleSpec { ttl_ms: 5_000, ..spec("a", 2, 10) }).await;
    let b = sample_http(SampleSpec { ttl_ms: 9_000, public: false, ..spec("b", 2, 10) }).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), UpstreamConfig::http("b", &b.url())])).await;
    let r = p.client.request("resources/list", json!({})).await.result();
    assert_eq!(r["ttlMs"], 5_000);
    assert_eq!(r["cacheScope"], "private");
    assert_eq!(r["resultType"], "complete");
}

#[tokio::test]
async fn tampered_foreign_and_cross_method_cursors_are_32602() {
    let a = sample_http(spec("a", 30, 5)).await;
    let b = sample_http(spec("b", 3, 5)).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), UpstreamConfig::http("b", &b.url())])).await;
    let first = p.client.request("resources/list", json!({})).await.result();
    let cursor = first["nextCursor"].as_str().expect("more pages").to_owned();
    let mut tampered = cursor.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'x' { b'y' } else { b'x' };
    for bad in [String::from_utf8(tampered).unwrap(), "not-a-cursor".into(), String::new(), "A".repeat(20_000)] {
        let ex = p.client.request("resources/list", json!({"cursor": bad})).await;
        assert_eq!(ex.error_code(), -32602);
    }
    let ex = p.client.request("tools/list", json!({"cursor": cursor})).await;
    assert_eq!(ex.error_code(), -32602, "a resources/list cursor is refused by tools/list");
    let ex = p.client.request("resources/list", json!({"cursor": 5})).await;
    assert_eq!(ex.error_code(), -32602);
    // The genuine cursor still works.
    let ex = p.client.request("resources/list", json!({"cursor": cursor})).await;
    assert!(ex.result()["resources"].as_array().is_some());
}

#[tokio::test]
async fn a_cursor_from_another_replica_with_the_same_key_is_accepted() {
    let a = sample_http(spec("a", 30, 5)).await;
    let b = sample_http(spec("b", 3, 5)).await;
    let mk = || {
        let mut c = config(vec![UpstreamConfig::http("a", &a.url()), UpstreamConfig::http("b", &b.url())]);
        c.proxy.cursor_secret =
            Some(resmux::config::SecretSource { value: Some("shared".into()), ..Default::default() });
        c
    };
    let one = Proxy::start(mk()).await;
    let two = Proxy::start(mk()).await;
    let cursor =
        one.client.request("resources/list", json!({})).await.result()["nextCursor"].as_str().unwrap().to_owned();
    let page = two.client.request("resources/list", json!({"cursor": cursor})).await.result();
    assert_eq!(page["resources"][0]["uri"], "a+a://item/5");
}

#[tokio::test]
async fn fail_open_skips_a_dead_upstream_and_fail_closed_errors() {
    let a = sample_http(spec("a", 4, 10)).await;
    let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut dead = UpstreamConfig::http("dead", &format!("http://{spare}/mcp"));
    dead.timeout = std::time::Duration::from_secs(2);
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), dead.clone()])).await;
    let (items, _) = p.client.list_all("resources/list", "resources").await;
    assert_eq!(items.len(), 5, "the live upstream's resources, the dead one skipped");

    dead.on_error = OnError::FailClosed;
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), dead])).await;
    let ex = p.client.request("resources/list", json!({})).await;
    assert_eq!(ex.status, 502);
    assert_eq!(ex.json()["error"]["data"]["upstream"], "dead");
}

#[tokio::test]
async fn tools_prompts_and_templates_are_merged_too() {
    let a = sample_http(spec("a", 1, 2)).await;
    let b = sample_http(spec("b", 1, 2)).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), UpstreamConfig::http("b", &b.url())])).await;
    let (tools, _) = p.client.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    // Each proxy page holds the current page of every upstream, in config order.
    assert_eq!(names, ["a__echo", "a__add", "b__echo", "b__add", "a__link", "b__link"]);
    let (prompts, _) = p.client.list_all("prompts/list", "prompts").await;
    assert_eq!(
        prompts.iter().map(|t| t["name"].clone()).collect::<Vec<Value>>(),
        [json!("a__summarize"), json!("b__summarize")]
    );
    let (templates, _) = p.client.list_all("resources/templates/list", "resourceTemplates").await;
    assert_eq!(templates[1]["uriTemplate"], "b+b://{path}");
}
