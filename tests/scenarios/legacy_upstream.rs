//! Legacy (2025-xx) upstreams behind the proxy, reached by a modern client: the official
//! `server-everything` (TypeScript SDK 1.x) over stdio and over Streamable HTTP, and the
//! built-in sample in legacy mode for session loss.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

/// The pinned `@modelcontextprotocol/server-everything` entry point. Installed by
/// `npm ci --prefix tests/node` (CI does this).
fn everything() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(path.exists(), "{} is missing: run `npm ci --prefix tests/node`", path.display());
    path
}

/// Waits until the proxy has established the upstream (its capabilities show in discover).
async fn established(p: &Proxy) {
    let client = p.client.clone();
    eventually("the legacy upstream is initialized", || {
        let client = client.clone();
        async move {
            let r = client.request("server/discover", json!({})).await.result();
            r["capabilities"]["resources"]["subscribe"].as_bool().map(|_| ())
        }
    })
    .await;
}

/// What every legacy upstream here must support through the proxy.
async fn exercise_everything(p: &Proxy) {
    established(p).await;
    let (items, pages) = p.client.list_all("resources/list", "resources").await;
    assert_eq!((items.len(), pages), (100, 10));
    assert_eq!(items[0]["uri"], "test://static/resource/1");

    let text = p.client.request("resources/read", json!({"uri": "test://static/resource/1"})).await;
    let r = text.result();
    assert_eq!(r["contents"][0]["text"], "Resource 1: This is a plaintext resource");
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["cacheScope"], "private", "legacy results default to private");
    let blob = p.client.request("resources/read", json!({"uri": "test://static/resource/2"})).await.result();
    assert_eq!(blob["contents"][0]["blob"], "UmVzb3VyY2UgMjogVGhpcyBpcyBhIGJhc2U2NCBibG9i");

    let missing = p.client.request("resources/read", json!({"uri": "test://static/resource/999"})).await;
    assert_eq!(missing.error_code(), -32602);
    assert_eq!(missing.json()["error"]["data"]["uri"], "test://static/resource/999");

    let echo = p.client.request("tools/call", json!({"name": "echo", "arguments": {"message": "hi"}})).await.result();
    assert_eq!(echo["content"][0]["text"], "Echo: hi");

    // Its subscription sends an update every 10 s: the modern listener gets it.
    let mut l =
        p.client.listen(json!("ev"), json!({"resourceSubscriptions": ["test://static/resource/3"]})).await.unwrap();
    let ack = l.next().await;
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!(["test://static/resource/3"]));
    let update = l.next_within(Duration::from_secs(25)).await.expect("an update within two of its 10 s periods");
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "test://static/resource/3");
    assert_eq!(update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "ev");
}

#[tokio::test]
async fn server_everything_over_stdio_is_served_to_modern_clients() {
    let cmd = vec!["node".to_owned(), everything().display().to_string(), "stdio".to_owned()];
    let p = Proxy::start(config(vec![UpstreamConfig::stdio("everything", cmd)])).await;
    exercise_everything(&p).await;
}

#[tokio::test]
async fn server_everything_over_http_is_served_to_modern_clients() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new("node")
        .arg(everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    // It binds a chosen port; a busy port makes it exit quietly, so check it is ours and alive.
    eventually("server-everything accepts connections", || {
        let alive = child.try_wait().map(|s| s.is_none()).unwrap_or(false);
        assert!(alive, "server-everything exited (port {port} busy?)");
        async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ()) }
    })
    .await;
    let p =
        Proxy::start(config(vec![UpstreamConfig::http("everything", &format!("http://127.0.0.1:{port}/mcp"))])).await;
    exercise_everything(&p).await;
    child.kill().await.ok();
}

#[tokio::test]
async fn a_legacy_upstream_that_drops_its_session_is_initialized_again() {
    let up = sample_http(SampleSpec { legacy: true, ..SampleSpec::generated("docs", 5) }).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("docs", &up.url())])).await;
    established(&p).await;
    let first = p.client.request("resources/read", json!({"uri": "docs://item/0"})).await;
    assert!(first.text().starts_with("item 0:"));
    assert_eq!(up.sample.initializations(), 1);

    up.sample.drop_sessions();
    // The upstream answers 404 for the old session: the proxy initializes again and the
    // client's request still succeeds.
    let second = p.client.request("resources/read", json!({"uri": "docs://item/1"})).await;
    assert!(second.text().starts_with("item 1:"));
    assert_eq!(up.sample.initializations(), 2);

    // Not found comes back in 2026-07-28 form.
    let missing = p.client.request("resources/read", json!({"uri": "docs://nope"})).await;
    assert_eq!(missing.error_code(), -32602);
    assert_eq!(missing.json()["error"]["data"]["uri"], "docs://nope");
}

