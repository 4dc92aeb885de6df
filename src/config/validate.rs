//! Cross-field rules of a [`Config`], each violation reported with its key path.

use std::collections::HashSet;

use super::{ASYMMETRIC_ALGORITHMS, AllowRule, AuthConfig, AuthMode, Config, Credential, UpstreamConfig};

/// Headers a configured `headers` entry may not set: hop-by-hop headers (RFC 9110 §7.6.1)
/// and the framing the HTTP client owns.
const FORBIDDEN_HEADERS: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Whether a configured header name is refused (see [`FORBIDDEN_HEADERS`]; any `Proxy-*`).
pub fn forbidden_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    FORBIDDEN_HEADERS.contains(&name.as_str()) || name.starts_with("proxy-")
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    crate::tls::error_chain(e)
}

/// Longest upstream name: it becomes a URI scheme prefix and a tool-name prefix.
const MAX_NAME: usize = 63;

/// Smallest `listen.max_header_bytes`: hyper's minimum HTTP/1 read buffer.
const MIN_HEADER_BYTES: usize = 8192;

impl Config {
    /// The secrets that do not resolve now (an unset environment variable, an unreadable
    /// file), as `(key path, message)` in the form [`Config::validate`] reports them. A CI job
    /// that checks configs has no secrets: `resmux check` reports these apart, as warnings,
    /// while `serve` refuses to start with any.
    pub fn secret_problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(secret) = &self.proxy.cursor_secret
            && let Err(e) = secret.resolve()
        {
            out.push(("proxy.cursor_secret".to_owned(), chain(&e)));
        }
        for (i, up) in self.upstreams.iter().enumerate() {
            for (name, secret) in &up.headers {
                if let Err(e) = secret.resolve() {
                    out.push((format!("upstream[{i}].headers"), format!("`{name}`: {}", chain(&e))));
                }
            }
            if let Some(oauth) = up.credential.oauth()
                && let Err(e) = oauth.client_secret.resolve()
            {
                out.push((format!("upstream[{i}].credential.client_secret"), chain(&e)));
            }
        }
        out
    }

    /// Every rule violation, as `(key path, message)`. Empty means valid.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut errors = self.telemetry.problems();
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
        if !(1..=crate::jsonrpc::MAX_DEPTH_LIMIT).contains(&self.listen.max_json_depth) {
            err("listen.max_json_depth".into(), "must be between 1 and 128");
        }
        if self.listen.legacy_session_idle.is_zero() {
            err("listen.legacy_session_idle".into(), "must be positive");
        }
        if let Some(tls) = &self.listen.tls {
            for (key, message) in check_listen_tls(&tls.cert, &tls.key) {
                err(format!("listen.tls.{key}"), &message);
            }
        }
        if self.cache.min_ttl > self.cache.max_ttl {
            err("cache.min_ttl".into(), "must not exceed cache.max_ttl");
        }
        if self.cache.max_entry_bytes > self.cache.max_bytes {
            err("cache.max_entry_bytes".into(), "must not exceed cache.max_bytes");
        }
        if let Some(secret) = &self.proxy.cursor_secret
            && let Err(e) = secret.resolve()
        {
            err("proxy.cursor_secret".into(), &chain(&e));
        }
        if self.proxy.cursor_ttl.is_zero() {
            err("proxy.cursor_ttl".into(), "must be positive");
        }
        if let Err(e) = self.admin.socket_addr() {
            err("admin.addr".into(), &format!("not a socket address: {e}"));
        }
        for (path, msg) in check_auth(&self.auth, self.listen.addr.ip().is_loopback()) {
            err(path, &msg);
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
            for (field, msg) in check_credential(up, &self.auth) {
                err(at(&field), &msg);
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
fn check_credential(up: &UpstreamConfig, auth: &AuthConfig) -> Vec<(String, String)> {
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
        err("token_url", m);
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
        err("resource", m);
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
            if oauth.proxy_requests != super::ProxyRequests::default() {
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
    // Each file on its own, so that every broken one is reported; then the pair together.
    let chain = |e: crate::tls::TlsError| crate::tls::error_chain(&e);
    if let Some(ca) = &up.tls_ca_file
        && let Err(e) = crate::tls::client_config(crate::tls::ClientTls { ca_file: Some(ca), identity: None })
    {
        errors.push(("tls_ca_file", chain(e)));
    }
    let cert = up.tls_client_cert.as_deref().map(crate::tls::load_certs);
    let key = up.tls_client_key.as_deref().map(crate::tls::load_key);
    match (cert, key) {
        (Some(Ok(_)), Some(Ok(_))) => {
            let identity = up.tls().and_then(|t| t.identity);
            if let Err(e) = crate::tls::client_config(crate::tls::ClientTls { ca_file: None, identity }) {
                errors.push(("tls_client_cert", chain(e)));
            }
        }
        (cert, key) => {
            if let Some(Err(e)) = cert {
                errors.push(("tls_client_cert", chain(e)));
            }
            if let Some(Err(e)) = key {
                errors.push(("tls_client_key", chain(e)));
            }
        }
    }
    errors
}

/// The `[auth]` rules, as `(key path, message)`.
fn check_auth(auth: &AuthConfig, loopback: bool) -> Vec<(String, String)> {
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
                        err("auth.jwt.jwks_url", m);
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
        errors.push(("auth.metadata.resource".into(), m));
    }
    errors
}

/// The listener's certificate and key: each readable, and usable together.
fn check_listen_tls(cert: &std::path::Path, key: &std::path::Path) -> Vec<(&'static str, String)> {
    let chain = |e: crate::tls::TlsError| crate::tls::error_chain(&e);
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

/// Checks a resource URI: absolute http(s), no fragment.
fn canonical_resource(r: &str) -> Result<(), String> {
    let uri: http::Uri = r.parse().map_err(|e| format!("`{r}` is not a URI: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!("`{r}` must be an absolute http(s) URI"));
    }
    if r.contains('#') {
        return Err(format!("`{r}` must not have a fragment"));
    }
    Ok(())
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

fn check_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("`{url}` must be an http:// or https:// URL")),
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
    fn auth_errors_are_reported_at_once() {
        let text = r#"
            [listen]
            addr = "0.0.0.0:8080"
            [auth]
            mode = ["api_key", "jwt"]
            [auth.jwt]
            issuer = "https://idp.example.com"
            audience = "https://mcp.example.com/mcp#frag"
            algorithms = ["HS256", "ES256"]
            [[auth.api_key]]
            principal = "a#b"
            sha256 = "abc"
            [[upstream]]
            name = "docs"
            url = "http://127.0.0.1:9001/mcp"
            [[upstream.allow]]
            tools = [""]
        "#;
        let errors = crate::config::parse(text).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "auth.jwt.jwks_url",
            "auth.jwt.algorithms",
            "auth.api_key[0].principal",
            "auth.api_key[0].sha256",
            "auth.metadata.resource",
            "upstream[0].allow",
        ] {
            assert!(paths.contains(&want), "{want} missing from {paths:?}");
        }
        // Anonymous on a public address is refused unless explicitly allowed.
        let open = "[listen]\naddr = \"0.0.0.0:8080\"\n[[upstream]]\nname = \"d\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        let errors = crate::config::parse(open).unwrap_err();
        assert_eq!(errors.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["auth.mode"]);
        assert!(crate::config::parse(&format!("{open}[auth]\nallow_anonymous = true\n")).is_ok());
    }

    #[test]
    fn credential_errors_are_reported_at_once() {
        let text = r#"
            [[upstream]]
            name = "a"
            url = "http://127.0.0.1:9001/mcp"
            headers = { Connection = { value = "close" }, Proxy-Authorization = { value = "x" }, X-Ok = { value = "1" } }
            [[upstream]]
            name = "b"
            command = ["srv"]
            headers = { authorization = { value = "Bearer s" } }
            [upstream.credential]
            kind = "client_credentials"
            token_url = "ftp://idp/token"
            client_id = ""
            client_secret = { env = "RESMUX_TEST_UNSET_SECRET" }
            max_cached_tokens = 5
            [[upstream]]
            name = "c"
            url = "http://127.0.0.1:9002/mcp"
            [upstream.credential]
            kind = "token_exchange"
            token_url = "http://idp/token"
            client_id = "resmux"
            client_secret = { value = "s" }
            max_cached_tokens = 0
        "#;
        let errors = crate::config::parse(text).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths.iter().filter(|p| **p == "upstream[0].headers").count(), 2, "{paths:?}");
        for want in [
            "upstream[1].credential.kind",
            "upstream[1].credential.token_url",
            "upstream[1].credential.client_id",
            "upstream[1].credential.client_secret",
            "upstream[1].credential.max_cached_tokens",
            "upstream[2].credential.max_cached_tokens",
            "upstream[2].credential.kind",
        ] {
            assert!(paths.contains(&want), "{want} missing from {paths:?}");
        }
        assert_eq!(
            paths.iter().filter(|p| **p == "upstream[1].credential.kind").count(),
            2,
            "stdio, and Authorization"
        );
        let unset = errors.iter().find(|e| e.path == "upstream[1].credential.client_secret").unwrap();
        assert!(unset.message.contains("RESMUX_TEST_UNSET_SECRET"), "{}", unset.message);
        // Unknown keys in the credential are refused, and a usable one passes.
        let bad = "[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\n[upstream.credential]\nkind = \"static\"\ncolour = 1\n";
        assert!(crate::config::parse(bad).is_err());
        let good = "[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\n[upstream.credential]\nkind = \"client_credentials\"\n\
                    token_url = \"https://idp/token\"\nclient_id = \"r\"\nclient_secret = { value = \"s\" }\nclient_auth = \"body\"\n";
        let good_with = |extra: &str| format!("{good}{extra}");
        assert!(crate::config::parse(&good_with("colour = 1\n")).is_err(), "unknown OAuth keys are refused");
        let config = crate::config::parse(good).unwrap();
        let oauth = config.upstreams[0].credential.oauth().unwrap();
        assert_eq!(
            (oauth.client_auth, oauth.refresh_before),
            (super::super::ClientAuth::Body, std::time::Duration::from_secs(30))
        );
    }

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

    fn errors_of(up: UpstreamConfig) -> Vec<(String, String)> {
        let config = Config { upstreams: vec![up], ..Config::default() };
        config.validate()
    }

    #[test]
    fn https_urls_are_accepted_and_tls_keys_need_one() {
        assert!(errors_of(UpstreamConfig::http("a", "https://mcp.example/mcp")).is_empty());
        let mut up = UpstreamConfig::http("a", "http://127.0.0.1:1/mcp");
        up.tls_ca_file = Some("/nonexistent/ca.pem".into());
        up.tls_client_cert = Some("/nonexistent/client.pem".into());
        let keys: Vec<_> = errors_of(up).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["upstream[0].tls_ca_file", "upstream[0].tls_client_cert"]);
        let up = UpstreamConfig::http("a", "ftp://x/mcp");
        assert_eq!(errors_of(up)[0].0, "upstream[0].url");
    }

    #[test]
    fn every_tls_file_problem_is_reported_at_once() {
        let mut up = UpstreamConfig::http("a", "https://mcp.example/mcp");
        up.tls_ca_file = Some("/nonexistent/ca.pem".into());
        up.tls_client_cert = Some("/nonexistent/client.pem".into());
        let errors = errors_of(up.clone());
        let keys: Vec<_> = errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["upstream[0].tls_client_key", "upstream[0].tls_ca_file", "upstream[0].tls_client_cert"]);
        assert!(errors[1].1.contains("/nonexistent/ca.pem"), "{errors:?}");
        up.tls_client_key = Some("/nonexistent/client.key".into());
        let keys: Vec<_> = errors_of(up).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["upstream[0].tls_ca_file", "upstream[0].tls_client_cert", "upstream[0].tls_client_key"]);
        let mut config = Config { upstreams: vec![UpstreamConfig::http("a", "http://x/mcp")], ..Config::default() };
        config.listen.tls =
            Some(super::super::ListenTls { cert: "/nonexistent/c.pem".into(), key: "/nonexistent/k.pem".into() });
        let keys: Vec<_> = config.validate().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["listen.tls.cert", "listen.tls.key"]);
    }

    #[test]
    fn an_otlp_endpoint_needs_the_otel_feature_and_an_http_url() {
        let up = "[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\n";
        let text = format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n{up}");
        match (crate::config::parse(&text), cfg!(feature = "otel")) {
            (Ok(c), true) => assert_eq!(c.telemetry.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318")),
            (Err(errors), false) => {
                assert_eq!(errors.len(), 1, "{errors:?}");
                assert_eq!(errors[0].path, "telemetry.otlp_endpoint");
                assert_eq!(errors[0].line, Some(2));
                assert!(errors[0].message.contains("built without") && errors[0].message.contains("--features otel"));
            }
            (other, _) => panic!("unexpected: {other:?}"),
        }
        let bad = crate::config::parse(&format!("[telemetry]\notlp_endpoint = \"grpc://c:4317\"\n{up}")).unwrap_err();
        assert!(bad.iter().any(|e| e.message.contains("http:// or https://")), "{bad:?}");
        let unknown = crate::config::parse(&format!("[telemetry]\nsampler = 1\n{up}")).unwrap_err();
        assert!(unknown[0].message.contains("sampler"), "{unknown:?}");
    }
}
