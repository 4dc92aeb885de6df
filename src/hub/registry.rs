//! Who listens to what, and the fan-out's view of it. The registry (behind the hub's one lock)
//! is the bookkeeping of joins and leaves: the listeners, the per-principal counts and, per
//! `(upstream, topic)`, the set of listener ids that is also the topic's refcount. Fan-out
//! never pushes under that lock: each topic keeps a snapshot of its listeners (an
//! `Arc<[Arc<Listener>]>`), rebuilt by the first fan-out after its set changed, and a change
//! is pushed to the snapshot with the lock released. Delivering one change to N listeners so
//! holds the lock for O(1) (O(N) once after the set changed), and joins, leaves and the other
//! upstreams' changes never wait for N pushes (`benches/fanout.rs`).
//!
//! A topic's listeners are kept in the order of their connection ([`Listener::key`]), so the
//! fan-out wakes the streams of one HTTP/2 connection one after another, and that
//! connection's task finds their frames queued together when it writes: in a random order
//! each `send` carried one or two frames, and the proxy spent most of its delivery time in
//! them (`loadtests/results/listeners-issue32.md`, "Gathered writes").

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::listener::{Listener, Topic};
use crate::auth::Principal;

/// A listener that left, and the topics it was the last listener of.
pub type Left = (Arc<Listener>, Vec<(usize, Topic)>);

/// The hub's bookkeeping of listeners.
#[derive(Default)]
pub struct Registry {
    pub listeners: HashMap<u64, Arc<Listener>>,
    pub per_principal: HashMap<Principal, usize>,
    /// Who listens to what: `(upstream, topic)` → listener ids.
    pub topics: HashMap<(usize, Topic), Watchers>,
}

/// A listener's place in a topic: its connection key, then its id ([`Listener::key`]).
pub type Key = (u64, u64);

/// The listeners of one topic: their keys, in fan-out order, and the fan-out's snapshot of
/// them.
#[derive(Default)]
pub struct Watchers {
    ids: BTreeSet<Key>,
    /// `None` once `ids` changed, until the next fan-out rebuilds it.
    snapshot: Option<Arc<[Arc<Listener>]>>,
}

impl Watchers {
    /// Adds a listener; true when it was not there.
    pub fn insert(&mut self, id: Key) -> bool {
        let added = self.ids.insert(id);
        if added {
            self.snapshot = None;
        }
        added
    }

    /// Removes a listener; true when it was there.
    pub fn remove(&mut self, id: &Key) -> bool {
        let removed = self.ids.remove(id);
        if removed {
            self.snapshot = None;
        }
        removed
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The listener ids, in fan-out order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.ids.iter().map(|&(_, id)| id)
    }
}

impl Extend<Key> for Watchers {
    fn extend<I: IntoIterator<Item = Key>>(&mut self, ids: I) {
        let before = self.ids.len();
        self.ids.extend(ids);
        if self.ids.len() != before {
            self.snapshot = None;
        }
    }
}

impl IntoIterator for Watchers {
    type Item = Key;
    type IntoIter = std::collections::btree_set::IntoIter<Key>;

    fn into_iter(self) -> Self::IntoIter {
        self.ids.into_iter()
    }
}

impl Registry {
    /// The listeners of `(upstream, topic)` to push a change to, with the lock released: the
    /// topic's snapshot, rebuilt first if its set changed since the last fan-out.
    pub fn watchers(&mut self, upstream: usize, topic: Topic) -> Option<Arc<[Arc<Listener>]>> {
        let Self { listeners, topics, .. } = self;
        let set = topics.get_mut(&(upstream, topic))?;
        let snapshot = set
            .snapshot
            .get_or_insert_with(|| set.ids.iter().filter_map(|(_, id)| listeners.get(id).cloned()).collect());
        Some(snapshot.clone())
    }

    /// Every listener, to be visited with the lock released.
    pub fn all(&self) -> Vec<Arc<Listener>> {
        self.listeners.values().cloned().collect()
    }

