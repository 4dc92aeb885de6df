//! Which replica should hold each upstream's listen: rendezvous (highest-random-weight)
//! hashing of (upstream, replica) over the live replicas. Every replica computes the same
//! answer from the same live set, the listens spread evenly, and a replica that joins or
//! leaves moves only the upstreams it wins or held: the others keep their holder. Also what
//! this replica knows of who holds each listen and which replicas are live.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::Cluster;

/// The weight of `replica` for `upstream` (a stable hash: replicas of different builds agree).
fn weight(upstream: &str, replica: &str) -> u64 {
    let mut h = Sha256::new();
    h.update((upstream.len() as u64).to_be_bytes());
    h.update(upstream.as_bytes());
    h.update(replica.as_bytes());
    let out = h.finalize();
    u64::from_be_bytes([out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]])
}

/// The replica of `live` that should hold `upstream`'s listen (`None` when none is live).
pub fn preferred<'a>(upstream: &str, live: &'a [String]) -> Option<&'a str> {
    live.iter().max_by_key(|r| (weight(upstream, r), r.as_str())).map(String::as_str)
}

impl Cluster {
    /// Records which replica holds upstream `index`'s listen, from its lease's value.
    pub(super) fn note_holder(&self, index: usize, lease: Option<&str>) {
        let holder = lease.map(|v| v.rsplit_once(':').map_or(v, |(replica, _)| replica));
        self.0.holders[index].send_if_modified(|old| {
            let changed = old.as_deref() != holder;
            if changed {
                *old = holder.map(Arc::from);
            }
            changed
        });
    }

    /// The live replicas (ids, sorted), as the last heartbeat saw them: the set leases are
    /// spread over.
    pub fn live_replicas(&self) -> Arc<[String]> {
        self.0.live.borrow().clone()
    }

    /// The replica holding upstream `index`'s listen, as last seen (`None`: none known).
    pub fn listen_holder(&self, index: usize) -> Option<Arc<str>> {
        self.0.holders.get(index).and_then(|h| h.borrow().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(upstreams: &[String], live: &[String]) -> Vec<String> {
        upstreams.iter().map(|u| preferred(u, live).unwrap().to_owned()).collect()
    }

    #[test]
    fn listens_spread_and_a_join_or_a_leave_moves_only_its_share() {
        let upstreams: Vec<String> = (0..1000).map(|i| format!("upstream-{i}")).collect();
        let live: Vec<String> = (0..10).map(|i| format!("{:016x}", i * 7919 + 13)).collect();
        let before = owners(&upstreams, &live);
        for r in &live {
            let n = before.iter().filter(|o| *o == r).count();
            assert!((50..=150).contains(&n), "replica {r} holds {n} of 1000");
        }
        // A replica joins: it takes only upstreams, from anyone, and about 1/11 of them.
        let mut joined = live.clone();
        joined.push("00000000deadbeef".into());
        let after = owners(&upstreams, &joined);
        let moved: Vec<usize> = (0..1000).filter(|&i| before[i] != after[i]).collect();
        assert!(moved.iter().all(|&i| after[i] == "00000000deadbeef"));
        assert!((40..=140).contains(&moved.len()), "{} moved on a join", moved.len());
        // A replica leaves: only the upstreams it held move.
        let left: Vec<String> = live[1..].to_vec();
        let after = owners(&upstreams, &left);
        for i in 0..1000 {
            if before[i] != live[0] {
                assert_eq!(before[i], after[i], "upstream {i} moved though its holder stayed");
            }
        }
        assert_eq!(preferred("docs", &[]), None);
    }
}
