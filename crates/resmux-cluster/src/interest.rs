//! Interest: what each replica's listeners and cache want from an upstream, kept for the
//! replica that holds its listen, which listens upstream for the union.
//!
//! Each replica keeps its interest in a Redis set, `<tag>:in:<replica>` (URIs, and `#list:<kind>`
//! for list changes: no URI starts with `#`). A change writes only the members added and
//! removed (`SADD`/`SREM`) and announces them on the upstream's bus in the same pipeline, so
//! the notice follows the write; the holder applies it to its copy of that replica's set and
//! to the union, with no read. Unchanged, the set's expiry is only extended, every lease
//! period; a replica that stops lets it lapse after three leases.
//!
//! Every `interest_resync` each replica rewrites its whole set (into a scratch key renamed over
//! it, so that it is never seen half written) and the holder reads every live replica's set
//! again, which repairs a notice that was lost. The holder also reads them all when it takes
//! the lease, when the bus had a gap, and reads one replica's set when that replica announces a
//! whole rewrite (it started, or its writes failed) or sends a change for a set it has not read.
//! Notices that arrive while a read is in flight are applied again on top of what it read:
//! they are set operations applied in order, so the last one on each member wins.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Cluster, ClusterError};
use resmux_proto::mcp::list::Capability;
use resmux_proto::mcp::notify::Filter;

/// Notices kept while a read is in flight; past it the holder reads everything again.
const MAX_DURING_READ: usize = 4096;

/// One upstream's interest, on one replica.
#[derive(Default)]
pub(super) struct Interest {
    /// What this replica last wrote to Redis (`None`: unknown, the next write is whole).
    mine: Mutex<Mine>,
    /// While holding the listen: every other replica's set, and their union.
    views: Mutex<Views>,
}

#[derive(Default)]
struct Mine {
    members: Option<BTreeSet<String>>,
    whole_at: Option<Instant>,
}

#[derive(Default)]
struct Views {
    sets: HashMap<String, BTreeSet<String>>,
    counts: HashMap<String, u32>,
    union: Filter,
    /// When every set was last read (`None`: never, or the views are stale).
    read_at: Option<Instant>,
    /// Replicas whose whole set must be read.
    pending: BTreeSet<String>,
    /// Notices received while a read is in flight (`None`: no read in flight).
    during: Option<Vec<Delta>>,
}

/// Replicas' sets as read.
type Sets = Vec<(String, BTreeSet<String>)>;

/// A change of one replica's interest, read off the bus.
#[derive(Clone)]
struct Delta {
    replica: String,
    whole: bool,
    add: Vec<String>,
    del: Vec<String>,
}

fn members(filter: &Filter) -> BTreeSet<String> {
    let lists = Capability::ALL.into_iter().filter(|k| filter.list(*k)).map(|k| format!("#list:{}", k.name()));
    filter.uris.iter().cloned().chain(lists).collect()
}

