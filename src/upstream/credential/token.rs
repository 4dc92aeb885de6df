//! A client of one OAuth token endpoint: client credentials (RFC 6749 §4.4) and token
//! exchange (RFC 8693), with the client authenticated by `client_secret_basic` or
//! `client_secret_post`.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::Full;
use serde_json::Value;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::{
    CredentialError, CredentialSetupError, GRANT_TOKEN_EXCHANGE, Issued, MAX_TOKEN_RESPONSE, TOKEN_TYPE_ACCESS,
};
use crate::client::HttpClient;
use crate::config::{ClientAuth, OAuthClient};
use crate::whole::whole;

/// A client of one token endpoint.
pub struct TokenClient {
    http: HttpClient,
    uri: Uri,
    url: String,
    client_id: String,
    secret: Zeroizing<String>,
    auth: ClientAuth,
    scope: Option<String>,
    audience: Option<String>,
    resource: Option<String>,
    refresh_before: Duration,
    default_lifetime: Duration,
    timeout: Duration,
}

impl TokenClient {
    pub(super) fn new(upstream: &str, c: &OAuthClient) -> Result<Self, CredentialSetupError> {
        let uri: Uri =
            c.token_url.parse().map_err(|source| CredentialSetupError::Url { url: c.token_url.clone(), source })?;
        let secret = Zeroizing::new(c.client_secret.resolve().map_err(CredentialSetupError::Secret)?);
        let tls = crate::tls::ClientTls { ca_file: c.tls_ca_file.as_deref(), identity: None };
        let http = crate::upstream::http::tls_client(tls).map_err(CredentialSetupError::Tls)?;
        tracing::debug!(upstream, token_url = %c.token_url, "OAuth credential configured");
        Ok(Self {
            http,
            uri,
            url: c.token_url.clone(),
            client_id: c.client_id.clone(),
            secret,
            auth: c.client_auth,
            scope: c.scope.clone(),
            audience: c.audience.clone(),
            resource: c.resource.clone(),
            refresh_before: c.refresh_before,
            default_lifetime: c.default_lifetime,
            timeout: c.timeout,
        })
    }

    /// A token of the proxy's own (RFC 6749 §4.4).
    pub(super) async fn client_credentials(&self) -> Result<Issued, CredentialError> {
        self.post(vec![("grant_type", "client_credentials")]).await
    }

    /// The caller's `subject` token exchanged for one scoped to the upstream (RFC 8693 §2.1).
    pub(super) async fn exchange(&self, subject: &str) -> Result<Issued, CredentialError> {
        self.post(vec![
            ("grant_type", GRANT_TOKEN_EXCHANGE),
            ("subject_token", subject),
            ("subject_token_type", TOKEN_TYPE_ACCESS),
            ("requested_token_type", TOKEN_TYPE_ACCESS),
        ])
        .await
    }

    pub(super) async fn post(&self, mut params: Vec<(&str, &str)>) -> Result<Issued, CredentialError> {
        for (key, value) in [("scope", &self.scope), ("audience", &self.audience), ("resource", &self.resource)] {
            if let Some(v) = value {
                params.push((key, v));
            }
        }
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json");
        match self.auth {
            ClientAuth::Basic => req = req.header(AUTHORIZATION, self.basic()),
            ClientAuth::Body => {
                params.push(("client_id", &self.client_id));
                params.push(("client_secret", &self.secret));
            }
        }
        let body = Zeroizing::new(form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish());
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .map_err(|e| CredentialError::Unreachable { url: self.url.clone(), source: Box::new(e) })?;
        let started = Instant::now();
        let exchange = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| CredentialError::Unreachable { url: self.url.clone(), source: Box::new(e) })?;
            let status = resp.status();
            let body = whole(resp.into_body(), MAX_TOKEN_RESPONSE)
                .await
                .map_err(|e| CredentialError::Unreachable { url: self.url.clone(), source: Box::new(e) })?;
            Ok::<_, CredentialError>((status, Zeroizing::new(body.to_vec())))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| CredentialError::Timeout { url: self.url.clone(), after: self.timeout })??;
        self.issued(status, &body, started)
    }

    /// `Basic base64(urlencode(id) ":" urlencode(secret))` (RFC 6749 §2.3.1).
    pub(super) fn basic(&self) -> HeaderValue {
        let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let pair = Zeroizing::new(format!("{}:{}", enc(&self.client_id), enc(&self.secret)));
        let b64 = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(pair.as_bytes()));
        let mut v = HeaderValue::from_str(&format!("Basic {}", b64.as_str())).expect("base64 is a valid header value");
        v.set_sensitive(true);
        v
    }

    /// Reads a token response (RFC 6749 §5.1) or error (§5.2).
    pub(super) fn issued(&self, status: StatusCode, body: &[u8], at: Instant) -> Result<Issued, CredentialError> {
        let url = || self.url.clone();
        let parsed: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(source) if status.is_success() => {
                return Err(CredentialError::Malformed { url: url(), status: status.as_u16(), source });
            }
            Err(_) => Value::Null,
        };
        let text = |k: &str| parsed.get(k).and_then(Value::as_str).map(str::to_owned);
        if !status.is_success() {
            return Err(CredentialError::Refused {
                url: url(),
                status: status.as_u16(),
                error: text("error").unwrap_or_else(|| "unknown".into()),
                description: text("error_description"),
            });
        }
        let Some(token) = parsed.get("access_token").and_then(Value::as_str).filter(|t| !t.is_empty()) else {
            let source = <serde_json::Error as serde::de::Error>::missing_field("access_token");
            return Err(CredentialError::Malformed { url: url(), status: status.as_u16(), source });
        };
        let token = Zeroizing::new(token.to_owned());
        let token_type = text("token_type").unwrap_or_default();
        if !token_type.eq_ignore_ascii_case("bearer") {
            return Err(CredentialError::TokenType { url: url(), token_type });
        }
        // `expires_in` is a number; some servers send it as a string.
        let lifetime = match parsed.get("expires_in") {
            Some(Value::Number(n)) => n.as_u64().map(Duration::from_secs),
            Some(Value::String(s)) => s.parse().ok().map(Duration::from_secs),
            _ => None,
        }
        .unwrap_or(self.default_lifetime);
        Issued::new(token, at, lifetime, self.refresh_before).map_err(|_| CredentialError::BadToken { url: url() })
    }
}
