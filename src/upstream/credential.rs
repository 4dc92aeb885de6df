//! Each upstream's own credential (DESIGN §6): the configured static headers, an OAuth 2.0
//! client-credentials token of the proxy's own (RFC 6749 §4.4), or an RFC 8693 token exchange
//! of the caller's token for one scoped to the upstream, cached per caller.
//!
//! Tokens are fetched lazily: a request finds the cached token, or (when there is none, or it
//! is within `refresh_before` of its expiry) fetches a new one. Concurrent requests needing the
//! same token wait for one fetch. A token the upstream refused (401) is dropped, so the next
//! request fetches a fresh one. Every secret here is zeroed on drop and never printed.

use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tokio::time::Instant;
use zeroize::Zeroizing;

use crate::auth::Principal;
use crate::config::{Credential as CredentialConfig, ProxyRequests};

mod token;
pub use token::TokenClient;

/// On whose behalf an upstream request is made.
#[derive(Debug, Clone, Copy)]
pub enum OnBehalf<'a> {
    /// The proxy's own: discovery, catalog walks, the hub's standing listens, legacy
    /// handshakes.
    Proxy,
    /// A downstream caller's request.
    Caller(&'a Principal),
}

/// `grant_type` of RFC 8693.
pub const GRANT_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// `subject_token_type` of an OAuth access token (RFC 8693 §3).
pub const TOKEN_TYPE_ACCESS: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Largest token endpoint response read.
const MAX_TOKEN_RESPONSE: usize = 64 << 10;

/// Why no credential could be had for an upstream request.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The token endpoint could not be reached, or the connection broke.
    #[error("token endpoint `{url}` unreachable")]
    Unreachable {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("token endpoint `{url}` did not answer within {after:?}")]
    Timeout { url: String, after: Duration },
    /// The authorization server refused the grant (RFC 6749 §5.2).
    #[error("token endpoint `{url}` refused the request: HTTP {status}, error `{error}`{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused { url: String, status: u16, error: String, description: Option<String> },
    #[error("token endpoint `{url}` sent an unreadable answer (HTTP {status})")]
    Malformed {
        url: String,
        status: u16,
        #[source]
        source: serde_json::Error,
    },
    #[error("token endpoint `{url}` issued a `{token_type}` token; only `Bearer` is supported")]
    TokenType { url: String, token_type: String },
    #[error("token endpoint `{url}` issued a token that is not a valid header value")]
    BadToken { url: String },
    /// Token exchange for a caller that presented no token of its own (anonymous, or an API
    /// key, which is the proxy's secret and never leaves it).
    #[error("this upstream needs the caller's own token (token exchange): authenticate with a JWT")]
    NoSubjectToken,
}

impl CredentialError {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout { .. })
            || matches!(self, Self::Refused { status, .. } if *status >= 500)
    }
}

/// An issued access token and when to stop using it.
pub struct Issued {
    /// `Bearer <token>`, marked sensitive.
    header: HeaderValue,
    /// The token itself, zeroed on drop (the header copy is `http`'s; it is never logged).
    _token: Zeroizing<String>,
    refresh_at: Instant,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("refresh_at", &self.refresh_at).finish_non_exhaustive()
    }
}

impl Issued {
    /// A token issued at `at` for `lifetime`, replaced `min(refresh_before, lifetime / 2)`
    /// before it ends.
    pub fn new(
        token: Zeroizing<String>,
        at: Instant,
        lifetime: Duration,
        refresh_before: Duration,
    ) -> Result<Self, InvalidToken> {
        let mut header = HeaderValue::from_str(&format!("Bearer {}", token.as_str())).map_err(|_| InvalidToken)?;
        header.set_sensitive(true);
        let margin = refresh_before.min(lifetime / 2);
        Ok(Self { header, _token: token, refresh_at: at + (lifetime - margin) })
    }

    /// The `Authorization` value.
    pub fn header(&self) -> &HeaderValue {
        &self.header
    }
}

/// A token that is not a valid header value.
#[derive(Debug)]
pub struct InvalidToken;

/// One cached token (or none yet), fetched by one request at a time.
#[derive(Default)]
pub struct Slot(Mutex<Option<Arc<Issued>>>);

