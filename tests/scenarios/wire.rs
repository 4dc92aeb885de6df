//! One scenario per wire rule of Streamable HTTP 2026-07-28 (reference §2.1).

use serde_json::json;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

async fn proxy() -> (Proxy, resmux::sample::SampleHttp) {
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.listen.max_body_bytes = 4096;
    (Proxy::start(cfg).await, up)
}

fn headers(version: &str, method: &str) -> Vec<(&'static str, String)> {
    vec![("mcp-protocol-version", version.to_owned()), ("mcp-method", method.to_owned())]
}

fn body(method: &str, params: serde_json::Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string().into_bytes()
}

#[tokio::test]
async fn get_and_delete_are_405() {
    let (p, _up) = proxy().await;
    for method in ["GET", "DELETE", "PUT"] {
        let ex = p.client.raw(method, &[], Vec::new()).await;
        assert_eq!(ex.status, 405, "{method}");
        assert_eq!(ex.header("allow"), Some("POST"));
    }
}

#[tokio::test]
async fn a_notification_gets_202_and_no_body() {
    let (p, _up) = proxy().await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let ex = p.client.raw("POST", &[], note.to_string().into_bytes()).await;
    assert_eq!(ex.status, 202);
    assert!(ex.body.is_empty());
}

#[tokio::test]
async fn a_conforming_request_is_answered_with_json() {
    let (p, _up) = proxy().await;
    let ex = p.client.request("server/discover", json!({})).await;
    assert_eq!(ex.status, 200);
    assert_eq!(ex.header("content-type"), Some("application/json"));
    let r = ex.result();
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "resmux");
    assert!(r["ttlMs"].as_u64().is_some());
    assert_eq!(r["cacheScope"], "public");
    assert!(r["capabilities"]["resources"].is_object());
}

#[tokio::test]
async fn version_header_missing_or_different_is_400_32020() {
    let (p, _up) = proxy().await;
    let b = body("server/discover", json!({"_meta": meta()}));
    let ex = p.client.raw("POST", &[("mcp-method", "server/discover".into())], b.clone()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
    assert_eq!(ex.json()["id"], 7);
    let ex = p.client.raw("POST", &headers("2025-11-25", "server/discover"), b).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
}

#[tokio::test]
async fn method_header_missing_or_different_is_400_32020() {
    let (p, _up) = proxy().await;
    let b = body("resources/list", json!({"_meta": meta()}));
    let ex = p.client.raw("POST", &[("mcp-protocol-version", "2026-07-28".into())], b.clone()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
    let ex = p.client.raw("POST", &headers("2026-07-28", "tools/list"), b).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
}

#[tokio::test]
async fn name_header_is_checked_including_the_base64_form() {
    let (p, _up) = proxy().await;
    let uri = "docs://café/ü";
    let b = body("resources/read", json!({"uri": uri, "_meta": meta()}));
    // Missing.
    let ex = p.client.raw("POST", &headers("2026-07-28", "resources/read"), b.clone()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
    // Different.
    let mut h = headers("2026-07-28", "resources/read");
    h.push(("mcp-name", "docs://other".into()));
    let ex = p.client.raw("POST", &h, b.clone()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
    // Malformed sentinel.
    let mut h = headers("2026-07-28", "resources/read");
    h.push(("mcp-name", "=?base64?%%%?=".into()));
    let ex = p.client.raw("POST", &h, b.clone()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32020));
    // Correct base64 form passes validation and reaches routing (the resource does not exist).
    let mut h = headers("2026-07-28", "resources/read");
    h.push(("mcp-name", resmux::mcp::header_value::encode(uri)));
    assert!(h[2].1.starts_with("=?base64?"));
    let ex = p.client.raw("POST", &h, b).await;
    assert_eq!(ex.error_code(), -32602);
    assert_eq!(ex.json()["error"]["data"]["uri"], uri);
}

#[tokio::test]
async fn a_missing_meta_field_is_400_32602() {
    let (p, _up) = proxy().await;
    let h = headers("2026-07-28", "server/discover");
    for params in [
        json!({}),
        json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    ] {
        let ex = p.client.raw("POST", &h, body("server/discover", params.clone())).await;
        assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32602), "{params}");
    }
    let no_params = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover"});
    let ex = p.client.raw("POST", &h, no_params.to_string().into_bytes()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32602));
}

