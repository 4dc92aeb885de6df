//! `[[upstream]]`: one MCP server the proxy fronts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::AllowRule;
pub use super::trust::{PublicPolicy, TrustPublic};
pub use crate::secret::{SecretError, SecretSource};

/// One upstream server. Exactly one of `url` and `command` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name; also the namespace prefix (`{name}+{uri}`, `{name}__{tool}`). Lowercase
    /// ASCII letters, digits and `-`, starting with a letter, at most 63 characters.
    pub name: String,
    /// Streamable HTTP endpoint, e.g. `http://127.0.0.1:9001/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// Program and arguments of a stdio server, started and supervised by the proxy.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Extra environment for `command`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory for `command`. Default: the proxy's.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Whether names and URIs get this upstream's prefix when several upstreams are configured.
    /// Default true. Unprefixed names that collide are resolved first-in-config-wins.
    #[serde(default = "yes")]
    pub prefix: bool,
    /// Deadline for one upstream request, connection included. Default 30 s.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Most requests in flight to this upstream at once; further requests wait (within their
    /// timeout). Default 64.
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// What a merged list does when this upstream fails: skip it (`fail_open`, the default) or
    /// fail the whole list (`fail_closed`).
    #[serde(default)]
    pub on_error: OnError,
    /// Headers sent on every request to this upstream (a static credential, say
    /// `Authorization = { env = "DOCS_TOKEN" }`). Hop-by-hop headers (`Connection`,
    /// `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`) and the framing
    /// headers `Host` and `Content-Length` are refused. The downstream `Authorization` header
    /// and cookies are never forwarded.
    #[serde(default)]
    pub headers: BTreeMap<String, SecretSource>,
    /// How the proxy authenticates to this upstream (`[upstream.credential]`, see
    /// [`Credential`]). Default `static`: the `headers` above, nothing more.
    #[serde(default)]
    pub credential: Credential,
    /// Largest upstream message the proxy parses or caches (response body, SSE event or stdio
    /// line). Default 16 MiB. A `resources/read` result past the cache's `max_entry_bytes`
    /// over HTTP is not held at all but relayed as it arrives, up to `max_relay_bytes`.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: usize,
    /// Largest `resources/read` answer relayed from this HTTP upstream to a client without
    /// being buffered (see `max_message_bytes`); past it the relay is cut. Default 1 GiB.
    #[serde(default = "default_max_relay")]
    pub max_relay_bytes: u64,
    /// TTL used when a result carries no `ttlMs` (legacy or non-conformant servers). Default 0:
    /// such results are not cached.
    #[serde(default, with = "humantime_serde")]
    pub default_ttl: Duration,
    /// Scope assumed when a result carries no `cacheScope`. Default `private`.
    #[serde(default)]
    pub default_scope: CacheScopeDefault,
    /// Whether this upstream's `cacheScope: "public"` (or `default_scope = "public"`) is
    /// believed, so that its answer is shared with every caller (see [`TrustPublic`]). Default
    /// `"auto"`: only where the upstream cannot tell callers apart.
    #[serde(default)]
    pub trust_public: TrustPublic,
    /// Upper clamp for this upstream's `ttlMs`, below `[cache] max_ttl`: what is stored and
    /// the `ttlMs` clients are told. Default: none (`[cache] max_ttl` alone).
    #[serde(default, with = "humantime_serde")]
    pub max_ttl: Option<Duration>,
    /// Whether this upstream's results may be cached. Default true.
    #[serde(default = "yes")]
    pub cache: bool,
    /// Protocol era: `auto` (the default: probe with `server/discover`, fall back to the
    /// legacy `initialize`), or a pinned version: `2026-07-28`, `2025-11-25`, `2025-06-18`,
    /// `2025-03-26`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Longest wait between restarts of a crashed stdio server (backoff doubles from 100 ms up
    /// to this). Default 30 s.
    #[serde(default = "default_restart_max", with = "humantime_serde")]
    pub restart_backoff_max: Duration,
    /// `https` only: a PEM file of CA certificates trusted for this upstream in addition to
    /// the system roots (a private CA). Default: none.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// `https` only: a PEM certificate chain presented when the upstream asks for a client
    /// certificate (mutual TLS). Set together with `tls_client_key`. Default: none.
    #[serde(default)]
    pub tls_client_cert: Option<PathBuf>,
    /// `https` only: the PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls_client_cert`.
    #[serde(default)]
    pub tls_client_key: Option<PathBuf>,
    /// Who may reach what on this upstream (`[[upstream.allow]]`, see [`AllowRule`]). Default
    /// none: every caller that authenticated may use all of it.
    #[serde(default)]
    pub allow: Vec<AllowRule>,
}

