//! A test identity provider on loopback: a JWKS endpoint whose key set a test can rotate (it
//! counts fetches), ES256 and RS256 signers with keys generated here, claims, and the
//! `[auth.jwt]` section that trusts it. Shared by the authentication, isolation, credential
//! and trust scenarios.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use resmux::config::JwtConfig;

pub(crate) const ISS: &str = "http://idp.test";
pub(crate) const AUD: &str = "http://mcp.test/mcp";

/// A JWKS endpoint on loopback whose key set the test can rotate; counts fetches.
pub(crate) struct Jwks {
    addr: SocketAddr,
    set: Arc<Mutex<String>>,
    fetches: Arc<AtomicU64>,
}

impl Jwks {
    pub(crate) async fn start(keys: &[Jwk]) -> Self {
        let set = Arc::new(Mutex::new(String::new()));
        let fetches = Arc::new(AtomicU64::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (s, f) = (set.clone(), fetches.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (s, f) = (s.clone(), f.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        f.fetch_add(1, Ordering::SeqCst);
                        let body = s.lock().unwrap().clone();
                        async move {
                            Ok::<_, Infallible>(
                                http::Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(body)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        let jwks = Self { addr, set, fetches };
        jwks.publish(keys);
        jwks
    }

    pub(crate) fn publish(&self, keys: &[Jwk]) {
        *self.set.lock().unwrap() = serde_json::to_string(&JwkSet { keys: keys.to_vec() }).unwrap();
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/jwks", self.addr)
    }

    pub(crate) fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// A signing key and its public JWK.
pub(crate) struct Signer {
    pub(crate) key: EncodingKey,
    pub(crate) alg: Algorithm,
    pub(crate) kid: String,
    pub(crate) jwk: Jwk,
}

pub(crate) fn es256(kid: &str) -> Signer {
    use p256::elliptic_curve::Generate;
    use p256::pkcs8::EncodePrivateKey;
    let secret = p256::SecretKey::generate_from_rng(&mut rand::rng());
    let key = EncodingKey::from_ec_der(secret.to_pkcs8_der().unwrap().as_bytes());
    signer(key, Algorithm::ES256, kid)
}

pub(crate) fn rs256(kid: &str) -> (Signer, rsa::PublicKey) {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    let private = rsa::PrivateKey::new(&mut rand::rng(), 2048).unwrap();
    let key = EncodingKey::from_rsa_der(private.to_pkcs1_der().unwrap().as_bytes());
    (signer(key, Algorithm::RS256, kid), private.to_public_key())
}

pub(crate) fn signer(key: EncodingKey, alg: Algorithm, kid: &str) -> Signer {
    let mut jwk = Jwk::from_encoding_key(&key, alg).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    Signer { key, alg, kid: kid.to_owned(), jwk }
}

pub(crate) fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Standard claims for `sub`, valid for an hour, with `scope`.
pub(crate) fn claims(sub: &str, scope: &str) -> Value {
    json!({"iss": ISS, "aud": AUD, "sub": sub, "iat": now(), "nbf": now() - 5, "exp": now() + 3600,
           "scope": scope, "groups": ["eng"]})
}

pub(crate) fn sign(s: &Signer, claims: &Value) -> String {
    let mut header = Header::new(s.alg);
    header.kid = Some(s.kid.clone());
    jsonwebtoken::encode(&header, claims, &s.key).unwrap()
}

pub(crate) fn with(mut c: Value, key: &str, v: Value) -> Value {
    c[key] = v;
    c
}

/// A JWT with a hand-made header and an arbitrary signature (for `alg: none`).
pub(crate) fn unsigned(header: Value, claims: &Value, signature: &[u8]) -> String {
    let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
    format!("{}.{}.{}", enc(&header), enc(claims), URL_SAFE_NO_PAD.encode(signature))
}

pub(crate) fn jwt_config(jwks: &Jwks) -> JwtConfig {
    JwtConfig {
        issuer: ISS.into(),
        audience: AUD.into(),
        jwks_url: Some(jwks.url()),
        jwks_file: None,
        required_scopes: vec!["mcp".into()],
        leeway: Duration::from_secs(30),
        algorithms: vec!["RS256".into(), "ES256".into()],
        groups_claim: "groups".into(),
        jwks_min_refresh: Duration::from_millis(200),
        jwks_max_age: Duration::from_secs(3600),
    }
}