    /// Registers `listener` under each of its topics; returns the topics that had no listener
    /// before.
    pub fn join(&mut self, listener: &Arc<Listener>) -> Vec<(usize, Topic)> {
        let mut added = Vec::new();
        for (up, topic) in listener.topics() {
            let set = self.topics.entry((up, topic.clone())).or_default();
            if set.is_empty() {
                added.push((up, topic));
            }
            set.insert(listener.key());
        }
        self.listeners.insert(listener.id, listener.clone());
        added
    }

    /// Unregisters listener `id`; returns it and the topics it was the last listener of.
    pub fn leave(&mut self, id: u64) -> Option<Left> {
        let listener = self.listeners.remove(&id)?;
        let mut removed = Vec::new();
        for key in listener.topics() {
            if let Some(set) = self.topics.get_mut(&key) {
                set.remove(&listener.key());
                if set.is_empty() {
                    self.topics.remove(&key);
                    removed.push(key);
                }
            }
        }
        Some((listener, removed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Notice;
    use crate::jsonrpc::RequestId;

    fn listener(id: u64, uri: &str) -> Arc<Listener> {
        Arc::new(Listener::new(id, Principal::Anonymous, RequestId::number(id), vec![(0, Topic::Uri(uri.into()))]))
    }

    #[test]
    fn the_fan_out_wakes_one_connections_listeners_together() {
        let mut reg = Registry::default();
        // Streams of three connections, joining interleaved (as their clients' listens come).
        let conns = [30, 10, 20];
        for id in 1..=9u64 {
            let l = Listener::new(id, Principal::Anonymous, RequestId::number(id), vec![(0, Topic::Uri("x".into()))]);
            reg.join(&Arc::new(l.on_conn(conns[id as usize % 3])));
        }
        let order: Vec<(u64, u64)> = reg.watchers(0, Topic::Uri("x".into())).unwrap().iter().map(|l| l.key()).collect();
        assert_eq!(
            order,
            vec![(10, 1), (10, 4), (10, 7), (20, 2), (20, 5), (20, 8), (30, 3), (30, 6), (30, 9)],
            "by connection, then in the order they joined"
        );
        reg.leave(4).unwrap();
        let order: Vec<u64> = reg.watchers(0, Topic::Uri("x".into())).unwrap().iter().map(|l| l.id).collect();
        assert_eq!(order, vec![1, 7, 2, 5, 8, 3, 6, 9], "a leave takes its own key out");
    }

    #[test]
    fn the_snapshot_follows_joins_and_leaves() {
        let mut reg = Registry::default();
        let (a, b) = (listener(1, "x"), listener(2, "x"));
        assert_eq!(reg.join(&a).len(), 1, "the first listener adds the topic");
        assert!(reg.join(&b).is_empty());
        let ids = |s: Arc<[Arc<Listener>]>| {
            let mut v: Vec<u64> = s.iter().map(|l| l.id).collect();
            v.sort();
            v
        };
        let first = reg.watchers(0, Topic::Uri("x".into())).unwrap();
        assert_eq!(ids(first.clone()), vec![1, 2]);
        let again = reg.watchers(0, Topic::Uri("x".into())).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "unchanged sets reuse their snapshot");
        let (_, gone) = reg.leave(1).unwrap();
        assert!(gone.is_empty());
        assert_eq!(ids(reg.watchers(0, Topic::Uri("x".into())).unwrap()), vec![2]);
        let (_, gone) = reg.leave(2).unwrap();
        assert_eq!(gone, vec![(0, Topic::Uri("x".into()))], "the last leave removes the topic");
        assert!(reg.watchers(0, Topic::Uri("x".into())).is_none());
        assert!(reg.leave(2).is_none());
        // A snapshot taken before a leave still delivers harmlessly to the listener that left.
        first.iter().for_each(|l| l.push(&Notice::Uri("x".into())));
    }
}