/// Where an upstream lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Http { url: String },
    Stdio { command: Vec<String> },
}

impl UpstreamConfig {
    /// The transport, once `validate()` has checked exactly one is set.
    pub fn transport(&self) -> Transport {
        match (&self.url, &self.command) {
            (Some(url), _) => Transport::Http { url: url.clone() },
            (None, Some(command)) => Transport::Stdio { command: command.clone() },
            (None, None) => Transport::Stdio { command: Vec::new() },
        }
    }

    /// A config for an HTTP upstream with every default (tests, demo).
    pub fn http(name: &str, url: &str) -> Self {
        Self::with_defaults(name, Some(url.to_owned()), None)
    }

    /// A config for a stdio upstream with every default (tests, demo).
    pub fn stdio(name: &str, command: Vec<String>) -> Self {
        Self::with_defaults(name, None, Some(command))
    }

    fn with_defaults(name: &str, url: Option<String>, command: Option<Vec<String>>) -> Self {
        Self {
            name: name.to_owned(),
            url,
            command,
            env: BTreeMap::new(),
            cwd: None,
            prefix: true,
            timeout: default_timeout(),
            max_in_flight: default_in_flight(),
            on_error: OnError::default(),
            headers: BTreeMap::new(),
            credential: Credential::Static {},
            max_message_bytes: default_max_message(),
            max_relay_bytes: default_max_relay(),
            default_ttl: Duration::ZERO,
            default_scope: CacheScopeDefault::default(),
            trust_public: TrustPublic::default(),
            max_ttl: None,
            cache: true,
            protocol: default_protocol(),
            restart_backoff_max: default_restart_max(),
            tls_ca_file: None,
            tls_client_cert: None,
            tls_client_key: None,
            allow: Vec::new(),
        }
    }

    /// Whether a `public` answer of this upstream is shared between callers, and why.
    pub fn public_policy(&self) -> PublicPolicy {
        match self.trust_public {
            TrustPublic::Always => PublicPolicy::Trusted,
            TrustPublic::Never => PublicPolicy::Refused,
            TrustPublic::Auto if self.credential.is_per_caller() => PublicPolicy::PerCaller,
            TrustPublic::Auto => PublicPolicy::Trusted,
        }
    }

    /// This upstream's own TLS settings, when it has any (otherwise it shares the default
    /// client). A lone `tls_client_cert` or `tls_client_key` is left out: `validate()`
    /// rejects it.
    pub fn tls(&self) -> Option<crate::tls::ClientTls<'_>> {
        let identity = match (&self.tls_client_cert, &self.tls_client_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            _ => None,
        };
        let ca_file = self.tls_ca_file.as_deref();
        (ca_file.is_some() || identity.is_some()).then_some(crate::tls::ClientTls { ca_file, identity })
    }
}

/// Failure policy for merged lists.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    #[default]
    FailOpen,
    FailClosed,
}

/// Scope assumed for results without `cacheScope`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CacheScopeDefault {
    #[default]
    Private,
    Public,
}

/// How the proxy authenticates to one upstream (DESIGN §6). Whatever the kind, the downstream
/// caller's own `Authorization` header and cookies never reach the upstream.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Credential {
    /// The configured `headers` only (the default). (A struct variant, so that unknown keys
    /// beside `kind` are refused.)
    Static {},
    /// OAuth 2.0 client credentials (RFC 6749 §4.4): the proxy's own token, fetched from
    /// `token_url`, cached and refreshed before it expires, sent as `Authorization: Bearer`.
    ClientCredentials(OAuthClient),
    /// OAuth 2.0 Token Exchange (RFC 8693): the caller's own bearer token (a JWT verified by
    /// `[auth.jwt]`) is exchanged at `token_url` for one scoped to this upstream
    /// (`audience` / `resource`), cached per caller until it expires. The upstream learns the
    /// user from the exchanged token and never sees the caller's.
    TokenExchange(OAuthClient),
}

