//! Cache hints of a result (`ttlMs`, `cacheScope`), with the upstream's defaults applied.

use crate::config::{CacheScopeDefault, UpstreamConfig};
use crate::jsonrpc::RawObject;

/// Freshness and scope of one result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub ttl_ms: u64,
    pub public: bool,
}

impl Hints {
    /// Reads `ttlMs` / `cacheScope` from a result, falling back to the upstream's `default_ttl`
    /// and `default_scope` when absent. Negative or malformed TTLs count as 0.
    pub fn of(result: &RawObject<'_>, upstream: &UpstreamConfig) -> Self {
        let ttl_ms = match result.get("ttlMs") {
            Some(raw) => raw.get().parse::<f64>().map_or(0, |v| if v > 0.0 { v as u64 } else { 0 }),
            None => upstream.default_ttl.as_millis() as u64,
        };
        let public = match result.get_str("cacheScope").as_deref() {
            Some("public") => true,
            Some(_) => false,
            None => upstream.default_scope == CacheScopeDefault::Public,
        };
        Self { ttl_ms, public }
    }

    /// Combines the hints of a merged page's contributors: the shortest TTL, and private if
    /// any contributor is private.
    pub fn combine(self, other: Hints) -> Hints {
        Hints { ttl_ms: self.ttl_ms.min(other.ttl_ms), public: self.public && other.public }
    }

    /// The scope as the wire spells it.
    pub fn scope(&self) -> &'static str {
        if self.public { "public" } else { "private" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_clamps() {
        let mut up = UpstreamConfig::http("a", "http://x/mcp");
        up.default_ttl = std::time::Duration::from_secs(2);
        let h = Hints::of(&RawObject::parse_str(r#"{"ttlMs":-5,"cacheScope":"public"}"#).unwrap(), &up);
        assert_eq!(h, Hints { ttl_ms: 0, public: true });
        let h = Hints::of(&RawObject::parse_str("{}").unwrap(), &up);
        assert_eq!(h, Hints { ttl_ms: 2000, public: false });
        let c = Hints { ttl_ms: 10, public: true }.combine(Hints { ttl_ms: 5, public: false });
        assert_eq!(c, Hints { ttl_ms: 5, public: false });
    }
}
