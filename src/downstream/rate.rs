//! The per-principal request rate (`[listen] requests_per_second`, `request_burst`): a GCRA
//! token bucket per caller ([`governor`]), checked after authentication on every request to
//! the MCP endpoint.
//!
//! Keys: an authenticated caller by its principal id; an anonymous caller by its peer IP
//! address (IPv6 per /64, as `max_connections_per_ip` counts), so that anonymous clients do not
//! share one bucket; an anonymous caller with no known peer (none today) by one shared key.
//! An anonymous caller on a loopback address is not limited unless `[listen] limit_loopback`:
//! it is a process on the same host (a sidecar's app, a load generator), which one address
//! cannot tell apart from its neighbours, and which the host's own limits already govern.
//!
//! Bounded: governor's keyed store keeps a cell per key it has seen. [`RateLimit::prune`]
//! drops every key whose bucket has refilled (`retain_recent`: such a key is indistinguishable
//! from an absent one, so nothing is forgotten that matters) and runs every
//! [`PRUNE_EVERY`] on the app's task tracker, so the store holds at most the keys active within
//! the last period: authenticated principals (bounded by the identity provider) plus distinct
//! peer addresses (bounded by `max_connections` connections over the period).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Principal;

/// How often keys with a full bucket are dropped.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Who a bucket belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// Equal and hashed by its id; cloned as a reference count, so a check allocates nothing.
    Principal(Principal),
    Peer(IpAddr),
    Anonymous,
}

/// The request-rate limiter; no limiter inside when the rate is 0 (off). Cheap to clone.
#[derive(Clone)]
pub struct RateLimit {
    limiter: Option<Arc<DefaultKeyedRateLimiter<Key>>>,
    /// Whether anonymous loopback peers are limited by address too (`[listen] limit_loopback`).
    loopback: bool,
}

impl RateLimit {
    /// `per_second` sustained, `burst` at once (0 = twice `per_second`); `per_second` 0 = off.
    /// Anonymous callers on a loopback address are exempt unless `loopback`.
    pub fn new(per_second: u32, burst: u32, loopback: bool) -> Self {
        let Some(rate) = NonZeroU32::new(per_second) else { return Self::off() };
        let burst = NonZeroU32::new(burst).unwrap_or(rate.saturating_mul(NonZeroU32::MIN.saturating_add(1)));
        let limiter = RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst));
        Self { limiter: Some(Arc::new(limiter)), loopback }
    }

    /// A limiter that allows every request.
    pub fn off() -> Self {
        Self { limiter: None, loopback: false }
    }

    /// Takes one request from the caller's bucket, or says how long until one is available.
    pub fn check(&self, principal: &Principal, peer: Option<IpAddr>) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else { return Ok(()) };
        let key = match (principal.identity(), peer) {
            (Some(_), _) => Key::Principal(principal.clone()),
            (None, Some(ip)) if !self.loopback && ip.to_canonical().is_loopback() => return Ok(()),
            (None, Some(ip)) => Key::Peer(crate::downstream::per_ip::ip_key(ip)),
            (None, None) => Key::Anonymous,
        };
        limiter.check_key(&key).map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Drops the keys whose bucket is full again; returns how many keys remain.
    pub fn prune(&self) -> usize {
        let Some(limiter) = &self.limiter else { return 0 };
        limiter.retain_recent();
        limiter.shrink_to_fit();
        limiter.len()
    }

    /// Prunes every [`PRUNE_EVERY`] until `cancel`.
    pub fn start_pruner(&self, cancel: &CancellationToken, tracker: &TaskTracker) {
        if self.limiter.is_none() {
            return;
        }
        let me = self.clone();
        crate::periodic::every(PRUNE_EVERY, cancel, tracker, move || {
            me.prune();
        });
    }
}

/// The `Retry-After` value for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_and_peers_have_their_own_buckets() {
        let rate = RateLimit::new(1, 2, false);
        let (a, b) = (Principal::user("a", &[], &[]), Principal::user("b", &[], &[]));
        assert!(rate.check(&a, None).is_ok() && rate.check(&a, None).is_ok());
        let wait = rate.check(&a, None).unwrap_err();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(rate.check(&b, None).is_ok(), "another principal is unaffected");
        let (p, q): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let anon = Principal::Anonymous;
        assert!(rate.check(&anon, Some(p)).is_ok() && rate.check(&anon, Some(p)).is_ok());
        assert!(rate.check(&anon, Some(p)).is_err());
        assert!(rate.check(&anon, Some(q)).is_ok(), "another address is unaffected");
        // An authenticated caller on a throttled address keeps its own bucket.
        assert!(rate.check(&b, Some(p)).is_ok());
    }

    #[test]
    fn anonymous_loopback_peers_are_limited_only_when_configured() {
        let anon = Principal::Anonymous;
        let locals: [IpAddr; 3] = ["127.0.0.1".parse().unwrap(), "127.8.9.10".parse().unwrap(), "::1".parse().unwrap()];
        let exempt = RateLimit::new(1, 1, false);
        for ip in locals {
            assert!((0..100).all(|_| exempt.check(&anon, Some(ip)).is_ok()), "{ip} exempt by default");
        }
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!((0..100).all(|_| exempt.check(&anon, Some(mapped)).is_ok()), "IPv4-mapped loopback too");
        let user = Principal::user("u", &[], &[]);
        assert!(exempt.check(&user, Some(locals[0])).is_ok());
        assert!(exempt.check(&user, Some(locals[0])).is_err(), "a principal keeps its own bucket on loopback");
        let remote: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(exempt.check(&anon, Some(remote)).is_ok());
        assert!(exempt.check(&anon, Some(remote)).is_err(), "remote peers are still limited");
        let limited = RateLimit::new(1, 1, true);
        assert!(limited.check(&anon, Some(locals[0])).is_ok());
        assert!(limited.check(&anon, Some(locals[0])).is_err(), "limit_loopback = true limits loopback");
    }

    #[test]
    fn off_allows_everything_and_tracks_nothing() {
        let rate = RateLimit::new(0, 5, false);
        for _ in 0..1000 {
            assert!(rate.check(&Principal::Anonymous, None).is_ok());
        }
        assert_eq!(rate.prune(), 0);
    }

    #[test]
    fn prune_keeps_keys_still_refilling() {
        // 1/s with a burst of 1: a bucket used once stays in use for a second.
        let rate = RateLimit::new(1, 1, false);
        for i in 0..100 {
            let _ = rate.check(&Principal::user(&format!("p{i}"), &[], &[]), None);
        }
        assert_eq!(rate.prune(), 100);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
    }
}
