//! The trust boundary of the shared cache (DESIGN §4): an upstream's `cacheScope: "public"` is
//! shared between callers only where the upstream could not tell them apart. The upstream
//! here is a server built on the official Python SDK (tests/python/personal_server.py) that
//! answers each caller by the bearer token it receives and calls every answer public; behind
//! RFC 8693 token exchange (a real token endpoint on loopback, JWT callers) each caller must
//! get its own answer.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::credentials::{EXCHANGE, TokenEndpoint, oauth};
use crate::jwt_issuer::{Jwks, claims, es256, jwt_config, sign};
use crate::support::*;
use resmux::config::{AuthMode, AuthModes, ClientAuth, Config, Credential, SecretSource, TrustPublic, UpstreamConfig};

/// The Python SDK server, started on a port of its own choosing.
struct PythonPeer {
    url: String,
    _child: Child,
}

impl PythonPeer {
    async fn start() -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python");
        let python = dir.join(".venv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run scripts/test, or `python3 -m venv tests/python/.venv && \
             tests/python/.venv/bin/pip install -r tests/python/requirements.txt`",
            python.display()
        );
        let mut child = Command::new(python)
            .arg(dir.join("personal_server.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python SDK server starts");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(DEADLINE, lines.next_line())
            .await
            .expect("the Python server says where it listens in time")
            .expect("its stdout reads")
            .expect("a line before it exits");
        let url = line.strip_prefix("listening on ").expect("`listening on URL`").to_owned();
        Self { url, _child: child }
    }
}

/// Alice and Bob (JWT callers) in front of the Python server reached with `credential`.
struct Tenants {
    p: Proxy,
    alice: McpClient,
    bob: McpClient,
    _peer: PythonPeer,
    _jwks: Jwks,
}

async fn tenants(credential: Credential, tweak: impl FnOnce(&mut UpstreamConfig)) -> Tenants {
    let peer = PythonPeer::start().await;
    let ec = es256("ec1");
    let jwks = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
    let mut up = UpstreamConfig::http("personal", &peer.url);
    up.credential = credential;
    tweak(&mut up);
    let mut cfg: Config = config(vec![up]);
    cfg.auth.mode = AuthModes::Many(vec![AuthMode::Jwt]);
    cfg.auth.jwt = Some(jwt_config(&jwks));
    cfg.listen.metrics_path = "/metrics".into();
    let p = Proxy::start(cfg).await;
    let alice = p.client.as_principal(&sign(&ec, &claims("alice", "mcp")));
    let bob = p.client.as_principal(&sign(&ec, &claims("bob", "mcp")));
    discovered(&alice).await;
    Tenants { p, alice, bob, _peer: peer, _jwks: jwks }
}

async fn read(client: &McpClient, uri: &str) -> Exchange {
    let ex = client.request("resources/read", json!({"uri": uri})).await;
    assert_eq!(ex.status, 200, "{}", ex.text());
    ex
}

/// How many reads reached the Python server (its own count, through its `read_count` tool).
async fn upstream_reads(client: &McpClient) -> u64 {
    let ex = client.request("tools/call", json!({"name": "read_count", "arguments": {}})).await;
    let text = ex.result()["content"][0]["text"].as_str().map(str::to_owned);
    text.and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("a count: {}", ex.text()))
}

