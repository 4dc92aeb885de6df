//! Downstream identity (DESIGN §6): who is asking. [`Authenticator`] turns a request's
//! `Authorization` header into a [`Principal`] — an API key (stored hashed, compared in
//! constant time), a JWT checked against the issuer's JWKS ([`jwt`]), or anonymous when
//! authentication is off — and says how to refuse a caller (401 / 403 with
//! `WWW-Authenticate`, RFC 6750 and RFC 9728). [`policy`] decides what a principal may reach.
//!
//! No token is ever stored, logged or printed: [`Principal`]'s `Debug` shows the id only.

pub mod jwt;
pub mod policy;

use std::sync::Arc;

use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use crate::mcp::principal::{BearerToken, Identity, Principal};

use crate::client::HttpClient;
use crate::config::{AuthConfig, AuthMode};
use crate::headers::{Headers, Known};

/// Why a caller is refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credential (401).
    #[error("no credential presented")]
    Missing,
    /// A credential that does not verify (401 `invalid_token`). The reason is for the
    /// proxy's log; it never contains the token.
    #[error("invalid token: {0}")]
    Invalid(#[source] jwt::TokenError),
    /// A valid token without the required scopes (403 `insufficient_scope`).
    #[error("token lacks required scopes")]
    InsufficientScope,
}

/// One configured API key.
struct ApiKey {
    digest: [u8; 32],
    principal: Principal,
}

/// Derives principals from request credentials; shared by every connection.
pub struct Authenticator {
    /// Authentication off: everyone is anonymous.
    off: bool,
    keys: Vec<ApiKey>,
    jwt: Option<jwt::Verifier>,
    /// Scopes every JWT must carry.
    required_scopes: Vec<String>,
    /// The RFC 9728 document and where it is served.
    metadata: Option<Metadata>,
}

/// The protected resource metadata.
struct Metadata {
    /// `https://host/.well-known/oauth-protected-resource/mcp`.
    url: String,
    document: String,
}

/// Why the authenticator cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("auth.jwt: {0}")]
    Jwt(#[source] jwt::JwksError),
    #[error("auth.api_key[{index}].sha256 is not 64 hex digits")]
    KeyHash { index: usize },
}

/// Path of the protected resource metadata (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

impl Authenticator {
    /// Authentication off.
    pub fn none() -> Self {
        Self { off: true, keys: Vec::new(), jwt: None, required_scopes: Vec::new(), metadata: None }
    }

    /// Builds the authenticator of a validated `[auth]`. A `jwks_file` is read now; a
    /// `jwks_url` is fetched on first use, through `client`.
    pub fn from_config(auth: &AuthConfig, client: &HttpClient) -> Result<Self, AuthSetupError> {
        if auth.mode.is_none() {
            return Ok(Self::none());
        }
        let mut keys = Vec::new();
        if auth.mode.has(AuthMode::ApiKey) {
            for (index, k) in auth.api_key.iter().enumerate() {
                let digest = decode_hex32(&k.sha256).ok_or(AuthSetupError::KeyHash { index })?;
                let groups: Vec<&str> = k.groups.iter().map(String::as_str).collect();
                let scopes: Vec<&str> = k.scopes.iter().map(String::as_str).collect();
                keys.push(ApiKey { digest, principal: Principal::user(&k.principal, &groups, &scopes) });
            }
        }
        let jwt_config = auth.jwt.as_ref().filter(|_| auth.mode.has(AuthMode::Jwt));
        let jwt = match jwt_config {
            Some(cfg) => Some(jwt::Verifier::new(cfg, client.clone()).map_err(AuthSetupError::Jwt)?),
            None => None,
        };
        let resource = auth.metadata.resource.clone().or_else(|| jwt_config.map(|j| j.audience.clone()));
        let metadata = resource.map(|resource| {
            let servers = if auth.metadata.authorization_servers.is_empty() {
                jwt_config.map(|j| vec![j.issuer.clone()]).unwrap_or_default()
            } else {
                auth.metadata.authorization_servers.clone()
            };
            let scopes = if auth.metadata.scopes_supported.is_empty() {
                jwt_config.map(|j| j.required_scopes.clone()).unwrap_or_default()
            } else {
                auth.metadata.scopes_supported.clone()
            };
            let mut doc = json!({
                "resource": resource,
                "authorization_servers": servers,
                "bearer_methods_supported": ["header"],
                "resource_name": "resmux",
            });
            if !scopes.is_empty() {
                doc["scopes_supported"] = json!(scopes);
            }
            Metadata { url: metadata_url(&resource), document: doc.to_string() }
        });
        Ok(Self {
            off: false,
            keys,
            jwt,
            required_scopes: jwt_config.map(|j| j.required_scopes.clone()).unwrap_or_default(),
            metadata,
        })
    }

