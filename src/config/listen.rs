//! `[listen]`: the downstream HTTP endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Where the proxy listens and what it accepts there.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// Socket address. Default `127.0.0.1:8080`; local servers should stay on loopback.
    pub addr: SocketAddr,
    /// The one MCP endpoint path. Default `/mcp`.
    pub path: String,
    /// Largest accepted request body; larger bodies get 413 before they are read. Default 1 MiB.
    pub max_body_bytes: usize,
    /// Origins allowed in an `Origin` header (exact `scheme://host[:port]`, or `*`). Empty (the
    /// default) allows loopback origins only: `http(s)://localhost|127.0.0.1|[::1]` on any port.
    pub allowed_origins: Vec<String>,
    /// Host names allowed in the `Host` header (DNS-rebinding protection). Empty (the default)
    /// allows any host when `addr` is not loopback, and only loopback names when it is.
    pub allowed_hosts: Vec<String>,
    /// Most concurrent downstream connections; further connections wait in the accept queue.
    /// Default 10,000.
    pub max_connections: usize,
    /// Also accept HTTP/2: with prior knowledge (h2c) in clear text, offered by ALPN under
    /// `tls`. Default false: MCP clients speak HTTP/1.1 in clear text, and the dual-protocol
    /// connection costs ~9 KiB more per open connection (10,000 idle listen streams: 304 MB
    /// instead of 212 MB).
    pub http2: bool,
    /// Path serving Prometheus metrics on the same listener (GET). Empty disables it.
    /// Default `/metrics`.
    pub metrics_path: String,
    /// Most legacy (2025-xx) sessions held at once. A session is minted by a legacy
    /// `initialize` and holds the client's `resources/subscribe` set and its standalone GET
    /// stream; at the bound, sessions idle past `legacy_session_idle` are evicted first, and
    /// if none is, a new `initialize` gets 429. A session that has subscribed or holds its GET
    /// stream also counts as one listen toward the `[hub]` limits. Default 10,000.
    pub max_legacy_sessions: usize,
    /// A legacy session with no open GET stream that sends nothing for this long is evicted:
    /// its subscriptions are dropped and its id gets 404, so the client initializes again.
    /// Default 30 min.
    #[serde(with = "humantime_serde")]
    pub legacy_session_idle: Duration,
    /// Serve HTTPS instead of clear-text HTTP, with this certificate and key. ALPN offers
    /// `http/1.1`, and `h2` too when `http2` is set. Default: none (clear text).
    pub tls: Option<ListenTls>,
}

/// `[listen.tls]`: the listener's certificate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenTls {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            path: "/mcp".into(),
            max_body_bytes: 1 << 20,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_connections: 10_000,
            metrics_path: "/metrics".into(),
            http2: false,
            max_legacy_sessions: 10_000,
            legacy_session_idle: Duration::from_secs(30 * 60),
            tls: None,
        }
    }
}
