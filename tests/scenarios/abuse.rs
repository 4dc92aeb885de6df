//! Abuse limits (issue 11 §5–§7): the per-principal request rate, per-principal caps on legacy
//! sessions and held MRTR calls, a held call giving back its upstream slot while it waits and
//! being reaped on a timer, and the JSON nesting cap.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::SampleSpec;

/// The body as text.
fn body(ex: &Exchange) -> String {
    String::from_utf8_lossy(&ex.body).into_owned()
}

/// A counter from the data listener's `/metrics` (the config must set `metrics_path`).
async fn metric(p: &Proxy, series: &str) -> u64 {
    let ex = McpClient::new(&format!("http://{}/metrics", p.app.local_addr())).raw("GET", &[], Vec::new()).await;
    let text = body(&ex);
    let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_principal_over_its_rate_gets_429_with_retry_after_and_others_do_not() {
    let up = sample_http(SampleSpec::generated("docs", 2)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    api_keys(&mut cfg, &["alice", "bob"]);
    cfg.listen.requests_per_second = 1;
    cfg.listen.request_burst = 2;
    cfg.listen.limit_loopback = true;
    cfg.listen.metrics_path = "/metrics".into();
    let p = Proxy::start(cfg).await;
    let alice = p.client.as_principal("alice");
    for _ in 0..2 {
        assert_eq!(alice.request("server/discover", json!({})).await.status, 200);
    }
    let over = alice.request("server/discover", json!({})).await;
    assert_eq!(over.status, 429, "{}", body(&over));
    let retry: u64 = over.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert_eq!(over.error_code(), -32600);
    assert!(over.json()["id"].is_null());
    assert!(over.json()["error"]["message"].as_str().unwrap().contains("rate"));
    // Another principal has its own bucket.
    assert_eq!(p.client.as_principal("bob").request("server/discover", json!({})).await.status, 200);
    // A refused credential is a 401, not a rate hit.
    assert_eq!(p.client.as_principal("mallory").request("server/discover", json!({})).await.status, 401);
    assert!(metric(&p, "resmux_downstream_rejections_total{reason=\"rate\"}").await >= 1);
}

fn legacy_initialize() -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "abuse", "version": "0"}}})
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn legacy_sessions_per_principal_are_capped_at_initialize() {
    let up = sample_http(SampleSpec::generated("docs", 2)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    api_keys(&mut cfg, &["alice", "bob"]);
    cfg.listen.max_legacy_sessions_per_principal = 2;
    let p = Proxy::start(cfg).await;
    let alice = p.client.as_principal("alice");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let ex = alice.raw("POST", &[], legacy_initialize()).await;
        assert_eq!(ex.status, 200, "{}", body(&ex));
        ids.push(ex.header("mcp-session-id").unwrap().to_owned());
    }
    let over = alice.raw("POST", &[], legacy_initialize()).await;
    assert_eq!(over.status, 429, "{}", body(&over));
    assert_eq!(over.error_code(), -32600);
    assert!(body(&over).contains("legacy sessions"), "{}", body(&over));
    assert_eq!(p.client.as_principal("bob").raw("POST", &[], legacy_initialize()).await.status, 200);
    // Ending one frees its place.
    let del = alice.raw("DELETE", &[("mcp-session-id", ids[0].clone())], Vec::new()).await;
    assert!(del.status.is_success(), "{}", del.status);
    assert_eq!(alice.raw("POST", &[], legacy_initialize()).await.status, 200);
}

/// A legacy upstream whose `confirm` tool asks the client (elicitation) mid-call.
async fn held_setup(tweak: impl FnOnce(&mut Config)) -> (Proxy, resmux::sample::SampleHttp) {
    let up = sample_http(SampleSpec { legacy: true, ..SampleSpec::generated("docs", 2) }).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    api_keys(&mut cfg, &["alice", "bob", "scenario"]);
    tweak(&mut cfg);
    let p = Proxy::start(cfg).await;
    let p = Proxy { client: p.client.as_principal("scenario"), ..p };
    let client = p.client.clone();
    eventually("the legacy upstream is initialized", || {
        let client = client.clone();
        async move {
            let r = client.request("server/discover", json!({})).await.result();
            r["capabilities"]["tools"].as_object().map(|_| ())
        }
    })
    .await;
    (p, up)
}

