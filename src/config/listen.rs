//! `[listen]`: the downstream HTTP endpoint.

use std::net::SocketAddr;

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
        }
    }
}
