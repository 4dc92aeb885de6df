//! Interest: what each replica's listeners and cache want from an upstream, kept for the
//! replica that holds its listen, which listens upstream for the union.
//!
//! Each replica keeps its interest in a Redis set, `<tag>:in:<replica>` (URIs, and `#list:<kind>`
//! for list changes). A change writes only the members added and removed (`SADD`/`SREM`) and
//! announces them on the upstream's bus in the same pipeline, so the notice follows the write;
//! the holder applies it to its copy of that replica's set and to the union, with no read.
//! Unchanged, the set's expiry is only extended, every lease period; a replica that stops
//! lets it lapse after three leases.
//!
//! The set disappears when it is empty, so whether a replica runs the upstream is recorded
//! apart, as its field in the hash `<tag>:runners`: written with every publication, dropped
//! when the upstream is retired by a reload or by the holder once the replica stops beating.
//! The lease keeper reads it to hand a listen only to a replica that runs the upstream.
//!
//! Every `interest_resync` each replica rewrites its whole set (into a scratch key renamed over
//! it, so that it is never seen half written) and the holder reads every live replica's set
//! and the runners again, which repairs a notice that was lost. The holder also reads them all
//! when it takes the lease, when the bus had a gap, and reads one replica's set and runner
//! field when that replica announces a whole rewrite (it started, retired the upstream, or its
//! writes failed) or sends a change for a set it has not read. Notices that arrive while a
//! read is in flight are applied again on top of what it read: they are set operations applied
//! in order, so the last one on each member wins.

mod views;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Cluster, ClusterError};
use resmux_proto::mcp::notify::Filter;
pub(super) use views::Interest;
use views::{Delta, MAX_DURING_READ, Views, members};

/// What a read of the holder's brought back: the live replicas and the runners (full reads
/// only), and each replica's set with whether it runs the upstream.
struct Read {
    full: Option<(Vec<String>, Vec<String>)>,
    sets: Vec<(String, BTreeSet<String>, bool)>,
}

impl Cluster {
    fn interest_key(tag: &str, replica: &str) -> String {
        format!("{tag}:in:{replica}")
    }

    /// The hash whose fields name the replicas that run the upstream under `tag`.
    pub(super) fn runners_key(tag: &str) -> String {
        format!("{tag}:runners")
    }

