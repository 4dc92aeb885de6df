//! One downstream listener and its coalescing queue of pending changes.
//!
//! A change notification only says "this changed", so repeats of one change coalesce: the
//! queue is a set, bounded by the listener's own subscriptions, and a slow listener loses no
//! information however many changes arrive while it is not reading.
//!
//! Whoever writes the listener's stream (the connection polling its listen body, or a legacy
//! session's pump) registers its waker here and takes what is pending when woken: a listener
//! needs no task or channel of its own, and an idle one holds no buffer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::task::AtomicWaker;
use smallvec::SmallVec;

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

/// Pending URIs up to which repeats are found by a scan; past it a set is kept beside them.
const SCANNED: usize = 16;

/// Pending URIs, the first in place.
type Uris = SmallVec<[Arc<str>; 1]>;

/// Changes waiting to be written to one listener, in downstream form.
#[derive(Debug, Default)]
pub struct Pending {
    /// URIs in the order they first changed (so delivery order follows change order). The
    /// first is held in place: a change fanned out to N listeners allocates nothing for them.
    order: Uris,
    /// The same URIs as a set, once there are more than [`SCANNED`] of them. Boxed: every
    /// listener holds this field, few ever fill it, and a set in place is six words.
    #[expect(clippy::box_collection, reason = "one word in every listener instead of six")]
    seen: Option<Box<HashSet<Arc<str>>>>,
    lists: [bool; 3],
    /// When the oldest change still pending was queued (its fan-out from the upstream).
    since: Option<Instant>,
}

impl Pending {
    /// Number of distinct pending changes.
    pub fn len(&self) -> usize {
        self.order.len() + self.lists.iter().filter(|b| **b).count()
    }

    fn push(&mut self, change: &Notice, now: Instant) {
        self.since.get_or_insert(now);
        match change {
            Notice::Uri(uri) => {
                let new = match &mut self.seen {
                    Some(seen) => seen.insert(uri.clone()),
                    None => !self.order.iter().any(|u| u == uri),
                };
                if new {
                    self.order.push(uri.clone());
                    if self.seen.is_none() && self.order.len() > SCANNED {
                        self.seen = Some(Box::new(self.order.iter().cloned().collect()));
                    }
                }
            }
            Notice::List(kind) => self.lists[kind.slot()] = true,
        }
    }

    /// The pending changes, lists first, emptying the queue (and freeing its buffers: an
    /// idle listener holds none).
    pub fn take(&mut self) -> Vec<Notice> {
        let taken = self.take_out();
        let mut out = Vec::with_capacity(taken.len());
        taken.for_each(|n| out.push(n));
        out
    }

    /// [`Pending::take`] without a new buffer: the queue's own is moved out (the fan-out of
    /// one change to many listeners takes one change from each).
    fn take_out(&mut self) -> Taken {
        self.seen = None;
        let since = self.since.take();
        Taken { lists: std::mem::take(&mut self.lists), uris: std::mem::take(&mut self.order), since }
    }
}

/// Changes taken from a listener's queue, to be visited once.
#[derive(Debug)]
pub struct Taken {
    lists: [bool; 3],
    uris: Uris,
    /// When the oldest of them was queued.
    pub since: Option<Instant>,
}

impl Taken {
    /// How many changes.
    pub fn len(&self) -> usize {
        self.uris.len() + self.lists.iter().filter(|b| **b).count()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each change, lists first, then URIs in the order they first changed.
    pub fn for_each(self, mut f: impl FnMut(Notice)) {
        for kind in Capability::ALL {
            if self.lists[kind.slot()] {
                f(Notice::List(kind));
            }
        }
        self.uris.into_iter().for_each(|uri| f(Notice::Uri(uri)));
    }
}

/// A change was pushed since the writer last looked.
const NOTIFIED: u8 = 1;
/// The proxy is shutting down: the stream ends with its result.
const FINISHED: u8 = 2;
/// The hub dropped the listener (it stopped reading): the stream ends.
const CLOSED: u8 = 4;
/// The listener is dropped once a change has waited for it longer than the slow-listener
/// time (a listen stream's; a legacy session's queue outlives its GET streams).
const DROPS_WHEN_STALLED: u8 = 8;

/// How a listener's stream is to end, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Still listening.
    No,
    /// The proxy is shutting down: end with the listen's result.
    Finished,
    /// Dropped by the hub: end now.
    Closed,
}

