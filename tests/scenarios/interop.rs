//! Interop on the wire (issue #9): what the proxy sends its upstreams, checked on a recording
//! sample upstream. Every request a 2026-07-28 upstream receives carries the mirrored headers
//! its body calls for (on the plain, relayed, retried, `input_required` and non-ASCII paths;
//! `Mcp-Param-*` from `x-mcp-header`); a legacy upstream gets its session and version headers
//! instead. Also: cached reads evicted by upstream changes with no downstream listener, the
//! `max_watched_uris` bound, one execution per tool call across unprefixed upstreams, upstream
//! 4xx statuses relayed, and legacy `initialize` version negotiation.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::mcp::header_value;
use resmux::sample::{APPROVE_STATE, Failure, NON_ASCII_PATH, Recorded, SampleHttp, SampleSpec};

/// A sample upstream with the interop tools and the non-ASCII resource.
pub(crate) fn interop(name: &str) -> SampleSpec {
    SampleSpec { interop: true, ..SampleSpec::generated(name, 3) }
}

/// Capabilities of a client that can answer every server request.
pub(crate) fn full_caps() -> Value {
    json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}})
}

/// A conforming request (headers mirroring the body) whose client declares `caps`.
pub(crate) async fn request_with(client: &McpClient, method: &str, params: Value, caps: Value) -> Exchange {
    client.request_declaring(method, params, caps).await
}

