//! The `[auth]` rules and the listener's TLS files.

use std::collections::HashSet;

use super::url::{canonical_resource, check_url};
use crate::config::{ASYMMETRIC_ALGORITHMS, AuthConfig, AuthMode};

/// The `[auth]` rules, as `(key path, message)`.
pub(super) fn check_auth(auth: &AuthConfig, loopback: bool) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let mut err = |path: &str, msg: String| errors.push((path.to_owned(), msg));
    if auth.mode.is_none() && !loopback && !auth.allow_anonymous {
        err(
            "auth.mode",
            "`none` on a non-loopback [listen] addr lets anyone act with the proxy's upstream \
             credentials: set `api_key` or `jwt`, or `allow_anonymous = true`"
                .into(),
        );
    }
    if auth.mode.has(AuthMode::None) && auth.mode.list().len() > 1 {
        err("auth.mode", "`none` cannot be combined with other modes".into());
    }
    let mut modes = HashSet::new();
    for m in auth.mode.list() {
        if !modes.insert(m) {
            err("auth.mode", format!("{m:?} is listed twice"));
        }
    }
    match (&auth.jwt, auth.mode.has(AuthMode::Jwt)) {
        (None, true) => err("auth.jwt", "`mode` includes `jwt`: [auth.jwt] is required".into()),
        (Some(_), false) => err("auth.jwt", "set, but `mode` does not include `jwt`".into()),
        (Some(jwt), true) => {
            if jwt.issuer.is_empty() {
                err("auth.jwt.issuer", "must not be empty".into());
            }
            if jwt.audience.is_empty() {
                err("auth.jwt.audience", "must be the proxy's canonical resource URI".into());
            }
            match (&jwt.jwks_url, &jwt.jwks_file) {
                (Some(_), Some(_)) => err("auth.jwt.jwks_url", "set either `jwks_url` or `jwks_file`, not both".into()),
                (None, None) => err("auth.jwt.jwks_url", "set `jwks_url` or `jwks_file`".into()),
                (Some(url), None) => {
                    if let Err(m) = check_url(url) {
                        err("auth.jwt.jwks_url", m.to_string());
                    }
                }
                (None, Some(_)) => {}
            }
            if jwt.algorithms.is_empty() {
                err("auth.jwt.algorithms", "must name at least one algorithm".into());
            }
            for alg in &jwt.algorithms {
                if !ASYMMETRIC_ALGORITHMS.contains(&alg.as_str()) {
                    err(
                        "auth.jwt.algorithms",
                        format!("`{alg}` is not one of {ASYMMETRIC_ALGORITHMS:?} (HMAC and `none` are never accepted)"),
                    );
                }
            }
            if jwt.groups_claim.is_empty() {
                err("auth.jwt.groups_claim", "must not be empty".into());
            }
            if jwt.jwks_min_refresh.is_zero() {
                err("auth.jwt.jwks_min_refresh", "must be positive".into());
            }
        }
        (None, false) => {}
    }
    if auth.mode.has(AuthMode::ApiKey) && auth.api_key.is_empty() {
        err("auth.api_key", "`mode` includes `api_key`: at least one [[auth.api_key]] is required".into());
    }
    if !auth.mode.has(AuthMode::ApiKey) && !auth.api_key.is_empty() {
        err("auth.api_key", "set, but `mode` does not include `api_key`".into());
    }
    let mut principals = HashSet::new();
    let mut hashes = HashSet::new();
    for (i, key) in auth.api_key.iter().enumerate() {
        let at = |f: &str| format!("auth.api_key[{i}].{f}");
        if key.principal.is_empty() || key.principal.contains('#') {
            errors.push((at("principal"), "must be non-empty and contain no `#`".into()));
        } else if !principals.insert(key.principal.as_str()) {
            errors.push((at("principal"), format!("duplicate principal `{}`", key.principal)));
        }
        if key.sha256.len() != 64 || !key.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            errors.push((at("sha256"), "must be the 64 hex digits of the key's SHA-256".into()));
        } else if !hashes.insert(key.sha256.to_ascii_lowercase()) {
            errors.push((at("sha256"), "the same key is configured twice".into()));
        }
    }
    let resource = auth.metadata.resource.as_deref().or(auth.jwt.as_ref().map(|j| j.audience.as_str()));
    if let Some(r) = resource
        && let Err(m) = canonical_resource(r)
    {
        errors.push(("auth.metadata.resource".into(), m.to_string()));
    }
    errors
}

/// The listener's certificate and key: each readable, and usable together.
pub(super) fn check_listen_tls(cert: &std::path::Path, key: &std::path::Path) -> Vec<(&'static str, String)> {
    let chain = |e: crate::tls::TlsError| crate::error::chain(&e);
    match (crate::tls::load_certs(cert), crate::tls::load_key(key)) {
        (Ok(_), Ok(_)) => match crate::tls::server_config(cert, key, None, &[crate::tls::ALPN_HTTP1]) {
            Ok(_) => Vec::new(),
            Err(e) => vec![("cert", chain(e))],
        },
        (c, k) => {
            let mut errors = Vec::new();
            if let Err(e) = c {
                errors.push(("cert", chain(e)));
            }
            if let Err(e) = k {
                errors.push(("key", chain(e)));
            }
            errors
        }
    }
}