#[tokio::test]
async fn an_unsupported_version_is_400_32022_with_supported_and_requested() {
    let (p, _up) = proxy().await;
    let mut m = meta();
    m["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let ex = p
        .client
        .raw("POST", &headers("1900-01-01", "server/discover"), body("server/discover", json!({"_meta": m})))
        .await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32022));
    let data = &ex.json()["error"]["data"];
    assert_eq!(data["requested"], "1900-01-01");
    assert_eq!(data["supported"], json!(["2026-07-28"]));
}

#[tokio::test]
async fn unknown_and_removed_methods_are_404_32601() {
    let (p, _up) = proxy().await;
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "no/such"]
    {
        let ex = p.client.request(method, json!({"uri": "docs://x"})).await;
        assert_eq!((ex.status.as_u16(), ex.error_code()), (404, -32601), "{method}");
    }
}

#[tokio::test]
async fn a_foreign_origin_or_host_is_403() {
    let (p, _up) = proxy().await;
    let b = body("server/discover", json!({"_meta": meta()}));
    let mut h = headers("2026-07-28", "server/discover");
    h.push(("origin", "https://evil.example".into()));
    assert_eq!(p.client.raw("POST", &h, b.clone()).await.status, 403);
    let mut h = headers("2026-07-28", "server/discover");
    h.push(("origin", "http://localhost:3000".into()));
    assert_eq!(p.client.raw("POST", &h, b.clone()).await.status, 200);
    let mut h = headers("2026-07-28", "server/discover");
    h.push(("host", "evil.example".into()));
    assert_eq!(p.client.raw("POST", &h, b).await.status, 403);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let (p, _up) = proxy().await;
    let big = body("resources/read", json!({"uri": "x".repeat(8192), "_meta": meta()}));
    let ex = p.client.raw("POST", &headers("2026-07-28", "resources/read"), big).await;
    assert_eq!(ex.status, 413);
}

#[tokio::test]
async fn malformed_json_is_32700_and_bad_envelopes_are_32600() {
    let (p, _up) = proxy().await;
    let h = headers("2026-07-28", "server/discover");
    let ex = p.client.raw("POST", &h, b"{\"jsonrpc\": \"2.0\", ".to_vec()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32700));
    assert!(ex.json()["id"].is_null());
    let ex = p.client.raw("POST", &h, br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#.to_vec()).await;
    assert_eq!(ex.error_code(), -32600);
    let ex = p.client.raw("POST", &h, br#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#.to_vec()).await;
    assert_eq!(ex.error_code(), -32600);
    let ex = p.client.raw("POST", &h, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec()).await;
    assert_eq!(ex.error_code(), -32600);
}

#[tokio::test]
async fn a_dead_upstream_gives_a_gateway_error_that_says_so() {
    // A port nothing listens on.
    let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut up = UpstreamConfig::http("gone", &format!("http://{spare}/mcp"));
    up.timeout = std::time::Duration::from_secs(2);
    let p = Proxy::start(config(vec![up])).await;
    let ex = p.client.request("resources/read", json!({"uri": "gone://x"})).await;
    assert_eq!(ex.status, 502);
    let err = &ex.json()["error"];
    assert_eq!(err["code"], -32603);
    assert_eq!(err["data"]["side"], "upstream");
    assert_eq!(err["data"]["upstream"], "gone");
    assert_eq!(err["data"]["retryable"], true);
}

#[tokio::test]
async fn http2_prior_knowledge_is_served_only_when_enabled() {
    use http_body_util::{BodyExt, Full};
    let up = sample_http(SampleSpec::generated("docs", 1)).await;
    for enabled in [false, true] {
        let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
        cfg.listen.http2 = enabled;
        let p = Proxy::start(cfg).await;
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http::<Full<bytes::Bytes>>();
        let req = http::Request::post(format!("http://{}/mcp", p.app.local_addr()))
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .body(Full::new(bytes::Bytes::from(body("server/discover", json!({"_meta": meta()})))))
            .unwrap();
        let answer = tokio::time::timeout(DEADLINE, client.request(req)).await.expect("in time");
        match (enabled, answer) {
            (true, Ok(resp)) => {
                assert_eq!(resp.status(), 200);
                let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                assert!(String::from_utf8_lossy(&bytes).contains("supportedVersions"));
            }
            (false, Err(_)) => {}
            (enabled, other) => panic!("http2 = {enabled}: unexpected {:?}", other.map(|r| r.status())),
        }
    }
}
