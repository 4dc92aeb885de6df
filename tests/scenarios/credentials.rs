//! Upstream credentials on the wire: OAuth client credentials and RFC 8693 token exchange
//! against a token endpoint on loopback (which counts its requests and checks the client's
//! authentication and grant parameters), and no passthrough of the caller's `Authorization`
//! or cookies, as a recording upstream sees it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::jwt_issuer::{Jwks, claims, es256, jwt_config, sign};
use crate::support::*;
use resmux::config::{AuthMode, AuthModes, ClientAuth, Config, Credential, OAuthClient, SecretSource, UpstreamConfig};
use resmux::sample::{Failure, SampleHttp, SampleSpec};

const CLIENT_ID: &str = "resmux proxy";
const CLIENT_SECRET: &str = "s3cret:+/";
pub(crate) const EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// One request the token endpoint received.
#[derive(Debug, Clone)]
pub(crate) struct TokenRequest {
    authorization: Option<String>,
    content_type: Option<String>,
    form: HashMap<String, String>,
}

/// A token endpoint on loopback. Client credentials get `cc-{n}`; an exchange of a JWT gets
/// `exchanged-for-{sub}`. Every token is issued for `expires_in` seconds; a client that does
/// not authenticate with [`CLIENT_ID`] / [`CLIENT_SECRET`] gets 401 `invalid_client`.
pub(crate) struct TokenEndpoint {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<TokenRequest>>>,
    expires_in: Arc<AtomicU64>,
}

impl TokenEndpoint {
    pub(crate) async fn start(auth: ClientAuth) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let expires_in = Arc::new(AtomicU64::new(3600));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (log, exp) = (requests.clone(), expires_in.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, exp) = (log.clone(), exp.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (log, exp) = (log.clone(), exp.clone());
                        async move {
                            let header = |n: &str| req.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
                            let (authorization, content_type) = (header("authorization"), header("content-type"));
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let form: HashMap<String, String> = form_urlencoded::parse(&body).into_owned().collect();
                            let request = TokenRequest { authorization, content_type, form };
                            let n = {
                                let mut log = log.lock().unwrap();
                                log.push(request.clone());
                                log.len()
                            };
                            let (status, answer) = issue(&request, auth, n, exp.load(Ordering::SeqCst));
                            Ok::<_, Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(answer.to_string())))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Self { addr, requests, expires_in }
    }

    fn url(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    fn requests(&self) -> Vec<TokenRequest> {
        self.requests.lock().unwrap().clone()
    }

    pub(crate) fn grants(&self, grant: &str) -> Vec<TokenRequest> {
        self.requests().into_iter().filter(|r| r.form.get("grant_type").map(String::as_str) == Some(grant)).collect()
    }
}

/// The endpoint's answer to one request.
fn issue(req: &TokenRequest, auth: ClientAuth, n: usize, expires_in: u64) -> (u16, Value) {
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let authenticated = match auth {
        ClientAuth::Basic => {
            let want = format!("Basic {}", STANDARD.encode(format!("{}:{}", enc(CLIENT_ID), enc(CLIENT_SECRET))));
            req.authorization.as_deref() == Some(want.as_str()) && !req.form.contains_key("client_secret")
        }
        ClientAuth::Body => {
            req.authorization.is_none()
                && req.form.get("client_id").map(String::as_str) == Some(CLIENT_ID)
                && req.form.get("client_secret").map(String::as_str) == Some(CLIENT_SECRET)
        }
    };
    if !authenticated || req.content_type.as_deref() != Some("application/x-www-form-urlencoded") {
        return (401, json!({"error": "invalid_client"}));
    }
    let token = match req.form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => format!("cc-{n}"),
        Some(EXCHANGE) => {
            let (Some(subject), Some(ACCESS_TOKEN)) =
                (req.form.get("subject_token"), req.form.get("subject_token_type").map(String::as_str))
            else {
                return (400, json!({"error": "invalid_request"}));
            };
            let Some(sub) = jwt_sub(subject) else {
                return (400, json!({"error": "invalid_grant", "error_description": "subject token is not a JWT"}));
            };
            format!("exchanged-for-{sub}")
        }
        _ => return (400, json!({"error": "unsupported_grant_type"})),
    };
    (200, json!({"access_token": token, "token_type": "Bearer", "expires_in": expires_in}))
}

