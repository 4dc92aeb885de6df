//! JWT bearer tokens checked against the issuer's JWKS, with `jsonwebtoken` doing every
//! cryptographic step: signature, `exp`/`nbf` (with leeway), `iss`, `aud`.
//!
//! What the proxy adds around it:
//! - the algorithm allow-list, asymmetric algorithms only: `alg: none` does not even parse,
//!   and an HMAC `alg` is refused before any key is looked at; keys are built only from RSA
//!   and EC JWKs (never `DecodingKey::from_secret`, never an `oct` JWK), and a key's family
//!   must match the header's algorithm, so a public key can never act as an HMAC secret;
//! - the JWKS cache: loaded from `jwks_file` at start, or fetched from `jwks_url` on first
//!   use, refetched when a token names an unknown `kid` (at most once per `jwks_min_refresh`,
//!   so made-up key ids cannot make the proxy hammer the identity provider) or when older than
//!   `jwks_max_age`;
//! - the identity: `iss#sub`, groups from the configured claim, scopes from `scope`
//!   (space-separated) or `scp` (string or array).

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::Full;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};
use tokio::time::Instant;

use super::Identity;
use crate::client::HttpClient;
use crate::config::JwtConfig;
use crate::whole::whole;

/// Largest JWKS document accepted.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// Most keys kept from one JWKS.
const MAX_KEYS: usize = 64;
/// Deadline for one JWKS fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a token is refused (logged at debug; never contains the token).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("no configured API key or JWT key matches")]
    UnknownKey,
    #[error("algorithm {0:?} is not allowed")]
    Algorithm(Algorithm),
    #[error("the token names no key id and the JWKS has more than one key for its algorithm")]
    NoKid,
    #[error("the JWKS has no key `{0}`")]
    UnknownKid(String),
    #[error("key `{kid}` is not usable with {alg:?}")]
    KeyMismatch { kid: String, alg: Algorithm },
    #[error("the token's `sub` is missing or not a string")]
    NoSubject,
    #[error("rejected by validation")]
    Rejected(#[source] jsonwebtoken::errors::Error),
    #[error("the JWKS is unavailable")]
    Jwks(#[source] JwksError),
}

/// Why the JWKS could not be loaded (the identity provider's side, or the file's).
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("cannot read JWKS file {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("JWKS URL `{0}` is not a valid URI")]
    Url(String),
    #[error("fetching the JWKS from {url}")]
    Fetch {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the JWKS fetch from {url} timed out")]
    Timeout { url: String },
    #[error("the identity provider answered {status} for {url}")]
    Status { url: String, status: StatusCode },
    #[error("the JWKS is not JSON with a `keys` array")]
    Parse(#[source] serde_json::Error),
    #[error("unknown algorithm name in auth.jwt.algorithms")]
    AlgorithmName(#[source] jsonwebtoken::errors::Error),
}

/// Where the keys come from.
enum Source {
    File,
    Url { uri: Uri, client: Box<HttpClient> },
}

/// The cached key set.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Key>,
    /// Keys without a `kid` (used only when a token names none).
    anonymous: Vec<Key>,
    fetched: Option<Instant>,
}

#[derive(Clone)]
struct Key {
    key: DecodingKey,
    /// The JWK's own `alg`, when it declares one.
    alg: Option<Algorithm>,
}

/// Verifies tokens for one `[auth.jwt]`.
pub struct Verifier {
    issuer: String,
    audience: String,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
    groups_claim: String,
    min_refresh: Duration,
    max_age: Duration,
    source: Source,
    keys: RwLock<Keys>,
    /// Serializes fetches; holds when the last fetch was attempted (success or not).
    fetching: Mutex<Option<Instant>>,
}

impl Verifier {
    pub fn new(cfg: &JwtConfig, client: HttpClient) -> Result<Self, JwksError> {
        let algorithms = cfg
            .algorithms
            .iter()
            .map(|a| Algorithm::from_str(a).map_err(JwksError::AlgorithmName))
            .collect::<Result<Vec<_>, _>>()?;
        let (source, keys) = match (&cfg.jwks_file, &cfg.jwks_url) {
            (Some(path), _) => {
                let text = std::fs::read(path).map_err(|source| JwksError::File { path: path.clone(), source })?;
                let mut keys = parse_jwks(&text)?;
                keys.fetched = Some(Instant::now());
                (Source::File, keys)
            }
            (None, Some(url)) => {
                let uri: Uri = url.parse().map_err(|_| JwksError::Url(url.clone()))?;
                (Source::Url { uri, client: Box::new(client) }, Keys::default())
            }
            (None, None) => (Source::File, Keys::default()),
        };
        Ok(Self {
            issuer: cfg.issuer.clone(),
            audience: cfg.audience.clone(),
            algorithms,
            leeway: cfg.leeway,
            groups_claim: cfg.groups_claim.clone(),
            min_refresh: cfg.jwks_min_refresh,
            max_age: cfg.jwks_max_age,
            source,
            keys: RwLock::new(keys),
            fetching: Mutex::new(None),
        })
    }

    /// Verifies `token`; the caller's identity when it is valid.
    pub async fn verify(&self, token: &str) -> Result<Identity, TokenError> {
        // `alg: none` and unknown algorithms fail here: `Algorithm` has no such variant.
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        let alg = header.alg;
        if !self.algorithms.contains(&alg) {
            return Err(TokenError::Algorithm(alg));
        }
        let kid = header.kid.as_deref();
        let key = match self.find(kid, alg).await {
            Some(k) => k,
            None => {
                if !self.refresh(false).await {
                    return Err(self.missing(kid));
                }
                self.find(kid, alg).await.ok_or_else(|| self.missing(kid))?
            }
        };
        if key.key.family() != alg.family() || key.alg.is_some_and(|a| a != alg) {
            return Err(TokenError::KeyMismatch { kid: kid.unwrap_or("").to_owned(), alg });
        }
        let mut v = Validation::new(alg);
        v.algorithms = vec![alg];
        v.leeway = self.leeway.as_secs();
        v.validate_exp = true;
        v.validate_nbf = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Value>(token, &key.key, &v).map_err(TokenError::Rejected)?;
        let claims = data.claims;
        let sub = claims.get("sub").and_then(Value::as_str).ok_or(TokenError::NoSubject)?;
        Ok(Identity {
            id: format!("{}#{sub}", self.issuer),
            groups: strings(claims.get(&self.groups_claim)),
            scopes: strings(claims.get("scope").filter(|v| v.is_string()).or_else(|| claims.get("scp"))),
            token: Some(super::BearerToken::new(token)),
        })
    }

    fn missing(&self, kid: Option<&str>) -> TokenError {
        match kid {
            Some(k) => TokenError::UnknownKid(k.to_owned()),
            None => TokenError::NoKid,
        }
    }

    /// The key for `kid` (or the only kid-less-or-not key for `alg`'s family when the token
    /// names none). Refetches first when the set is older than `jwks_max_age`.
    async fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Key> {
        let stale = self.keys.read().await.fetched.is_none_or(|t| t.elapsed() >= self.max_age);
        if stale && matches!(self.source, Source::Url { .. }) {
            self.refresh(true).await;
        }
        let keys = self.keys.read().await;
        match kid {
            Some(kid) => keys.by_kid.get(kid).cloned(),
            None => {
                let mut fitting =
                    keys.by_kid.values().chain(keys.anonymous.iter()).filter(|k| k.key.family() == alg.family());
                let first = fitting.next()?;
                fitting.next().is_none().then(|| first.clone())
            }
        }
    }

    /// Refetches the JWKS unless the last attempt was less than `jwks_min_refresh` ago
    /// (`due`: the set is past its age, which is rate-limited the same way). Returns whether a
    /// new set was loaded.
    async fn refresh(&self, due: bool) -> bool {
        let Source::Url { uri, client } = &self.source else { return false };
        let mut last = self.fetching.lock().await;
        if last.is_some_and(|t| t.elapsed() < self.min_refresh) {
            return false;
        }
        if due && self.keys.read().await.fetched.is_some_and(|t| t.elapsed() < self.max_age) {
            return false; // another caller refreshed while we waited
        }
        *last = Some(Instant::now());
        match fetch_jwks(client, uri).await {
            Ok(mut keys) => {
                keys.fetched = Some(Instant::now());
                tracing::debug!(url = %uri, keys = keys.by_kid.len() + keys.anonymous.len(), "JWKS loaded");
                *self.keys.write().await = keys;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS fetch failed; keeping the previous keys");
                false
            }
        }
    }
}

/// Fetches a JWKS over HTTP with the proxy's client. The one place the proxy reaches the
/// identity provider (so that TLS support for it lands in one spot).
async fn fetch_jwks(client: &HttpClient, uri: &Uri) -> Result<Keys, JwksError> {
    let url = uri.to_string();
    let req = Request::get(uri.clone())
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::new()))
        .map_err(|e| JwksError::Fetch { url: url.clone(), source: Box::new(e) })?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| JwksError::Fetch { url: url.clone(), source: Box::new(e) })?;
        if resp.status() != StatusCode::OK {
            return Err(JwksError::Status { url: url.clone(), status: resp.status() });
        }
        whole(resp.into_body(), MAX_JWKS_BYTES)
            .await
            .map_err(|e| JwksError::Fetch { url: url.clone(), source: Box::new(e) })
    };
    let body =
        tokio::time::timeout(FETCH_TIMEOUT, exchange).await.map_err(|_| JwksError::Timeout { url: url.clone() })??;
    parse_jwks(&body)
}

