//! Which upstream each slot stands for in the cluster, and how a reload changes that.
//!
//! The proxy names its upstreams by slot (a reload starts added and changed upstreams in free
//! slots and retires the old ones), while replicas name an upstream by its name and its
//! *generation*: a keyed digest of what decides its content (where it lives, how the proxy
//! authenticates to it, what may be shared of it). Every Redis key, the lease, the interest
//! hash and the bus channel of an upstream sit under `<prefix>{name}:g<generation>`, so:
//!
//! - replicas whose configs for an upstream agree share its lease, interest and values;
//! - a changed URL or credential is another generation: nothing fetched from the old target is
//!   served for the new one, and replicas on different files during a rolling reload run one
//!   listen per generation instead of following a listen on a target they do not use;
//! - a replica ignores events for a name or generation it does not run (it is not subscribed
//!   to their channel, and the payload's name and generation are checked too).
//!
//! The `{name}` hash tag stays the bare name, so a Redis Cluster keeps every generation of an
//! upstream in the slot its operators know it by.

use std::sync::Arc;

use arc_swap::ArcSwap;
use serde_json::json;

use super::Cluster;
use super::lease::Role;
use resmux_proto::mcp::notify::Filter;

/// What one slot stands for.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) name: Arc<str>,
    /// Keyed digest of the upstream's content identity (hex).
    pub(super) generation: String,
    /// `<prefix>{name}:g<generation>`: the start of every Redis name of the upstream.
    pub(super) tag: String,
    /// Whether the slot runs now (installed and not retired). A retired slot keeps its names
    /// so that requests still draining there address the same keys.
    pub(super) active: bool,
}

impl Member {
    pub(super) fn vacant() -> Self {
        Self { name: Arc::from(""), generation: String::new(), tag: String::new(), active: false }
    }

    fn same_upstream(&self, other: &Member) -> bool {
        self.name == other.name && self.generation == other.generation
    }
}

pub(super) type Members = Vec<ArcSwap<Member>>;

impl Cluster {
    pub(super) fn member(&self, slot: usize) -> Arc<Member> {
        self.0.members.get(slot).map_or_else(|| Arc::new(Member::vacant()), |m| m.load_full())
    }

    /// The slots running now.
    pub(super) fn active_slots(&self) -> Vec<usize> {
        (0..self.0.members.len()).filter(|&i| self.0.members[i].load().active).collect()
    }

    /// The running slots that stand for upstream `name` at `generation` (two while a reload
    /// replaces an upstream whose content identity did not change).
    pub(super) fn slots_of(&self, name: &str, generation: &str) -> Vec<usize> {
        let found = |m: &Member| m.active && &*m.name == name && m.generation == generation;
        (0..self.0.members.len()).filter(|&i| found(&self.0.members[i].load())).collect()
    }

    /// A running slot other than `except` standing for the same upstream as `member`.
    fn twin(&self, member: &Member, except: usize) -> Option<usize> {
        (0..self.0.members.len()).filter(|&i| i != except).find(|&i| {
            let m = self.0.members[i].load();
            m.active && m.same_upstream(member)
        })
    }

    /// Whether `replica` runs the upstream under `tag` (it publishes its interest there); an
    /// unanswered read counts as yes, which only keeps the usual wait for a free lease.
    pub(super) async fn runs(&self, tag: &str, replica: &str) -> bool {
        let cmd = redis::cmd("HEXISTS").arg(format!("{tag}:interest")).arg(replica).to_owned();
        self.query::<bool>("HEXISTS interest", &cmd).await.unwrap_or(true)
    }

    /// Puts upstream `name` in `slot`; `identity` is what decides its content (the proxy's
    /// rendering of its target, credential and sharing policy), never stored raw. Its lease,
    /// interest and bus channel follow from the next keeper round, run at once.
    pub fn install(&self, slot: usize, name: &str, identity: &[u8]) {
        let Some(cell) = self.0.members.get(slot) else { return };
        let generation = self.digest(&[name.as_bytes(), identity]);
        let tag = format!("{}{{{name}}}:g{generation}", self.0.config.prefix);
        cell.store(Arc::new(Member { name: Arc::from(name), generation, tag, active: true }));
        // A replacement whose identity did not change holds what its twin holds from the start,
        // so its listen opens before the swap as on a single replica.
        let twin = self.twin(&cell.load(), slot);
        let role = twin.map_or(Role::Follower, |t| *self.0.roles[t].borrow());
        self.0.roles[slot].send_replace(role);
        self.0.holders[slot].send_replace(twin.and_then(|t| self.0.holders[t].borrow().clone()));
        self.0.remote[slot].send_replace(twin.map(|t| self.0.remote[t].borrow().clone()).unwrap_or_default());
        self.0.fence[slot].inherit(twin.map(|t| &self.0.fence[t]));
        self.0.channels_changed.send_modify(|n| *n += 1);
        self.0.keeper_now.notify_one();
        tracing::info!(upstream = name, slot, "upstream joined the cluster");
    }