    fn count_interest(&self, calls: u64, bytes: usize) {
        self.0.stats.interest_calls.fetch_add(calls, Ordering::Relaxed);
        self.0.stats.interest_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Publishes this replica's interest in upstream `index` (what its listeners and its cache
    /// want) for the holder of its listen: the change since the last call, the whole of it
    /// when due, or only a longer life for the set.
    pub async fn publish_interest(&self, index: usize, filter: &Filter) -> Result<(), ClusterError> {
        let member = self.member(index);
        let Some(interest) = self.0.interest.get(index).filter(|_| member.active) else { return Ok(()) };
        let now = members(filter);
        let resync = self.0.config.interest_resync;
        // A rewrite that follows a failed or first write is announced: the holder cannot know
        // what it missed. A periodic one is not: the holder reads every set at its own.
        let (whole, announce_whole, add, del) = {
            let mine = interest.mine.lock().expect("interest");
            match &mine.members {
                Some(prev) if mine.whole_at.is_some_and(|t| t.elapsed() < resync) => {
                    (false, false, now.difference(prev).cloned().collect(), prev.difference(&now).cloned().collect())
                }
                prev => (true, prev.is_none(), Vec::new(), Vec::new()),
            }
        };
        let me = &*self.0.replica;
        let key = Self::interest_key(&member.tag, me);
        let runners = Self::runners_key(&member.tag);
        let px = 3 * self.0.config.lease_ttl.as_millis() as u64;
        let mut p = redis::pipe();
        let mut bytes = key.len() + runners.len() + me.len();
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
        p.cmd("HSET").arg(&runners).arg(me).arg(1).ignore();
        if announce_whole || !add.is_empty() || !del.is_empty() {
            let mut msg = json!({ "r": me, "u": &*member.name, "g": &member.generation, "f": 0, "k": "interest" });
            if announce_whole {
                msg["whole"] = json!(true);
            } else {
                msg["add"] = json!(add);
                msg["del"] = json!(del);
            }
            let text = msg.to_string();
            bytes += text.len() + add.iter().chain(&del).map(String::len).sum::<usize>();
            p.cmd(self.publish_command()).arg(format!("{}:bus", member.tag)).arg(text).ignore();
        }
        self.count_interest(1, bytes);
        let result = self.run_pipeline::<()>("interest", &p).await;
        // A slot reused meanwhile starts afresh: what was written here is not its upstream's.
        if self.member(index).tag != member.tag {
            return result;
        }
        let mut mine = interest.mine.lock().expect("interest");
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
        let Some(interest) = self.0.interest.get(index) else { return false };
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
        let mut views = interest.views.lock().expect("interest");
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
        if let Some(i) = self.0.interest.get(index) {
            *i.views.lock().expect("interest") = Views::default();
        }
    }

    /// The bus had a gap: holders read every set again at their next round.
    pub(super) fn interest_gap(&self) {
        for i in &self.0.interest {
            i.views.lock().expect("interest").read_at = None;
        }
    }

    /// Reads what the holder of upstream `index`'s listen must read: every live replica's set
    /// and the runners when due (taking the lease, a gap, every `interest_resync`), else the
    /// sets of replicas that announced a whole rewrite. Returns the live replicas known to run
    /// the upstream, this one included (empty: not known). A replica that does not hold the
    /// listen forgets the others'.
    pub async fn refresh_interest(&self, index: usize) -> Result<Vec<String>, ClusterError> {
        let Some(interest) = self.0.interest.get(index) else { return Ok(Vec::new()) };
        if self.held_fence(index).is_none() {
            let mut views = interest.views.lock().expect("interest");
            if views.read_at.is_some() || !views.sets.is_empty() || !views.runners.is_empty() {
                *views = Views::default();
            }
            return Ok(Vec::new());
        }
        let tag = self.tag(index);
        let (all, replicas) = {
            let mut views = interest.views.lock().expect("interest");
            let all = views.read_at.is_none_or(|t| t.elapsed() >= self.0.config.interest_resync);
            if !all && views.pending.is_empty() || views.during.is_some() {
                return Ok(views.runners.iter().cloned().collect());
            }
            views.during = Some(Vec::new());
            (all, std::mem::take(&mut views.pending))
        };
        let read = self.read_sets(&tag, all, replicas).await;
        let mut views = interest.views.lock().expect("interest");
        let during = views.during.take().unwrap_or_default();
        // A slot reused meanwhile: what was read belongs to its previous upstream.
        if self.tag(index) != tag {
            return Ok(Vec::new());
        }
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                views.read_at = None;
                return Err(e);
            }
        };
        if let Some((alive, runners)) = read.full {
            let gone: Vec<String> = views.sets.keys().filter(|r| !alive.contains(r)).cloned().collect();
            for r in gone {
                views.replace(&r, None);
            }
            views.runners = runners.into_iter().collect();
            views.read_at = Some(Instant::now());
            self.0.stats.interest_resyncs.fetch_add(1, Ordering::Relaxed);
        }
        for (replica, set, runs) in read.sets {
            if runs {
                views.runners.insert(replica.clone());
            } else {
                views.runners.remove(&replica);
            }
            views.replace(&replica, Some(set));
        }
        for d in &during {
            views.apply(d);
        }
        let (union, runners) = (views.union.clone(), views.runners.iter().cloned().collect());
        drop(views);
        self.0.remote[index].send_if_modified(|old| {
            let changed = *old != union;
            *old = union;
            changed
        });
        Ok(runners)
    }

    /// The sets of `replicas` and whether each runs the upstream under `tag`; or (`all`) the
    /// sets of every other replica that beat within three leases, with those replicas and the
    /// live runners, forgetting runners that stopped beating.
    async fn read_sets(&self, tag: &str, all: bool, replicas: BTreeSet<String>) -> Result<Read, ClusterError> {
        let runners_key = Self::runners_key(tag);
        let (alive, replicas): (Option<Vec<String>>, Vec<String>) = if all {
            let since = super::now_ms().saturating_sub(3 * self.0.config.lease_ttl.as_millis() as u64);
            let cmd = redis::cmd("ZRANGEBYSCORE").arg(self.replicas_key()).arg(since).arg("+inf").to_owned();
            let alive: Vec<String> = self.query("ZRANGEBYSCORE", &cmd).await?;
            let others = alive.iter().filter(|r| **r != *self.0.replica).cloned().collect();
            (Some(alive), others)
        } else {
            (None, replicas.into_iter().collect())
        };
        // The runners' hash has a field per replica that runs the upstream: small, read whole.
        let mut p = redis::pipe();
        p.cmd("HKEYS").arg(&runners_key);
        for r in &replicas {
            p.cmd("SMEMBERS").arg(Self::interest_key(tag, r));
        }
        let mut replies: Vec<BTreeSet<String>> = self.run_pipeline("read interest", &p).await?;
        let got: usize = replies.iter().flatten().map(String::len).sum();
        self.count_interest(1 + u64::from(all), got + replicas.iter().map(|r| tag.len() + r.len()).sum::<usize>());
        let named = if replies.is_empty() { BTreeSet::new() } else { replies.remove(0) };
        let full = match alive {
            Some(alive) => {
                let (live, dead): (Vec<String>, Vec<String>) = named.iter().cloned().partition(|r| alive.contains(r));
                if !dead.is_empty() {
                    let cmd = redis::cmd("HDEL").arg(&runners_key).arg(&dead).to_owned();
                    let _: Result<u64, _> = self.query("HDEL runners", &cmd).await;
                }
                Some((alive, live))
            }
            None => None,
        };
        let sets = replicas.into_iter().zip(replies).map(|(r, set)| {
            let runs = named.contains(&r);
            (r, set, runs)
        });
        Ok(Read { full, sets: sets.collect() })
    }
}
