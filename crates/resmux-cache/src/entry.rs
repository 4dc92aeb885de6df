//! What the cache stores: results in their final downstream form, ready to be written with
//! only the request id and the remaining TTL spliced in.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::epochs::Ticket;
use resmux_proto::jsonrpc::{Head, RawObject, Spliced};

/// A stored answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// A complete result, without its `ttlMs`: the JSON object text after the opening brace
    /// (`"contents":[…],"cacheScope":"public"}`), so that `{"ttlMs":N,` can be written in
    /// front of it on every hit without parsing anything.
    Result { tail: Bytes },
    /// One upstream's list page: its items in downstream form (comma-separated, no brackets),
    /// its own `nextCursor`, and its scope.
    Page { items: Bytes, next: Option<Box<str>>, public: bool },
    /// A "resource not found" answer (negative entry).
    NotFound,
}

impl Stored {
    /// A result's stored form: `ttlMs` removed. `None` when `result` is not an object.
    pub fn result(result: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(result).ok()?;
        Some(Self::result_of(&RawObject::parse_str(text).ok()?))
    }

    /// The stored form of a parsed result object.
    pub fn result_of(obj: &RawObject<'_>) -> Self {
        let mut obj = obj.clone();
        obj.remove("ttlMs");
        let mut out = obj.to_vec();
        out.remove(0); // the opening brace; written again at splice time
        Stored::Result { tail: Bytes::from(out) }
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        match self {
            Stored::Result { tail } => tail.len(),
            Stored::Page { items, next, .. } => items.len() + next.as_ref().map_or(0, |n| n.len()),
            Stored::NotFound => 0,
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stored result with `ttlMs` set to `ttl_ms`: `{"ttlMs":N,` in front of the stored tail,
/// which is shared, not copied.
pub fn splice_ttl(tail: &Bytes, ttl_ms: u64) -> Spliced {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(ttl_ms).as_bytes();
    let comma: &[u8] = if tail.first() == Some(&b'}') { b"" } else { b"," };
    Spliced { head: Head::of(&[b"{\"ttlMs\":", digits, comma]), tail: tail.clone() }
}

/// One cache entry.
#[derive(Debug)]
pub struct Entry {
    pub stored: Stored,
    /// When it was fetched (tokio's clock, so paused-time tests can move it).
    pub stored_at: Instant,
    /// Freshness lifetime (the clamped `ttlMs`).
    pub ttl: Duration,
    /// How long past `ttl` it may still be served if a refetch fails.
    pub stale_window: Duration,
    /// Invalidation epochs at fetch start.
    pub ticket: Ticket,
    /// Whether it sits in the public partition.
    pub public: bool,
    /// The upstream URI it keeps watched (see [`super::WatchedUris`]), for reads of upstreams that
    /// can be subscribed.
    pub watched: Option<Box<str>>,
    /// Fresh hits served from it, for the admin page's Cache view (relaxed: a count, not a
    /// synchronization point).
    pub hits: AtomicU64,
    /// Set when an operator purge removed it: a request that looked it up as stale before the
    /// purge must not serve it after a failed refetch.
    pub purged: AtomicBool,
}

impl Entry {
    /// Bytes this entry costs in the store.
    pub fn weight(&self) -> usize {
        std::mem::size_of::<Self>() + self.stored.len()
    }

    /// Counts a fresh hit.
    pub fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether it may still be served as stale-if-error (an operator purge says no).
    pub fn servable_stale(&self) -> bool {
        !self.purged.load(Ordering::Acquire)
    }

    /// Time since it was fetched.
    pub fn age(&self) -> Duration {
        Instant::now().saturating_duration_since(self.stored_at)
    }

    /// Time left until it goes stale at `age`, in milliseconds (0 once stale).
    pub fn remaining_ms(&self, age: Duration) -> u64 {
        self.ttl.saturating_sub(age).as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_spliced_without_parsing() {
        let Stored::Result { tail } =
            Stored::result(br#"{"contents":[],"ttlMs":60000,"cacheScope":"public"}"#).unwrap()
        else {
            panic!()
        };
        let out = splice_ttl(&tail, 1234);
        assert_eq!(out.tail.as_ptr(), tail.as_ptr(), "the stored tail is shared, not copied");
        let v: serde_json::Value = serde_json::from_slice(&out.to_bytes()).unwrap();
        assert_eq!(v["ttlMs"], 1234);
        assert_eq!(v["cacheScope"], "public");
        let Stored::Result { tail } = Stored::result(b"{}").unwrap() else { panic!() };
        assert_eq!(&splice_ttl(&tail, 5).to_bytes()[..], br#"{"ttlMs":5}"#);
        assert!(Stored::result(b"[1]").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn remaining_time_and_age_follow_tokio_time() {
        let epochs = super::super::Epochs::new(1);
        let entry = Entry {
            stored: Stored::result(b"{}").unwrap(),
            stored_at: Instant::now(),
            ttl: Duration::from_secs(3),
            stale_window: Duration::ZERO,
            ticket: epochs.ticket(0, super::super::CachedMethod::ResourcesRead, Some("a://x")),
            public: true,
            watched: None,
            hits: AtomicU64::new(0),
            purged: AtomicBool::new(false),
        };
        let at = |entry: &Entry| (entry.remaining_ms(entry.age()), entry.age().as_secs());
        assert_eq!(at(&entry), (3000, 0));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(at(&entry), (1500, 1));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(at(&entry), (0, 6));
    }
}
