//! `[admin]`: the operations listener (metrics, health, the admin page), separate from the MCP
//! listener so that probes and dashboards never share a port, a connection bound or a Host
//! policy with MCP clients.

use std::time::Duration;

use serde::Deserialize;

/// Where the admin listener binds and how the proxy drains on shutdown.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Socket address of the admin listener, e.g. `127.0.0.1:9090`; empty (the default)
    /// disables it. It serves `/metrics`, `/healthz`, `/readyz`, `/admin/upstreams`,
    /// `/admin/stats` and the admin page at `/`, and is never reachable through the MCP
    /// listener. `POST /admin/reload` and `POST /admin/cache/purge` change state: they are
    /// refused with a foreign `Origin`.
    pub addr: String,
    /// Host names accepted in the admin listener's `Host` header. Empty (the default) accepts
    /// loopback names when `addr` is loopback, and any host otherwise (a probe from a
    /// kubelet names the pod IP).
    pub allowed_hosts: Vec<String>,
    /// How long shutdown waits for in-flight requests to finish (and listens to end with their
    /// result) before upstream listens and stdio children are stopped. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// Largest request body the admin listener reads (a cache purge's JSON); a larger one gets
    /// 400. Default 64 KiB.
    pub max_body_bytes: u64,
    /// Entries the admin page's Cache view lists by hits, and again by bytes. Default 20.
    pub cache_view_top: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            addr: String::new(),
            allowed_hosts: Vec::new(),
            drain_timeout: Duration::from_secs(10),
            max_body_bytes: 64 * 1024,
            cache_view_top: 20,
        }
    }
}

impl AdminConfig {
    /// The address to bind, when the listener is enabled; an error names a malformed one.
    pub fn socket_addr(&self) -> Result<Option<std::net::SocketAddr>, std::net::AddrParseError> {
        if self.addr.is_empty() { Ok(None) } else { self.addr.parse().map(Some) }
    }
}
