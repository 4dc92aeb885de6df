//! The cluster bus between replicas: a pub/sub channel per upstream (`<tag>:bus`, in the
//! upstream's hash-tag slot, so that a Redis Cluster shards it with the upstream's keys and an
//! event is published in the same pipeline as the epoch it bumps), and a few channels for
//! legacy sessions ended anywhere.
//!
//! A change an upstream listen saw is published with the holder's fencing token after the
//! epoch it invalidates was bumped in Redis (in one pipeline, in that order), so a replica that
//! reads the epoch after a fill can tell the fill raced the change. Events are JSON:
//! `{"r":replica,"u":upstream,"g":generation,"f":fence,"k":kind,...}`. A replica ignores its
//! own events, those of an upstream or a generation it does not run, and those of a deposed
//! holder (a fence below the highest seen for that upstream, see `fence.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Cluster;
use super::l2::{list_epoch_index, scope_suffix};
use resmux_cache::{CachedMethod, Target};
use resmux_proto::mcp::list::Capability;
use resmux_proto::mcp::notify::{Change, Filter};

/// Lifetime of a URI's epoch in Redis once it is no longer bumped. A forgotten epoch reads as
/// 0, which only makes older shared entries look current if they are still within their own
/// TTL, itself clamped far below this.
pub(super) const URI_EPOCH_TTL: Duration = Duration::from_secs(24 * 3600);

/// What replicas tell each other about one upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An upstream change, seen by the holder of its listen.
    Change(Change),
    /// The holder lost its upstream listen: what changes meanwhile is unknown.
    Lost,
    /// The holder re-opened its upstream listen: everything may have changed.
    Resync,
    /// The holder's live filter: followers acknowledge listens once it covers them.
    Active(Filter),
    /// A replica's interest changed: the holder re-reads the union.
    Interest,
    /// An operator purged entries of the upstream (any replica may announce it).
    Purge(resmux_cache::Target),
}

/// What the hub receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Event {
        upstream: usize,
        event: Event,
    },
    /// The bus connection was lost and is back: events may have been missed.
    Gap,
    /// A legacy session was ended (DELETE) on another replica: its record's name.
    SessionEnded(String),
}

pub(super) struct Outgoing {
    pub(super) upstream: usize,
    pub(super) fence: u64,
    pub(super) event: Event,
}

fn list_of(name: &str) -> Option<Capability> {
    Capability::ALL.into_iter().find(|k| k.name() == name)
}

impl Cluster {
    /// The bus channel of upstream `index`.
    pub(super) fn channel(&self, index: usize) -> String {
        format!("{}:bus", self.tag(index))
    }

    /// Every channel a replica listens on now: each running upstream's, then the session
    /// shards'.
    pub(super) fn channels(&self) -> Vec<String> {
        let mut upstreams: Vec<String> = self.active_slots().into_iter().map(|i| self.channel(i)).collect();
        upstreams.sort_unstable();
        upstreams.dedup();
        upstreams.into_iter().chain((0..super::sessions::SHARDS).map(|s| self.session_channel(s))).collect()
    }