/// Parses a JWKS, keeping the RSA and EC signature keys and skipping what it cannot use
/// (`oct` secrets above all, encryption keys, unknown key types).
fn parse_jwks(text: &[u8]) -> Result<Keys, JwksError> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<Value>,
    }
    let set: Set = serde_json::from_slice(text).map_err(JwksError::Parse)?;
    let mut keys = Keys::default();
    for raw in set.keys.into_iter().take(MAX_KEYS) {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw) else { continue };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let key = match &jwk.algorithm {
            AlgorithmParameters::RSA(p) => DecodingKey::from_rsa_components(&p.n, &p.e),
            AlgorithmParameters::EllipticCurve(p) => DecodingKey::from_ec_components(&p.x, &p.y),
            // `oct` would be an HMAC secret; OKP and others are not accepted here.
            _ => continue,
        };
        let Ok(key) = key else { continue };
        let alg = match jwk.common.key_algorithm.map(Algorithm::try_from) {
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => continue,
            None => None,
        };
        let key = Key { key, alg };
        match jwk.common.key_id {
            Some(kid) => {
                keys.by_kid.insert(kid, key);
            }
            None => keys.anonymous.push(key),
        }
    }
    Ok(keys)
}

/// A claim as a set of strings: an array of strings, or one space-separated string.
fn strings(v: Option<&Value>) -> BTreeSet<String> {
    match v {
        Some(Value::String(s)) => s.split_ascii_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => BTreeSet::new(),
    }
}
