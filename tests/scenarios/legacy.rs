//! Legacy (2025-xx) clients on the proxy's own endpoint, on the wire: `initialize` mints a
//! signed `Mcp-Session-Id`; later requests carry it and need no `_meta` and no mirrored
//! headers; GET opens the session's stream of unsolicited notifications; DELETE ends it. The
//! same endpoint still serves modern requests statelessly.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

async fn proxy_with(tweak: impl FnOnce(&mut Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(SampleSpec::generated("docs", 12)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.hub.linger = Duration::from_millis(50);
    tweak(&mut cfg);
    (Proxy::start(cfg).await, up)
}

/// A legacy session as a 2025-06-18 client holds it.
struct Session {
    client: McpClient,
    url: String,
    id: String,
    version: String,
}

fn initialize_body(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "legacy-scenario", "version": "0"}}})
}

async fn initialize(p: &Proxy, version: &str) -> (Session, Exchange) {
    let ex = p.client.raw("POST", &[], initialize_body(version).to_string().into_bytes()).await;
    assert_eq!(ex.status, 200, "{}", String::from_utf8_lossy(&ex.body));
    let id = ex.header("mcp-session-id").expect("a session id").to_owned();
    let version = ex.result()["protocolVersion"].as_str().unwrap().to_owned();
    let url = format!("http://{}/mcp", p.app.local_addr());
    (Session { client: p.client.clone(), url, id, version }, ex)
}

impl Session {
    /// POSTs `body` with the session's headers (and no modern ones).
    async fn post(&self, body: Value) -> Exchange {
        let headers = [("mcp-session-id", self.id.clone()), ("mcp-protocol-version", self.version.clone())];
        self.client.raw("POST", &headers, body.to_string().into_bytes()).await
    }

    async fn request(&self, method: &str, params: Value) -> Exchange {
        self.post(json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})).await
    }

    async fn notify(&self, method: &str) -> Exchange {
        self.post(json!({"jsonrpc": "2.0", "method": method, "params": {}})).await
    }

    /// GET with the session id: the stream, or the refusal.
    async fn stream(&self) -> Result<Listening, Exchange> {
        get_stream(&self.url, &[("mcp-session-id", self.id.as_str()), ("accept", "text/event-stream")]).await
    }

    async fn delete(&self) -> Exchange {
        self.client.raw("DELETE", &[("mcp-session-id", self.id.clone())], Vec::new()).await
    }
}

async fn get_stream(url: &str, headers: &[(&str, &str)]) -> Result<Listening, Exchange> {
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(DEADLINE, http.request(req.body(Full::new(Bytes::new())).unwrap()))
        .await
        .expect("answered in time")
        .expect("HTTP exchange");
    let (status, headers) = (resp.status(), resp.headers().clone());
    if status != StatusCode::OK {
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        return Err(Exchange { status, headers, body });
    }
    assert_eq!(headers["content-type"], "text/event-stream");
    Ok(Listening::from_response(resp))
}

#[tokio::test]
async fn initialize_mints_a_session_and_describes_what_the_proxy_serves() {
    let (p, _up) = proxy_with(|_| {}).await;
    let (session, ex) = initialize(&p, "2025-06-18").await;
    assert_eq!(ex.header("content-type"), Some("application/json"));
    let r = ex.result();
    assert_eq!(r["protocolVersion"], "2025-06-18");
    assert_eq!(r["serverInfo"]["name"], "resmux");
    // What the proxy really serves: the sample upstream offers resource subscriptions and
    // list changes, tools, prompts and completions; the proxy relays no log messages.
    assert_eq!(r["capabilities"]["resources"], json!({"subscribe": true, "listChanged": true}));
    assert!(r["capabilities"]["tools"].is_object() && r["capabilities"]["prompts"].is_object());
    assert!(r["capabilities"].get("logging").is_none());
    assert!(r["instructions"].as_str().unwrap().contains("[docs]"));
    assert!(session.id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII: {}", session.id);

    // A version the proxy does not speak is answered with the newest legacy one.
    for asked in ["2026-07-28", "2024-11-05", "garbage"] {
        let (s, _) = initialize(&p, asked).await;
        assert_eq!(s.version, "2025-11-25", "asked for {asked}");
        assert_ne!(s.id, session.id);
    }
}

#[tokio::test]
async fn a_modern_shaped_initialize_is_still_404_32601() {
    let (p, _up) = proxy_with(|_| {}).await;
    let ex = p.client.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (404, -32601));
    assert!(ex.header("mcp-session-id").is_none());
}

