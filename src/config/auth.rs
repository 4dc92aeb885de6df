//! `[auth]`: how downstream callers authenticate (DESIGN §6). Inert data; the verifier is
//! built from it in [`crate::auth::Authenticator::from_config`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// One way to authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// No authentication: every caller is anonymous.
    None,
    /// `Authorization: Bearer <key>` checked against `[[auth.api_key]]` (stored hashed).
    ApiKey,
    /// `Authorization: Bearer <JWT>` checked against `[auth.jwt]`.
    Jwt,
}

/// `mode`: one mode, or several accepted at once (`["api_key", "jwt"]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum AuthModes {
    One(AuthMode),
    Many(Vec<AuthMode>),
}

impl Default for AuthModes {
    fn default() -> Self {
        AuthModes::One(AuthMode::None)
    }
}

impl AuthModes {
    /// The modes, as a list.
    pub fn list(&self) -> &[AuthMode] {
        match self {
            AuthModes::One(m) => std::slice::from_ref(m),
            AuthModes::Many(v) => v,
        }
    }

    /// Whether `mode` is accepted.
    pub fn has(&self, mode: AuthMode) -> bool {
        self.list().contains(&mode)
    }

    /// Whether callers are not authenticated at all (`none`, or an empty list).
    pub fn is_none(&self) -> bool {
        self.list().iter().all(|m| *m == AuthMode::None)
    }
}

/// `[auth]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `none` (the default), `api_key`, `jwt`, or a list such as `["api_key", "jwt"]`.
    /// `none` is refused on a non-loopback `[listen] addr` unless `allow_anonymous = true`.
    pub mode: AuthModes,
    /// Allow `mode = "none"` on a non-loopback listener. Default false.
    pub allow_anonymous: bool,
    /// JWT validation, for `mode = "jwt"`.
    pub jwt: Option<JwtConfig>,
    /// API keys, for `mode = "api_key"`.
    pub api_key: Vec<ApiKeyConfig>,
    /// RFC 9728 protected resource metadata.
    pub metadata: MetadataConfig,
}

/// `[auth.jwt]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Required `iss`, exactly.
    pub issuer: String,
    /// Required `aud`: the proxy's canonical resource URI, e.g. `https://mcp.example.com/mcp`.
    pub audience: String,
    /// Where the issuer's JWKS is fetched (cached; refetched on an unknown `kid`, at most
    /// once per `jwks_min_refresh`). Exactly one of `jwks_url` and `jwks_file`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// A JWKS file read at start.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// Scopes every token must carry (in `scope`, space-separated, or `scp`); a token without
    /// them gets 403 `insufficient_scope`. Default none.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`. Default 30 s.
    #[serde(default = "default_leeway", with = "humantime_serde")]
    pub leeway: Duration,
    /// Accepted signature algorithms (asymmetric only: RS256/384/512, PS256/384/512,
    /// ES256/384, EdDSA). Default `["RS256", "ES256"]`.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The claim holding the caller's groups (a string array, or a space-separated string).
    /// Default `groups`.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Least time between two JWKS fetches triggered by unknown `kid`s, so that tokens with
    /// made-up key ids cannot make the proxy hammer the identity provider. Default 30 s.
    #[serde(default = "default_min_refresh", with = "humantime_serde")]
    pub jwks_min_refresh: Duration,
    /// A fetched JWKS older than this is refetched on next use (revoked keys drop out); the
    /// old set keeps serving if the fetch fails. Default 1 h.
    #[serde(default = "default_max_age", with = "humantime_serde")]
    pub jwks_max_age: Duration,
}

/// One `[[auth.api_key]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// The principal this key authenticates as (no `#`: that separates JWT `iss#sub`).
    pub principal: String,
    /// Lowercase or uppercase hex SHA-256 of the key; the key itself is never stored.
    /// `printf %s "$KEY" | sha256sum`.
    pub sha256: String,
    /// Groups of the principal, for `[[upstream.allow]]`.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Scopes of the principal, for `[[upstream.allow]]`.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `[auth.metadata]`: what `/.well-known/oauth-protected-resource` says.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetadataConfig {
    /// The proxy's canonical resource URI. Default: `auth.jwt.audience`.
    pub resource: Option<String>,
    /// Authorization servers. Default: `[auth.jwt.issuer]`.
    pub authorization_servers: Vec<String>,
    /// Scopes advertised. Default: `auth.jwt.required_scopes`.
    pub scopes_supported: Vec<String>,
}

/// Algorithms `algorithms` may name: asymmetric only, so a public key can never be used as
/// an HMAC secret.
pub const ASYMMETRIC_ALGORITHMS: &[&str] =
    &["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}
fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into()]
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn default_min_refresh() -> Duration {
    Duration::from_secs(30)
}
fn default_max_age() -> Duration {
    Duration::from_secs(3600)
}

/// One `[[upstream.allow]]` rule: who (every `principals`/`groups`/`scopes` given must match;
/// none given: every caller) may reach what (`uris`, `tools`, `prompts`: glob lists where `*`
/// matches any run of characters; a list left out allows all of its kind, an empty list none).
/// Names and URIs are the upstream's own, before namespacing. With no rules on an upstream,
/// every caller that authenticated may use all of it; with rules, a caller reaches only what
/// some rule that applies to it allows.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AllowRule {
    /// Principal ids (`iss#sub` for JWTs, the key's `principal` for API keys).
    #[serde(default)]
    pub principals: Option<Vec<String>>,
    /// The caller must be in one of these groups.
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    /// The caller must hold all of these scopes.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Resource URIs (and URI templates, in `resources/templates/list`).
    #[serde(default)]
    pub uris: Option<Vec<String>>,
    /// Tool names.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Prompt names.
    #[serde(default)]
    pub prompts: Option<Vec<String>>,
}
