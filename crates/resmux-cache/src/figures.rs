//! Per-upstream cache figures for the metrics: bytes held and evictions, per scope (public,
//! private). Kept as atomics beside the store, updated on insert and in its removal listener.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use super::{CacheKey, Entry, Partition};

/// One upstream's figures, per scope: index 0 public, 1 private.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeFigures {
    pub bytes: [u64; 2],
    pub evictions: [u64; 2],
}

#[derive(Default)]
struct Slot {
    bytes: [AtomicI64; 2],
    evictions: [AtomicU64; 2],
}

/// The figures of every upstream.
pub(super) struct Figures(Vec<Slot>);

fn scope(key: &CacheKey) -> usize {
    usize::from(key.partition != Partition::Public)
}

/// What an entry weighs in the store (the same sum as its weigher).
pub(super) fn weight(key: &CacheKey, entry: &Entry) -> i64 {
    (key.weight() + entry.weight()) as i64
}

impl Figures {
    pub(super) fn new(upstreams: usize) -> Self {
        Self((0..upstreams).map(|_| Slot::default()).collect())
    }

    pub(super) fn stored(&self, key: &CacheKey, entry: &Entry) {
        if let Some(slot) = self.0.get(key.base.upstream as usize) {
            slot.bytes[scope(key)].fetch_add(weight(key, entry), Relaxed);
        }
    }

    pub(super) fn removed(&self, key: &CacheKey, entry: &Entry, evicted: bool) {
        if let Some(slot) = self.0.get(key.base.upstream as usize) {
            slot.bytes[scope(key)].fetch_sub(weight(key, entry), Relaxed);
            if evicted {
                slot.evictions[scope(key)].fetch_add(1, Relaxed);
            }
        }
    }

    pub(super) fn of(&self, upstream: usize) -> ScopeFigures {
        let Some(slot) = self.0.get(upstream) else { return ScopeFigures::default() };
        let bytes = |s: usize| slot.bytes[s].load(Relaxed).max(0) as u64;
        ScopeFigures { bytes: [bytes(0), bytes(1)], evictions: [0, 1].map(|s| slot.evictions[s].load(Relaxed)) }
    }
}
