//! The state behind interest: what this replica last wrote, and (while holding the listen)
//! every other replica's set with per-member counts, so the union is kept exact by changes
//! alone.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use tokio::time::Instant;

use resmux_proto::mcp::list::Capability;
use resmux_proto::mcp::notify::Filter;

/// Notices kept while a read is in flight; past it the holder reads everything again.
pub(super) const MAX_DURING_READ: usize = 4096;

/// One upstream slot's interest, on one replica.
#[derive(Default)]
pub(crate) struct Interest {
    /// What this replica last wrote to Redis (`None`: unknown, the next write is whole).
    pub(super) mine: Mutex<Mine>,
    /// While holding the listen: every other replica's set, and their union.
    pub(super) views: Mutex<Views>,
}

impl Interest {
    /// Forgets everything: the slot now stands for another upstream (or none).
    pub(crate) fn reset(&self) {
        *self.mine.lock().expect("interest") = Mine::default();
        *self.views.lock().expect("interest") = Views::default();
    }

    /// Makes the next write whole (and announced): the set in Redis may hold members this
    /// replica no longer knows it wrote.
    pub(crate) fn forget_written(&self) {
        self.mine.lock().expect("interest").members = None;
    }
}

#[derive(Default)]
pub(super) struct Mine {
    pub(super) members: Option<BTreeSet<String>>,
    pub(super) whole_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Views {
    pub(super) sets: HashMap<String, BTreeSet<String>>,
    counts: HashMap<String, u32>,
    pub(super) union: Filter,
    /// The live replicas that run the upstream (this one included), as last read.
    pub(super) runners: BTreeSet<String>,
    /// When every set was last read (`None`: never, or the views are stale).
    pub(super) read_at: Option<Instant>,
    /// Replicas whose whole set must be read.
    pub(super) pending: BTreeSet<String>,
    /// Notices received while a read is in flight (`None`: no read in flight).
    pub(super) during: Option<Vec<Delta>>,
}

/// A change of one replica's interest, read off the bus.
#[derive(Clone)]
pub(super) struct Delta {
    pub(super) replica: String,
    pub(super) whole: bool,
    pub(super) add: Vec<String>,
    pub(super) del: Vec<String>,
}

/// A filter as set members: its URIs, and `#list:<kind>` for each list it wants (no URI
/// starts with `#`).
pub(super) fn members(filter: &Filter) -> BTreeSet<String> {
    let lists = Capability::ALL.into_iter().filter(|k| filter.list(*k)).map(|k| format!("#list:{}", k.name()));
    filter.uris.iter().cloned().chain(lists).collect()
}

impl Views {
    pub(super) fn apply(&mut self, d: &Delta) {
        for m in &d.add {
            self.add(&d.replica, m);
        }
        for m in &d.del {
            self.del(&d.replica, m);
        }
    }

    fn add(&mut self, replica: &str, member: &str) {
        let set = self.sets.entry(replica.to_owned()).or_default();
        if set.insert(member.to_owned()) {
            let n = self.counts.entry(member.to_owned()).or_insert(0);
            *n += 1;
            if *n == 1 {
                set_member(&mut self.union, member, true);
            }
        }
    }

    fn del(&mut self, replica: &str, member: &str) {
        if self.sets.get_mut(replica).is_some_and(|s| s.remove(member))
            && let Some(n) = self.counts.get_mut(member)
        {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(member);
                set_member(&mut self.union, member, false);
            }
        }
    }

    /// Makes `replica`'s set `now` (`None`: gone).
    pub(super) fn replace(&mut self, replica: &str, now: Option<BTreeSet<String>>) {
        let old = self.sets.get(replica).cloned().unwrap_or_default();
        let now = now.unwrap_or_default();
        for m in old.difference(&now) {
            self.del(replica, m);
        }
        for m in now.difference(&old) {
            self.add(replica, m);
        }
        if self.sets.get(replica).is_some_and(BTreeSet::is_empty) {
            self.sets.remove(replica);
        }
    }
}

fn set_member(f: &mut Filter, member: &str, on: bool) {
    match member.strip_prefix("#list:") {
        Some(kind) => {
            if let Some(k) = Capability::ALL.into_iter().find(|k| k.name() == kind) {
                f.set_list(k, on);
            }
        }
        None if on => {
            f.uris.insert(member.to_owned());
        }
        None => {
            f.uris.remove(member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(replica: &str, add: &[&str], del: &[&str]) -> Delta {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Delta { replica: replica.into(), whole: false, add: owned(add), del: owned(del) }
    }

    #[test]
    fn the_union_drops_a_member_only_when_no_replica_wants_it() {
        let mut v = Views::default();
        v.apply(&delta("a", &["x://1", "x://2", "#list:resources"], &[]));
        v.apply(&delta("b", &["x://2"], &[]));
        v.apply(&delta("a", &[], &["x://2", "#list:resources"]));
        assert_eq!(v.union.uris, ["x://1", "x://2"].map(String::from).into());
        assert!(!v.union.list(Capability::Resources));
        // A read replaces one replica's set; replayed notices land on top of it.
        v.replace("b", Some(["x://3".to_string()].into()));
        v.apply(&delta("b", &["x://4"], &["x://3"]));
        assert_eq!(v.union.uris, ["x://1", "x://4"].map(String::from).into());
        v.replace("a", None);
        v.apply(&delta("a", &[], &["x://1"]));
        assert_eq!(v.union.uris, ["x://4"].map(String::from).into());
        assert_eq!(v.counts.len(), 1);
    }
}
