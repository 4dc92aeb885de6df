//! Passthrough URIs and URI validation with the official peers as upstreams: the conformance
//! suite's fixture server (tests/conformance, TypeScript SDK v2) and the TypeScript SDK v2
//! server of tests/node, next to a sample upstream that lists `https://` pages (neither SDK
//! peer serves one). What the SDK peers serve stays namespaced; the sample's pages pass
//! through and are read from it; bad URIs never reach any of them (their request counts on
//! the proxy's `/metrics` do not move).
//!
//! Needs Node and the pinned packages: `npm ci --prefix tests/node` and
//! `npm ci --prefix tests/conformance` (scripts/test runs both). Without them this test fails.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::*;
use crate::uri_checks::{MAX_URI, completions_are_refused, reads_are_refused};
use crate::uris::{DOCS_PAGE, refused, web};
use resmux::config::UpstreamConfig;

/// Starts `node {script}` (under the repository) and returns it with the `url` its first
/// stdout line announces.
async fn node_peer(script: &str, package: &str) -> (Child, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let manifest = root.join(package);
    assert!(manifest.exists(), "{} is missing: run `npm ci --prefix {}`", manifest.display(), {
        let dir = std::path::Path::new(package).iter().take(2).collect::<PathBuf>();
        dir.display().to_string()
    });
    let mut child = Command::new("node")
        .arg(root.join(script))
        .arg("0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts (Node 20+ is required)");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("the peer reports its URL in time")
        .expect("reading the peer's stdout")
        .expect("the peer ended before reporting its URL");
    let first: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let url = first["url"].as_str().unwrap_or_else(|| panic!("no url in {first}")).to_owned();
    // Keep reading its stdout so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// Requests the proxy has sent to `upstream`, from its `/metrics`.
async fn sent_to(p: &Proxy, upstream: &str) -> u64 {
    let ex = McpClient::new(&format!("http://{}/metrics", p.app.local_addr())).raw("GET", &[], Vec::new()).await;
    let text = String::from_utf8_lossy(&ex.body).into_owned();
    let series = format!("resmux_upstream_requests_total{{upstream=\"{upstream}\"");
    text.lines().filter(|l| l.starts_with(&series)).map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum()
}

#[tokio::test]
async fn sdk_peers_stay_namespaced_https_pages_pass_through_and_bad_uris_reach_no_one() {
    let (_conf, conf_url) =
        node_peer("tests/conformance/fixture.mjs", "tests/conformance/node_modules/@modelcontextprotocol/server").await;
    let (_ts, ts_url) =
        node_peer("tests/node/v2-upstream.mjs", "tests/node/node_modules/@modelcontextprotocol/server").await;
    let site = sample_http(web("site", &[DOCS_PAGE])).await;
    let mut cfg = config(vec![
        UpstreamConfig::http("conf", &conf_url),
        UpstreamConfig::http("ts", &ts_url),
        UpstreamConfig::http("site", &site.url()),
    ]);
    cfg.listen.metrics_path = "/metrics".into();
    cfg.proxy.max_uri_bytes = MAX_URI;
    let p = Proxy::start(cfg).await;
    eventually("every upstream is discovered", || {
        let ups = p.app.router().upstreams();
        async move { ups.iter().all(|u| u.info().is_some()).then_some(()) }
    })
    .await;

    let (items, _) = p.client.list_all("resources/list", "resources").await;
    let listed: Vec<&str> = items.iter().filter_map(|i| i["uri"].as_str()).collect();
    for uri in ["conf+test://static-text", "ts+ts://doc/0", "site+site://item/0", DOCS_PAGE] {
        assert!(listed.contains(&uri), "{uri} in {listed:?}");
    }
    let (templates, _) = p.client.list_all("resources/templates/list", "resourceTemplates").await;
    let templates: Vec<&str> = templates.iter().filter_map(|t| t["uriTemplate"].as_str()).collect();
    for template in ["conf+test://template/{id}/data", "ts+ts://item/{id}", "https://docs.example.com/guide/{page}"] {
        assert!(templates.contains(&template), "{template} in {templates:?}");
    }

    // The SDK peers' URIs read back under their namespaced form, the page from its lister.
    let r = p.client.request("resources/read", json!({"uri": "conf+test://static-text"})).await.result();
    assert_eq!(r["contents"][0]["uri"], "conf+test://static-text");
    let r = p.client.request("resources/read", json!({"uri": "ts+ts://doc/0"})).await.result();
    assert_eq!(r["contents"][0]["uri"], "ts+ts://doc/0");
    let ex = p.client.request("resources/read", json!({"uri": DOCS_PAGE})).await;
    assert_eq!(ex.result()["contents"][0]["uri"], DOCS_PAGE);
    assert!(ex.text().contains("as site lists it"), "{}", ex.text());
    let r = p.client.request("tools/call", json!({"name": "conf__test_embedded_resource", "arguments": {}})).await;
    assert_eq!(r.result()["content"][0]["resource"]["uri"], "conf+test://embedded-resource", "{}", r.json());
    let r = p.client.request("tools/call", json!({"name": "site__link", "arguments": {}})).await.result();
    assert_eq!(r["content"][2]["uri"], DOCS_PAGE);

    // Nothing below reaches an upstream.
    let before = (
        sent_to(&p, "conf").await,
        sent_to(&p, "ts").await,
        site.sample.count("resources/read") + site.sample.count("completion/complete"),
    );
    let unlisted = "https://example.org/unlisted";
    refused(&p.client.request("resources/read", json!({"uri": unlisted})).await, unlisted, "Resource not found");
    reads_are_refused(&p.client, "conf+test://static-text").await;
    reads_are_refused(&p.client, "ts+ts://doc/0").await;
    completions_are_refused(&p.client, "conf+test://template").await;
    completions_are_refused(&p.client, "ts+ts://item").await;
    let after = (
        sent_to(&p, "conf").await,
        sent_to(&p, "ts").await,
        site.sample.count("resources/read") + site.sample.count("completion/complete"),
    );
    assert_eq!(after, before, "requests sent to conf, ts and site");
    assert!(before.0 > 0 && before.1 > 0, "the counters do count these upstreams: {before:?}");

    // Completion of a valid template still reaches the SDK peer.
    let params =
        json!({"ref": {"type": "ref/resource", "uri": "ts+ts://item/{id}"}, "argument": {"name": "id", "value": "al"}});
    let r = p.client.request("completion/complete", params).await.result();
    assert_eq!(r["completion"]["values"], json!(["alpha", "alder"]));
}