/// A registered downstream listen.
pub struct Listener {
    pub id: u64,
    /// The connection it arrived on, as a key (0 when none was told): the fan-out wakes the
    /// listeners of one connection one after the other, so that an HTTP/2 connection writes
    /// its streams' frames together (see [`super::registry`]).
    pub conn: u64,
    pub principal: Principal,
    /// The listen request's id: every notification carries it as `subscriptionId`.
    pub subscription: RequestId,
    /// `(upstream slot, topic)` pairs it is subscribed to (a reload moves them to a replaced
    /// upstream's new slot, or drops a removed upstream's).
    topics: Mutex<Vec<(usize, Topic)>>,
    pending: Mutex<Pending>,
    /// The writer's waker.
    waker: AtomicWaker,
    state: AtomicU8,
}

impl Listener {
    pub fn new(id: u64, principal: Principal, subscription: RequestId, mut topics: Vec<(usize, Topic)>) -> Self {
        // Held for the listen's life, usually with one topic in room for four.
        topics.shrink_to_fit();
        Self {
            id,
            conn: 0,
            principal,
            subscription,
            topics: Mutex::new(topics),
            pending: Mutex::new(Pending::default()),
            waker: AtomicWaker::new(),
            state: AtomicU8::new(0),
        }
    }

    /// The same listener, arrived on connection `conn`.
    pub fn on_conn(self, conn: u64) -> Self {
        Self { conn, ..self }
    }

    /// Where it sits in a topic's fan-out: by connection, then in the order it joined.
    pub fn key(&self) -> (u64, u64) {
        (self.conn, self.id)
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
        self.push_at(change, Instant::now());
    }

    /// Queues a change fanned out at `now` and wakes the writer; returns when the oldest
    /// change it had pending already was queued (`None`: nothing was pending).
    pub fn push_at(&self, change: &Notice, now: Instant) -> Option<Instant> {
        let mut pending = self.pending.lock().expect("pending lock");
        let since = pending.since;
        pending.push(change, now);
        drop(pending);
        self.wake(NOTIFIED);
        since
    }

    /// Queues several changes with one wake-up.
    pub fn push_all(&self, changes: &[Notice]) {
        let now = Instant::now();
        let mut pending = self.pending.lock().expect("pending lock");
        for c in changes {
            pending.push(c, now);
        }
        drop(pending);
        self.wake(NOTIFIED);
    }

    /// Takes everything pending.
    pub fn take(&self) -> Vec<Notice> {
        self.pending.lock().expect("pending lock").take()
    }

    /// Takes everything pending, with when the oldest of it was queued.
    pub fn take_timed(&self) -> Taken {
        self.pending.lock().expect("pending lock").take_out()
    }

    /// Changes waiting now.
    pub fn pending_len(&self) -> usize {
        self.pending.lock().expect("pending lock").len()
    }

    /// Registers `cx`'s waker for the next change or ending; ready (and cleared) when a
    /// change was pushed since the last time it was.
    pub fn poll_woken(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.waker.register(cx.waker());
        if self.state.fetch_and(!NOTIFIED, Ordering::AcqRel) & NOTIFIED != 0 { Poll::Ready(()) } else { Poll::Pending }
    }

    /// Resolves when changes may be pending (a wake-up is kept if none was waiting).
    pub async fn woken(&self) {
        std::future::poll_fn(|cx| self.poll_woken(cx)).await;
    }

