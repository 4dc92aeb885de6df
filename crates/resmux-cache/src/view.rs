//! The admin page's Cache view: the entries with the most hits and the most bytes, found in
//! one pass over the store holding at most twice the asked number of candidates per list.
//! Private entries are shown by a short keyed digest of their owner, never the identity.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use super::figures::weight;
use super::{Cache, CacheKey, CachedMethod, Entry, Partition};

/// Key of the owner digests: per process, so a digest tells rows of one owner apart from
/// another's on this page and means nothing anywhere else.
static OWNER_KEY: LazyLock<std::collections::hash_map::RandomState> = LazyLock::new(Default::default);

/// One entry as the Cache view shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryView {
    pub upstream: u32,
    pub method: CachedMethod,
    /// The URI of a read, in the upstream's form.
    pub uri: Option<String>,
    pub public: bool,
    /// For a private entry: a short keyed digest of its owner.
    pub owner: Option<String>,
    /// Milliseconds until it goes stale (0 once stale).
    pub remaining_ms: u64,
    /// Past its TTL or invalidated (kept only as a stale-if-error fallback).
    pub stale: bool,
    /// What it weighs in the store.
    pub bytes: u64,
    pub hits: u64,
}

/// The entries with the most hits and with the most bytes, most first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopEntries {
    pub by_hits: Vec<EntryView>,
    pub by_bytes: Vec<EntryView>,
}

type Candidate = (u64, Arc<CacheKey>, Arc<Entry>);

/// Keeps the `n` best of `list` once it holds `2n`: amortized O(log n) per entry, bounded
/// memory whatever the store holds.
fn push_top(list: &mut Vec<Candidate>, candidate: Candidate, n: usize) {
    list.push(candidate);
    if list.len() >= 2 * n {
        settle(list, n);
    }
}

fn settle(list: &mut Vec<Candidate>, n: usize) {
    list.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    list.truncate(n);
}

impl Cache {
    /// The `n` entries with the most hits and the `n` with the most bytes.
    pub fn top(&self, n: usize) -> TopEntries {
        if n == 0 {
            return TopEntries::default();
        }
        let (mut by_hits, mut by_bytes) = (Vec::new(), Vec::new());
        for (key, entry) in self.0.store.iter() {
            let hits = entry.hits.load(Ordering::Relaxed);
            let bytes = weight(&key, &entry) as u64;
            push_top(&mut by_hits, (hits, key.clone(), entry.clone()), n);
            push_top(&mut by_bytes, (bytes, key, entry), n);
        }
        settle(&mut by_hits, n);
        settle(&mut by_bytes, n);
        let show = |list: Vec<Candidate>| list.into_iter().map(|(_, k, e)| self.view(&k, &e)).collect();
        TopEntries { by_hits: show(by_hits), by_bytes: show(by_bytes) }
    }

    fn view(&self, key: &CacheKey, entry: &Entry) -> EntryView {
        let age = entry.age();
        let owner = match &key.partition {
            Partition::Public => None,
            Partition::Private(owner) => Some(format!("{:08x}", OWNER_KEY.hash_one(owner) >> 32)),
        };
        EntryView {
            upstream: key.upstream(),
            method: key.base.method,
            uri: super::purge::read_uri(key).map(|u| u.into_owned()),
            public: entry.public,
            owner,
            remaining_ms: entry.remaining_ms(age),
            stale: age >= entry.ttl || !self.0.epochs.is_current(&entry.ticket),
            bytes: weight(key, entry) as u64,
            hits: entry.hits.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::CacheConfig;
    use crate::{BaseKey, Lookup, Owner, Stored};
    use resmux_proto::mcp::principal::Principal;

    #[test]
    fn the_top_lists_rank_by_hits_and_bytes_and_hide_owners() {
        let cache = Cache::new(CacheConfig::default(), 1);
        let key = |i: usize| BaseKey {
            upstream: 0,
            method: CachedMethod::ResourcesRead,
            era: 0,
            params: format!(r#"{{"uri":"mem://{i}"}}"#).into(),
        };
        let alice = Owner::Principal(Principal::user("alice-the-secret-name", &[], &[]));
        for i in 0..30 {
            let ticket = cache.epochs().ticket(0, CachedMethod::ResourcesRead, Some(&format!("mem://{i}")));
            let body = format!(r#"{{"text":"{}"}}"#, "x".repeat(i * 10));
            let partition = if i == 7 { Partition::Private(alice.clone()) } else { Partition::Public };
            let stored = Stored::result(body.as_bytes()).unwrap();
            assert!(cache.store(key(i), partition, stored, Duration::from_secs(60), ticket, None));
        }
        for (i, hits) in [(3, 5), (7, 9), (12, 1)] {
            for _ in 0..hits {
                assert!(matches!(cache.lookup(&key(i), || &alice), Lookup::Fresh { .. }));
            }
        }
        let top = cache.top(3);
        let uris = |l: &[EntryView]| l.iter().map(|e| e.uri.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(uris(&top.by_hits), ["mem://7", "mem://3", "mem://12"]);
        assert_eq!(top.by_hits.iter().map(|e| e.hits).collect::<Vec<_>>(), [9, 5, 1]);
        assert_eq!(uris(&top.by_bytes), ["mem://29", "mem://28", "mem://27"]);
        let private = &top.by_hits[0];
        assert!(!private.public && !private.stale && private.remaining_ms > 59_000);
        let digest = private.owner.as_deref().expect("a private entry has an owner digest");
        assert_eq!(digest.len(), 8);
        assert!(!format!("{private:?}").contains("alice"), "the identity is never shown");
        assert!(top.by_hits[1].owner.is_none());
        assert_eq!(cache.top(0), TopEntries::default());
    }
}
