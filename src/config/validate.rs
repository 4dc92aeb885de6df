//! Cross-field rules of a [`Config`], each violation reported with its key path.

use std::collections::HashSet;

use super::{Config, UpstreamConfig};

/// Longest upstream name: it becomes a URI scheme prefix and a tool-name prefix.
const MAX_NAME: usize = 63;

/// Smallest `listen.max_header_bytes`: hyper's minimum HTTP/1 read buffer.
const MIN_HEADER_BYTES: usize = 8192;

impl Config {
    /// Every rule violation, as `(key path, message)`. Empty means valid.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut errors = Vec::new();
        let mut err = |path: String, msg: &str| errors.push((path, msg.to_owned()));
        if !self.listen.path.starts_with('/') {
            err("listen.path".into(), "must start with `/`");
        }
        if self.listen.max_body_bytes == 0 {
            err("listen.max_body_bytes".into(), "must be at least 1");
        }
        if self.listen.max_connections == 0 {
            err("listen.max_connections".into(), "must be at least 1");
        }
        for (key, d) in [
            ("header_timeout", self.listen.header_timeout),
            ("body_timeout", self.listen.body_timeout),
            ("idle_timeout", self.listen.idle_timeout),
        ] {
            if d.is_zero() {
                err(format!("listen.{key}"), "must be positive");
            }
        }
        if self.listen.max_header_bytes < MIN_HEADER_BYTES {
            err("listen.max_header_bytes".into(), &format!("must be at least {MIN_HEADER_BYTES}"));
        }
        if self.listen.max_legacy_sessions == 0 {
            err("listen.max_legacy_sessions".into(), "must be at least 1");
        }
        if self.listen.legacy_session_idle.is_zero() {
            err("listen.legacy_session_idle".into(), "must be positive");
        }
        if self.cache.min_ttl > self.cache.max_ttl {
            err("cache.min_ttl".into(), "must not exceed cache.max_ttl");
        }
        if self.cache.max_entry_bytes > self.cache.max_bytes {
            err("cache.max_entry_bytes".into(), "must not exceed cache.max_bytes");
        }
        if let Some(secret) = &self.proxy.cursor_secret
            && let Err(m) = secret.resolve()
        {
            err("proxy.cursor_secret".into(), &m);
        }
        if let Err(e) = self.admin.socket_addr() {
            err("admin.addr".into(), &format!("not a socket address: {e}"));
        }
        if self.upstreams.is_empty() {
            err("upstream".into(), "at least one [[upstream]] is required");
        }
        let mut seen = HashSet::new();
        for (i, up) in self.upstreams.iter().enumerate() {
            let at = |field: &str| format!("upstream[{i}].{field}");
            for (field, msg) in check_upstream(up) {
                err(at(field), &msg);
            }
            if !seen.insert(up.name.as_str()) {
                err(at("name"), &format!("duplicate upstream name `{}`", up.name));
            }
        }
        errors
    }
}

fn check_upstream(up: &UpstreamConfig) -> Vec<(&'static str, String)> {
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
                errors.push(("url", m));
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
    for (name, secret) in &up.headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            errors.push(("headers", format!("`{name}` is not a valid header name")));
        } else if let Err(m) = secret.resolve() {
            errors.push(("headers", format!("`{name}`: {m}")));
        }
    }
    errors
}

/// Whether `name` can serve as a URI-scheme prefix and a tool-name prefix.
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_NAME
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn check_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err("https upstreams are not supported by this build; front them with a \
                        local TLS terminator or use http on a private network"
                .into());
        }
        _ => return Err(format!("`{url}` must be an http:// URL")),
    }
    if uri.host().is_none() {
        return Err(format!("`{url}` has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("docs"));
        assert!(valid_name("fs-2"));
        assert!(!valid_name("Docs"));
        assert!(!valid_name("2fs"));
        assert!(!valid_name("a_b"));
        assert!(!valid_name("a+b"));
        assert!(!valid_name(""));
    }
}