    /// How its stream is to end, if it is.
    pub fn ending(&self) -> Ending {
        let state = self.state.load(Ordering::Acquire);
        if state & CLOSED != 0 {
            Ending::Closed
        } else if state & FINISHED != 0 {
            Ending::Finished
        } else {
            Ending::No
        }
    }

    /// The proxy is shutting down: its stream ends with the listen's result.
    pub fn finish(&self) {
        self.wake(FINISHED);
    }

    /// Its stream ends now (it stopped reading).
    pub(super) fn close(&self) {
        self.wake(CLOSED);
    }

    /// Has the hub drop it once a change has waited for it longer than the slow-listener time.
    pub fn drop_when_stalled(&self) {
        self.state.fetch_or(DROPS_WHEN_STALLED, Ordering::Relaxed);
    }

    /// Whether the hub drops it when it stalls.
    pub(super) fn drops_when_stalled(&self) -> bool {
        self.state.load(Ordering::Relaxed) & DROPS_WHEN_STALLED != 0
    }

    fn wake(&self, bits: u8) {
        self.state.fetch_or(bits, Ordering::AcqRel);
        self.waker.wake();
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
        let now = Instant::now();
        for _ in 0..1000 {
            p.push(&Notice::Uri(b.clone()), now);
            p.push(&Notice::Uri(a.clone()), now);
            p.push(&Notice::List(Capability::Tools), now);
        }
        assert_eq!(p.len(), 3);
        assert_eq!(p.take(), vec![Notice::List(Capability::Tools), Notice::Uri(b), Notice::Uri(a)]);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn one_pending_uri_is_held_in_place_in_a_vectors_room() {
        assert_eq!(std::mem::size_of::<Uris>(), std::mem::size_of::<Vec<Arc<str>>>());
        let mut p = Pending::default();
        p.push(&Notice::Uri("a".into()), Instant::now());
        assert!(!p.order.spilled(), "one URI needs no allocation");
        p.push(&Notice::Uri("b".into()), Instant::now());
        assert!(p.order.spilled(), "a second one does");
    }

    #[test]
    fn many_uris_coalesce_through_the_set_in_change_order() {
        let mut p = Pending::default();
        let uris: Vec<Arc<str>> = (0..3 * SCANNED).map(|i| format!("u{i}").into()).collect();
        let now = Instant::now();
        for _ in 0..3 {
            for u in &uris {
                p.push(&Notice::Uri(u.clone()), now);
            }
        }
        assert!(p.seen.is_some(), "past the scanned length a set finds repeats");
        assert_eq!(p.len(), uris.len());
        assert_eq!(p.take(), uris.iter().cloned().map(Notice::Uri).collect::<Vec<_>>());
        assert!(p.seen.is_none() && !p.order.spilled(), "an emptied queue holds no buffer");
    }

    #[test]
    fn a_push_reports_how_long_the_queue_has_waited_and_wakes_once() {
        let l = Listener::new(1, Principal::Anonymous, RequestId::number(1), Vec::new());
        let t0 = Instant::now();
        assert_eq!(l.push_at(&Notice::Uri("x".into()), t0), None);
        let later = t0 + std::time::Duration::from_secs(1);
        assert_eq!(l.push_at(&Notice::Uri("y".into()), later), Some(t0), "the oldest pending change");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(l.poll_woken(&mut cx), Poll::Ready(()));
        assert_eq!(l.poll_woken(&mut cx), Poll::Pending, "one wake-up for both pushes");
        assert_eq!(l.take_timed().since, Some(t0));
        assert_eq!(l.push_at(&Notice::Uri("z".into()), later), None, "taken: nothing waits");
        assert_eq!(l.ending(), Ending::No);
        l.finish();
        assert_eq!(l.ending(), Ending::Finished);
        l.close();
        assert_eq!(l.ending(), Ending::Closed, "closing outranks finishing");
    }
}