impl Views {
    fn apply(&mut self, d: &Delta) {
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
    fn replace(&mut self, replica: &str, now: Option<BTreeSet<String>>) {
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

impl Cluster {
    fn interest_key(&self, index: usize, replica: &str) -> String {
        format!("{}:in:{replica}", self.tag(index))
    }

    fn count_interest(&self, calls: u64, bytes: usize) {
        self.0.stats.interest_calls.fetch_add(calls, Ordering::Relaxed);
        self.0.stats.interest_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Publishes this replica's interest in upstream `index` (what its listeners and its cache
    /// want) for the holder of its listen: the change since the last call, the whole of it
    /// when due, or only a longer life for the set.
    pub async fn publish_interest(&self, index: usize, filter: &Filter) -> Result<(), ClusterError> {
        let now = members(filter);
        let resync = self.0.config.interest_resync;
        // A rewrite that follows a failed or first write is announced: the holder cannot know
        // what it missed. A periodic one is not: the holder reads every set at its own.
        let (whole, announce_whole, add, del) = {
            let mine = self.0.interest[index].mine.lock().expect("interest");
            match &mine.members {
                Some(prev) if mine.whole_at.is_some_and(|t| t.elapsed() < resync) => {
                    (false, false, now.difference(prev).cloned().collect(), prev.difference(&now).cloned().collect())
                }
                prev => (true, prev.is_none(), Vec::new(), Vec::new()),
            }
        };
        let key = self.interest_key(index, &self.0.replica);
        let px = 3 * self.0.config.lease_ttl.as_millis() as u64;
        let mut p = redis::pipe();
        let mut bytes = key.len();
        if whole {
            let scratch = format!("{key}:w");
            p.cmd("DEL").arg(&scratch).ignore();
            if now.is_empty() {
                p.cmd("DEL").arg(&key).ignore();
            } else {
                p.cmd("SADD").arg(&scratch).arg(now.iter().collect::<Vec<_>>()).ignore();
                p.cmd("RENAME").arg(&scratch).arg(&key).ignore();
            }
            bytes += 2 * scratch.len() + now.iter().map(String::len).sum::<usize>();
        } else {
            if !add.is_empty() {
                p.cmd("SADD").arg(&key).arg(&add).ignore();
            }
            if !del.is_empty() {
                p.cmd("SREM").arg(&key).arg(&del).ignore();
            }
        }
        p.cmd("PEXPIRE").arg(&key).arg(px).ignore();
        if announce_whole || !add.is_empty() || !del.is_empty() {
            let mut msg = json!({ "r": &*self.0.replica, "u": &*self.0.upstreams[index], "k": "interest" });
            if announce_whole {
                msg["whole"] = json!(true);
            } else {
                msg["add"] = json!(add);
                msg["del"] = json!(del);
            }
            let text = msg.to_string();
            bytes += text.len() + add.iter().chain(&del).map(String::len).sum::<usize>();
            p.cmd(self.publish_command()).arg(self.channel(index)).arg(text).ignore();
        }
        self.count_interest(1, bytes);
        let result = self.run_pipeline::<()>("interest", &p).await;
        let mut mine = self.0.interest[index].mine.lock().expect("interest");
        match result {
            Ok(()) => {
                if whole {
                    mine.whole_at = Some(Instant::now());
                }
                mine.members = Some(now);
            }
            Err(_) => mine.members = None,
        }
        result
    }

    /// An interest notice of another replica (while this one holds upstream `index`'s
    /// listen): applied at once, or `true` when a set must be read first (the hub then calls
    /// [`Cluster::refresh_interest`]).
    pub(super) fn interest_notice(&self, index: usize, v: &Value) -> bool {
        if self.held_fence(index).is_none() {
            return false;
        }
        let strings = |key: &str| -> Vec<String> {
            let items = v[key].as_array().map(Vec::as_slice).unwrap_or_default();
            items.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()
        };
        let Some(replica) = v["r"].as_str() else { return false };
        let d = Delta {
            replica: replica.to_owned(),
            whole: v["whole"] == true || (v.get("add").is_none() && v.get("del").is_none()),
            add: strings("add"),
            del: strings("del"),
        };
        let mut views = self.0.interest[index].views.lock().expect("interest");
        let views = &mut *views;
        if d.whole || (views.read_at.is_some() && !views.sets.contains_key(&d.replica) && !d.add.is_empty()) {
            views.pending.insert(d.replica);
            return true;
        }
        if let Some(during) = &mut views.during {
            if during.len() >= MAX_DURING_READ {
                views.read_at = None;
                return true;
            }
            during.push(d.clone());
        }
        views.apply(&d);
        self.0.stats.interest_deltas.fetch_add(1, Ordering::Relaxed);
        let union = views.union.clone();
        self.0.remote[index].send_if_modified(|old| {
            let changed = *old != union;
            *old = union;
            changed
        });
        false
    }

    /// This replica took upstream `index`'s lease: what it kept of the others' interest from
    /// an earlier time may be stale, so its keeper reads every set at once.
    pub(super) fn interest_taken(&self, index: usize) {
        *self.0.interest[index].views.lock().expect("interest") = Views::default();
    }

    /// The bus had a gap: holders read every set again at their next round.
    pub(super) fn interest_gap(&self) {
        for i in &self.0.interest {
            i.views.lock().expect("interest").read_at = None;
        }
    }

    /// Reads what the holder of upstream `index`'s listen must read: every live replica's set
    /// when due (taking the lease, a gap, every `interest_resync`), else the sets of replicas
    /// that announced a whole rewrite. A replica that does not hold it forgets the others'.
    pub async fn refresh_interest(&self, index: usize) -> Result<(), ClusterError> {
        let interest = &self.0.interest[index];
        if self.held_fence(index).is_none() {
            let mut views = interest.views.lock().expect("interest");
            if views.read_at.is_some() || !views.sets.is_empty() {
                *views = Views::default();
            }
            return Ok(());
        }
        let (all, replicas) = {
            let mut views = interest.views.lock().expect("interest");
            let all = views.read_at.is_none_or(|t| t.elapsed() >= self.0.config.interest_resync);
            if !all && views.pending.is_empty() || views.during.is_some() {
                return Ok(());
            }
            views.during = Some(Vec::new());
            (all, std::mem::take(&mut views.pending))
        };
        let read = self.read_sets(index, all, replicas).await;
        let mut views = interest.views.lock().expect("interest");
        let during = views.during.take().unwrap_or_default();
        let (alive, sets) = match read {
            Ok(r) => r,
            Err(e) => {
                views.read_at = None;
                return Err(e);
            }
        };
        if let Some(alive) = alive {
            let gone: Vec<String> = views.sets.keys().filter(|r| !alive.contains(r)).cloned().collect();
            for r in gone {
                views.replace(&r, None);
            }
            views.read_at = Some(Instant::now());
            self.0.stats.interest_resyncs.fetch_add(1, Ordering::Relaxed);
        }
        for (replica, set) in sets {
            views.replace(&replica, Some(set));
        }
        for d in &during {
            views.apply(d);
        }
        let union = views.union.clone();
        drop(views);
        self.0.remote[index].send_if_modified(|old| {
            let changed = *old != union;
            *old = union;
            changed
        });
        Ok(())
    }

    /// The sets of `replicas`, or of every replica that beat within three leases (`all`, which
    /// also returns those replicas).
    async fn read_sets(
        &self,
        index: usize,
        all: bool,
        replicas: BTreeSet<String>,
    ) -> Result<(Option<Vec<String>>, Sets), ClusterError> {
        let (alive, replicas): (Option<Vec<String>>, Vec<String>) = if all {
            let since = super::now_ms().saturating_sub(3 * self.0.config.lease_ttl.as_millis() as u64);
            let cmd = redis::cmd("ZRANGEBYSCORE").arg(self.replicas_key()).arg(since).arg("+inf").to_owned();
            let alive: Vec<String> = self.query("ZRANGEBYSCORE", &cmd).await?;
            let others = alive.iter().filter(|r| **r != *self.0.replica).cloned().collect();
            (Some(alive), others)
        } else {
            (None, replicas.into_iter().collect())
        };
        if replicas.is_empty() {
            return Ok((alive, Vec::new()));
        }
        let mut p = redis::pipe();
        for r in &replicas {
            p.cmd("SMEMBERS").arg(self.interest_key(index, r));
        }
        let sets: Vec<BTreeSet<String>> = self.run_pipeline("SMEMBERS interest", &p).await?;
        let got: usize = sets.iter().flatten().map(String::len).sum();
        self.count_interest(1 + u64::from(all), got + replicas.iter().map(|r| r.len()).sum::<usize>());
        Ok((alive, replicas.into_iter().zip(sets).collect()))
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
