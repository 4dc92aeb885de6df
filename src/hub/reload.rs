//! The hub's side of a config reload: upstream slots (each running upstream's identity), the
//! lineup (upstreams in config order and their namespaces) that a reload swaps, and moving
//! listeners when upstreams are replaced or removed.
//!
//! A replaced upstream's new slot is primed with what its listeners want before the swap, so
//! its upstream listen is open (make-before-break) when the listeners move to it; they then
//! get `resources/updated` and `list_changed` for what they watch there, since the new
//! upstream may answer differently. A removed upstream's listeners get the same for what they
//! watched there and lose those topics; its feed stops, which ends its upstream listen.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::registry::Watchers;
use super::{Hub, Notice, Topic, feed};
use crate::auth::policy;
use crate::mcp::Capability;
use crate::mcp::notify::Filter;
use crate::router::namespace::Namespace;
use crate::upstream::Upstream;

/// The upstreams in config order, with their namespace table.
pub struct Lineup {
    pub upstreams: Vec<Upstream>,
    pub ns: Namespace,
    /// Position of each slot's upstream (indexed by slot).
    positions: Vec<Option<usize>>,
}

impl Lineup {
    pub fn new(upstreams: Vec<Upstream>, ns: Namespace) -> Self {
        let len = upstreams.iter().map(|u| u.slot() as usize + 1).max().unwrap_or(0);
        let mut positions = vec![None; len];
        for (i, u) in upstreams.iter().enumerate() {
            positions[u.slot() as usize] = Some(i);
        }
        Self { upstreams, ns, positions }
    }

    /// Where upstream slot `slot` stands in config order, if it is in this lineup.
    pub fn position(&self, slot: usize) -> Option<usize> {
        self.positions.get(slot).copied().flatten()
    }

    /// The downstream form of upstream slot `slot`'s `uri`, if the slot is in this lineup.
    pub fn uri_out(&self, slot: usize, uri: &str) -> Option<String> {
        Some(self.ns.uri_out(self.position(slot)?, uri).into_owned())
    }
}

/// One upstream slot of the hub.
pub(super) struct Slot {
    /// The upstream in this slot (kept after it is retired, until the slot is reused).
    pub(super) upstream: RwLock<Option<Upstream>>,
    /// What its feed should listen for (listeners' URIs and lists; the cache's standing list
    /// interest is added by the feed from the upstream's capabilities).
    pub(super) desired: watch::Sender<Filter>,
    /// Upstream listens opened since its upstream was installed (for tests and metrics).
    pub(super) opened: AtomicU64,
    /// What it is subscribed to right now (the feed's live listen, or its legacy
    /// subscriptions): a listen is acknowledged once its topics are covered, so that no change
    /// after the acknowledgment can be missed.
    pub(super) active: watch::Sender<Filter>,
    /// Stops its feed alone (a reload retiring it).
    pub(super) stop: Mutex<CancellationToken>,
}

impl Slot {
    pub(super) fn new() -> Self {
        Self {
            upstream: RwLock::new(None),
            desired: watch::channel(Filter::default()).0,
            opened: AtomicU64::new(0),
            active: watch::channel(Filter::default()).0,
            stop: Mutex::new(CancellationToken::new()),
        }
    }
}

/// How a reload moves the upstream slots.
#[derive(Debug, Default)]
pub struct Moves {
    /// Replaced upstreams: `(old slot, new slot)`.
    pub replaced: Vec<(usize, usize)>,
    /// Removed upstreams' slots.
    pub removed: Vec<usize>,
    /// Added upstreams' slots.
    pub added: Vec<usize>,
}

impl Hub {
    /// The upstream in `slot`, if one was ever installed there.
    pub(super) fn upstream(&self, slot: usize) -> Option<Upstream> {
        self.0.slots.get(slot)?.upstream.read().expect("slot lock").clone()
    }

    /// How many upstream slots there are (`[reload] max_upstreams`).
    pub fn slot_count(&self) -> usize {
        self.0.slots.len()
    }

    /// The lineup current now.
    pub fn lineup(&self) -> Arc<Lineup> {
        self.0.lineup.load_full()
    }

    /// Puts `upstream` in its slot and starts its feed, which listens once the upstream is
    /// discovered and something wants its notifications.
    pub fn install(&self, upstream: &Upstream) {
        let index = upstream.slot() as usize;
        let slot = &self.0.slots[index];
        *slot.upstream.write().expect("slot lock") = Some(upstream.clone());
        slot.desired.send_replace(Filter::default());
        slot.active.send_replace(Filter::default());
        slot.opened.store(0, Ordering::Relaxed);
        let stop = self.0.cancel.child_token();
        *slot.stop.lock().expect("stop lock") = stop.clone();
        if let Some(cluster) = &self.0.cluster {
            super::replicas::join(self, cluster, upstream, &stop);
        }
        self.0.tracker.spawn(feed::run(self.clone(), index, stop));
    }