/// The header value a tool argument mirrors to, per the spec's encoding.
pub(crate) fn mirrored_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(header_value::encode(s)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) if n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// Asserts that a request a 2026-07-28 upstream received carries exactly the headers its own
/// body requires: the version, `Mcp-Method`, `Mcp-Name` for the three named methods (and only
/// those), `Mcp-Param-*` for the `lookup` tool's annotated arguments, and no session.
pub(crate) fn assert_mirrored(r: &Recorded) {
    let method = r.method.as_deref().unwrap_or_else(|| panic!("a JSON-RPC request: {r:?}"));
    assert_eq!(r.http_method, "POST", "{r:?}");
    assert_eq!(r.header("mcp-protocol-version"), Some("2026-07-28"), "{r:?}");
    assert_eq!(r.params["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28", "{r:?}");
    assert_eq!(r.header("mcp-method"), Some(method), "{r:?}");
    let name = match method {
        "tools/call" | "prompts/get" => Some(r.params["name"].as_str().expect("a name")),
        "resources/read" => Some(r.params["uri"].as_str().expect("a uri")),
        _ => None,
    };
    assert_eq!(r.header("mcp-name").map(str::to_owned), name.map(header_value::encode), "{r:?}");
    let mut want = BTreeSet::new();
    if method == "tools/call" && name == Some("lookup") {
        for (arg, header) in [("region", "mcp-param-region"), ("limit", "mcp-param-limit")] {
            if let Some(v) = mirrored_value(&r.params["arguments"][arg]) {
                want.insert((header.to_owned(), v));
            }
        }
    }
    let got: BTreeSet<(String, String)> =
        r.param_headers().into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    assert_eq!(got, want, "Mcp-Param-* of {r:?}");
    assert_eq!(r.header("mcp-session-id"), None, "{r:?}");
}

/// The recorded requests for `method` whose `params[key]` is `value`.
pub(crate) fn requests_for(up: &SampleHttp, method: &str, key: &str, value: &str) -> Vec<Recorded> {
    up.sample.recorded_of(method).into_iter().filter(|r| r.params[key] == value).collect()
}

#[tokio::test]
async fn every_upstream_request_carries_the_headers_its_body_requires_on_every_path() {
    let a = sample_http(interop("a")).await;
    let b = sample_http(interop("b")).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("a", &a.url()), UpstreamConfig::http("b", &b.url())])).await;
    let c = &p.client;
    discovered(c).await;

    // Plain: the client declares no capabilities. Every list, a read, calls, a prompt, a
    // completion.
    for (method, key) in [
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
        ("tools/list", "tools"),
        ("prompts/list", "prompts"),
    ] {
        let (items, _) = c.list_all(method, key).await;
        assert!(!items.is_empty(), "{method}");
    }
    assert!(c.request("resources/read", json!({"uri": "a+a://item/0"})).await.text().starts_with("item 0"));
    let r = c.request("tools/call", json!({"name": "a__echo", "arguments": {"text": "hi"}})).await.result();
    assert_eq!(r["content"][0]["text"], "hi");
    let r = c
        .request(
            "tools/call",
            json!({"name": "a__lookup", "arguments": {"region": "eu-west", "limit": 5, "query": "q"}}),
        )
        .await
        .result();
    assert_eq!(r["content"][0]["text"], "q in eu-west");
    let r = c
        .request("tools/call", json!({"name": "b__lookup", "arguments": {"region": "Zürich", "query": "fondue"}}))
        .await
        .result();
    assert_eq!(r["content"][0]["text"], "fondue in Zürich");
    let r =
        c.request("prompts/get", json!({"name": "a__summarize", "arguments": {"uri": "a://item/1"}})).await.result();
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    let r = c
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "a+a://{path}"}, "argument": {"name": "path", "value": "item/"}}),
        )
        .await
        .result();
    assert_eq!(r["completion"]["total"], 3, "{r}");

    // The mirrored Mcp-Param headers arrived as such (the spec's encoding for non-ASCII).
    let lookups = requests_for(&a, "tools/call", "name", "lookup");
    assert_eq!(lookups.len(), 1);
    assert_eq!(lookups[0].header("mcp-param-region"), Some("eu-west"));
    assert_eq!(lookups[0].header("mcp-param-limit"), Some("5"));
    let lookups = requests_for(&b, "tools/call", "name", "lookup");
    assert_eq!(lookups[0].header("mcp-param-region"), Some(header_value::encode("Zürich").as_str()));
    assert!(lookups[0].header("mcp-param-region").unwrap().starts_with("=?base64?"));
    assert_eq!(lookups[0].header("mcp-param-limit"), None, "an absent argument is not mirrored");

    // Relayed: the client can answer elicitation, sampling and roots.
    let r = request_with(c, "tools/call", json!({"name": "a__sample_me", "arguments": {}}), full_caps()).await;
    assert_eq!(r.result()["content"][0]["text"], "sampled", "the capabilities reached the upstream");
    let r = request_with(
        c,
        "tools/call",
        json!({"name": "a__lookup", "arguments": {"region": "us", "limit": 0, "query": "r"}}),
        full_caps(),
    )
    .await;
    assert_eq!(r.result()["content"][0]["text"], "r in us");
    let r = request_with(
        c,
        "prompts/get",
        json!({"name": "b__summarize", "arguments": {"uri": "b://item/2"}}),
        full_caps(),
    )
    .await;
    assert_eq!(r.result()["messages"].as_array().unwrap().len(), 2);
    let r = request_with(c, "resources/read", json!({"uri": "b+b://item/1"}), full_caps()).await;
    assert!(r.text().starts_with("item 1"));
    let relayed = requests_for(&a, "tools/call", "name", "sample_me");
    assert_eq!(relayed.len(), 1);
    assert_eq!(relayed[0].params["_meta"]["io.modelcontextprotocol/clientCapabilities"], full_caps());

    // Retried: the first attempt of an idempotent request fails (503 with no body, or a closed
    // connection); the proxy's one retry carries the headers too.
    a.sample.fail_next("resources/read", 1, Failure::Status(503));
    assert!(c.request("resources/read", json!({"uri": "a+a://item/2"})).await.text().starts_with("item 2"));
    assert_eq!(requests_for(&a, "resources/read", "uri", "a://item/2").len(), 2, "one failed attempt, one retry");
    a.sample.fail_next("prompts/get", 1, Failure::Close);
    let r = c.request("prompts/get", json!({"name": "a__summarize", "arguments": {"uri": "a://item/2"}})).await;
    assert_eq!(r.result()["messages"].as_array().unwrap().len(), 2);
    let attempts: Vec<Recorded> = a
        .sample
        .recorded_of("prompts/get")
        .into_iter()
        .filter(|r| r.params["arguments"]["uri"] == "a://item/2")
        .collect();
    assert_eq!(attempts.len(), 2, "one dropped attempt, one retry");
    b.sample.fail_next("completion/complete", 1, Failure::Status(502));
    let r = c
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "b+b://{path}"}, "argument": {"name": "path", "value": "item/1"}}),
        )
        .await;
    assert_eq!(r.result()["completion"]["values"], json!(["item/1"]));
    assert_eq!(b.sample.recorded_of("completion/complete").len(), 2);

    // input_required: the tool asks, the client retries with its answer and the echoed state.
    let first =
        request_with(c, "tools/call", json!({"name": "a__approve", "arguments": {"what": "deploy"}}), full_caps())
            .await
            .result();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(first["requestState"], APPROVE_STATE, "the upstream's state reaches the client intact");
    assert_eq!(first["inputRequests"]["approval"]["method"], "elicitation/create");
    assert_eq!(first["inputRequests"]["approval"]["params"]["message"], "Approve?");
    let answers = json!({"approval": {"action": "accept", "content": {"ok": true}}});
    let retry = json!({"name": "a__approve", "arguments": {"what": "deploy"},
                       "inputResponses": answers, "requestState": first["requestState"]});
    let done = request_with(c, "tools/call", retry, full_caps()).await.result();
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["content"][0]["text"], "approved: deploy");
    let approvals = requests_for(&a, "tools/call", "name", "approve");
    assert_eq!(approvals.len(), 2);
    for r in &approvals {
        assert_eq!(r.header("mcp-name"), Some("approve"), "the upstream's own (unprefixed) name: {r:?}");
    }
    assert_eq!(approvals[0].params.get("requestState"), None);
    assert_eq!(approvals[1].params["requestState"], APPROVE_STATE);
    assert_eq!(approvals[1].params["inputResponses"], answers);

    // A non-ASCII URI travels in the base64 form.
    let uri = format!("a://{NON_ASCII_PATH}");
    let r = c.request("resources/read", json!({"uri": format!("a+{uri}")})).await;
    assert_eq!(r.text(), "Café au lait, crème brûlée");
    let reads = requests_for(&a, "resources/read", "uri", &uri);
    assert_eq!(reads.len(), 1);
    let sent = reads[0].header("mcp-name").expect("Mcp-Name");
    assert!(sent.starts_with("=?base64?") && sent.ends_with("?="), "{sent}");
    assert_eq!(sent, header_value::encode(&uri));

    // subscriptions/listen: a listener's URI joins the proxy's listen on that upstream.
    let mut listening =
        c.listen(json!("l1"), json!({"resourceSubscriptions": ["b+b://item/0"]})).await.expect("a stream");
    assert_eq!(listening.next().await["method"], "notifications/subscriptions/acknowledged");
    eventually("b's listen holds b://item/0", || {
        let got = b.sample.active_subscriptions();
        async move { got.iter().any(|uris| uris.contains(&"b://item/0".to_owned())).then_some(()) }
    })
    .await;
    drop(listening);

    // Every request either upstream received, on every path above, carried its headers; and
    // every method was seen.
    let mut methods = BTreeSet::new();
    for up in [&a, &b] {
        for r in up.sample.recorded() {
            assert_mirrored(&r);
            methods.insert(r.method.clone().unwrap());
        }
    }
    let expected = [
        "server/discover",
        "resources/list",
        "resources/templates/list",
        "tools/list",
        "prompts/list",
        "resources/read",
        "tools/call",
        "prompts/get",
        "completion/complete",
        "subscriptions/listen",
    ];
    for m in expected {
        assert!(methods.contains(m), "no {m} reached an upstream: {methods:?}");
    }
}

