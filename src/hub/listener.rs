//! One downstream listener and its coalescing queue of pending changes.
//!
//! A change notification only says "this changed", so repeats of one change coalesce: the
//! queue is a set, bounded by the listener's own subscriptions, and a slow listener loses no
//! information however many changes arrive while it is not reading.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::auth::Principal;
use crate::jsonrpc::RequestId;
use crate::mcp::Capability;
pub use crate::mcp::notify::Notice;

/// What a listener is subscribed to on one upstream (upstream-form URIs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Topic {
    Uri(String),
    List(Capability),
}

/// Changes waiting to be written to one listener, in downstream form.
#[derive(Debug, Default)]
pub struct Pending {
    /// URIs in the order they first changed (so delivery order follows change order).
    order: Vec<Arc<str>>,
    seen: HashSet<Arc<str>>,
    lists: [bool; 3],
    /// When the oldest change still pending was queued (its receipt from the upstream).
    since: Option<std::time::Instant>,
}

impl Pending {
    /// Number of distinct pending changes.
    pub fn len(&self) -> usize {
        self.order.len() + self.lists.iter().filter(|b| **b).count()
    }

    fn push(&mut self, change: &Notice) {
        self.since.get_or_insert_with(std::time::Instant::now);
        match change {
            Notice::Uri(uri) => {
                if self.seen.insert(uri.clone()) {
                    self.order.push(uri.clone());
                }
            }
            Notice::List(kind) => self.lists[kind.slot()] = true,
        }
    }

    /// The pending changes, lists first, emptying the queue.
    pub fn take(&mut self) -> Vec<Notice> {
        let mut out: Vec<Notice> = Capability::ALL
            .into_iter()
            .filter(|k| std::mem::take(&mut self.lists[k.slot()]))
            .map(Notice::List)
            .collect();
        self.seen.clear();
        self.since = None;
        out.extend(self.order.drain(..).map(Notice::Uri));
        out
    }
}

/// A registered downstream listen.
pub struct Listener {
    pub id: u64,
    pub principal: Principal,
    /// The listen request's id: every notification carries it as `subscriptionId`.
    pub subscription: RequestId,
    /// `(upstream slot, topic)` pairs it is subscribed to (a reload moves them to a replaced
    /// upstream's new slot, or drops a removed upstream's).
    topics: Mutex<Vec<(usize, Topic)>>,
    /// The downstream form of each URI topic, parallel to `topics` where it is a URI.
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Listener {
    pub fn new(id: u64, principal: Principal, subscription: RequestId, topics: Vec<(usize, Topic)>) -> Self {
        Self {
            id,
            principal,
            subscription,
            topics: Mutex::new(topics),
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
        }
    }

    /// The `(upstream slot, topic)` pairs it is subscribed to now.
    pub fn topics(&self) -> Vec<(usize, Topic)> {
        self.topics.lock().expect("topics lock").clone()
    }

    /// Edits its topics (the hub does, under its registry lock, on a reload).
    pub(super) fn edit_topics<R>(&self, edit: impl FnOnce(&mut Vec<(usize, Topic)>) -> R) -> R {
        edit(&mut self.topics.lock().expect("topics lock"))
    }

    /// Queues a change and wakes the writer. Never blocks on the connection.
    pub fn push(&self, change: &Notice) {
        self.pending.lock().expect("pending lock").push(change);
        self.wake.notify_one();
    }

    /// Queues several changes with one wake-up.
    pub fn push_all(&self, changes: &[Notice]) {
        let mut pending = self.pending.lock().expect("pending lock");
        for c in changes {
            pending.push(c);
        }
        drop(pending);
        self.wake.notify_one();
    }

    /// Takes everything pending.
    pub fn take(&self) -> Vec<Notice> {
        self.pending.lock().expect("pending lock").take()
    }

    /// Takes everything pending, with when the oldest of it was queued.
    pub fn take_timed(&self) -> (Vec<Notice>, Option<std::time::Instant>) {
        let mut pending = self.pending.lock().expect("pending lock");
        let since = pending.since;
        (pending.take(), since)
    }

    /// Changes waiting now.
    pub fn pending_len(&self) -> usize {
        self.pending.lock().expect("pending lock").len()
    }

    /// Resolves when changes may be pending (a permit is kept if none was waiting).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_coalesce_and_order_is_kept() {
        let mut p = Pending::default();
        let a: Arc<str> = "a".into();
        let b: Arc<str> = "b".into();
        for _ in 0..1000 {
            p.push(&Notice::Uri(b.clone()));
            p.push(&Notice::Uri(a.clone()));
            p.push(&Notice::List(Capability::Tools));
        }
        assert_eq!(p.len(), 3);
        assert_eq!(p.take(), vec![Notice::List(Capability::Tools), Notice::Uri(b), Notice::Uri(a)]);
        assert_eq!(p.len(), 0);
    }
}