impl Default for Credential {
    fn default() -> Self {
        Credential::Static {}
    }
}

impl Credential {
    /// Whether the upstream request carries something that identifies the caller, so that
    /// the upstream can answer each caller differently.
    pub fn is_per_caller(&self) -> bool {
        match self {
            Credential::Static {} | Credential::ClientCredentials(_) => false,
            Credential::TokenExchange(_) => true,
        }
    }

    /// The OAuth client settings, for the OAuth kinds.
    pub fn oauth(&self) -> Option<&OAuthClient> {
        match self {
            Credential::Static {} => None,
            Credential::ClientCredentials(c) | Credential::TokenExchange(c) => Some(c),
        }
    }
}

/// An OAuth 2.0 client of an authorization server's token endpoint.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OAuthClient {
    /// The token endpoint, `http://` or `https://` (system roots, plus `tls_ca_file`).
    pub token_url: String,
    /// The proxy's client id at the authorization server.
    pub client_id: String,
    /// The client secret (`env` or `file`; `value` only for tests).
    pub client_secret: SecretSource,
    /// How the client authenticates: `basic` (HTTP Basic, the RFC 6749 §2.3.1 default) or
    /// `body` (`client_id` and `client_secret` form parameters). Default `basic`.
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// `scope` requested (space-separated). Default: none (the server's default).
    #[serde(default)]
    pub scope: Option<String>,
    /// `audience` requested: the upstream's logical name at the authorization server.
    /// Default: none.
    #[serde(default)]
    pub audience: Option<String>,
    /// `resource` requested (RFC 8707): the upstream's URI. Default: none.
    #[serde(default)]
    pub resource: Option<String>,
    /// How long before its expiry a token is replaced: a token issued for `expires_in` is used
    /// until `expires_in - min(refresh_before, expires_in / 2)`. Default 30 s.
    #[serde(default = "default_refresh_before", with = "humantime_serde")]
    pub refresh_before: Duration,
    /// Lifetime assumed when the token response has no `expires_in`. Default 5 min.
    #[serde(default = "default_token_lifetime", with = "humantime_serde")]
    pub default_lifetime: Duration,
    /// Deadline for one token request, connection included. Default 10 s.
    #[serde(default = "default_token_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// `token_exchange` only: most exchanged tokens kept (one per caller and caller token);
    /// the least recently used go first. Default 10,000.
    #[serde(default)]
    pub max_cached_tokens: Option<u64>,
    /// `token_exchange` only: what the proxy's own requests to the upstream (discovery,
    /// catalog walks, the hub's standing listens, legacy handshakes), made on nobody's
    /// behalf, carry: `client_credentials` (a token of the proxy's own from the same client,
    /// the default) or `none` (no `Authorization`).
    #[serde(default)]
    pub proxy_requests: ProxyRequests,
    /// A PEM file of CA certificates trusted for `token_url` in addition to the system roots.
    /// Default: none.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
}

impl OAuthClient {
    /// The exchanged-token cache bound.
    pub fn max_cached_tokens(&self) -> u64 {
        self.max_cached_tokens.unwrap_or(DEFAULT_MAX_CACHED_TOKENS)
    }
}

/// Default `max_cached_tokens`.
pub const DEFAULT_MAX_CACHED_TOKENS: u64 = 10_000;

/// How an OAuth client authenticates to the token endpoint.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// `Authorization: Basic` with the form-encoded id and secret (RFC 6749 §2.3.1).
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the request body.
    Body,
}

/// What a `token_exchange` upstream's requests on nobody's behalf carry.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProxyRequests {
    /// A client-credentials token of the proxy's own.
    #[default]
    ClientCredentials,
    /// No `Authorization` header.
    None,
}

fn yes() -> bool {
    true
}
fn default_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_in_flight() -> usize {
    64
}
fn default_max_relay() -> u64 {
    1 << 30
}

fn default_max_message() -> usize {
    16 << 20
}
fn default_protocol() -> String {
    "auto".into()
}
fn default_restart_max() -> Duration {
    Duration::from_secs(30)
}
fn default_refresh_before() -> Duration {
    Duration::from_secs(30)
}
fn default_token_lifetime() -> Duration {
    Duration::from_secs(300)
}
fn default_token_timeout() -> Duration {
    Duration::from_secs(10)
}