#[tokio::test]
async fn a_legacy_upstream_gets_its_session_and_version_headers_and_no_mirrored_ones() {
    let up = sample_http(SampleSpec { legacy: true, ..interop("docs") }).await;
    let p = Proxy::start(config(vec![UpstreamConfig::http("docs", &up.url())])).await;
    let c = &p.client;
    discovered(c).await;

    let (items, _) = c.list_all("resources/list", "resources").await;
    assert_eq!(items.len(), 5, "3 items, the non-ASCII one and the status resource");
    let r = c.request("resources/read", json!({"uri": format!("docs://{NON_ASCII_PATH}")})).await;
    assert_eq!(r.text(), "Café au lait, crème brûlée");
    // An annotated argument is not mirrored to a legacy upstream (Mcp-Param-* is 2026-07-28).
    let r = c.request("tools/call", json!({"name": "lookup", "arguments": {"region": "eu", "query": "q"}})).await;
    assert_eq!(r.result()["content"][0]["text"], "q in eu");
    // A mid-call question becomes input_required; the retry answers it on the same session.
    let first = request_with(c, "tools/call", json!({"name": "confirm", "arguments": {}}), full_caps()).await.result();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let retry = json!({"name": "confirm", "arguments": {}, "requestState": first["requestState"],
                       "inputResponses": {"upstream": {"action": "accept", "content": {"ok": true}}}});
    let done = request_with(c, "tools/call", retry, full_caps()).await.result();
    assert_eq!(done["content"][0]["text"], "confirmed: accept");
    assert!(c.request("resources/read", json!({"uri": "docs://item/1"})).await.text().starts_with("item 1"));
    let r = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}})).await.result();
    assert_eq!(r["content"][0]["text"], "hi");
    let r =
        c.request("prompts/get", json!({"name": "summarize", "arguments": {"uri": "docs://item/0"}})).await.result();
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    let mut listening =
        c.listen(json!("l1"), json!({"resourceSubscriptions": ["docs://item/2"]})).await.expect("a stream");
    assert_eq!(listening.next().await["method"], "notifications/subscriptions/acknowledged");
    eventually("the legacy upstream got resources/subscribe", || {
        let n = up.sample.count("resources/subscribe");
        async move { (n > 0).then_some(()) }
    })
    .await;
    drop(listening);

    // The era probe (a modern `server/discover`, which a legacy server cannot answer) comes
    // first; from `initialize` on, the proxy speaks 2025-11-25.
    let recorded = up.sample.recorded();
    let at = recorded.iter().position(|r| r.method.as_deref() == Some("initialize")).expect("an initialize");
    for probe in &recorded[..at] {
        assert_eq!(probe.method.as_deref(), Some("server/discover"), "{probe:?}");
    }
    let (init, rest) = recorded[at..].split_first().expect("requests");
    assert_eq!(init.header("mcp-session-id"), None);
    assert_eq!(init.header("mcp-method"), None);
    let mut seen = BTreeSet::new();
    for r in rest {
        let session = r.header("mcp-session-id").unwrap_or_else(|| panic!("no session id: {r:?}"));
        assert!(session.starts_with("legacy-session-"), "{r:?}");
        assert_eq!(r.header("mcp-protocol-version"), Some("2025-11-25"), "{r:?}");
        assert_eq!(r.header("mcp-method"), None, "{r:?}");
        assert_eq!(r.header("mcp-name"), None, "{r:?}");
        assert!(r.param_headers().is_empty(), "{r:?}");
        seen.insert(r.method.clone().unwrap_or_else(|| r.http_method.clone()));
    }
    assert!(seen.contains("POST"), "the answer to the mid-call question: {seen:?}");
    for m in ["notifications/initialized", "resources/list", "resources/read", "tools/call", "prompts/get"] {
        assert!(seen.contains(m), "no {m} reached the upstream: {seen:?}");
    }
    assert!(seen.contains("resources/subscribe") && seen.contains("GET"), "{seen:?}");
}