    /// Whether callers are authenticated at all.
    pub fn enabled(&self) -> bool {
        !self.off
    }

    /// The principal of a request.
    pub async fn authenticate(&self, headers: Headers<'_>) -> Result<Principal, AuthError> {
        if self.off {
            return Ok(Principal::Anonymous);
        }
        let value = headers.get(Known::Authorization).ok_or(AuthError::Missing)?;
        let token = bearer(value).ok_or(AuthError::Invalid(jwt::TokenError::NotBearer))?;
        if !self.keys.is_empty()
            && let Some(p) = self.api_key(token)
        {
            return Ok(p);
        }
        let Some(verifier) = &self.jwt else {
            return Err(AuthError::Invalid(jwt::TokenError::UnknownKey));
        };
        let text = std::str::from_utf8(token).map_err(|_| AuthError::Invalid(jwt::TokenError::Malformed))?;
        // Boxed: verifying may fetch the issuer's keys, whose future inline would be moved
        // with every request's (an anonymous or API-key caller's too).
        let identity = Box::pin(verifier.verify(text)).await.map_err(AuthError::Invalid)?;
        if !self.required_scopes.iter().all(|s| identity.scopes.contains(s)) {
            return Err(AuthError::InsufficientScope);
        }
        Ok(Principal::User(Arc::new(identity)))
    }

    /// The API key principal for `token`: every configured digest is compared, in constant
    /// time, whether or not an earlier one matched.
    fn api_key(&self, token: &[u8]) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.digest.ct_eq(&digest)) {
                found = Some(key.principal.clone());
            }
        }
        found
    }

    /// The `WWW-Authenticate` value refusing `error`, and its status.
    pub fn challenge(&self, error: &AuthError) -> (http::StatusCode, String) {
        let mut parts: Vec<String> = Vec::new();
        let status = match error {
            AuthError::Missing => http::StatusCode::UNAUTHORIZED,
            AuthError::Invalid(_) => {
                parts.push(r#"error="invalid_token""#.into());
                http::StatusCode::UNAUTHORIZED
            }
            AuthError::InsufficientScope => {
                parts.push(r#"error="insufficient_scope""#.into());
                http::StatusCode::FORBIDDEN
            }
        };
        if !self.required_scopes.is_empty() {
            parts.push(format!(r#"scope="{}""#, quoted(&self.required_scopes.join(" "))));
        }
        if let Some(m) = &self.metadata {
            parts.push(format!(r#"resource_metadata="{}""#, quoted(&m.url)));
        }
        let value = if parts.is_empty() { "Bearer".to_owned() } else { format!("Bearer {}", parts.join(", ")) };
        (status, value)
    }

    /// The RFC 9728 document, when `path` is where it is served (the root form, or the
    /// path-suffixed form for the MCP endpoint `endpoint`).
    pub fn metadata_document(&self, path: &str, endpoint: &str) -> Option<&str> {
        let m = self.metadata.as_ref()?;
        let rest = path.strip_prefix(WELL_KNOWN)?;
        (rest.is_empty() || rest == endpoint).then_some(m.document.as_str())
    }
}

/// The metadata URL of a resource: the well-known path inserted between host and path
/// (RFC 9728 §3.1).
fn metadata_url(resource: &str) -> String {
    match resource.parse::<http::Uri>() {
        Ok(uri) if uri.authority().is_some() => {
            let scheme = uri.scheme_str().unwrap_or("https");
            let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
            let path = uri.path().trim_end_matches('/');
            format!("{scheme}://{authority}{WELL_KNOWN}{path}")
        }
        _ => WELL_KNOWN.to_owned(),
    }
}

/// Escapes a value for a quoted-string.
fn quoted(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The token of `Bearer <token>` (scheme case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ")).then(|| rest.trim_ascii()).filter(|t| !t.is_empty())
}

fn decode_hex32(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_compare_by_id_and_debug_shows_no_secret() {
        let a = Principal::user("ci-bot", &["ci"], &[]);
        let b = Principal::user("ci-bot", &[], &["x"]);
        assert_eq!(a, b);
        assert_ne!(a, Principal::Anonymous);
        assert_ne!(a, Principal::user("other", &[], &[]));
        assert_eq!(format!("{a:?}"), "user:ci-bot");
        let jwt = Principal::with_token("iss#alice", "secret-token");
        let shown = format!("{jwt:?} {:?}", jwt.identity().unwrap().token);
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    #[test]
    fn bearer_and_metadata_url() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("https://mcp.example.com/"),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }
}