    /// Changes when [`Cluster::channels`] may have (a reload installed or retired a slot).
    pub(super) fn channels_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.channels_changed.subscribe()
    }

    /// The command that publishes on a bus channel (`SPUBLISH` on a Redis Cluster).
    pub(super) fn publish_command(&self) -> &'static str {
        self.0.backend.publish_command()
    }

    /// Queues `event` about upstream `index` for the other replicas. Never waits: past
    /// `max_outbox` queued events it is dropped and counted. Nothing is queued while Redis is
    /// unreachable (every replica is on its own then).
    pub fn announce(&self, index: usize, event: Event) {
        if !self.healthy() {
            return;
        }
        let fence = match &event {
            Event::Interest => 0,
            _ => self.held_fence(index).unwrap_or(0),
        };
        if self.0.outbox.try_send(Outgoing { upstream: index, fence, event }).is_err() {
            self.0.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn encode(&self, out: &Outgoing) -> String {
        let member = self.member(out.upstream);
        let mut msg = json!({ "r": &*self.0.replica, "u": &*member.name, "g": &member.generation, "f": out.fence });
        let fields = match &out.event {
            Event::Change(Change::Updated(uri)) => json!({ "k": "updated", "uri": uri }),
            Event::Change(Change::ListChanged(kind)) => json!({ "k": "list", "list": kind.name() }),
            Event::Lost => json!({ "k": "lost" }),
            Event::Resync => json!({ "k": "resync" }),
            Event::Active(filter) => json!({ "k": "active", "filter": filter.to_json() }),
            Event::Interest => json!({ "k": "interest" }),
            Event::Purge(target) => purge_fields(target),
        };
        if let (Value::Object(m), Value::Object(f)) = (&mut msg, fields) {
            m.extend(f);
        }
        msg.to_string()
    }

    /// Hands a bus message to the hub (or, for a session ended elsewhere, to the session
    /// table); `false` once the hub is gone.
    pub(super) async fn deliver(&self, payload: &[u8]) -> bool {
        self.0.stats.received.fetch_add(1, Ordering::Relaxed);
        for inbound in self.decode(payload) {
            if let Inbound::SessionEnded(name) = inbound {
                let _ = self.0.ended_sessions.send(name.into());
            } else if self.0.inbox.send(inbound).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Tells the hub that events may have been missed; `false` once the hub is gone.
    pub(super) async fn gap(&self) -> bool {
        self.0.inbox.send(Inbound::Gap).await.is_ok()
    }

    /// Reads a bus message: one inbound per slot running its upstream (two while a reload
    /// replaces an upstream with the same content), none for our own, malformed or fenced-off
    /// ones, or one of an upstream this replica does not run.
    pub(super) fn decode(&self, payload: &[u8]) -> Vec<Inbound> {
        let Some(v) = serde_json::from_slice::<Value>(payload).ok() else { return Vec::new() };
        if v["k"] == "session-ended" || v["k"] == "filled" {
            return self.decode_one(&v, 0).into_iter().collect();
        }
        let (Some(name), Some(generation)) = (v["u"].as_str(), v["g"].as_str()) else { return Vec::new() };
        (self.slots_of(name, generation).into_iter()).filter_map(|slot| self.decode_one(&v, slot)).collect()
    }

    /// Reads a bus message about upstream slot `upstream` (or about no upstream).
    fn decode_one(&self, v: &Value, upstream: usize) -> Option<Inbound> {
        if v["k"] == "filled" {
            // Waiters are on other replicas, but two flights of one replica (different
            // callers) may wait on one lock too.
            self.wake_fill_waiters(v["l"].as_str()?);
            return None;
        }
        if v["r"].as_str()? == &*self.0.replica {
            return None;
        }
        if v["k"] == "session-ended" {
            return Some(Inbound::SessionEnded(v["s"].as_str()?.to_owned()));
        }
        let name = v["u"].as_str()?;
        if v["k"] == "claim" {
            self.claimed(upstream);
            return None;
        }
        let event = match v["k"].as_str()? {
            "updated" => Event::Change(Change::Updated(v["uri"].as_str()?.to_owned())),
            "list" => Event::Change(Change::ListChanged(list_of(v["list"].as_str()?)?)),
            "lost" => Event::Lost,
            "resync" => Event::Resync,
            "active" => Event::Active(Filter::from_json(&v["filter"]).ok()?),
            "interest" => return Some(Inbound::Event { upstream, event: Event::Interest }),
            // Not the listen holder's: no fence applies.
            "purge" => return Some(Inbound::Event { upstream, event: Event::Purge(purge_target(v)?) }),
            _ => return None,
        };
        let fence = v["f"].as_u64()?;
        if !self.0.fence[upstream].admits(fence) {
            self.0.stats.fenced.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(upstream = name, fence, "dropping an event of a deposed listen holder");
            return None;
        }
        Some(Inbound::Event { upstream, event })
    }

    /// The pipeline that publishes `out`: epochs bumped first, then the event.
    fn event_pipeline(&self, out: &Outgoing) -> redis::Pipeline {
        let tag = self.tag(out.upstream);
        let mut p = redis::pipe();
        match &out.event {
            Event::Change(Change::Updated(uri)) => {
                let key = format!("{tag}:{}", scope_suffix(self, CachedMethod::ResourcesRead, Some(uri)));
                p.cmd("INCR").arg(&key).ignore();
                p.cmd("PEXPIRE").arg(&key).arg(URI_EPOCH_TTL.as_millis() as u64).ignore();
            }
            Event::Change(Change::ListChanged(kind)) => {
                for m in CachedMethod::invalidated_by(*kind) {
                    p.cmd("INCR").arg(format!("{tag}:e:l:{}", list_epoch_index(m))).ignore();
                }
            }
            Event::Lost | Event::Resync => {
                p.cmd("INCR").arg(format!("{tag}:e:s")).ignore();
            }
            // A purge bumps its epochs itself, before it is announced (see `purge.rs`).
            Event::Active(_) | Event::Interest | Event::Purge(_) => {}
        }
        p.cmd(self.publish_command()).arg(self.channel(out.upstream)).arg(self.encode(out)).ignore();
        p
    }
}

/// Publishes queued events in order until `cancel`.
pub(super) async fn publisher(cluster: Cluster, mut outbox: mpsc::Receiver<Outgoing>, cancel: CancellationToken) {
    loop {
        let out = tokio::select! {
            _ = cancel.cancelled() => return,
            out = outbox.recv() => match out { Some(o) => o, None => return },
        };
        match cluster.run_pipeline::<()>("publish", &cluster.event_pipeline(&out)).await {
            Ok(()) => cluster.0.stats.published.fetch_add(1, Ordering::Relaxed),
            Err(_) => cluster.0.stats.dropped.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// The bus fields of a purge.
pub(super) fn purge_fields(target: &Target) -> Value {
    match target {
        Target::Uri(uri) => json!({ "k": "purge", "t": "uri", "v": &**uri }),
        Target::UriPrefix(prefix) => json!({ "k": "purge", "t": "uri_prefix", "v": &**prefix }),
        Target::Everything => json!({ "k": "purge", "t": "upstream" }),
    }
}

/// A purge read off the bus; `None` when malformed.
pub(super) fn purge_target(v: &Value) -> Option<Target> {
    let text = || v["v"].as_str().map(Box::from);
    Some(match v["t"].as_str()? {
        "uri" => Target::Uri(text()?),
        "uri_prefix" => Target::UriPrefix(text()?),
        "upstream" => Target::Everything,
        _ => return None,
    })
}