#[tokio::test]
async fn requests_in_a_session_need_no_meta_and_no_mirrored_headers() {
    let (p, _up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-06-18").await;
    assert_eq!(s.notify("notifications/initialized").await.status, 202);

    // Every page of the list, with the proxy's own cursors.
    let mut cursor: Option<String> = None;
    let mut uris = Vec::new();
    let mut pages = 0;
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let r = s.request("resources/list", params).await.result();
        pages += 1;
        uris.extend(r["resources"].as_array().unwrap().iter().map(|x| x["uri"].as_str().unwrap().to_owned()));
        match r["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!((uris.len(), pages), (13, 2), "12 items and the status resource, 10 per page");

    let read = s.request("resources/read", json!({"uri": "docs://item/3"})).await;
    assert_eq!((read.status.as_u16(), read.result()["contents"][0]["uri"].as_str()), (200, Some("docs://item/3")));
    let r = s.request("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}})).await.result();
    assert_eq!(r["content"][0]["text"], "hi");
    let r =
        s.request("prompts/get", json!({"name": "summarize", "arguments": {"uri": "docs://item/3"}})).await.result();
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    let r = s.request("tools/list", json!({})).await.result();
    assert!(r["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"));
    let r = s.request("resources/templates/list", json!({})).await.result();
    assert_eq!(r["resourceTemplates"][0]["uriTemplate"], "docs://{path}");
    let r = s
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "docs://{path}"},
                                               "argument": {"name": "path", "value": "item/1"}}),
        )
        .await
        .result();
    assert!(r["completion"]["values"].as_array().unwrap().iter().any(|v| v == "item/1"));

    // The methods 2026-07-28 removed are served to legacy sessions.
    assert_eq!(s.request("ping", json!({})).await.result(), json!({}));
    assert_eq!(s.request("logging/setLevel", json!({"level": "debug"})).await.result(), json!({}));
    assert_eq!(s.notify("notifications/cancelled").await.status, 202);
    // The modern-only ones are not, and a legacy error travels in a 200 (a 404 would tell the
    // client its session expired).
    let ex = s.request("subscriptions/listen", json!({"notifications": {}})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (200, -32601));
    let ex = s.request("no/such/method", json!({})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (200, -32601));

    // No MCP-Protocol-Version header means 2025-03-26, which is fine; a version the proxy
    // does not speak in a legacy session is 400.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string().into_bytes();
    let ex = p.client.raw("POST", &[("mcp-session-id", s.id.clone())], body.clone()).await;
    assert_eq!(ex.result(), json!({}));
    let headers = [("mcp-session-id", s.id.clone()), ("mcp-protocol-version", "2024-01-01".to_owned())];
    let ex = p.client.raw("POST", &headers, body).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32022));
}

#[tokio::test]
async fn session_ids_are_checked() {
    let (p, _up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-11-25").await;
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {}}).to_string().into_bytes();
    // Without a session id a request without `_meta` is a malformed modern request.
    let ex = p.client.raw("POST", &[], list.clone()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32602));
    // A forged or tampered id is the legacy 404: initialize again.
    let mut tampered = s.id.clone().into_bytes();
    tampered[5] = if tampered[5] == b'A' { b'B' } else { b'A' };
    for bad in ["forged".to_owned(), String::from_utf8(tampered).unwrap()] {
        let ex = p.client.raw("POST", &[("mcp-session-id", bad.clone())], list.clone()).await;
        assert_eq!((ex.status.as_u16(), ex.error_code()), (404, -32600), "{bad}");
        assert_eq!(ex.json()["id"], 3);
        let get = get_stream(&s.url, &[("mcp-session-id", &bad), ("accept", "text/event-stream")]).await;
        assert_eq!(get.err().expect("refused").status, 404);
        assert_eq!(p.client.raw("DELETE", &[("mcp-session-id", bad)], Vec::new()).await.status, 404);
    }
    // The real one works.
    assert_eq!(p.client.raw("POST", &[("mcp-session-id", s.id.clone())], list).await.status, 200);
    // A modern request carrying a session id is served statelessly (the id is ignored).
    let modern = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": meta()}});
    let headers = [
        ("mcp-session-id", "forged".to_owned()),
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", "resources/list".to_owned()),
    ];
    assert_eq!(p.client.raw("POST", &headers, modern.to_string().into_bytes()).await.status, 200);
}

