//! Invalidation by epochs. Every notification that invalidates something bumps an epoch; an
//! entry remembers the epochs current when its fetch *started*, and is stale once any of them
//! moved. This evicts in every partition at O(1) per notification, and a fetch that races a
//! notification can never store pre-change content as fresh.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::key::CachedMethod;
use resmux_proto::mcp::{Capability, List};

/// Most (upstream, URI) epochs remembered. An evicted epoch reads as 0, which can only make an
/// entry look stale (a spurious miss), never fresh.
const MAX_URI_EPOCHS: u64 = 1 << 18;

/// The epochs an entry depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    upstream: u32,
    /// The upstream's stream epoch (bumped when its notification stream was lost).
    stream: u64,
    scope: Scope,
    /// The epoch of `scope` at fetch start.
    epoch: u64,
    /// The upstream's purge count at fetch start (see [`Epochs::purge_begins`]).
    purges: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// A read of the URI with this hash, taken when the upstream had had `changes` URI
    /// changes.
    Uri { hash: u64, changes: u64 },
    /// A list kind (index into the per-upstream list epochs).
    List(usize),
}

/// All epochs.
pub struct Epochs {
    counter: AtomicU64,
    streams: Vec<AtomicU64>,
    /// Per upstream: resources/list, templates, tools, prompts.
    lists: Vec<[AtomicU64; 4]>,
    uris: moka::sync::Cache<(u32, u64), u64>,
    /// Per upstream: how many URI changes it has had. While it has not moved since a ticket
    /// was taken, no URI epoch of that upstream can have moved either, so checking a read's
    /// ticket costs an atomic load instead of a lookup in `uris`.
    uri_changes: Vec<AtomicU64>,
    /// Per upstream: operator purges begun. A fill whose ticket is behind was in flight
    /// during a purge and is not stored: whether its URI was among the purged ones is not
    /// worth tracking for the few fills a purge overlaps.
    purges: Vec<AtomicU64>,
    hasher: std::collections::hash_map::RandomState,
}

fn list_index(method: CachedMethod) -> usize {
    match method {
        CachedMethod::ResourcesList => 0,
        CachedMethod::TemplatesList => 1,
        CachedMethod::ToolsList => 2,
        CachedMethod::PromptsList => 3,
        CachedMethod::ResourcesRead => unreachable!("reads are keyed by URI"),
    }
}

impl From<List> for CachedMethod {
    fn from(list: List) -> Self {
        match list {
            List::Resources => CachedMethod::ResourcesList,
            List::Templates => CachedMethod::TemplatesList,
            List::Tools => CachedMethod::ToolsList,
            List::Prompts => CachedMethod::PromptsList,
        }
    }
}

impl CachedMethod {
    /// The cached lists a change to `kind`'s lists invalidates.
    pub fn invalidated_by(kind: Capability) -> impl Iterator<Item = CachedMethod> {
        List::ALL.into_iter().filter(move |l| l.capability() == kind).map(CachedMethod::from)
    }
}

