//! Cache hints of a result (`ttlMs`, `cacheScope`), with the upstream's defaults applied and
//! judged by the operator's policy: a `public` the upstream may not be trusted with is kept per
//! caller, and a TTL past `max_ttl` is lowered (DESIGN §4).

use std::time::Duration;

use crate::config::{CacheScopeDefault, UpstreamConfig};
use crate::jsonrpc::RawObject;
use crate::telemetry::metrics::{NarrowReason, UpstreamMeter};

/// Freshness and scope of one result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub ttl_ms: u64,
    pub public: bool,
}

/// Hints as the proxy will honour them, and what it changed on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    pub hints: Hints,
    /// The upstream said (or defaulted to) `public`, and is not believed.
    pub narrowed: bool,
    /// The `ttlMs` was lowered to the `max_ttl` in force.
    pub clamped: bool,
}

impl Judged {
    /// Whether the result's own `ttlMs`/`cacheScope` must be rewritten before a client sees it.
    pub fn changed(&self) -> bool {
        self.narrowed || self.clamped
    }

    /// Counts what was changed in the upstream's metrics.
    pub fn count(&self, meter: &UpstreamMeter) {
        if self.narrowed {
            meter.scope_narrowed(NarrowReason::Untrusted);
        }
        if self.clamped {
            meter.ttl_clamped();
        }
    }
}

impl Hints {
    /// Reads `ttlMs` / `cacheScope` from a result, falling back to the upstream's `default_ttl`
    /// and `default_scope` when absent. Negative or malformed TTLs count as 0. A TTL above
    /// `max_ttl` (the `[cache]` one, or the upstream's own when lower) comes down to it; a
    /// `public` scope holds only where the upstream's `trust_public` policy shares it.
    pub fn of(result: &RawObject<'_>, upstream: &UpstreamConfig, max_ttl: Duration) -> Judged {
        let ttl_ms = match result.get("ttlMs") {
            Some(raw) => raw.get().parse::<f64>().map_or(0, |v| if v > 0.0 { v as u64 } else { 0 }),
            None => upstream.default_ttl.as_millis() as u64,
        };
        let cap = upstream.max_ttl.map_or(max_ttl, |own| own.min(max_ttl)).as_millis() as u64;
        let claimed = match result.get_str("cacheScope").as_deref() {
            Some("public") => true,
            Some(_) => false,
            None => upstream.default_scope == CacheScopeDefault::Public,
        };
        let public = claimed && upstream.public_policy().shares();
        Judged { hints: Hints { ttl_ms: ttl_ms.min(cap), public }, narrowed: claimed && !public, clamped: ttl_ms > cap }
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
    use crate::config::{Credential, OAuthClient, SecretSource, TrustPublic};

    const HOUR: Duration = Duration::from_secs(3600);

    fn judge(text: &str, up: &UpstreamConfig) -> Judged {
        Hints::of(&RawObject::parse_str(text).unwrap(), up, HOUR)
    }

    fn exchanging() -> UpstreamConfig {
        let mut up = UpstreamConfig::http("a", "http://x/mcp");
        up.credential = Credential::TokenExchange(OAuthClient {
            token_url: "http://127.0.0.1:1/token".into(),
            client_id: "proxy".into(),
            client_secret: SecretSource { value: Some("s".into()), ..SecretSource::default() },
            client_auth: Default::default(),
            scope: None,
            audience: None,
            resource: None,
            refresh_before: Duration::from_secs(30),
            default_lifetime: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            max_cached_tokens: None,
            proxy_requests: Default::default(),
            tls_ca_file: None,
        });
        up
    }

    #[test]
    fn defaults_and_clamps() {
        let mut up = UpstreamConfig::http("a", "http://x/mcp");
        up.default_ttl = Duration::from_secs(2);
        let h = judge(r#"{"ttlMs":-5,"cacheScope":"public"}"#, &up).hints;
        assert_eq!(h, Hints { ttl_ms: 0, public: true });
        let h = judge("{}", &up).hints;
        assert_eq!(h, Hints { ttl_ms: 2000, public: false });
        let c = Hints { ttl_ms: 10, public: true }.combine(Hints { ttl_ms: 5, public: false });
        assert_eq!(c, Hints { ttl_ms: 5, public: false });
    }

    #[test]
    fn a_ttl_past_max_ttl_comes_down_to_the_lower_of_the_two_caps() {
        let mut up = UpstreamConfig::http("a", "http://x/mcp");
        let day = judge(r#"{"ttlMs":86400000,"cacheScope":"public"}"#, &up);
        assert_eq!((day.hints.ttl_ms, day.clamped), (3_600_000, true), "[cache] max_ttl");
        up.max_ttl = Some(Duration::from_secs(60));
        let day = judge(r#"{"ttlMs":86400000}"#, &up);
        assert_eq!((day.hints.ttl_ms, day.clamped), (60_000, true), "the upstream's own, lower cap");
        let short = judge(r#"{"ttlMs":5000}"#, &up);
        assert_eq!((short.hints.ttl_ms, short.clamped), (5000, false));
        up.max_ttl = Some(Duration::from_secs(7200));
        assert_eq!(judge(r#"{"ttlMs":86400000}"#, &up).hints.ttl_ms, 3_600_000, "never above [cache]'s");
    }

    #[test]
    fn public_is_believed_only_where_the_upstream_cannot_tell_callers_apart() {
        let public = r#"{"ttlMs":1000,"cacheScope":"public"}"#;
        let mut stat = UpstreamConfig::http("a", "http://x/mcp");
        assert_eq!(
            judge(public, &stat),
            Judged { hints: Hints { ttl_ms: 1000, public: true }, narrowed: false, clamped: false }
        );
        let mut exchange = exchanging();
        let j = judge(public, &exchange);
        assert!(!j.hints.public && j.narrowed, "auto behind token exchange keeps it per caller");
        exchange.default_scope = CacheScopeDefault::Public;
        assert!(judge(r#"{"ttlMs":1000}"#, &exchange).narrowed, "a defaulted public is narrowed too");
        exchange.trust_public = TrustPublic::Always;
        assert!(judge(public, &exchange).hints.public, "trust_public = true is the operator's word");
        stat.trust_public = TrustPublic::Never;
        assert!(judge(public, &stat).narrowed, "trust_public = false never shares");
        let private = judge(r#"{"ttlMs":1000,"cacheScope":"private"}"#, &exchanging());
        assert!(!private.hints.public && !private.narrowed, "private stays private, not counted");
    }
}
