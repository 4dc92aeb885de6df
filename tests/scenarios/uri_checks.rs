//! The proxy validates every resource URI a client sends before routing it: `resources/read`,
//! `subscriptions/listen` filters, legacy `resources/subscribe`/`unsubscribe`, and
//! `completion/complete` `ref/resource` templates. Each bad URI is answered -32602 with
//! `data.uri` and a message saying what is wrong, and no upstream is contacted.

use serde_json::json;

use crate::support::*;
use crate::uris::refused;
use resmux::config::UpstreamConfig;
use resmux::sample::{SampleHttp, SampleSpec};

/// What the tests below send that could reach an upstream: reads, completions, and upstream
/// listens for a URI (the proxy's own listen for list changes carries none).
fn reached(up: &SampleHttp) -> (u64, u64, bool) {
    let watched = up.sample.active_subscriptions().iter().any(|uris| !uris.is_empty());
    (up.sample.count("resources/read"), up.sample.count("completion/complete"), watched)
}

/// `max_uri_bytes` in these tests.
pub const MAX_URI: usize = 256;

/// The bad URIs, each with what its error message says. `base` is a valid URI to break.
pub fn bad_uris(base: &str) -> Vec<(String, &'static str)> {
    let mut rows: Vec<(String, &'static str)> = [
        ("\u{0}", "control character"),
        ("\n", "control character"),
        ("\r", "control character"),
        ("\t", "control character"),
        (" ", "whitespace"),
        ("\u{7f}", "control character"),
        ("%", "`%`"),
        ("%4", "`%`"),
        ("%zz", "`%`"),
    ]
    .iter()
    .map(|(bad, says)| (format!("{base}{bad}x"), *says))
    .collect();
    rows.push(("no-scheme/at/all".into(), "no scheme"));
    rows.push((String::new(), "empty"));
    rows.push((format!("{base}/{}", "a".repeat(MAX_URI)), "longer than 256 bytes"));
    rows
}

/// The `data.uri` expected for `uri`: an oversized one is cut at the bound.
pub fn echoed(uri: &str) -> &str {
    &uri[..uri.len().min(MAX_URI)]
}

/// Reads every bad URI made from `base` and asserts each is refused.
pub async fn reads_are_refused(client: &McpClient, base: &str) {
    for (uri, says) in bad_uris(base) {
        let ex = client.request("resources/read", json!({"uri": uri})).await;
        refused(&ex, echoed(&uri), says);
        assert!(ex.json()["error"]["message"].as_str().unwrap().contains("invalid resource URI"));
    }
}

/// Bad `completion/complete` templates, each with what its message says.
pub fn bad_templates(base: &str) -> Vec<(String, &'static str)> {
    vec![
        (format!("{base}/{{id"), "unbalanced"),
        (format!("{base}/id}}"), "unbalanced"),
        (format!("{base}/{{}}"), "template expression"),
        (format!("{base}/{{a b}}"), "template expression"),
        (format!("{base}/{{=x}}"), "template expression"),
        (format!("{base}/{{id}}\n"), "control character"),
    ]
}

/// Asks to complete every bad template and asserts each is refused.
pub async fn completions_are_refused(client: &McpClient, base: &str) {
    for (template, says) in bad_templates(base) {
        let params = json!({"ref": {"type": "ref/resource", "uri": template}, "argument": {"name": "id", "value": ""}});
        refused(&client.request("completion/complete", params).await, &template, says);
    }
}

/// A proxy with `max_uri_bytes` = [`MAX_URI`] in front of two sample upstreams, discovered.
async fn two() -> (Proxy, SampleHttp, SampleHttp) {
    let a = sample_http(SampleSpec::generated("docs", 2)).await;
    let b = sample_http(SampleSpec::generated("notes", 2)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &a.url()), UpstreamConfig::http("notes", &b.url())]);
    cfg.proxy.max_uri_bytes = MAX_URI;
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    (p, a, b)
}

#[tokio::test]
async fn every_bad_uri_is_refused_before_any_upstream_sees_it() {
    let (p, a, b) = two().await;
    let before = (reached(&a), reached(&b));

    reads_are_refused(&p.client, "docs+docs://item/0").await;
    reads_are_refused(&p.client, "https://docs.example.com/").await;
    completions_are_refused(&p.client, "docs+docs://item").await;
    for (uri, says) in bad_uris("docs+docs://status") {
        let refusal = p.client.listen(json!(1), json!({"resourceSubscriptions": ["docs+docs://status", uri]})).await;
        let ex = refusal.err().unwrap_or_else(|| panic!("a listen on {uri:?} was opened"));
        refused(&ex, echoed(&uri), says);
    }
    assert_eq!((reached(&a), reached(&b)), before, "no upstream was contacted");

    // Good URIs still go through, a non-ASCII one too.
    assert_eq!(p.client.request("resources/read", json!({"uri": "docs+docs://item/0"})).await.status, 200);
    let ex = p.client.request("resources/read", json!({"uri": "docs+docs://café/menü"})).await;
    refused(&ex, "docs+docs://café/menü", "Resource not found");
    assert_eq!(a.sample.count("resources/read"), 2, "both valid reads reached docs, and nothing else did");
}

/// A legacy (2025-11-25) session on the proxy's endpoint.
async fn legacy_session(p: &Proxy) -> Vec<(&'static str, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "uri-checks", "version": "0"}}});
    let ex = p.client.raw("POST", &[], init.to_string().into_bytes()).await;
    assert_eq!(ex.status, 200, "{}", String::from_utf8_lossy(&ex.body));
    let id = ex.header("mcp-session-id").expect("a session id").to_owned();
    vec![("mcp-session-id", id), ("mcp-protocol-version", "2025-11-25".to_owned())]
}

#[tokio::test]
async fn legacy_subscribe_and_unsubscribe_refuse_bad_uris() {
    let (p, a, b) = two().await;
    let headers = legacy_session(&p).await;
    let before = (reached(&a), reached(&b));
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        for (uri, says) in bad_uris("docs+docs://status") {
            let body = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": {"uri": uri}});
            let ex = p.client.raw("POST", &headers, body.to_string().into_bytes()).await;
            refused(&ex, echoed(&uri), says);
        }
    }
    assert_eq!((reached(&a), reached(&b)), before, "no upstream was contacted");
    let body =
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe", "params": {"uri": "docs+docs://status"}});
    let ex = p.client.raw("POST", &headers, body.to_string().into_bytes()).await;
    assert_eq!(ex.json()["result"], json!({}), "{}", ex.json());
}