#[tokio::test]
async fn not_found_is_32002_for_legacy_clients_and_32602_for_modern_ones() {
    let (p, _up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-11-25").await;
    let ex = s.request("resources/read", json!({"uri": "docs://nope"})).await;
    assert_eq!(ex.status, 200);
    assert_eq!(ex.json()["error"]["code"], -32002);
    assert_eq!(ex.json()["error"]["data"]["uri"], "docs://nope");
    let ex = p.client.request("resources/read", json!({"uri": "docs://nope"})).await;
    assert_eq!(ex.error_code(), -32602);
}

#[tokio::test]
async fn legacy_and_modern_clients_share_the_cache() {
    let (p, up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-11-25").await;
    assert_eq!(s.request("resources/read", json!({"uri": "docs://item/1"})).await.cache(), "miss");
    assert_eq!(p.client.request("resources/read", json!({"uri": "docs://item/1"})).await.cache(), "hit");
    assert_eq!(s.request("resources/read", json!({"uri": "docs://item/1"})).await.cache(), "hit");
    assert_eq!(up.sample.count("resources/read"), 1);
}

#[tokio::test]
async fn the_get_stream_delivers_updates_and_list_changes_in_the_legacy_shape() {
    let (p, up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-11-25").await;
    assert_eq!(s.request("resources/subscribe", json!({"uri": "docs://status"})).await.result(), json!({}));
    let mut stream = s.stream().await.expect("a stream");
    upstream_subscribed(&up, &["docs://status"]).await;

    up.sample.bump();
    let m = stream.next().await;
    assert_eq!(
        m,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "docs://status"}})
    );
    // list_changed comes unsolicited: the upstream declared resources.listChanged.
    up.sample.change_list();
    assert_eq!(stream.next().await["method"], "notifications/resources/list_changed");
    // Only what the session subscribed to: the next message is a later change of a subscribed
    // URI (changes are delivered in order), not the unsubscribed one before it.
    up.sample.touch("docs://item/2");
    up.sample.bump();
    assert_eq!(stream.next().await["params"]["uri"], "docs://status");

    // One stream per session.
    let second = s.stream().await.err().expect("a second stream is refused");
    assert_eq!((second.status.as_u16(), second.error_code()), (409, -32600));
    // Without text/event-stream in Accept the stream cannot be served.
    let refused = get_stream(&s.url, &[("mcp-session-id", &s.id), ("accept", "application/json")]).await;
    assert_eq!(refused.err().unwrap().status, 406);

    // Re-subscribing moves the upstream interest without a gap; unsubscribing drops it.
    s.request("resources/subscribe", json!({"uri": "docs://item/2"})).await.result();
    upstream_subscribed(&up, &["docs://item/2", "docs://status"]).await;
    s.request("resources/unsubscribe", json!({"uri": "docs://status"})).await.result();
    upstream_subscribed(&up, &["docs://item/2"]).await;
    up.sample.bump();
    up.sample.touch("docs://item/2");
    assert_eq!(stream.next().await["params"]["uri"], "docs://item/2");
}

#[tokio::test]
async fn changes_wait_for_the_stream_and_coalesce() {
    let (p, up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-11-25").await;
    s.request("resources/subscribe", json!({"uri": "docs://status"})).await.result();
    upstream_subscribed(&up, &["docs://status"]).await;
    // Changes before the client opened its stream are held, not lost, and repeats coalesce.
    for _ in 0..50 {
        up.sample.bump();
    }
    let mut stream = s.stream().await.expect("a stream");
    let mut received = 0;
    while let Some(m) = stream.next_within(Duration::from_millis(300)).await {
        assert_eq!(m["params"]["uri"], "docs://status");
        received += 1;
    }
    // Usually one; a bump still in transit when the stream opens may add another.
    assert!((1..50).contains(&received), "{received} notifications for 50 changes");
}

#[tokio::test]
async fn delete_ends_the_session_its_stream_and_its_subscriptions() {
    let (p, up) = proxy_with(|_| {}).await;
    let (s, _) = initialize(&p, "2025-11-25").await;
    s.request("resources/subscribe", json!({"uri": "docs://status"})).await.result();
    let mut stream = s.stream().await.expect("a stream");
    upstream_subscribed(&up, &["docs://status"]).await;

    assert_eq!(s.delete().await.status, 200);
    assert!(stream.ends().await, "the stream ends with the session");
    upstream_subscribed(&up, &[]).await;
    let ex = s.request("ping", json!({})).await;
    assert_eq!(ex.status, 404);
    assert_eq!(s.delete().await.status, 404);
    assert_eq!(s.stream().await.err().unwrap().status, 404);

    // GET and DELETE without a session id are the modern endpoint's 405.
    let get = get_stream(&s.url, &[("accept", "text/event-stream")]).await.err().unwrap();
    assert_eq!((get.status.as_u16(), get.header("allow")), (405, Some("POST")));
    assert_eq!(p.client.raw("DELETE", &[], Vec::new()).await.status, 405);
}

#[tokio::test]
async fn legacy_sessions_are_bounded() {
    let (p, _up) = proxy_with(|c| c.listen.max_legacy_sessions = 2).await;
    let (a, _) = initialize(&p, "2025-11-25").await;
    let _b = initialize(&p, "2025-11-25").await;
    let ex = p.client.raw("POST", &[], initialize_body("2025-11-25").to_string().into_bytes()).await;
    assert_eq!(ex.status, 429);
    assert!(ex.json()["error"]["message"].as_str().unwrap().contains("legacy sessions"));
    // Ending one makes room.
    assert_eq!(a.delete().await.status, 200);
    initialize(&p, "2025-11-25").await;
}
