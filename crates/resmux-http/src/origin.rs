//! `Origin` and `Host` checks: a local server must refuse pages of other sites (403) and
//! DNS-rebinding hosts.

use std::net::SocketAddr;

/// Which origins and hosts may reach the endpoint.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    origins: Vec<String>,
    hosts: Vec<String>,
    loopback_only_hosts: bool,
}

const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]", "::1"];

impl OriginPolicy {
    pub fn new(origins: &[String], hosts: &[String], addr: SocketAddr) -> Self {
        Self {
            origins: origins.to_vec(),
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            loopback_only_hosts: hosts.is_empty() && addr.ip().is_loopback(),
        }
    }

    /// Whether an `Origin` header value is allowed.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        if self.origins.is_empty() {
            return is_loopback_origin(origin);
        }
        self.origins.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(origin))
    }

    /// Whether a `Host` (authority) value is allowed. Compared case-insensitively without
    /// allocating (this runs on every request).
    pub fn host_allowed(&self, authority: &str) -> bool {
        let host = strip_port(authority);
        if !self.hosts.is_empty() {
            return self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host) || h == "*");
        }
        !self.loopback_only_hosts || LOOPBACK_HOSTS.iter().any(|l| l.eq_ignore_ascii_case(host))
    }
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn is_loopback_origin(origin: &str) -> bool {
    let rest = match origin.split_once("://") {
        Some(("http" | "https", rest)) => rest,
        _ => return false,
    };
    if rest.contains('/') {
        return false;
    }
    LOOPBACK_HOSTS.contains(&strip_port(rest).to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_is_loopback() {
        let p = OriginPolicy::new(&[], &[], "127.0.0.1:8080".parse().unwrap());
        assert!(p.origin_allowed("http://localhost:3000"));
        assert!(p.origin_allowed("http://[::1]:1"));
        // Pages served over https (the TLS listener, a local dev server) are loopback too.
        assert!(p.origin_allowed("https://localhost"));
        assert!(p.origin_allowed("https://localhost:8443"));
        assert!(p.origin_allowed("https://127.0.0.1:8443"));
        assert!(p.origin_allowed("https://[::1]"));
        assert!(!p.origin_allowed("https://localhost.evil.example"));
        assert!(!p.origin_allowed("https://localhost:8443/path"));
        assert!(!p.origin_allowed("wss://localhost"));
        assert!(!p.origin_allowed("https://evil.example"));
        assert!(!p.origin_allowed("http://localhost.evil.example"));
        assert!(!p.origin_allowed("null"));
        assert!(p.host_allowed("127.0.0.1:8080"));
        assert!(p.host_allowed("localhost"));
        assert!(p.host_allowed("LocalHost:8080"));
        assert!(!p.host_allowed("evil.example:8080"));
    }

    #[test]
    fn configured_lists() {
        let p =
            OriginPolicy::new(&["https://app.example".into()], &["mcp.example".into()], "0.0.0.0:1".parse().unwrap());
        assert!(p.origin_allowed("https://app.example"));
        assert!(!p.origin_allowed("http://localhost"));
        assert!(p.host_allowed("mcp.example:443"));
        assert!(p.host_allowed("MCP.Example"));
        assert!(!p.host_allowed("other.example"));
        let open = OriginPolicy::new(&[], &[], "0.0.0.0:1".parse().unwrap());
        assert!(open.host_allowed("anything"));
    }
}
