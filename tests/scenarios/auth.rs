//! Downstream authentication and authorization on the wire: the token table against a JWKS
//! served on loopback with keys generated here, API keys, the RFC 9728 document, isolation of
//! private results between principals (JWT, API key, anonymous), legacy sessions bound to
//! their creator, and `[[upstream.allow]]` rules (filtered pages, denied read / call, a
//! public cached entry, a listen's acknowledged subset).

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::jwt_issuer::*;
use crate::support::*;
use resmux::config::{AllowRule, AuthMode, AuthModes, Config, UpstreamConfig};
use resmux::sample::SampleSpec;

const META_URL: &str = "http://mcp.test/.well-known/oauth-protected-resource/mcp";

/// Both modes at once: API keys `ci-bot` (key `ci-key`) and `other-bot`, and JWTs.
fn auth_config(c: &mut Config, jwks: &Jwks) {
    api_keys(c, &["ci-key"]);
    c.auth.api_key[0].principal = "ci-bot".into();
    c.auth.api_key[0].groups = vec!["ci".into()];
    c.auth.mode = AuthModes::Many(vec![AuthMode::ApiKey, AuthMode::Jwt]);
    c.auth.jwt = Some(jwt_config(jwks));
}

async fn proxy(spec: SampleSpec, tweak: impl FnOnce(&mut Config)) -> (Proxy, resmux::sample::SampleHttp) {
    let up = sample_http(spec).await;
    let mut cfg = config(vec![UpstreamConfig::http("gen", &up.url())]);
    tweak(&mut cfg);
    (Proxy::start(cfg).await, up)
}

fn www(ex: &Exchange) -> String {
    ex.header("www-authenticate").unwrap_or("").to_owned()
}

/// What a caller with `token` gets for `resources/list`: status and `WWW-Authenticate`.
async fn attempt(p: &Proxy, token: Option<&str>) -> (u16, String) {
    let client = match token {
        Some(t) => p.client.as_principal(t),
        None => p.client.clone(),
    };
    let ex = client.request("resources/list", json!({})).await;
    (ex.status.as_u16(), www(&ex))
}

const INVALID: &str = r#"Bearer error="invalid_token", scope="mcp", resource_metadata="http://mcp.test/.well-known/oauth-protected-resource/mcp""#;

