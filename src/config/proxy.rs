//! `[proxy]` and `[log]`: proxy-wide identity and logging.

use std::time::Duration;

use serde::Deserialize;

use super::SecretSource;

/// Proxy-wide settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// `serverInfo.name` the proxy reports. Default `resmux`.
    pub name: String,
    /// Instructions placed first in the proxy's `server/discover` result, before those of the
    /// upstreams. Default none.
    pub instructions: Option<String>,
    /// Secret behind the proxy's signed tokens: list cursors and legacy `Mcp-Session-Id`s (each
    /// use gets its own key derived from it), so that every replica sharing the secret accepts
    /// the others' cursors and session ids. Default: random keys per process, which is right
    /// for a single replica.
    pub cursor_secret: Option<SecretSource>,
    /// How long a list cursor stays usable. Cursors are also bound to the principal they
    /// were issued to and to the list method. Default 1 h.
    #[serde(with = "humantime_serde")]
    pub cursor_ttl: Duration,
    /// `ttlMs` of the proxy's own `server/discover` result once every upstream has been
    /// discovered (before that it is 0). Default 60 s.
    #[serde(with = "humantime_serde")]
    pub discover_ttl: Duration,
    /// Most upstream calls held open at once while downstream clients answer a legacy
    /// server's questions (MRTR relay); beyond it, questions are declined. Default 1,024.
    pub max_held_calls: usize,
    /// Most held calls one authenticated principal may have at once; 0 = no per-principal bound
    /// (only `max_held_calls`). A question that would be held past it is declined: the call is
    /// answered `429`, `-32600`. Anonymous callers are bounded by `max_held_calls` alone.
    /// Default 16.
    pub max_held_calls_per_principal: usize,
    /// How long a held call waits for the client's retry before it is abandoned. Default 10 min.
    #[serde(with = "humantime_serde")]
    pub held_call_ttl: Duration,
    /// URI schemes whose resources the client fetches itself, without any server (the spec's
    /// `https://`): with several upstreams they are not namespaced, and a read or listen of
    /// one goes to the upstream that listed it. Case-insensitive. Default `["https"]`.
    pub passthrough_schemes: Vec<String>,
    /// Most passthrough URIs (and URI templates) remembered with the upstreams that listed
    /// them, least recently used forgotten first; a forgotten one is learnt again from the
    /// next list page fetched from its upstream. Default 10,000.
    pub max_passthrough_uris: u64,
    /// Longest resource URI (or URI template) a client may send, in bytes; a longer one is
    /// answered -32602 without reaching an upstream. Default 8 KiB.
    pub max_uri_bytes: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            name: "resmux".into(),
            instructions: None,
            cursor_secret: None,
            cursor_ttl: Duration::from_secs(3600),
            discover_ttl: Duration::from_secs(60),
            max_held_calls: 1024,
            max_held_calls_per_principal: 16,
            held_call_ttl: Duration::from_secs(600),
            passthrough_schemes: vec!["https".into()],
            max_passthrough_uris: 10_000,
            max_uri_bytes: 8 << 10,
        }
    }
}

impl ProxyConfig {
    /// Problems with the URI settings, as `(path, message)`.
    pub fn uri_problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, s) in self.passthrough_schemes.iter().enumerate() {
            // A scheme is what `mcp::uri::scheme` reads before the `:`.
            if crate::mcp::uri::scheme(&format!("{s}:")) != Some(s.as_str()) {
                out.push((
                    format!("proxy.passthrough_schemes[{i}]"),
                    format!("`{s}` is not a URI scheme (a letter, then letters, digits, `+`, `-` or `.`)"),
                ));
            }
        }
        if self.max_passthrough_uris == 0 {
            out.push(("proxy.max_passthrough_uris".into(), "must be positive".into()));
        }
        if !(64..=1 << 20).contains(&self.max_uri_bytes) {
            out.push(("proxy.max_uri_bytes".into(), "must be between 64 and 1048576".into()));
        }
        out
    }
}

/// Log output.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `tracing` filter directive, e.g. `info` or `resmux=debug`. `RUST_LOG` overrides it.
    /// Default `info`.
    pub level: String,
    /// `text` or `json`. Default `text`.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { level: "info".into(), format: LogFormat::Text }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Traces (`[telemetry]`): where to export them over OTLP/HTTP. Needs a resmux built with the
/// `otel` cargo feature; without it a configured endpoint is a config error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP (protobuf) collector, e.g. `http://127.0.0.1:4318`; spans go to its
    /// `/v1/traces` (unless the URL already names a path). Unset: no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans. Default `resmux`.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { otlp_endpoint: None, service_name: "resmux".into() }
    }
}

impl TelemetryConfig {
    /// Problems with these settings, as `(path, message)`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let Some(endpoint) = &self.otlp_endpoint else { return out };
        if !cfg!(feature = "otel") {
            out.push((
                "telemetry.otlp_endpoint".into(),
                "this resmux was built without OpenTelemetry export (the `otel` cargo feature); \
                 rebuild with `--features otel` or remove the setting"
                    .into(),
            ));
        }
        match endpoint.parse::<http::Uri>() {
            Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {}
            _ => out.push(("telemetry.otlp_endpoint".into(), "must be an http:// or https:// URL".into())),
        }
        if self.service_name.is_empty() {
            out.push(("telemetry.service_name".into(), "must not be empty".into()));
        }
        out
    }
}
