//! One replica dies: the one holding the most leases, killed (nothing released). Measured:
//! which leases moved, and how long until every upstream's lease is held by a survivor,
//! against `lease_ttl` (the target: within it).

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::SimOptions;
use super::replica::{Handle, Stop};

/// What one replica's death did to the leases.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KillReport {
    /// Leases the killed replica held.
    pub victim_held: usize,
    /// Upstreams whose holder is another replica afterwards than before.
    pub moved: usize,
    /// … of which the killed replica did not hold (rendezvous hashing: should be 0).
    pub moved_others: usize,
    /// From the kill until every upstream had exactly one live holder again.
    pub reheld_ms: Option<u64>,
    pub lease_ttl_ms: u64,
    /// Whether `reheld_ms` is within `lease_ttl`.
    pub within_lease_ttl: bool,
}

/// How often the holders are looked at after the kill.
const POLL: Duration = Duration::from_millis(5);

/// Kills the replica holding the most leases, waits (at most 5 lease periods) until every
/// upstream has one live holder, and reports the moves.
pub(super) async fn kill_one(o: &SimOptions, handles: &mut Vec<Handle>) -> KillReport {
    let holders = |hs: &[Handle]| (0..o.upstreams).map(|u| super::holder(hs, u)).collect::<Vec<_>>();
    let Some(victim) = (0..handles.len()).max_by_key(|&i| handles[i].held(o.upstreams).len()) else {
        return KillReport::default();
    };
    let victim_held = handles[victim].held(o.upstreams).len();
    // Holders by replica id, since the indexes shift once the victim is gone.
    let before: Vec<Option<String>> =
        holders(handles).into_iter().map(|h| h.map(|i| handles[i].cluster.replica().to_owned())).collect();
    let victim_id = handles[victim].cluster.replica().to_owned();
    let dead = handles.remove(victim);
    let t0 = Instant::now();
    dead.stop(Stop::Kill).await;
    let deadline = t0 + 5 * o.lease_ttl;
    let mut reheld_ms = None;
    while Instant::now() < deadline {
        if holders(handles).iter().all(Option::is_some) {
            reheld_ms = Some(t0.elapsed().as_millis() as u64);
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let after: Vec<Option<String>> =
        holders(handles).into_iter().map(|h| h.map(|i| handles[i].cluster.replica().to_owned())).collect();
    let moved: Vec<usize> = (0..o.upstreams).filter(|&u| before[u] != after[u]).collect();
    let moved_others = moved.iter().filter(|&&u| before[u].as_deref() != Some(victim_id.as_str())).count();
    let lease_ttl_ms = o.lease_ttl.as_millis() as u64;
    KillReport {
        victim_held,
        moved: moved.len(),
        moved_others,
        reheld_ms,
        lease_ttl_ms,
        within_lease_ttl: reheld_ms.is_some_and(|ms| ms <= lease_ttl_ms),
    }
}