#[tokio::test]
async fn the_token_table() {
    let ec = es256("ec1");
    let (rsa_signer, rsa_public) = rs256("rsa1");
    let jwks = Jwks::start(&[ec.jwk.clone(), rsa_signer.jwk.clone()]).await;
    let (p, _up) = proxy(SampleSpec::generated("gen", 3), |c| auth_config(c, &jwks)).await;
    let ok = claims("alice", "mcp read");

    // No credential: 401 with the discovery hint, no error code.
    assert_eq!(
        attempt(&p, None).await,
        (401, format!(r#"Bearer scope="mcp", resource_metadata="{META_URL}""#)),
        "missing"
    );
    let table: Vec<(&str, String, u16, String)> = vec![
        ("valid ES256", sign(&ec, &ok), 200, String::new()),
        ("valid RS256", sign(&rsa_signer, &ok), 200, String::new()),
        ("expired", sign(&ec, &with(ok.clone(), "exp", json!(now() - 120))), 401, INVALID.into()),
        ("not yet valid", sign(&ec, &with(ok.clone(), "nbf", json!(now() + 300))), 401, INVALID.into()),
        ("wrong aud", sign(&ec, &with(ok.clone(), "aud", json!("http://other.test/mcp"))), 401, INVALID.into()),
        ("wrong iss", sign(&ec, &with(ok.clone(), "iss", json!("http://evil.test"))), 401, INVALID.into()),
        ("bad signature", sign(&Signer { kid: "ec1".into(), ..es256("x") }, &ok), 401, INVALID.into()),
        ("alg none", unsigned(json!({"alg": "none", "typ": "JWT", "kid": "ec1"}), &ok, b""), 401, INVALID.into()),
        (
            "HS256 signed with the public key",
            {
                use rsa::pkcs1::EncodeRsaPublicKey;
                let der = rsa_public.to_pkcs1_der().unwrap();
                let mut header = Header::new(Algorithm::HS256);
                header.kid = Some("rsa1".into());
                jsonwebtoken::encode(&header, &ok, &EncodingKey::from_secret(der.as_bytes()).unwrap()).unwrap()
            },
            401,
            INVALID.into(),
        ),
        (
            "HS256 signed with the JWK modulus",
            {
                let mut header = Header::new(Algorithm::HS256);
                header.kid = Some("rsa1".into());
                let n = serde_json::to_value(&rsa_signer.jwk).unwrap()["n"].as_str().unwrap().to_owned();
                jsonwebtoken::encode(&header, &ok, &EncodingKey::from_secret(n.as_bytes()).unwrap()).unwrap()
            },
            401,
            INVALID.into(),
        ),
        (
            "missing scope",
            sign(&ec, &with(ok.clone(), "scope", json!("read"))),
            403,
            format!(r#"Bearer error="insufficient_scope", scope="mcp", resource_metadata="{META_URL}""#),
        ),
        (
            "scp array",
            sign(&ec, &with(with(ok.clone(), "scope", Value::Null), "scp", json!(["mcp"]))),
            200,
            String::new(),
        ),
        ("not a JWT", "garbage".into(), 401, INVALID.into()),
        ("API key hit", "ci-key".into(), 200, String::new()),
        ("API key miss", "ci-key-2".into(), 401, INVALID.into()),
    ];
    let mut report = Vec::new();
    for (name, token, status, challenge) in &table {
        let got = attempt(&p, Some(token)).await;
        report.push(format!("{name}: {} {}", got.0, got.1));
        assert_eq!(got, (*status, challenge.clone()), "{name}");
    }
    // Unknown kid: refused, then valid once the identity provider publishes the key (the
    // proxy refetches the JWKS on an unknown kid, rate-limited by jwks_min_refresh).
    let rotated = es256("ec2");
    let token = sign(&rotated, &ok);
    let got = attempt(&p, Some(&token)).await;
    report.push(format!("unknown kid: {} {}", got.0, got.1));
    assert_eq!(got, (401, INVALID.into()), "unknown kid");
    jwks.publish(&[ec.jwk.clone(), rotated.jwk.clone()]);
    eventually("the rotated key is fetched", || {
        let (p, token) = (&p, token.clone());
        async move { (attempt(p, Some(&token)).await.0 == 200).then_some(()) }
    })
    .await;
    report.push("unknown kid after JWKS rotation: 200".into());
    println!("token table:\n  {}", report.join("\n  "));
}

#[tokio::test]
async fn unknown_kids_do_not_hammer_the_identity_provider() {
    let ec = es256("ec1");
    let jwks = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
    let (p, _up) = proxy(SampleSpec::generated("gen", 3), |c| {
        auth_config(c, &jwks);
        c.auth.jwt.as_mut().unwrap().jwks_min_refresh = Duration::from_secs(3600);
    })
    .await;
    assert_eq!(attempt(&p, Some(&sign(&ec, &claims("alice", "mcp")))).await.0, 200);
    let before = jwks.fetches();
    for i in 0..20 {
        let token = sign(&Signer { kid: format!("made-up-{i}"), ..es256("y") }, &claims("alice", "mcp"));
        assert_eq!(attempt(&p, Some(&token)).await.0, 401);
    }
    assert!(jwks.fetches() - before <= 1, "{} JWKS fetches for 20 unknown kids", jwks.fetches() - before);
}

#[tokio::test]
async fn the_protected_resource_metadata_is_served() {
    let ec = es256("ec1");
    let jwks = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
    let (p, _up) = proxy(SampleSpec::generated("gen", 3), |c| auth_config(c, &jwks)).await;
    let base = format!("http://{}", p.app.local_addr());
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let ex = McpClient::new(&format!("{base}{path}")).raw("GET", &[], Vec::new()).await;
        assert_eq!(ex.status, 200, "{path}");
        let doc = ex.json();
        assert_eq!(doc["resource"], AUD);
        assert_eq!(doc["authorization_servers"], json!([ISS]));
        assert_eq!(doc["scopes_supported"], json!(["mcp"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    let ex =
        McpClient::new(&format!("{base}/.well-known/oauth-protected-resource/other")).raw("GET", &[], vec![]).await;
    assert_eq!(ex.status, 404);
}

/// Reads `uri` with a `_meta.clientInfo.name` of `name` and no credential.
async fn anonymous_read(client: &McpClient, uri: &str, name: &str) -> Exchange {
    let mut m = meta();
    m["io.modelcontextprotocol/clientInfo"]["name"] = json!(name);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri, "_meta": m}});
    let headers = [
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", "resources/read".to_owned()),
        ("mcp-name", uri.to_owned()),
    ];
    client.raw("POST", &headers, body.to_string().into_bytes()).await
}

#[tokio::test]
async fn principals_never_see_each_others_private_results() {
    let ec = es256("ec1");
    let jwks = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
    let (p, up) = proxy(SampleSpec::generated("gen", 3), |c| auth_config(c, &jwks)).await;
    let alice = p.client.as_principal(&sign(&ec, &claims("alice", "mcp")));
    let bob = p.client.as_principal(&sign(&ec, &claims("bob", "mcp")));
    let bot = p.client.as_principal("ci-key");
    let uri = up.sample.spec().uri("me");
    let mut seen = Vec::new();
    for (who, client) in [("alice", &alice), ("bob", &bob), ("ci-bot", &bot)] {
        let first = client.request("resources/read", json!({"uri": uri})).await;
        assert_eq!((first.cache(), first.result()["cacheScope"].as_str()), ("miss", Some("private")), "{who}");
        let again = client.request("resources/read", json!({"uri": uri})).await;
        assert_eq!(again.cache(), "hit", "{who}");
        assert_eq!(again.text(), first.text(), "{who} gets its own entry back");
        assert!(!seen.contains(&first.text()), "{who} got someone else's private result");
        seen.push(first.text());
    }
    assert_eq!(up.sample.count("resources/read"), 3);

    // Anonymous callers (auth off) that differ only in `_meta.clientInfo` never share.
    let (anon, up) = proxy(SampleSpec::generated("gen", 3), |_| {}).await;
    let uri = up.sample.spec().uri("me");
    let a1 = anonymous_read(&anon.client, &uri, "client-a").await;
    let b1 = anonymous_read(&anon.client, &uri, "client-b").await;
    assert_eq!((a1.cache(), b1.cache()), ("miss", "miss"));
    assert!(a1.text().ends_with("for client-a") && b1.text().ends_with("for client-b"));
    // The same bytes are the same request to the upstream: shared.
    let a2 = anonymous_read(&anon.client, &uri, "client-a").await;
    assert_eq!((a2.cache(), a2.text()), ("hit", a1.text()));
    // A credential does not matter with auth off: the same `_meta` is the same partition.
    let with_token = anon.client.as_principal("client-a").request("resources/read", json!({"uri": uri})).await;
    assert_eq!(with_token.text(), a1.text());
}

#[tokio::test]
async fn a_list_cursor_works_only_for_the_principal_it_was_issued_to() {
    let (p, _up) = proxy(SampleSpec::generated("gen", 25), |c| api_keys(c, &["alice", "bob"])).await;
    let (alice, bob) = (p.client.as_principal("alice"), p.client.as_principal("bob"));
    let first = alice.request("resources/list", json!({})).await.result();
    let cursor = first["nextCursor"].as_str().expect("a second page").to_owned();
    let next = alice.request("resources/list", json!({"cursor": cursor})).await;
    assert!(next.result()["resources"].as_array().is_some_and(|r| !r.is_empty()), "the owner goes on");
    let borrowed = bob.request("resources/list", json!({"cursor": cursor})).await;
    assert_eq!(borrowed.error_code(), -32602, "another principal's cursor is refused");
    assert!(borrowed.json()["error"]["message"].as_str().unwrap().contains("another caller"), "{}", borrowed.json());
}

#[tokio::test]
async fn a_legacy_session_belongs_to_its_creator() {
    let (p, _up) = proxy(SampleSpec::generated("gen", 3), |c| api_keys(c, &["alice", "bob"])).await;
    let alice = p.client.as_principal("alice");
    let bob = p.client.as_principal("bob");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "0"}}});
    let ex = alice.raw("POST", &[], init.to_string().into_bytes()).await;
    assert_eq!(ex.status, 200);
    let sid = ex.header("mcp-session-id").expect("a session id").to_owned();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string().into_bytes();
    let hdr = [("mcp-session-id", sid.clone()), ("mcp-protocol-version", "2025-11-25".to_owned())];
    assert_eq!(bob.raw("POST", &hdr, ping.clone()).await.status, 404, "another principal's POST");
    assert_eq!(bob.raw("GET", &hdr, vec![]).await.status, 404, "another principal's GET");
    assert_eq!(bob.raw("DELETE", &hdr, vec![]).await.status, 404, "another principal's DELETE");
    assert_eq!(p.client.raw("POST", &hdr, ping.clone()).await.status, 401, "no credential");
    // The owner's session is untouched.
    assert_eq!(alice.raw("POST", &hdr, ping.clone()).await.status, 200);
    assert_eq!(alice.raw("DELETE", &hdr, vec![]).await.status, 200);
}