impl Epochs {
    pub fn new(upstreams: usize) -> Self {
        Self {
            counter: AtomicU64::new(1),
            streams: (0..upstreams).map(|_| AtomicU64::new(0)).collect(),
            lists: (0..upstreams).map(|_| Default::default()).collect(),
            uri_changes: (0..upstreams).map(|_| AtomicU64::new(0)).collect(),
            purges: (0..upstreams).map(|_| AtomicU64::new(0)).collect(),
            uris: moka::sync::Cache::builder()
                .max_capacity(MAX_URI_EPOCHS)
                .time_to_idle(Duration::from_secs(24 * 3600))
                .build(),
            hasher: Default::default(),
        }
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    fn uri_hash(&self, uri: &str) -> u64 {
        self.hasher.hash_one(uri)
    }

    /// The ticket for a fetch of `method` (with `uri` for reads) from `upstream`, taken before
    /// the upstream request is sent.
    pub fn ticket(&self, upstream: u32, method: CachedMethod, uri: Option<&str>) -> Ticket {
        let u = upstream as usize;
        let (scope, epoch) = match (method, uri) {
            (CachedMethod::ResourcesRead, uri) => {
                // The count first: a change that lands between the two loads leaves the
                // ticket behind the count, so `is_current` looks the epoch up again.
                let changes = self.uri_changes[u].load(Ordering::Acquire);
                let hash = uri.map_or(0, |uri| self.uri_hash(uri));
                let epoch = if uri.is_some() { self.uris.get(&(upstream, hash)).unwrap_or(0) } else { 0 };
                (Scope::Uri { hash, changes }, epoch)
            }
            (m, _) => {
                let i = list_index(m);
                (Scope::List(i), self.lists[u][i].load(Ordering::Acquire))
            }
        };
        let purges = self.purges[u].load(Ordering::Acquire);
        Ticket { upstream, stream: self.streams[u].load(Ordering::Acquire), scope, epoch, purges }
    }

    /// Whether nothing the ticket depends on changed since it was taken.
    pub fn is_current(&self, t: &Ticket) -> bool {
        let u = t.upstream as usize;
        let epoch = match t.scope {
            Scope::Uri { changes, .. } if self.uri_changes[u].load(Ordering::Acquire) == changes => t.epoch,
            Scope::Uri { hash, .. } => self.uris.get(&(t.upstream, hash)).unwrap_or(0),
            Scope::List(i) => self.lists[u][i].load(Ordering::Acquire),
        };
        epoch == t.epoch && self.streams[u].load(Ordering::Acquire) == t.stream
    }

    /// `notifications/resources/updated` for `uri`: its reads go stale in every partition.
    pub fn uri_changed(&self, upstream: u32, uri: &str) {
        let h = self.uri_hash(uri);
        self.uris.insert((upstream, h), self.next());
        // After the epoch, so that a ticket which sees the new count sees the new epoch too.
        self.uri_changes[upstream as usize].fetch_add(1, Ordering::Release);
    }

    /// A `list_changed` notification: that list's pages go stale.
    pub fn list_changed(&self, upstream: u32, method: CachedMethod) {
        self.lists[upstream as usize][list_index(method)].store(self.next(), Ordering::Release);
    }

    /// An operator purge of `upstream` begins: fills in flight from now on are refused (see
    /// [`Epochs::purged_since`]). Called before the purge removes entries, so that a fill
    /// stored after the removal pass sees the new count and takes itself out again.
    pub fn purge_begins(&self, upstream: u32) {
        if let Some(p) = self.purges.get(upstream as usize) {
            p.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Whether a purge of the ticket's upstream began after the ticket was taken.
    pub fn purged_since(&self, t: &Ticket) -> bool {
        self.purges.get(t.upstream as usize).is_some_and(|p| p.load(Ordering::SeqCst) != t.purges)
    }

    /// The upstream's notification stream was lost: everything from it goes stale, since
    /// changes during the gap are unknown.
    pub fn stream_lost(&self, upstream: u32) {
        self.streams[upstream as usize].store(self.next(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_notification_invalidates_what_it_names_and_nothing_else() {
        let e = Epochs::new(2);
        let read_a = e.ticket(0, CachedMethod::ResourcesRead, Some("a"));
        let read_b = e.ticket(0, CachedMethod::ResourcesRead, Some("b"));
        let list = e.ticket(0, CachedMethod::ResourcesList, None);
        let tools = e.ticket(0, CachedMethod::ToolsList, None);
        let other = e.ticket(1, CachedMethod::ResourcesRead, Some("a"));
        e.uri_changed(0, "a");
        assert!(!e.is_current(&read_a));
        assert!(e.is_current(&read_b) && e.is_current(&list) && e.is_current(&other));
        e.list_changed(0, CachedMethod::ResourcesList);
        assert!(!e.is_current(&list) && e.is_current(&tools));
        e.stream_lost(0);
        assert!(!e.is_current(&read_b) && !e.is_current(&tools) && e.is_current(&other));
        // A ticket taken after the change is current.
        assert!(e.is_current(&e.ticket(0, CachedMethod::ResourcesRead, Some("a"))));
    }

    #[test]
    fn a_read_stays_current_through_changes_of_other_uris_and_goes_stale_with_its_own() {
        let e = Epochs::new(1);
        let read_a = e.ticket(0, CachedMethod::ResourcesRead, Some("a"));
        // Other URIs change: the count moves, so `a` is checked by its own epoch.
        for n in 0..3 {
            e.uri_changed(0, &format!("other{n}"));
            assert!(e.is_current(&read_a), "after {n} other changes");
        }
        let after = e.ticket(0, CachedMethod::ResourcesRead, Some("a"));
        e.uri_changed(0, "a");
        assert!(!e.is_current(&read_a) && !e.is_current(&after));
        // A ticket whose count is behind but whose epoch is the current one is current.
        let fresh = e.ticket(0, CachedMethod::ResourcesRead, Some("a"));
        let behind = Ticket { scope: Scope::Uri { hash: e.uri_hash("a"), changes: 0 }, ..fresh.clone() };
        assert!(e.is_current(&fresh) && e.is_current(&behind));
    }

    #[test]
    fn a_purge_marks_the_fills_in_flight_on_its_upstream_only() {
        let e = Epochs::new(2);
        let before = e.ticket(0, CachedMethod::ResourcesRead, Some("a"));
        let list = e.ticket(0, CachedMethod::ToolsList, None);
        let other = e.ticket(1, CachedMethod::ResourcesRead, Some("a"));
        e.purge_begins(0);
        assert!(e.purged_since(&before) && e.purged_since(&list));
        assert!(!e.purged_since(&other), "another upstream's fill is unaffected");
        assert!(!e.purged_since(&e.ticket(0, CachedMethod::ResourcesRead, Some("a"))));
        assert!(e.is_current(&before), "a purge is no notification: freshness is the entries' removal");
        e.purge_begins(7); // a slot that does not exist is ignored
    }
}