const CONFIRM_HEADERS: [(&str, &str); 3] =
    [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "confirm")];

/// `tools/call confirm` from a client that can answer elicitation; `extra` is merged into params.
async fn confirm(client: &McpClient, extra: Value) -> Exchange {
    let mut params = json!({"name": "confirm", "arguments": {}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        params[k] = v.clone();
    }
    params["_meta"] = meta();
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let headers: Vec<(&str, String)> = CONFIRM_HEADERS.iter().map(|(k, v)| (*k, v.to_string())).collect();
    client.raw("POST", &headers, request.to_string().into_bytes()).await
}

#[tokio::test]
async fn held_calls_per_principal_are_capped() {
    let (p, _up) = held_setup(|c| c.proxy.max_held_calls_per_principal = 1).await;
    let alice = p.client.as_principal("alice");
    let first = confirm(&alice, json!({})).await.result();
    assert_eq!(first["resultType"], "input_required");
    let over = confirm(&alice, json!({})).await;
    assert_eq!(over.status, 429, "{}", body(&over));
    assert_eq!(over.error_code(), -32600);
    assert!(body(&over).contains("awaiting its input"), "{}", body(&over));
    // Another principal is unaffected.
    assert_eq!(confirm(&p.client.as_principal("bob"), json!({})).await.result()["resultType"], "input_required");
    // Answering the held call frees the place.
    let state = first["requestState"].as_str().unwrap();
    let retry = json!({"requestState": state, "inputResponses": {"upstream": {"action": "accept", "content": {}}}});
    assert_eq!(confirm(&alice, retry).await.result()["content"][0]["text"], "confirmed: accept");
    assert_eq!(confirm(&alice, json!({})).await.result()["resultType"], "input_required");
}

#[tokio::test]
async fn a_held_call_gives_back_its_upstream_slot_while_it_waits() {
    let (p, _up) = held_setup(|c| {
        c.upstreams[0].max_in_flight = 1;
        c.upstreams[0].timeout = Duration::from_secs(3);
    })
    .await;
    let alice = p.client.as_principal("alice");
    let held = confirm(&alice, json!({})).await.result();
    assert_eq!(held["resultType"], "input_required");
    let state = held["requestState"].as_str().unwrap().to_owned();
    // With one slot, a held call that kept it would make these time out (504).
    for _ in 0..3 {
        let other = p.client.request("tools/call", json!({"name": "confirm", "arguments": {}})).await;
        assert_eq!(other.status, 200, "{}", body(&other));
        assert!(other.result()["content"][0]["text"].as_str().unwrap().starts_with("declined: "));
    }
    assert_eq!(p.app.router().upstreams()[0].in_flight().0, 0, "the held call holds no slot");
    // The held call takes a slot again to resume, and finishes.
    let retry = json!({"requestState": state, "inputResponses": {"upstream": {"action": "accept", "content": {}}}});
    assert_eq!(confirm(&alice, retry).await.result()["content"][0]["text"], "confirmed: accept");
    let router = p.app.router().clone();
    eventually("the finished call gives its slot back", || {
        let router = router.clone();
        async move { (router.upstreams()[0].in_flight().0 == 0).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn expired_held_calls_are_reaped_without_a_new_question() {
    let (p, _up) = held_setup(|c| c.proxy.held_call_ttl = Duration::from_millis(200)).await;
    let held = confirm(&p.client.as_principal("alice"), json!({})).await.result();
    assert_eq!(held["resultType"], "input_required");
    assert_eq!(p.app.router().held_calls(), 1);
    let router = p.app.router().clone();
    eventually("the expired held call is reaped", || {
        let router = router.clone();
        async move { (router.held_calls() == 0).then_some(()) }
    })
    .await;
    let state = held["requestState"].as_str().unwrap();
    let retry = json!({"requestState": state, "inputResponses": {"upstream": {"action": "accept", "content": {}}}});
    assert_eq!(confirm(&p.client.as_principal("alice"), retry).await.error_code(), -32602);
}

#[tokio::test]
async fn deeply_nested_bodies_get_a_parse_error_not_a_stack_overflow() {
    let up = sample_http(SampleSpec::generated("docs", 2)).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("docs", &up.url())])).await;
    let headers = [("mcp-protocol-version", "2026-07-28".to_owned()), ("mcp-method", "tools/call".to_owned())];
    // 100,000 levels: well under max_body_bytes, far past any recursion limit.
    let ex = p.client.raw("POST", &headers, "[".repeat(100_000).into_bytes()).await;
    assert_eq!(ex.status, 400, "{}", body(&ex));
    assert_eq!(ex.error_code(), -32700);
    assert!(body(&ex).contains("deeper than 64"), "{}", body(&ex));
    // A well-formed request whose arguments nest past the cap.
    let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
    let request = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{deep}}},"_meta":{}}}}}"#,
        meta()
    );
    let ex = p.client.raw("POST", &headers, request.into_bytes()).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32700), "{}", body(&ex));
    // The proxy still serves.
    assert_eq!(p.client.request("server/discover", json!({})).await.status, 200);
}

