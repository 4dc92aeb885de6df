//! Cross-field rules of a [`Config`], each violation reported with its key path.

mod auth;
mod tls_files;
mod upstream;
mod url;

use std::collections::HashSet;

use super::Config;
use auth::{check_auth, check_listen_tls};
use upstream::{check_credential, check_upstream};

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
    crate::error::chain(e)
}

/// Longest upstream name: it becomes a URI scheme prefix and a tool-name prefix.
const MAX_NAME: usize = 63;

/// Largest `listen.http2_max_concurrent_streams`: one connection's streams are one task
/// each, so a client cannot ask for an unbounded number through one socket.
const MAX_H2_STREAMS: u32 = 100_000;

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
        for (key, secret) in
            [("key_secret", &self.cluster.key_secret), ("redis_url_secret", &self.cluster.redis_url_secret)]
        {
            if let Some(secret) = secret
                && let Err(e) = secret.resolve()
            {
                out.push((format!("cluster.{key}"), chain(&e)));
            }
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
        let mut errors = self.cluster.problems(self.proxy.cursor_secret.is_some());
        if self.cluster.enabled() {
            let c = &self.cluster;
            let files = [c.tls_ca_file.as_deref(), c.tls_cert_file.as_deref(), c.tls_key_file.as_deref()];
            let keys = ["tls_ca_file", "tls_cert_file", "tls_key_file"];
            for (key, msg) in tls_files::check_tls_files(keys, files[0], files[1], files[2]) {
                errors.push((format!("cluster.{key}"), msg));
            }
        }
        errors.extend(self.telemetry.problems());
        let mut err = |path: String, msg: &str| errors.push((path, msg.to_owned()));
        if !self.listen.path.starts_with('/') {
            err("listen.path".into(), "must start with `/`");
        }
        if self.reload.max_upstreams < self.upstreams.len() {
            err("reload.max_upstreams".into(), "must be at least the number of [[upstream]] sections");
        }
        if self.reload.poll_interval.is_zero() {
            err("reload.poll_interval".into(), "must be positive");
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
        if !(1..=MAX_H2_STREAMS).contains(&self.listen.http2_max_concurrent_streams) {
            err("listen.http2_max_concurrent_streams".into(), &format!("must be between 1 and {MAX_H2_STREAMS}"));
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
        for (path, msg) in self.proxy.uri_problems() {
            err(path, &msg);
        }
        if let Err(e) = self.admin.socket_addr() {
            err("admin.addr".into(), &format!("not a socket address: {e}"));
        }
        if self.admin.max_body_bytes == 0 {
            err("admin.max_body_bytes".into(), "must be positive");
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

#[cfg(test)]
mod tests {
    use super::upstream::valid_name;
    use super::*;
    use crate::config::UpstreamConfig;

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
