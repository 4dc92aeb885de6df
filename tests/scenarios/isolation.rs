//! No principal ever receives content fetched for another (DESIGN §4, §6), whatever the
//! callers are (anonymous, API keys, JWTs), however the proxy reaches the upstream (a static
//! credential, or RFC 8693 token exchange against a real token endpoint), whatever scope the
//! upstream claims for its per-caller content and whatever `trust_public` says: across reads,
//! concurrent misses (the single-flight), stale serves and the cluster's L2 in Redis.
//!
//! The upstream's `…://me` names the caller in its content. When the upstream calls it
//! `public` (`me_public`), only a static credential with `trust_public = "auto"` may share it:
//! that is the configuration in which the operator says the upstream cannot tell callers apart.

use std::time::Duration;

use futures_util::future::join_all;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::cluster::{Redis, replica_config};
use crate::credentials::{TokenEndpoint, oauth};
use crate::jwt_issuer::{Jwks, claims, es256, jwt_config, sign};
use crate::support::*;
use resmux::config::{AuthMode, AuthModes, ClientAuth, Config, Credential, TrustPublic, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

/// Who the callers are, and how the proxy reaches the upstream for them.
#[derive(Debug, Clone, Copy)]
enum Setup {
    /// Auth off: callers told apart by their `_meta` only; a static credential.
    Anonymous,
    /// API keys; a static credential.
    Keys,
    /// JWTs; a static credential.
    JwtStatic,
    /// JWTs; each caller's token exchanged for the upstream.
    JwtExchange,
}

/// A proxy in `setup` in front of `up`, and one client per caller name.
struct Callers {
    p: Proxy,
    clients: Vec<(String, McpClient)>,
    _jwks: Option<Jwks>,
    _endpoint: Option<TokenEndpoint>,
}

async fn callers(setup: Setup, mut cfg: Config, trust: TrustPublic, n: usize) -> Callers {
    let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    cfg.upstreams[0].trust_public = trust;
    let (mut jwks, mut endpoint, mut signer) = (None, None, None);
    match setup {
        Setup::Anonymous => {}
        Setup::Keys => api_keys(&mut cfg, &names.iter().map(String::as_str).collect::<Vec<_>>()),
        Setup::JwtStatic | Setup::JwtExchange => {
            let ec = es256("ec1");
            let keys = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
            cfg.auth.mode = AuthModes::Many(vec![AuthMode::Jwt]);
            cfg.auth.jwt = Some(jwt_config(&keys));
            if matches!(setup, Setup::JwtExchange) {
                let e = TokenEndpoint::start(ClientAuth::Basic).await;
                cfg.upstreams[0].credential = Credential::TokenExchange(oauth(&e, ClientAuth::Basic));
                endpoint = Some(e);
            }
            jwks = Some(keys);
            signer = Some(ec);
        }
    }
    let p = Proxy::start(cfg).await;
    let clients = names
        .iter()
        .map(|name| {
            // A JWT caller's bearer is its token; the sample names a caller by its clientInfo,
            // which the test client sets to the bearer.
            let bearer = signer.as_ref().map_or_else(|| name.clone(), |ec| sign(ec, &claims(name, "mcp")));
            (bearer.clone(), p.client.as_principal(&bearer))
        })
        .collect();
    Callers { p, clients, _jwks: jwks, _endpoint: endpoint }
}

/// Whether this configuration may share an answer the upstream called public.
fn may_share(setup: Setup, trust: TrustPublic, me_public: bool) -> bool {
    me_public && trust != TrustPublic::Never && !matches!(setup, Setup::JwtExchange)
}

fn read(uri: &str) -> Value {
    json!({ "uri": uri })
}

/// Asserts that `text`, read from `…://me` by `who`, was fetched for `who`.
fn assert_own(who: &str, text: &str) {
    assert!(text.ends_with(&format!("for {who}")), "{who} got {text:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any interleaving (sequential and concurrent batches) of callers reading the per-caller
    /// resource and shared ones, in every setup, scope claim and `trust_public`: a caller only
    /// ever receives per-caller content fetched for itself, unless the configuration is the
    /// one that may share it.
    #[test]
    fn no_principal_ever_sees_another_principals_content(
        batches in prop::collection::vec(prop::collection::vec((0usize..3, 0usize..3), 1..6), 1..6),
        setup in prop::sample::select(vec![Setup::Anonymous, Setup::Keys, Setup::JwtStatic, Setup::JwtExchange]),
        me_public in any::<bool>(),
        trust in prop::sample::select(vec![TrustPublic::Auto, TrustPublic::Never]),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let up = sample_http(SampleSpec { me_public, ..SampleSpec::generated("docs", 3) }).await;
            let cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
            let c = callers(setup, cfg, trust, 3).await;
            let shared = may_share(setup, trust, me_public);
            for batch in batches {
                let calls = batch.iter().map(|&(who, what)| {
                    let (name, client) = &c.clients[who];
                    let uri = if what == 0 { "docs://me".to_owned() } else { format!("docs://item/{what}") };
                    async move { (name, what, client.request("resources/read", read(&uri)).await) }
                });
                for (name, what, ex) in join_all(calls).await {
                    let text = ex.text();
                    match what {
                        0 if shared => assert!(text.starts_with("read "), "{text:?}"),
                        0 => {
                            assert_own(name, &text);
                            assert_eq!(ex.result()["cacheScope"], "private", "{setup:?}");
                        }
                        _ => assert!(text.starts_with(&format!("item {what}:"))),
                    }
                }
            }
            drop(c.p);
        });
    }
}

