//! Open connections per peer address, for `max_connections_per_ip`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per peer address. An entry exists only while its count is positive, so
/// the map holds at most `max_connections` entries. IPv6 peers are counted per /64, the block
/// one host is normally given, so that one host cannot take a fresh address per connection.
pub struct PerIp {
    limit: usize,
    /// Whether loopback peers count too (`[listen] limit_loopback`); by default a process on
    /// the same host (a sidecar's app, a load generator) is not held to a per-address bound.
    loopback: bool,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in [`PerIp`]; dropping it frees the place.
pub struct IpSlot(Option<(Arc<PerIp>, IpAddr)>);

impl PerIp {
    pub fn new(limit: usize, loopback: bool) -> Self {
        Self { limit, loopback, counts: Mutex::new(HashMap::new()) }
    }

    /// A place for one more connection from `ip`, or `None` at the limit.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<IpSlot> {
        if self.limit == 0 || (!self.loopback && ip.to_canonical().is_loopback()) {
            return Some(IpSlot(None));
        }
        let key = ip_key(ip);
        let mut counts = self.counts.lock().expect("not poisoned");
        let n = counts.entry(key).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(IpSlot(Some((self.clone(), key))))
    }
}

/// The key a peer address is counted under: IPv4 (and IPv4-mapped IPv6) as is, IPv6 by /64.
pub fn ip_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        if let Some((table, key)) = self.0.take() {
            let mut counts = table.counts.lock().expect("not poisoned");
            if let Some(n) = counts.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_ip_counts_are_bounded_and_removed_at_zero() {
        let t = Arc::new(PerIp::new(2, false));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let (s1, s2) = (t.take(a).unwrap(), t.take(a).unwrap());
        assert!(t.take(a).is_none());
        assert!(t.take("10.0.0.2".parse().unwrap()).is_some(), "another address is unaffected");
        drop(s1);
        let s3 = t.take(a).expect("a freed place is reusable");
        drop((s2, s3));
        assert!(t.counts.lock().unwrap().is_empty(), "entries go when their count reaches 0");
    }

    #[test]
    fn ipv6_peers_share_their_64_and_mapped_v4_is_v4() {
        let t = Arc::new(PerIp::new(1, false));
        let _a = t.take("2001:db8::1".parse().unwrap()).unwrap();
        assert!(t.take("2001:db8::2".parse().unwrap()).is_none());
        assert!(t.take("2001:db8:0:1::1".parse().unwrap()).is_some());
        let _b = t.take("10.0.0.1".parse().unwrap()).unwrap();
        assert!(t.take("::ffff:10.0.0.1".parse().unwrap()).is_none());
    }

    #[test]
    fn loopback_peers_are_counted_only_when_configured() {
        let exempt = Arc::new(PerIp::new(1, false));
        let slots: Vec<_> = ["127.0.0.1", "127.0.0.1", "::1", "::1", "::ffff:127.0.0.1"]
            .iter()
            .map(|ip| exempt.take(ip.parse().unwrap()).expect("loopback is exempt by default"))
            .collect();
        assert!(exempt.counts.lock().unwrap().is_empty());
        let counted = Arc::new(PerIp::new(1, true));
        let _a = counted.take("127.0.0.1".parse().unwrap()).unwrap();
        assert!(counted.take("127.0.0.1".parse().unwrap()).is_none(), "limit_loopback = true counts it");
        drop(slots);
    }

    #[test]
    fn unlimited_tracks_nothing() {
        let t = Arc::new(PerIp::new(0, false));
        let slots: Vec<_> = (0..10).map(|_| t.take("10.0.0.1".parse().unwrap()).unwrap()).collect();
        assert!(t.counts.lock().unwrap().is_empty());
        drop(slots);
    }
}