/// `alice` may use everything; `bob` only URIs `gen://item/1*`, the tool `echo`, no prompt.
fn rules(c: &mut Config) {
    api_keys(c, &["alice", "bob", "carol"]);
    c.upstreams[0].allow = vec![
        AllowRule { principals: Some(vec!["alice".into()]), ..Default::default() },
        AllowRule {
            principals: Some(vec!["bob".into()]),
            uris: Some(vec!["gen://item/1*".into()]),
            tools: Some(vec!["echo".into()]),
            prompts: Some(vec![]),
            ..Default::default()
        },
    ];
}

/// An error with the URI or name it is about replaced, to compare two errors' shapes.
fn shape(ex: &Exchange, about: &str) -> String {
    ex.json()["error"].to_string().replace(about, "<X>")
}

#[tokio::test]
async fn rules_filter_lists_across_pages_and_forbidden_looks_like_not_found() {
    let (p, up) = proxy(SampleSpec::generated("gen", 25), rules).await;
    let (alice, bob, carol) =
        (p.client.as_principal("alice"), p.client.as_principal("bob"), p.client.as_principal("carol"));
    let uris =
        |items: Vec<Value>| -> Vec<String> { items.iter().map(|r| r["uri"].as_str().unwrap().to_owned()).collect() };
    let (all, pages_a) = alice.list_all("resources/list", "resources").await;
    assert_eq!(all.len(), 26, "25 items and the status resource");
    let (mine, pages_b) = bob.list_all("resources/list", "resources").await;
    let mut expected: Vec<String> = std::iter::once(1).chain(10..20).map(|i| format!("gen://item/{i}")).collect();
    expected.sort();
    let mut got = uris(mine);
    got.sort();
    assert_eq!(got, expected, "bob sees exactly his URIs, each once, across every page");
    assert_eq!(pages_a, pages_b, "the cursors walk the same upstream pages");
    let (tools, _) = bob.list_all("tools/list", "tools").await;
    assert_eq!(tools.iter().map(|t| t["name"].as_str().unwrap()).collect::<Vec<_>>(), ["echo"]);
    assert!(bob.list_all("prompts/list", "prompts").await.0.is_empty());
    // Carol matches no rule: the upstream is hidden altogether.
    assert!(carol.list_all("resources/list", "resources").await.0.is_empty());
    let discover = carol.request("server/discover", json!({})).await.result();
    assert_eq!(discover["capabilities"], json!({}));
    assert_eq!(discover["cacheScope"], "private");

    // A public entry alice cached is not served to bob, who gets not-found exactly as for a
    // URI that does not exist.
    let cached = alice.request("resources/read", json!({"uri": "gen://item/2"})).await;
    assert_eq!((cached.cache(), cached.result()["cacheScope"].as_str()), ("miss", Some("public")));
    assert_eq!(alice.request("resources/read", json!({"uri": "gen://item/2"})).await.cache(), "hit");
    let denied = bob.request("resources/read", json!({"uri": "gen://item/2"})).await;
    let missing = bob.request("resources/read", json!({"uri": "gen://item/12345"})).await;
    assert_eq!(denied.status, missing.status);
    assert_eq!(shape(&denied, "gen://item/2"), shape(&missing, "gen://item/12345"));
    assert_eq!(denied.error_code(), -32602);
    assert_eq!(bob.request("resources/read", json!({"uri": "gen://item/12"})).await.cache(), "miss");
    let reads = up.sample.count("resources/read");

    // A denied call is answered like an unknown tool, and never reaches the upstream.
    let call = |name: &str| json!({"name": name, "arguments": {"a": 1, "b": 2}});
    let denied = bob.request("tools/call", call("add")).await;
    let unknown = bob.request("tools/call", call("no-such-tool")).await;
    assert_eq!(denied.status, unknown.status);
    assert_eq!(shape(&denied, "add"), shape(&unknown, "no-such-tool"));
    assert_eq!(alice.request("tools/call", call("add")).await.result()["content"][0]["text"], "3");
    assert_eq!(up.sample.count("tools/call"), 1);
    let prompt = bob.request("prompts/get", json!({"name": "summarize", "arguments": {"uri": "gen://item/1"}})).await;
    let no_prompt = bob.request("prompts/get", json!({"name": "nothing", "arguments": {"uri": "gen://item/1"}})).await;
    assert_eq!(shape(&prompt, "summarize"), shape(&no_prompt, "nothing"));
    assert_eq!(up.sample.count("resources/read"), reads);
}

#[tokio::test]
async fn a_listen_acknowledges_only_what_the_caller_may_reach() {
    let (p, _up) = proxy(SampleSpec::generated("gen", 25), rules).await;
    let bob = p.client.as_principal("bob");
    eventually("upstream discovered", || {
        let alice = p.client.as_principal("alice");
        async move {
            let caps = alice.request("server/discover", json!({})).await.result()["capabilities"].clone();
            caps["resources"].is_object().then_some(())
        }
    })
    .await;
    let mut l = bob
        .listen(
            json!("b"),
            json!({"resourceSubscriptions": ["gen://item/1", "gen://item/2"], "resourcesListChanged": true}),
        )
        .await
        .expect("a stream");
    let ack = l.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourcesListChanged": true, "resourceSubscriptions": ["gen://item/1"]})
    );
    let mut l = p
        .client
        .as_principal("carol")
        .listen(json!("c"), json!({"resourceSubscriptions": ["gen://item/1"], "resourcesListChanged": true}))
        .await
        .expect("a stream");
    let ack = l.next().await;
    assert_eq!(ack["params"]["notifications"], json!({}));
}
