//! Operator purges (`POST /admin/cache/purge`): entries of one upstream removed by the URI of
//! a read, a URI prefix, or all of them. A purge first marks the fills in flight on that
//! upstream (see [`super::Epochs::purge_begins`]), so none of them can store what the purge
//! removed, then removes the matching entries, each flagged so that a request holding it as a
//! stale fallback does not serve it after a failed refetch.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Cache, CacheKey, CachedMethod};
use resmux_proto::jsonrpc::{RawObject, raw_str};

/// What a purge removes from one upstream. URIs are in the upstream's own form (the router
/// maps the namespaced form clients see onto upstreams).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Reads of exactly this URI, in every partition and with any other params.
    Uri(Box<str>),
    /// Reads of every URI starting with this.
    UriPrefix(Box<str>),
    /// Everything of the upstream: reads and list pages.
    Everything,
}

/// The kinds of purge, in the order the counters keep them (also the metric label values).
const KINDS: [&str; 3] = ["uri", "uri_prefix", "upstream"];

impl Target {
    /// How the purge selects, for the metrics: `uri`, `uri_prefix` or `upstream`.
    pub fn kind(&self) -> &'static str {
        KINDS[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            Target::Uri(_) => 0,
            Target::UriPrefix(_) => 1,
            Target::Everything => 2,
        }
    }

    fn matches(&self, key: &CacheKey) -> bool {
        match self {
            Target::Everything => true,
            Target::Uri(uri) => read_uri(key).is_some_and(|u| *u == **uri),
            Target::UriPrefix(prefix) => read_uri(key).is_some_and(|u| u.starts_with(&**prefix)),
        }
    }
}

/// The URI of a cached read (upstream form), from its canonical params; `None` for lists.
pub(super) fn read_uri(key: &CacheKey) -> Option<Cow<'_, str>> {
    if key.base.method != CachedMethod::ResourcesRead {
        return None;
    }
    raw_str(RawObject::parse_str(&key.base.params).ok()?.get_borrowed("uri")?)
}

/// Purges and purged entries since start, per kind.
#[derive(Default)]
pub(super) struct Counters {
    purges: [AtomicU64; 3],
    entries: [AtomicU64; 3],
}

/// One kind's purge figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeCounts {
    /// `uri`, `uri_prefix` or `upstream`.
    pub kind: &'static str,
    /// Purges applied on this replica (asked here or announced by another replica).
    pub purges: u64,
    /// Entries they removed here.
    pub entries: u64,
}

impl Cache {
    /// Removes what `target` selects of upstream `slot`; returns how many entries were
    /// removed. Bounded by the store's size (one pass over it).
    pub fn purge(&self, slot: u32, target: &Target) -> u64 {
        self.0.epochs.purge_begins(slot);
        let doomed: Vec<_> = self.0.store.iter().filter(|(k, _)| k.upstream() == slot && target.matches(k)).collect();
        let mut removed = 0;
        for (key, entry) in doomed {
            entry.purged.store(true, Ordering::Release);
            if self.0.store.remove(&*key).is_some() {
                removed += 1;
            }
        }
        self.0.store.run_pending_tasks();
        let i = target.index();
        self.0.purges.purges[i].fetch_add(1, Ordering::Relaxed);
        self.0.purges.entries[i].fetch_add(removed, Ordering::Relaxed);
        removed
    }

    /// Purge figures since start, per kind.
    pub fn purge_counts(&self) -> [PurgeCounts; 3] {
        let c = &self.0.purges;
        std::array::from_fn(|i| PurgeCounts {
            kind: KINDS[i],
            purges: c.purges[i].load(Ordering::Relaxed),
            entries: c.entries[i].load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::CacheConfig;
    use crate::{BaseKey, Lookup, Owner, Partition, Stored};

    fn read(uri: &str) -> BaseKey {
        BaseKey {
            upstream: 0,
            method: CachedMethod::ResourcesRead,
            era: 0,
            params: serde_json::json!({ "uri": uri }).to_string().into(),
        }
    }

    fn fill(cache: &Cache, key: BaseKey, partition: Partition) -> bool {
        let uri = read_uri(&key.clone().in_partition(Partition::Public)).map(|u| u.into_owned());
        let ticket = cache.epochs().ticket(key.upstream, key.method, uri.as_deref());
        cache.store(key, partition, Stored::result(b"{}").unwrap(), Duration::from_secs(60), ticket, None)
    }

    fn fresh(cache: &Cache, key: &BaseKey) -> bool {
        matches!(cache.lookup(key, || &Owner::Anonymous([9; 16])), Lookup::Fresh { .. })
    }

    #[test]
    fn each_target_removes_what_it_names_in_every_partition() {
        let cache = Cache::new(CacheConfig::default(), 2);
        let list = BaseKey { method: CachedMethod::ToolsList, params: "{}".into(), ..read("x") };
        let other = BaseKey { upstream: 1, ..read("file:///a.md") };
        for key in [read("file:///a.md"), read("file:///b/c.md"), read("mem://z"), list.clone(), other.clone()] {
            assert!(fill(&cache, key, Partition::Public));
        }
        assert!(fill(&cache, read("file:///a.md"), Partition::Private(Owner::Anonymous([1; 16]))));
        assert_eq!(cache.purge(0, &Target::Uri("file:///a.md".into())), 2, "public and private");
        assert!(!fresh(&cache, &read("file:///a.md")) && fresh(&cache, &read("file:///b/c.md")));
        assert!(fresh(&cache, &other), "another upstream's entry of the same URI stays");
        assert_eq!(cache.purge(0, &Target::UriPrefix("file:///".into())), 1);
        assert!(fresh(&cache, &read("mem://z")) && fresh(&cache, &list), "a prefix purge leaves lists");
        assert_eq!(cache.purge(0, &Target::Everything), 2);
        assert!(!fresh(&cache, &list) && fresh(&cache, &other));
        let counts = cache.purge_counts();
        assert_eq!(
            counts.map(|c| (c.kind, c.purges, c.entries)),
            [("uri", 1, 2), ("uri_prefix", 1, 1), ("upstream", 1, 2)]
        );
    }

    #[test]
    fn a_fill_in_flight_during_a_purge_is_not_stored_and_a_purged_entry_is_no_stale_fallback() {
        let cache = Cache::new(CacheConfig { stale_if_error: Duration::from_secs(60), ..CacheConfig::default() }, 1);
        let key = read("file:///a.md");
        assert!(fill(&cache, key.clone(), Partition::Public));
        let held = match cache.lookup(&key, || &Owner::Anonymous([0; 16])) {
            Lookup::Fresh { entry, .. } => entry,
            _ => panic!("filled"),
        };
        assert!(held.servable_stale());
        let in_flight = cache.epochs().ticket(0, CachedMethod::ResourcesRead, Some("file:///a.md"));
        assert_eq!(cache.purge(0, &Target::Uri("file:///a.md".into())), 1);
        assert!(!held.servable_stale(), "a request holding it as a fallback sees it purged");
        let late = cache.store(
            key.clone(),
            Partition::Public,
            Stored::result(b"{}").unwrap(),
            Duration::from_secs(60),
            in_flight,
            None,
        );
        assert!(!late && !fresh(&cache, &key), "the late fill did not bring it back");
        assert!(fill(&cache, key.clone(), Partition::Public) && fresh(&cache, &key), "a new fill is cached");
        assert_eq!(cache.entry_count(), 1);
    }
}