    /// Takes `slot` out of the cluster: at once, it stops following the upstream and its bus
    /// channel is no longer heard; unless another running slot stands for the same upstream,
    /// the returned cleanup releases its lease (another replica that runs it takes over at once
    /// rather than at the expiry) and drops its interest field, telling the holder.
    pub fn retire(&self, slot: usize) -> impl Future<Output = ()> + Send + 'static {
        let cleanup = self.deactivate(slot);
        let cluster = self.clone();
        async move {
            let Some((member, held)) = cleanup else { return };
            if let Some(token) = held {
                cluster.release(&member.tag, token).await;
            }
            let told = json!({ "r": &*cluster.0.replica, "u": &*member.name, "g": &member.generation, "f": 0, "k": "interest" });
            let mut p = redis::pipe();
            p.cmd("HDEL").arg(format!("{}:interest", member.tag)).arg(&*cluster.0.replica).ignore();
            p.cmd(cluster.publish_command()).arg(format!("{}:bus", member.tag)).arg(told.to_string()).ignore();
            // A field left behind would have the holder listen for this replica, and count it
            // among the replicas that run the upstream, for as long as this replica lives: with
            // Redis unreachable, tried again once it answers (within the time a silent
            // replica is remembered).
            let deadline = tokio::time::Instant::now() + cluster.0.config.lease_ttl * 20;
            let mut health = cluster.health_watch();
            while cluster.run_pipeline::<()>("drop interest", &p).await.is_err() {
                health.mark_unchanged();
                let back = tokio::time::timeout_at(deadline, health.wait_for(|up| *up)).await;
                if !matches!(back, Ok(Ok(_))) {
                    tracing::warn!(
                        upstream = &*member.name,
                        "could not drop this replica's interest in a retired upstream"
                    );
                    return;
                }
            }
            tracing::info!(upstream = &*member.name, slot, "upstream left the cluster");
        }
    }

    /// Marks `slot` retired; what the cleanup must still do in Redis, unless a twin runs on.
    fn deactivate(&self, slot: usize) -> Option<(Arc<Member>, Option<u64>)> {
        let cell = self.0.members.get(slot)?;
        let member = cell.load_full();
        if !member.active {
            return None;
        }
        let names = (member.name.clone(), member.generation.clone(), member.tag.clone());
        cell.store(Arc::new(Member { name: names.0, generation: names.1, tag: names.2, active: false }));
        let held = self.held_fence(slot);
        // Quietly: this is no lost lease, and the slot's feed is stopping anyway.
        self.0.roles[slot].send_replace(Role::Follower);
        self.0.holders[slot].send_replace(None);
        self.0.remote[slot].send_replace(Filter::default());
        self.0.channels_changed.send_modify(|n| *n += 1);
        self.twin(&member, slot).is_none().then_some((member, held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{Event, Inbound, Outgoing};
    use crate::config::ClusterConfig;

    /// A replica's cluster tier; nothing here reaches Redis (the connection is lazy).
    fn replica() -> Cluster {
        let config = ClusterConfig { redis_url: Some("redis://127.0.0.1:1".into()), ..ClusterConfig::default() };
        Cluster::new(&config, Some("a key every replica shares"), 4).unwrap().unwrap()
    }

    fn resync(from: &Cluster, slot: usize) -> String {
        from.encode(&Outgoing { upstream: slot, fence: 7, event: Event::Resync })
    }

    fn slots(inbound: Vec<Inbound>) -> Vec<usize> {
        inbound.into_iter().map(|i| if let Inbound::Event { upstream, .. } = i { upstream } else { 99 }).collect()
    }

    #[tokio::test]
    async fn events_reach_the_slots_that_run_their_name_and_generation_only() {
        let (here, there) = (replica(), replica());
        here.install(0, "docs", b"https://a.example/mcp");
        here.install(2, "wiki", b"https://w.example/mcp");
        // Another replica whose docs points elsewhere: another generation, not heard here.
        there.install(3, "docs", b"https://b.example/mcp");
        assert!(here.decode(resync(&there, 3).as_bytes()).is_empty());
        assert_ne!(here.tag(0), there.tag(3));
        assert!(here.tag(0).starts_with("resmux:{docs}:g") && there.tag(3).starts_with("resmux:{docs}:g"));
        // Once it agrees, its events reach the slot here, whichever slot it uses itself.
        there.install(3, "docs", b"https://a.example/mcp");
        assert_eq!(here.tag(0), there.tag(3));
        assert_eq!(slots(here.decode(resync(&there, 3).as_bytes())), [0]);
        // A replacement with the same identity (slot 1) hears them too, until its twin retires.
        here.install(1, "docs", b"https://a.example/mcp");
        assert_eq!(slots(here.decode(resync(&there, 3).as_bytes())), [0, 1]);
        assert!(here.deactivate(0).is_none(), "the twin runs on: the lease and interest stay");
        assert_eq!(slots(here.decode(resync(&there, 3).as_bytes())), [1]);
        assert_eq!(here.channels().iter().filter(|c| c.contains("{docs}")).count(), 1);
        // The last slot of an upstream leaves: its channel goes, and its events are ignored.
        assert!(here.deactivate(1).is_some());
        assert!(here.decode(resync(&there, 3).as_bytes()).is_empty());
        assert!(!here.channels().iter().any(|c| c.contains("{docs}")));
        // An unknown name is ignored too.
        there.install(0, "extra", b"https://x.example/mcp");
        assert!(here.decode(resync(&there, 0).as_bytes()).is_empty());
    }
}