async fn metric(p: &Proxy, series: &str) -> u64 {
    let ex = McpClient::new(&format!("http://{}/metrics", p.app.local_addr())).raw("GET", &[], Vec::new()).await;
    let text = String::from_utf8_lossy(&ex.body).into_owned();
    let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_public_answer_behind_token_exchange_stays_with_its_caller() {
    let endpoint = TokenEndpoint::start(ClientAuth::Basic).await;
    let t = tenants(Credential::TokenExchange(oauth(&endpoint, ClientAuth::Basic)), |_| {}).await;

    let a1 = read(&t.alice, "profile://me").await;
    assert!(a1.text().contains("exchanged-for-alice"), "{}", a1.text());
    assert_eq!(a1.cache(), "miss");
    assert_eq!(a1.result()["cacheScope"], "private", "the proxy says what it did: kept per caller");
    let b1 = read(&t.bob, "profile://me").await;
    assert_eq!(b1.cache(), "miss", "bob must not be served alice's entry");
    assert!(b1.text().contains("exchanged-for-bob") && !b1.text().contains("alice"), "{}", b1.text());
    let a2 = read(&t.alice, "profile://me").await;
    assert_eq!((a2.cache(), a2.text()), ("hit", a1.text()), "alice's own entry still serves her");
    assert_eq!(endpoint.grants(EXCHANGE).len(), 2, "bob's token was exchanged: his read went upstream as him");

    // Cold and all at once: each caller's reads collapse into one upstream read of its own.
    let before = upstream_reads(&t.alice).await;
    let reads = [&t.alice, &t.bob, &t.alice, &t.bob, &t.alice, &t.bob].map(|c| read(c, "profile://together"));
    let answers = futures_util::future::join_all(reads).await;
    for (i, ex) in answers.iter().enumerate() {
        let (mine, theirs) = if i % 2 == 0 { ("alice", "bob") } else { ("bob", "alice") };
        assert!(ex.text().contains(&format!("exchanged-for-{mine}")), "{mine} got {}", ex.text());
        assert!(!ex.text().contains(theirs), "{mine} got {}", ex.text());
    }
    assert_eq!(upstream_reads(&t.alice).await - before, 2, "one upstream read per caller");

    // A list the upstream calls public, written for its caller, stays with its caller too.
    for (client, mine, theirs) in [(&t.alice, "alice", "bob"), (&t.bob, "bob", "alice"), (&t.alice, "alice", "bob")] {
        let list = client.request("resources/list", json!({})).await;
        let names: Vec<Value> =
            list.result()["resources"].as_array().unwrap().iter().map(|r| r["name"].clone()).collect();
        let names = json!(names).to_string();
        assert!(names.contains(mine) && !names.contains(theirs), "{mine}'s list: {names}");
        assert_eq!(list.result()["cacheScope"], "private");
    }
    assert!(
        metric(&t.p, "resmux_cache_scope_narrowed_total{upstream=\"personal\",reason=\"untrusted\"}").await >= 4,
        "narrowed answers are counted"
    );
}

#[tokio::test]
async fn trust_public_true_shares_one_entry_behind_token_exchange() {
    let endpoint = TokenEndpoint::start(ClientAuth::Basic).await;
    let t = tenants(Credential::TokenExchange(oauth(&endpoint, ClientAuth::Basic)), |u| {
        u.trust_public = TrustPublic::Always;
    })
    .await;
    let before = upstream_reads(&t.alice).await;
    let a = read(&t.alice, "profile://me").await;
    let b = read(&t.bob, "profile://me").await;
    assert_eq!((b.cache(), b.text()), ("hit", a.text()), "the operator vouched for the upstream's public");
    assert_eq!(b.result()["cacheScope"], "public");
    assert_eq!(upstream_reads(&t.alice).await - before, 1);
}

#[tokio::test]
async fn a_static_credential_upstreams_public_is_shared_with_one_upstream_read() {
    let mut headers = std::collections::BTreeMap::new();
    headers
        .insert("Authorization".to_owned(), SecretSource { value: Some("Bearer team".into()), ..Default::default() });
    let t = tenants(Credential::Static {}, |u| u.headers = headers).await;
    let before = upstream_reads(&t.alice).await;
    let a = read(&t.alice, "profile://me").await;
    assert!(a.text().contains("Bearer team"), "{}", a.text());
    let b = read(&t.bob, "profile://me").await;
    assert_eq!((b.cache(), b.text()), ("hit", a.text()));
    assert_eq!(b.result()["cacheScope"], "public");
    assert_eq!(upstream_reads(&t.alice).await - before, 1, "the upstream could not tell them apart: one read");
}