#[tokio::test]
async fn the_depth_cap_is_configurable() {
    let up = sample_http(SampleSpec::generated("docs", 2)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.listen.max_json_depth = 3;
    let p = Proxy::start(cfg).await;
    // {params:{_meta:{clientInfo:{…}}}} is four levels deep.
    let ex = p.client.request("server/discover", json!({})).await;
    assert_eq!((ex.status.as_u16(), ex.error_code()), (400, -32700), "{}", body(&ex));
}

/// The shipped defaults, tried as a sidecar's app or a local load generator does: more
/// connections than `max_connections_per_ip` and more requests than a per-address burst, all
/// from loopback, and none answered 429 (a per-address refusal would close connections under
/// the client, failing the test). The same requests with `limit_loopback = true` (at a rate
/// this debug build can outrun, and the per-address connection cap off, whose refusal is
/// covered in `limits.rs`) are rate-limited, so the exemption is what lets them through.
#[tokio::test]
async fn the_shipped_defaults_never_answer_a_loopback_load_429() {
    let up = sample_http(SampleSpec::generated("docs", 2)).await;
    let (defaults, limited) = (config(vec![UpstreamConfig::http("docs", &up.url())]), {
        let mut c = config(vec![UpstreamConfig::http("docs", &up.url())]);
        c.listen.limit_loopback = true;
        c.listen.max_connections_per_ip = 0;
        c.listen.requests_per_second = 100;
        c
    });
    assert!(defaults.listen.requests_per_second > 0 && defaults.listen.max_connections_per_ip > 0);
    let over_burst = 2 * defaults.listen.requests_per_second as usize + 500;
    let connections = defaults.listen.max_connections_per_ip + 44;
    for (cfg, expect_limited) in [(defaults, false), (limited, true)] {
        let p = Proxy::start(cfg).await;
        // The client's pool opens a connection per request in flight: `connections` at once.
        let client = &p.client;
        let statuses: Vec<u16> = futures_util::stream::iter(0..over_burst)
            .map(|_| async move { client.request("server/discover", json!({})).await.status.as_u16() })
            .buffer_unordered(connections)
            .collect()
            .await;
        let refused = statuses.iter().filter(|s| **s == 429).count();
        let other: Vec<_> = statuses.iter().filter(|s| **s != 200 && **s != 429).collect();
        assert!(other.is_empty(), "only 200 or 429: {other:?}");
        if expect_limited {
            assert!(refused > 0, "limit_loopback = true limits a loopback load");
        } else {
            assert_eq!(refused, 0, "{refused} of {over_burst} answered 429 with the shipped defaults");
        }
    }
}