/// The `sub` of a JWT (unverified: the test's token endpoint trusts its own issuer).
fn jwt_sub(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    claims["sub"].as_str().map(str::to_owned)
}

pub(crate) fn oauth(endpoint: &TokenEndpoint, auth: ClientAuth) -> OAuthClient {
    OAuthClient {
        token_url: endpoint.url(),
        client_id: CLIENT_ID.into(),
        client_secret: SecretSource { value: Some(CLIENT_SECRET.into()), ..Default::default() },
        client_auth: auth,
        scope: Some("mcp:read".into()),
        audience: Some("gen-api".into()),
        resource: Some("http://gen.test/mcp".into()),
        refresh_before: std::time::Duration::from_secs(30),
        default_lifetime: std::time::Duration::from_secs(300),
        timeout: std::time::Duration::from_secs(5),
        max_cached_tokens: None,
        proxy_requests: Default::default(),
        tls_ca_file: None,
    }
}

/// A proxy in front of one uncached sample upstream whose `credential` is `credential`.
async fn proxy(credential: Credential, tweak: impl FnOnce(&mut Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(SampleSpec::generated("gen", 3)).await;
    let mut u = UpstreamConfig::http("gen", &up.url());
    u.cache = false;
    u.credential = credential;
    let mut cfg = config(vec![u]);
    tweak(&mut cfg);
    let p = Proxy::start(cfg).await;
    (p, up)
}

/// The `Authorization` each recorded `resources/read` carried, oldest first.
fn read_tokens(up: &SampleHttp) -> Vec<String> {
    up.sample
        .recorded_of("resources/read")
        .iter()
        .map(|r| r.header("authorization").unwrap_or("<none>").to_owned())
        .collect()
}

async fn read(client: &McpClient, up: &SampleHttp) -> Exchange {
    let ex = client.request("resources/read", json!({"uri": up.sample.spec().uri("item/1")})).await;
    assert_eq!(ex.status, 200, "{}", ex.text());
    ex
}

#[tokio::test]
async fn client_credentials_are_fetched_once_reused_and_refreshed() {
    for auth in [ClientAuth::Basic, ClientAuth::Body] {
        let endpoint = TokenEndpoint::start(auth).await;
        let (p, up) = proxy(Credential::ClientCredentials(oauth(&endpoint, auth)), |_| {}).await;
        discovered(&p.client).await;
        // Discovery fetched the proxy's token; every request reuses it.
        for _ in 0..3 {
            read(&p.client, &up).await;
        }
        assert_eq!(read_tokens(&up), ["Bearer cc-1"; 3], "{auth:?}");
        assert_eq!(endpoint.requests().len(), 1, "{auth:?}: one token request for all of them");
        let form = &endpoint.requests()[0].form;
        assert_eq!(form["grant_type"], "client_credentials");
        assert_eq!((form["scope"].as_str(), form["audience"].as_str()), ("mcp:read", "gen-api"));
        assert_eq!(form["resource"], "http://gen.test/mcp");
        let discover = up.sample.recorded_of("server/discover");
        assert!(discover.iter().all(|r| r.header("authorization") == Some("Bearer cc-1")), "{discover:?}");

        // The upstream refuses the token (401): one refresh, one retry, and the caller never
        // notices.
        up.sample.clear_recorded();
        up.sample.fail_next("resources/read", 1, Failure::Status(401));
        read(&p.client, &up).await;
        assert_eq!(read_tokens(&up), ["Bearer cc-1", "Bearer cc-2"], "{auth:?}");
        assert_eq!(endpoint.requests().len(), 2);
        // An upstream that keeps refusing: one refresh only, then the failure, as an
        // upstream error.
        up.sample.clear_recorded();
        up.sample.fail_next("resources/read", 2, Failure::Status(401));
        let ex = p.client.request("resources/read", json!({"uri": up.sample.spec().uri("item/1")})).await;
        assert_eq!(ex.status, 502, "{}", ex.text());
        assert_eq!(ex.json()["error"]["data"]["side"], "upstream");
        assert_eq!(read_tokens(&up), ["Bearer cc-2", "Bearer cc-3"]);
        assert_eq!(endpoint.requests().len(), 3);

        // A token that has already expired when issued is never reused: the next request
        // fetches a new one. (Refresh ahead of expiry under paused time: the unit tests of
        // `upstream::credential`.)
        endpoint.expires_in.store(0, Ordering::SeqCst);
        // The refused cc-3 was dropped: the next request fetches cc-4 (issued for an hour).
        up.sample.clear_recorded();
        read(&p.client, &up).await;
        assert_eq!(read_tokens(&up), ["Bearer cc-4"]);
        up.sample.fail_next("resources/read", 1, Failure::Status(401));
        read(&p.client, &up).await; // cc-4 refused; cc-5 issued for 0 s
        let before = endpoint.requests().len();
        read(&p.client, &up).await;
        read(&p.client, &up).await;
        assert_eq!(endpoint.requests().len(), before + 2, "an expired token is replaced on each use");
    }
}

#[tokio::test]
async fn a_wrong_client_secret_is_an_upstream_error_naming_the_token_endpoint() {
    let endpoint = TokenEndpoint::start(ClientAuth::Basic).await;
    let mut c = oauth(&endpoint, ClientAuth::Basic);
    c.client_secret.value = Some("wrong".into());
    let (p, up) = proxy(Credential::ClientCredentials(c), |_| {}).await;
    let ex = p.client.request("resources/read", json!({"uri": up.sample.spec().uri("item/1")})).await;
    assert_eq!(ex.status, 502, "{}", ex.text());
    let data = &ex.json()["error"]["data"];
    assert_eq!(data["upstream"], "gen");
    let why = data["credential"].as_str().unwrap();
    assert!(why.contains("invalid_client") && why.contains("/token"), "{why}");
    assert!(!why.contains("wrong"), "the secret is never shown: {why}");
    assert!(up.sample.recorded_of("resources/read").is_empty(), "no request without its credential");
}

#[tokio::test]
async fn token_exchange_gives_each_caller_its_own_token_and_never_forwards_theirs() {
    let ec = es256("ec1");
    let jwks = Jwks::start(std::slice::from_ref(&ec.jwk)).await;
    let endpoint = TokenEndpoint::start(ClientAuth::Basic).await;
    let (p, up) = proxy(Credential::TokenExchange(oauth(&endpoint, ClientAuth::Basic)), |c| {
        api_keys(c, &["ci-key"]);
        c.auth.mode = AuthModes::Many(vec![AuthMode::ApiKey, AuthMode::Jwt]);
        c.auth.jwt = Some(jwt_config(&jwks));
    })
    .await;
    let alice_jwt = sign(&ec, &claims("alice", "mcp"));
    let bob_jwt = sign(&ec, &claims("bob", "mcp"));
    let alice = p.client.as_principal(&alice_jwt);
    let bob = p.client.as_principal(&bob_jwt);
    discovered(&alice).await;
    up.sample.clear_recorded();
    for client in [&alice, &bob, &alice, &bob, &alice] {
        read(client, &up).await;
    }
    assert_eq!(
        read_tokens(&up),
        [
            "Bearer exchanged-for-alice",
            "Bearer exchanged-for-bob",
            "Bearer exchanged-for-alice",
            "Bearer exchanged-for-bob",
            "Bearer exchanged-for-alice"
        ]
    );
    let exchanges = endpoint.grants(EXCHANGE);
    assert_eq!(exchanges.len(), 2, "one exchange per caller, then the cached token");
    for (ex, jwt) in exchanges.iter().zip([&alice_jwt, &bob_jwt]) {
        assert_eq!(&ex.form["subject_token"], jwt);
        assert_eq!(ex.form["subject_token_type"], ACCESS_TOKEN);
        assert_eq!((ex.form["audience"].as_str(), ex.form["resource"].as_str()), ("gen-api", "http://gen.test/mcp"));
        assert!(ex.authorization.as_deref().is_some_and(|a| a.starts_with("Basic ")), "the client authenticates");
    }
    // The proxy's own requests (discovery) carry its own client-credentials token.
    assert_eq!(endpoint.grants("client_credentials").len(), 1);

    // A list goes with the caller's exchanged token too.
    let list = alice.request("resources/list", json!({})).await;
    assert_eq!(list.status, 200);
    let lists = up.sample.recorded_of("resources/list");
    assert_eq!(lists.last().unwrap().header("authorization"), Some("Bearer exchanged-for-alice"));

    // An API-key caller has no token to exchange: a clear error, and nothing sent upstream.
    let before = up.sample.recorded().len();
    let ex =
        p.client.as_principal("ci-key").request("resources/read", json!({"uri": up.sample.spec().uri("item/1")})).await;
    assert_eq!(ex.status, 502, "{}", ex.text());
    assert!(ex.json()["error"]["message"].as_str().unwrap().contains("caller's own token"), "{}", ex.text());
    assert_eq!(up.sample.recorded().len(), before);

    // Whatever the upstream saw, it never saw a caller's own token.
    for r in up.sample.recorded() {
        let auth = r.header("authorization").unwrap_or("");
        assert!(!auth.contains(&alice_jwt) && !auth.contains(&bob_jwt) && !auth.contains("ci-key"), "{r:?}");
    }
}

#[tokio::test]
async fn the_callers_authorization_and_cookies_never_reach_the_upstream() {
    let value = |v: &str| SecretSource { value: Some(v.into()), ..Default::default() };
    let up = sample_http(SampleSpec::generated("gen", 3)).await;
    let mut with_static = UpstreamConfig::http("gen", &up.url());
    with_static.cache = false;
    with_static.headers.insert("Authorization".into(), value("Bearer static-secret"));
    with_static.headers.insert("X-Team".into(), value("blue"));
    let bare_up = sample_http(SampleSpec::generated("bare", 3)).await;
    let mut bare = UpstreamConfig::http("bare", &bare_up.url());
    bare.cache = false;
    let mut cfg = config(vec![with_static, bare]);
    api_keys(&mut cfg, &["ci-key"]);
    let p = Proxy::start(cfg).await;
    let client = p.client.as_principal("ci-key");
    discovered(&client).await;
    for uri in ["gen+gen://item/1", "bare+bare://item/1"] {
        let m = meta();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri, "_meta": m}});
        let headers = [
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", "resources/read".to_owned()),
            ("mcp-name", uri.to_owned()),
            ("cookie", "session=caller-cookie".to_owned()),
        ];
        let ex = client.raw("POST", &headers, body.to_string().into_bytes()).await;
        assert_eq!(ex.status, 200, "{}", ex.text());
    }
    let reads = up.sample.recorded_of("resources/read");
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].header("authorization"), Some("Bearer static-secret"), "the configured credential");
    assert_eq!(reads[0].header("x-team"), Some("blue"));
    let bare_reads = bare_up.sample.recorded_of("resources/read");
    assert_eq!(bare_reads.len(), 1);
    assert_eq!(bare_reads[0].header("authorization"), None, "no credential configured: none sent");
    for r in up.sample.recorded().iter().chain(bare_up.sample.recorded().iter()) {
        assert_eq!(r.header("cookie"), None, "{r:?}");
        assert!(!r.header("authorization").unwrap_or("").contains("ci-key"), "{r:?}");
    }
}
