//! The URIs the cache watches (DESIGN §4): while a read of a URI is cached on an upstream that
//! can be subscribed, the URI belongs in that upstream's standing listen, so that its
//! `resources/updated` evicts the read whether or not any client listens.
//!
//! Counted per cached entry (a URI read in several partitions is one watch), bounded per
//! upstream: past the bound the oldest watch is dropped and its entries are left to their TTL,
//! which is counted. Membership changes bump a version the hub's feed waits on; the feed
//! reads the set when it (debounced) re-listens, so a burst of new entries costs one
//! re-listen, not one per entry.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// The watched URIs of every upstream.
pub struct WatchedUris {
    upstreams: Vec<Upstream>,
    /// Most URIs watched per upstream (`[cache] max_watched_uris`).
    limit: usize,
    /// WatchedUris dropped at the bound (their entries became TTL-only), over all upstreams.
    fallbacks: AtomicU64,
}

struct Upstream {
    set: Mutex<Watched>,
    /// Bumped when a URI joins or leaves the set.
    version: watch::Sender<u64>,
}

#[derive(Default)]
struct Watched {
    /// URI → (entries holding it, its place in `order`).
    counts: HashMap<Box<str>, (u32, u64)>,
    /// WatchedUris oldest first, for the bound.
    order: BTreeMap<u64, Box<str>>,
    next: u64,
}

impl WatchedUris {
    /// WatchedUris for `upstreams` upstreams, at most `limit` URIs each.
    pub fn new(upstreams: usize, limit: usize) -> Self {
        Self {
            upstreams: (0..upstreams)
                .map(|_| Upstream { set: Mutex::default(), version: watch::channel(0).0 })
                .collect(),
            limit,
            fallbacks: AtomicU64::new(0),
        }
    }

    /// A cached entry now holds `uri` of `upstream`.
    pub fn retain(&self, upstream: u32, uri: &str) {
        let Some(up) = self.upstreams.get(upstream as usize) else { return };
        if self.limit == 0 {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut w = up.set.lock().expect("watch lock");
        let seq = w.next;
        w.next += 1;
        if let Some((count, at)) = w.counts.get_mut(uri) {
            *count += 1;
            let old = std::mem::replace(at, seq);
            let key = w.order.remove(&old).expect("order holds every watch");
            w.order.insert(seq, key);
            return;
        }
        if w.counts.len() >= self.limit
            && let Some((_, oldest)) = w.order.pop_first()
        {
            w.counts.remove(&oldest);
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        w.counts.insert(uri.into(), (1, seq));
        w.order.insert(seq, uri.into());
        drop(w);
        up.version.send_modify(|v| *v += 1);
    }

    /// A cached entry holding `uri` of `upstream` is gone.
    pub fn release(&self, upstream: u32, uri: &str) {
        let Some(up) = self.upstreams.get(upstream as usize) else { return };
        let mut w = up.set.lock().expect("watch lock");
        let Some((count, at)) = w.counts.get_mut(uri) else { return };
        *count -= 1;
        if *count > 0 {
            return;
        }
        let at = *at;
        w.counts.remove(uri);
        w.order.remove(&at);
        drop(w);
        up.version.send_modify(|v| *v += 1);
    }

    /// The URIs watched on `upstream` now.
    pub fn uris(&self, upstream: usize) -> BTreeSet<String> {
        let Some(up) = self.upstreams.get(upstream) else { return BTreeSet::new() };
        up.set.lock().expect("watch lock").counts.keys().map(|k| k.to_string()).collect()
    }

    /// How many URIs are watched on `upstream`.
    pub fn len(&self, upstream: usize) -> usize {
        self.upstreams.get(upstream).map_or(0, |up| up.set.lock().expect("watch lock").counts.len())
    }

    /// Whether nothing is watched on `upstream`.
    pub fn is_empty(&self, upstream: usize) -> bool {
        self.len(upstream) == 0
    }

    /// Changes whenever a URI joins or leaves `upstream`'s set.
    pub fn changes(&self, upstream: usize) -> watch::Receiver<u64> {
        self.upstreams[upstream].version.subscribe()
    }

    /// WatchedUris dropped at the bound since start: reads then invalidated by TTL only.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_is_watched_while_any_entry_holds_it() {
        let w = WatchedUris::new(1, 10);
        let rx = w.changes(0);
        w.retain(0, "a");
        w.retain(0, "a");
        assert_eq!(w.uris(0), BTreeSet::from(["a".to_owned()]));
        assert!(rx.has_changed().unwrap(), "joining bumps the version");
        w.release(0, "a");
        assert_eq!(w.len(0), 1, "one entry still holds it");
        w.release(0, "a");
        assert!(w.is_empty(0));
        w.release(0, "a");
        assert!(w.is_empty(0), "a release of an unwatched URI is ignored");
    }

    #[test]
    fn past_the_bound_the_oldest_watch_falls_back_and_is_counted() {
        let w = WatchedUris::new(2, 2);
        w.retain(0, "a");
        w.retain(0, "b");
        w.retain(0, "a"); // refreshes a: b is now the oldest
        w.retain(0, "c");
        assert_eq!(w.uris(0), BTreeSet::from(["a".to_owned(), "c".to_owned()]));
        assert_eq!(w.fallbacks(), 1);
        assert!(w.is_empty(1), "upstreams are bounded separately");
        w.release(0, "b");
        assert_eq!(w.len(0), 2, "a fallen-back URI's release changes nothing");
    }
}