#[tokio::test]
async fn legacy_subscriptions_are_refcounted_and_feed_listeners_through_the_get_stream() {
    let up = sample_http(SampleSpec { legacy: true, ..SampleSpec::generated("docs", 5) }).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.hub.linger = Duration::from_millis(50);
    let p = Proxy::start(cfg).await;
    established(&p).await;
    let mut a = p.client.listen(json!(1), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    let mut b = p.client.listen(json!(2), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    a.next().await;
    b.next().await;
    let sample = up.sample.clone();
    eventually("one upstream subscription", || {
        let n = sample.count("resources/subscribe");
        async move { (n >= 1).then_some(()) }
    })
    .await;
    // Legacy servers drop what they send while no GET stream is open: wait for the proxy's.
    let sample = up.sample.clone();
    eventually("the proxy's GET stream is open", || {
        let n = sample.legacy_streams();
        async move { (n >= 1).then_some(()) }
    })
    .await;
    up.sample.bump();
    let update = a.next_within(Duration::from_secs(10)).await.expect("update for a");
    assert_eq!(update["params"]["uri"], "docs://status");
    let update = b.next_within(Duration::from_secs(10)).await.expect("update for b");
    assert_eq!(update["params"]["uri"], "docs://status");
    assert_eq!(up.sample.count("resources/subscribe"), 1, "two listeners, one upstream subscription");
    drop(a);
    drop(b);
    let sample = up.sample.clone();
    eventually("unsubscribed after the last listener left", || {
        let n = sample.count("resources/unsubscribe");
        async move { (n == 1).then_some(()) }
    })
    .await;
}

/// A legacy server that asks the client mid-call: relayed as MRTR to a client that declared
/// the capability, declined for one that did not.
#[tokio::test]
async fn a_legacy_servers_question_is_relayed_as_input_required() {
    let up = sample_http(SampleSpec { legacy: true, ..SampleSpec::generated("docs", 2) }).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    // Held calls are bound to the principal: tell alice and mallory apart by their keys.
    api_keys(&mut cfg, &["alice", "mallory", "scenario"]);
    let p = Proxy::start(cfg).await;
    let p = Proxy { client: p.client.as_principal("scenario"), ..p };
    established(&p).await;
    let alice = p.client.as_principal("alice");
    let mut meta = meta();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
    let ask = |params: serde_json::Value| {
        let mut body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        body["params"]["_meta"] = meta.clone();
        body.to_string().into_bytes()
    };
    let headers = [
        ("mcp-protocol-version", "2026-07-28".to_string()),
        ("mcp-method", "tools/call".to_string()),
        ("mcp-name", "confirm".to_string()),
    ];
    let first = alice.raw("POST", &headers, ask(json!({"name": "confirm", "arguments": {}}))).await.result();
    assert_eq!(first["resultType"], "input_required");
    assert_eq!(first["inputRequests"]["upstream"]["method"], "elicitation/create");
    assert_eq!(first["inputRequests"]["upstream"]["params"]["message"], "Proceed?");
    let state = first["requestState"].as_str().unwrap().to_owned();

    // Another principal cannot use the handle.
    let retry = json!({"name": "confirm", "arguments": {}, "requestState": state,
                       "inputResponses": {"upstream": {"action": "accept", "content": {"ok": true}}}});
    let stolen = p.client.as_principal("mallory").raw("POST", &headers, ask(retry.clone())).await;
    assert_eq!(stolen.error_code(), -32602);

    // The retry resumes the held upstream call, which finishes with the client's answer.
    let done = alice.raw("POST", &headers, ask(retry)).await.result();
    assert_eq!(done["content"][0]["text"], "confirmed: accept");

    // Without the capability the question is declined upstream with a clear error.
    let plain = p.client.request("tools/call", json!({"name": "confirm", "arguments": {}})).await.result();
    let text = plain["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("declined: ") && text.contains("elicitation/create"), "{text}");
}
