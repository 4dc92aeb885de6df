//! What the router gets from an upstream, and what it serves: the three shapes an answer takes
//! between the fetch, the cache and the reply.

use std::time::Duration;

use bytes::Bytes;

use super::CacheStatus;
use crate::cache::{Entry, Stored, splice_ttl};
use crate::jsonrpc::{RpcError, Spliced};

/// An answer from one upstream, as the router works with it.
#[derive(Debug, Clone)]
pub(super) enum Got {
    /// A result in downstream form (namespaced), with its `ttlMs`.
    Result(Spliced),
    /// A read result too large to hold, streamed (never cached).
    Streamed(super::large::RelaySlot),
    /// "Resource not found".
    NotFound,
    /// The upstream's own error, relayed (never cached).
    Relayed(RpcError),
    /// One upstream's list page.
    Page { items: Bytes, next: Option<Box<str>> },
}

/// What a fetch from an upstream produced.
pub(super) struct Fetched {
    pub got: Got,
    /// The form to store, when the answer is cacheable (complete, not an error).
    pub stored: Option<Stored>,
    pub public: bool,
    /// The upstream's `ttlMs` (after defaults).
    pub ttl_ms: u64,
}

/// An answer with its cache metadata.
#[derive(Debug, Clone)]
pub(super) struct Served {
    pub got: Got,
    pub public: bool,
    /// The `ttlMs` to report: remaining for hits, the stored (clamped) TTL for misses.
    pub ttl_ms: u64,
    pub status: CacheStatus,
    /// Seconds since the upstream produced it, for cached answers.
    pub age: Option<u64>,
}

impl Served {
    /// An answer from `entry`, `age` old.
    pub(super) fn from_entry(entry: &Entry, status: CacheStatus, age: Duration) -> Self {
        let ttl_ms = entry.remaining_ms(age);
        let got = match &entry.stored {
            Stored::Result { tail } => Got::Result(splice_ttl(tail, ttl_ms)),
            Stored::Page { items, next, .. } => Got::Page { items: items.clone(), next: next.clone() },
            Stored::NotFound => Got::NotFound,
        };
        Self { got, public: entry.public, ttl_ms, status, age: Some(age.as_secs()) }
    }

    pub(super) fn fresh(f: Fetched, status: CacheStatus) -> Self {
        Self { got: f.got, public: f.public, ttl_ms: f.ttl_ms, status, age: None }
    }
}