impl Slot {
    /// The cached token while it is fresh; otherwise the one `fetch` gets (and caches).
    /// Concurrent callers wait on the one fetch in flight.
    pub async fn get<F, Fut>(&self, fetch: F) -> Result<Arc<Issued>, CredentialError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Issued, CredentialError>>,
    {
        let mut held = self.0.lock().await;
        if let Some(t) = held.as_ref()
            && Instant::now() < t.refresh_at
        {
            return Ok(t.clone());
        }
        let fresh = Arc::new(fetch().await?);
        *held = Some(fresh.clone());
        Ok(fresh)
    }

    /// Drops `seen` (refused by the upstream) unless another request already replaced it.
    pub async fn invalidate(&self, seen: &Arc<Issued>) {
        let mut held = self.0.lock().await;
        if held.as_ref().is_some_and(|t| Arc::ptr_eq(t, seen)) {
            *held = None;
        }
    }
}

/// An upstream's credential, ready to use.
pub enum Credential {
    /// The configured headers only (the transport adds them).
    Static,
    ClientCredentials {
        client: TokenClient,
        token: Slot,
    },
    TokenExchange {
        client: TokenClient,
        /// Exchanged tokens by (caller, caller's token) digest. Bounded (`max_cached_tokens`).
        tokens: moka::sync::Cache<[u8; 32], Arc<Slot>>,
        /// The proxy's own token, for its requests on nobody's behalf (`None`: they carry
        /// none).
        proxy: Option<Slot>,
    },
}

