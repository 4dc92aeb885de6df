//! The rules of one `[[upstream]]`: its transport, credential, TLS files and allow rules.

use super::tls_files::check_tls_files;
use super::url::{canonical_resource, check_url};
use super::{MAX_NAME, chain, forbidden_header};
use crate::config::{AllowRule, AuthConfig, AuthMode, Credential, ProxyRequests, UpstreamConfig};

pub(super) fn check_upstream(up: &UpstreamConfig) -> Vec<(&'static str, String)> {
    let mut errors = Vec::new();
    if !valid_name(&up.name) {
        errors.push((
            "name",
            format!(
                "`{}` is not a valid name: use lowercase ASCII letters, digits and `-`, \
                 starting with a letter, at most {MAX_NAME} characters",
                up.name
            ),
        ));
    }
    match (&up.url, &up.command) {
        (Some(_), Some(_)) => errors.push(("url", "set either `url` or `command`, not both".into())),
        (None, None) => errors.push(("url", "set `url` (HTTP) or `command` (stdio)".into())),
        (Some(url), None) => {
            if let Err(m) = check_url(url) {
                errors.push(("url", m.to_string()));
            }
        }
        (None, Some(cmd)) => {
            if cmd.first().is_none_or(|p| p.is_empty()) {
                errors.push(("command", "must name a program".into()));
            }
        }
    }
    if up.timeout.is_zero() {
        errors.push(("timeout", "must be positive".into()));
    }
    let known = ["auto", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];
    if !known.contains(&up.protocol.as_str()) {
        errors.push(("protocol", format!("`{}` is not one of {known:?}", up.protocol)));
    }
    if up.max_in_flight == 0 {
        errors.push(("max_in_flight", "must be at least 1".into()));
    }
    if up.max_message_bytes < 1024 {
        errors.push(("max_message_bytes", "must be at least 1024".into()));
    }
    if up.max_relay_bytes < 1024 {
        errors.push(("max_relay_bytes", "must be at least 1024".into()));
    }
    errors.extend(check_upstream_tls(up));
    for rule in &up.allow {
        if let Some(m) = check_rule(rule) {
            errors.push(("allow", m));
        }
    }
    for (name, secret) in &up.headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            errors.push(("headers", format!("`{name}` is not a valid header name")));
        } else if forbidden_header(name) {
            errors.push((
                "headers",
                format!("`{name}` is a hop-by-hop or framing header, which the proxy never forwards or sets"),
            ));
        } else if let Err(e) = secret.resolve() {
            errors.push(("headers", format!("`{name}`: {}", chain(&e))));
        }
    }
    errors
}

/// `[upstream.credential]`: an OAuth kind needs an HTTP upstream, a usable token endpoint
/// and secret, no static `Authorization` beside it; token exchange needs JWT callers.
pub(super) fn check_credential(up: &UpstreamConfig, auth: &AuthConfig) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let Some(oauth) = up.credential.oauth() else { return errors };
    let mut err = |key: &str, msg: String| errors.push((format!("credential.{key}"), msg));
    if up.url.is_none() {
        err("kind", "an OAuth credential applies only to an HTTP upstream (`url`)".into());
    }
    if up.headers.keys().any(|h| h.eq_ignore_ascii_case("authorization")) {
        err("kind", "`headers` sets `Authorization` too: use one or the other".into());
    }
    if let Err(m) = check_url(&oauth.token_url) {
        err("token_url", m.to_string());
    }
    if oauth.client_id.is_empty() {
        err("client_id", "must not be empty".into());
    }
    if let Err(e) = oauth.client_secret.resolve() {
        err("client_secret", chain(&e));
    }
    if oauth.timeout.is_zero() {
        err("timeout", "must be positive".into());
    }
    if oauth.default_lifetime.is_zero() {
        err("default_lifetime", "must be positive".into());
    }
    if let Some(r) = &oauth.resource
        && let Err(m) = canonical_resource(r)
    {
        err("resource", m.to_string());
    }
    if let Some(ca) = &oauth.tls_ca_file
        && let Err(e) = crate::tls::client_config(crate::tls::ClientTls { ca_file: Some(ca), identity: None })
    {
        err("tls_ca_file", chain(&e));
    }
    match &up.credential {
        Credential::TokenExchange(_) => {
            if oauth.max_cached_tokens == Some(0) {
                err("max_cached_tokens", "must be at least 1".into());
            }
            if !auth.mode.has(AuthMode::Jwt) {
                // API keys are the proxy's own secrets: sending one to an authorization
                // server would leak it, and no server could verify it anyway.
                err(
                    "kind",
                    "`token_exchange` exchanges the caller's JWT: [auth] `mode` must include `jwt` \
                     (anonymous and API-key callers have no token to exchange)"
                        .into(),
                );
            }
        }
        _ => {
            if oauth.max_cached_tokens.is_some() {
                err("max_cached_tokens", "applies only to `token_exchange`".into());
            }
            if oauth.proxy_requests != ProxyRequests::default() {
                err("proxy_requests", "applies only to `token_exchange`".into());
            }
        }
    }
    errors
}

/// The `tls_*` keys: only on an `https` URL, the client certificate and key together, and
/// every file readable and usable.
fn check_upstream_tls(up: &UpstreamConfig) -> Vec<(&'static str, String)> {
    let mut errors = Vec::new();
    let set = [
        ("tls_ca_file", up.tls_ca_file.is_some()),
        ("tls_client_cert", up.tls_client_cert.is_some()),
        ("tls_client_key", up.tls_client_key.is_some()),
    ];
    let https =
        up.url.as_deref().and_then(|u| u.parse::<http::Uri>().ok()).is_some_and(|u| u.scheme_str() == Some("https"));
    if !https {
        for (key, _) in set.iter().filter(|(_, on)| *on) {
            errors.push((*key, "applies only to an https:// `url`".into()));
        }
        return errors;
    }
    match (&up.tls_client_cert, &up.tls_client_key) {
        (Some(_), None) => errors.push(("tls_client_key", "required with `tls_client_cert`".into())),
        (None, Some(_)) => errors.push(("tls_client_cert", "required with `tls_client_key`".into())),
        _ => {}
    }
    errors.extend(check_tls_files(
        ["tls_ca_file", "tls_client_cert", "tls_client_key"],
        up.tls_ca_file.as_deref(),
        up.tls_client_cert.as_deref(),
        up.tls_client_key.as_deref(),
    ));
    errors
}

/// One `[[upstream.allow]]` rule.
fn check_rule(rule: &AllowRule) -> Option<String> {
    let all = [&rule.principals, &rule.groups, &rule.scopes, &rule.uris, &rule.tools, &rule.prompts];
    if all.iter().any(|l| l.as_ref().is_some_and(|l| l.iter().any(String::is_empty))) {
        return Some("rule lists must not contain empty strings".into());
    }
    None
}

/// Whether `name` can serve as a URI-scheme prefix and a tool-name prefix.
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_NAME
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}