    /// Make-before-break: the new slot of a replaced upstream listens for what its old one's
    /// listeners want, before they move. Returns that filter.
    pub fn prime(&self, old: usize, new: usize) -> Filter {
        let want = self.0.slots[old].desired.borrow().clone();
        self.0.slots[new].desired.send_replace(want.clone());
        want
    }

    /// Waits until slot `slot` is subscribed to everything in `want` that its upstream
    /// honours, or `deadline`. Returns whether it is.
    pub async fn covers(&self, slot: usize, want: &Filter, deadline: Instant) -> bool {
        let Some(upstream) = self.upstream(slot) else { return false };
        if upstream.wait_info(deadline).await.is_none() {
            return false;
        }
        let goal = feed::local_interest(self, slot, want);
        let mut rx = self.0.slots[slot].active.subscribe();
        let covered =
            |f: &Filter| goal.uris.is_subset(&f.uris) && Capability::ALL.iter().all(|k| !goal.list(*k) || f.list(*k));
        tokio::time::timeout_at(deadline, rx.wait_for(covered)).await.is_ok_and(|r| r.is_ok())
    }

    /// Routes the hub to `next` and moves the listeners as `moves` says (see the module
    /// comment). Removed slots' listeners are told with the old lineup's names.
    pub fn swap_lineup(&self, next: Lineup, moves: &Moves) {
        let old = self.0.lineup.load_full();
        for &slot in &moves.removed {
            self.notify_topics_in(&old, slot);
        }
        let gone: HashSet<usize> = moves.removed.iter().copied().collect();
        let moved: HashMap<usize, usize> = moves.replaced.iter().copied().collect();
        let mut reg = self.0.registry.lock().expect("registry");
        self.0.lineup.store(Arc::new(next));
        for listener in reg.listeners.values() {
            listener.edit_topics(|topics| {
                topics.retain(|(slot, _)| !gone.contains(slot));
                for (slot, _) in topics.iter_mut() {
                    if let Some(new) = moved.get(slot) {
                        *slot = *new;
                    }
                }
            });
        }
        let mut topics = HashMap::with_capacity(reg.topics.len());
        for ((slot, topic), ids) in std::mem::take(&mut reg.topics) {
            if gone.contains(&slot) {
                continue;
            }
            let slot = moved.get(&slot).copied().unwrap_or(slot);
            topics.entry((slot, topic)).or_insert_with(Watchers::default).extend(ids);
        }
        reg.topics = topics;
        for &(_, new) in &moves.replaced {
            let mut want = Filter::default();
            for (slot, topic) in reg.topics.keys() {
                if *slot == new {
                    match topic {
                        Topic::Uri(uri) => drop(want.uris.insert(uri.clone())),
                        Topic::List(kind) => want.set_list(*kind, true),
                    }
                }
            }
            self.0.slots[new].desired.send_replace(want);
        }
        for &slot in moves.removed.iter().chain(moves.replaced.iter().map(|(old, _)| old)) {
            self.0.slots[slot].desired.send_replace(Filter::default());
        }
        for &slot in &moves.added {
            self.join_lists(&mut reg, slot);
        }
        drop(reg);
        for &(_, new) in &moves.replaced {
            self.notify_topics(new);
        }
    }

    /// An added upstream: every listener of a list it declares changes for (and may reach)
    /// listens there too, and is told the merged list changed.
    fn join_lists(&self, reg: &mut super::Registry, slot: usize) {
        let Some(upstream) = self.upstream(slot) else { return };
        let Some(info) = upstream.info() else { return };
        let mut joined = Vec::new();
        for listener in reg.listeners.values() {
            let mut notices = Vec::new();
            listener.edit_topics(|topics| {
                for kind in Capability::ALL {
                    let listens = topics.iter().any(|(_, t)| *t == Topic::List(kind));
                    if listens
                        && info.flag(kind.name(), "listChanged")
                        && policy::reaches_upstream(&upstream.config().allow, &listener.principal)
                    {
                        topics.push((slot, Topic::List(kind)));
                        joined.push((listener.key(), kind));
                        notices.push(Notice::List(kind));
                    }
                }
            });
            if !notices.is_empty() {
                listener.push_all(&notices);
            }
        }
        let mut kinds = Vec::new();
        for (id, kind) in joined {
            let set = reg.topics.entry((slot, Topic::List(kind))).or_default();
            if set.is_empty() {
                kinds.push(Topic::List(kind));
            }
            set.insert(id);
        }
        let added: Vec<(usize, &Topic)> = kinds.iter().map(|t| (slot, t)).collect();
        self.recompute_interest(&added, true);
    }

    /// Stops the feed of a retired slot: its upstream listen ends (and, in a cluster, its
    /// lease is released and its interest dropped).
    pub fn retire(&self, index: usize) {
        let slot = &self.0.slots[index];
        slot.stop.lock().expect("stop lock").cancel();
        slot.desired.send_replace(Filter::default());
        if let Some(cluster) = &self.0.cluster {
            super::replicas::leave(self, cluster, index);
        }
    }
}