/// Why a credential cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum CredentialSetupError {
    #[error("credential.token_url `{url}` is not a URI")]
    Url {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("credential.client_secret")]
    Secret(#[source] crate::config::SecretError),
    #[error("credential.tls_ca_file")]
    Tls(#[source] crate::tls::TlsError),
}

impl Credential {
    /// Builds the credential of a validated `[upstream.credential]`. Token requests get a
    /// client of their own (system roots plus `tls_ca_file`), never the upstream's (whose
    /// client certificate is for the upstream alone).
    pub fn from_config(upstream: &str, config: &CredentialConfig) -> Result<Self, CredentialSetupError> {
        Ok(match config {
            CredentialConfig::Static {} => Credential::Static,
            CredentialConfig::ClientCredentials(c) => {
                Credential::ClientCredentials { client: TokenClient::new(upstream, c)?, token: Slot::default() }
            }
            CredentialConfig::TokenExchange(c) => Credential::TokenExchange {
                client: TokenClient::new(upstream, c)?,
                tokens: moka::sync::Cache::new(c.max_cached_tokens()),
                proxy: (c.proxy_requests == ProxyRequests::ClientCredentials).then(Slot::default),
            },
        })
    }

    /// The token for a request on behalf of `on`, if this credential sends one.
    pub async fn token(&self, on: OnBehalf<'_>) -> Result<Option<Arc<Issued>>, CredentialError> {
        match self {
            Credential::Static => Ok(None),
            Credential::ClientCredentials { client, token } => {
                token.get(|| client.client_credentials()).await.map(Some)
            }
            Credential::TokenExchange { client, tokens, proxy } => match on {
                OnBehalf::Proxy => match proxy {
                    Some(slot) => slot.get(|| client.client_credentials()).await.map(Some),
                    None => Ok(None),
                },
                OnBehalf::Caller(principal) => {
                    let (key, subject) = exchange_key(principal)?;
                    let slot = tokens.get_with(key, || Arc::new(Slot::default()));
                    slot.get(|| client.exchange(subject)).await.map(Some)
                }
            },
        }
    }

    /// Forgets `seen`, which the upstream refused, so that the next request fetches anew.
    pub async fn invalidate(&self, on: OnBehalf<'_>, seen: &Arc<Issued>) {
        match (self, on) {
            (Credential::Static, _) => {}
            (Credential::ClientCredentials { token, .. }, _) => token.invalidate(seen).await,
            (Credential::TokenExchange { proxy: Some(slot), .. }, OnBehalf::Proxy) => slot.invalidate(seen).await,
            (Credential::TokenExchange { .. }, OnBehalf::Proxy) => {}
            (Credential::TokenExchange { tokens, .. }, OnBehalf::Caller(principal)) => {
                if let Ok((key, _)) = exchange_key(principal)
                    && let Some(slot) = tokens.get(&key)
                {
                    slot.invalidate(seen).await;
                }
            }
        }
    }

    /// Exchanged tokens cached now (tests, the admin page).
    pub fn cached_exchanges(&self) -> u64 {
        match self {
            Credential::TokenExchange { tokens, .. } => {
                tokens.run_pending_tasks();
                tokens.entry_count()
            }
            _ => 0,
        }
    }
}

/// The cache key of a caller's exchanged token and the token to exchange. The key digests the
/// principal id and the caller's token: callers never share an entry, and one caller's other
/// token (other scopes, or a newer one after a revocation) gets its own exchange.
fn exchange_key(principal: &Principal) -> Result<([u8; 32], &str), CredentialError> {
    let identity = principal.identity().ok_or(CredentialError::NoSubjectToken)?;
    let token = identity.token.as_ref().ok_or(CredentialError::NoSubjectToken)?;
    let mut h = Sha256::new();
    h.update((identity.id.len() as u64).to_le_bytes());
    h.update(identity.id.as_bytes());
    h.update(token.expose().as_bytes());
    Ok((h.finalize().into(), token.expose()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    async fn issue(n: &AtomicU32, lifetime: Duration) -> Result<Issued, CredentialError> {
        let i = n.fetch_add(1, Ordering::SeqCst) + 1;
        // The endpoint takes a while: concurrent callers must wait for this one fetch.
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(Issued::new(Zeroizing::new(format!("t{i}")), Instant::now(), lifetime, Duration::from_secs(30)).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_reused_refreshed_before_expiry_and_fetched_once() {
        let slot = Slot::default();
        let n = AtomicU32::new(0);
        let lifetime = Duration::from_secs(300);
        let gets = (0..10).map(|_| slot.get(|| issue(&n, lifetime)));
        let got = futures_util::future::join_all(gets).await;
        assert_eq!(n.load(Ordering::SeqCst), 1, "concurrent refreshes collapse into one");
        assert!(got.iter().all(|t| t.as_ref().unwrap().header() == "Bearer t1"));
        // Reused until 30 s before expiry...
        tokio::time::advance(Duration::from_secs(269)).await;
        assert_eq!(slot.get(|| issue(&n, lifetime)).await.unwrap().header(), "Bearer t1");
        // ...then replaced, before it expires.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(slot.get(|| issue(&n, lifetime)).await.unwrap().header(), "Bearer t2");
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn short_lifetimes_keep_half_and_refused_tokens_are_dropped_once() {
        let slot = Slot::default();
        let n = AtomicU32::new(0);
        // A 20 s token: the 30 s margin is capped at half its life.
        let lifetime = Duration::from_secs(20);
        let first = slot.get(|| issue(&n, lifetime)).await.unwrap();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(Arc::ptr_eq(&first, &slot.get(|| issue(&n, lifetime)).await.unwrap()));
        // Two requests saw a 401 with the same token: one refetch, not two.
        slot.invalidate(&first).await;
        let second = slot.get(|| issue(&n, lifetime)).await.unwrap();
        slot.invalidate(&first).await;
        assert!(Arc::ptr_eq(&second, &slot.get(|| issue(&n, lifetime)).await.unwrap()));
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn exchanges_need_a_caller_token_and_keys_separate_callers() {
        assert!(matches!(exchange_key(&Principal::Anonymous), Err(CredentialError::NoSubjectToken)));
        assert!(matches!(exchange_key(&Principal::user("ci-bot", &[], &[])), Err(CredentialError::NoSubjectToken)));
        let with = |id: &str, token: &str| Principal::with_token(id, token);
        let (a, _) = exchange_key(&with("iss#alice", "tok")).unwrap();
        let (b, _) = exchange_key(&with("iss#bob", "tok")).unwrap();
        let alice = with("iss#alice", "tok");
        let (a2, subject) = exchange_key(&alice).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, a2);
        assert_eq!(subject, "tok");
        assert_ne!(a, exchange_key(&with("iss#alice", "other")).unwrap().0);
    }
}