#[tokio::test]
async fn a_stale_serve_behind_token_exchange_stays_with_its_caller() {
    let up = sample_http(SampleSpec { me_public: true, ttl_ms: 200, ..SampleSpec::generated("docs", 3) }).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.cache.stale_if_error = Duration::from_secs(60);
    let c = callers(Setup::JwtExchange, cfg, TrustPublic::Auto, 2).await;
    let ((alice_name, alice), (bob_name, bob)) = (&c.clients[0], &c.clients[1]);
    let fresh = alice.request("resources/read", read("docs://me")).await;
    assert_own(alice_name, &fresh.text());
    up.stop();
    let stale = eventually("alice's expired entry is served to her stale", || {
        let alice = alice.clone();
        async move {
            let ex = alice.request("resources/read", read("docs://me")).await;
            (ex.cache() == "stale").then_some(ex)
        }
    })
    .await;
    assert_eq!(stale.text(), fresh.text());
    // Bob has no entry of his own to fall back on: the upstream's error, never alice's.
    let ex = bob.request("resources/read", read("docs://me")).await;
    assert_eq!(ex.status, 502, "{bob_name} got {}", ex.text());
}

#[tokio::test]
async fn the_l2_keeps_a_public_answer_behind_token_exchange_with_its_caller() {
    let redis = Redis::start().await;
    let up: SampleHttp = sample_http(SampleSpec { me_public: true, ..SampleSpec::generated("docs", 3) }).await;
    // Two replicas with the same principals (one JWKS, one token endpoint for both).
    let ec = es256("ec1");
    let jwks = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
    let endpoint = TokenEndpoint::start(ClientAuth::Basic).await;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut cfg = replica_config(&up, &redis);
        cfg.auth.mode = AuthModes::Many(vec![AuthMode::Jwt]);
        cfg.auth.jwt = Some(jwt_config(&jwks));
        cfg.upstreams[0].credential = Credential::TokenExchange(oauth(&endpoint, ClientAuth::Basic));
        replicas.push(Proxy::start(cfg).await);
    }
    let (alice, bob) = (sign(&ec, &claims("alice", "mcp")), sign(&ec, &claims("bob", "mcp")));
    let first = replicas[0].client.as_principal(&alice).request("resources/read", read("docs://me")).await;
    assert_eq!((first.cache(), first.result()["cacheScope"].as_str()), ("miss", Some("private")));
    assert_own(&alice, &first.text());
    // Bob, on the replica that never saw the read, gets his own answer, not alice's from Redis.
    let theirs = replicas[1].client.as_principal(&bob).request("resources/read", read("docs://me")).await;
    assert_eq!(theirs.cache(), "miss");
    assert_own(&bob, &theirs.text());
    // Alice on that replica is served her own entry through Redis.
    let again = replicas[1].client.as_principal(&alice).request("resources/read", read("docs://me")).await;
    assert_eq!((again.cache(), again.text()), ("hit", first.text()));
    assert_eq!(up.sample.count("resources/read"), 2);
}
