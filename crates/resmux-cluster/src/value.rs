//! The form of a cache entry in Redis: what the local entry holds, plus its fetch time (wall
//! clock, shared by replicas) and TTL, so that every replica answers with the right remaining
//! `ttlMs`, and the epochs at fetch start, so that an entry older than a change is never taken
//! as fresh.
//!
//! Layout (big-endian): `b"RMX1"`, kind (0 result, 1 page, 2 not found), public (0/1),
//! fetched-at ms since the Unix epoch (u64), TTL ms (u64), scope and stream epochs (u64 each),
//! then for a result its stored tail; for a page the items' length (u32), the items, and the
//! next cursor (the rest, empty for none… marked by a flag byte first).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use resmux_cache::Stored;

const MAGIC: &[u8; 4] = b"RMX1";
const HEADER: usize = 4 + 1 + 1 + 8 * 4;

/// A cache entry as the replicas share it.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedValue {
    pub stored: Stored,
    pub public: bool,
    /// When the upstream answered, in ms since the Unix epoch.
    pub fetched_at_ms: u64,
    pub ttl_ms: u64,
    /// The Redis epochs (the URI's or list's, and the upstream stream's) when the fetch began.
    pub epochs: (u64, u64),
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl SharedValue {
    /// Time it has been cached, by the wall clock (replicas' clocks are assumed to agree to
    /// well within a TTL; a clock behind the writer's reads as age 0).
    pub fn age(&self, now_ms: u64) -> Duration {
        Duration::from_millis(now_ms.saturating_sub(self.fetched_at_ms))
    }

    /// TTL left at `now_ms` (zero once expired).
    pub fn remaining(&self, now_ms: u64) -> Duration {
        Duration::from_millis(self.ttl_ms).saturating_sub(self.age(now_ms))
    }

    pub fn encode(&self) -> Vec<u8> {
        let (kind, body_len) = match &self.stored {
            Stored::Result { tail } => (0u8, tail.len()),
            Stored::Page { items, next, .. } => (1, 4 + items.len() + 1 + next.as_ref().map_or(0, |n| n.len())),
            Stored::NotFound => (2, 0),
        };
        let mut out = Vec::with_capacity(HEADER + body_len);
        out.extend_from_slice(MAGIC);
        out.push(kind);
        out.push(self.public as u8);
        for n in [self.fetched_at_ms, self.ttl_ms, self.epochs.0, self.epochs.1] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        match &self.stored {
            Stored::Result { tail } => out.extend_from_slice(tail),
            Stored::Page { items, next, .. } => {
                out.extend_from_slice(&(items.len() as u32).to_be_bytes());
                out.extend_from_slice(items);
                match next {
                    Some(n) => {
                        out.push(1);
                        out.extend_from_slice(n.as_bytes());
                    }
                    None => out.push(0),
                }
            }
            Stored::NotFound => {}
        }
        out
    }

    /// Reads an encoded value; `None` for anything malformed (treated as a miss).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < HEADER || &bytes[..4] != MAGIC {
            return None;
        }
        let num = |i: usize| u64::from_be_bytes(bytes[6 + 8 * i..14 + 8 * i].try_into().expect("8 bytes"));
        let public = match bytes[5] {
            0 => false,
            1 => true,
            _ => return None,
        };
        let body = &bytes[HEADER..];
        let stored = match bytes[4] {
            0 => Stored::Result { tail: Bytes::copy_from_slice(body) },
            1 => {
                let len = u32::from_be_bytes(body.get(..4)?.try_into().ok()?) as usize;
                let items = body.get(4..4 + len)?;
                let rest = body.get(4 + len..)?;
                let next = match rest.split_first()? {
                    (0, []) => None,
                    (1, n) => Some(std::str::from_utf8(n).ok()?.into()),
                    _ => return None,
                };
                Stored::Page { items: Bytes::copy_from_slice(items), next, public }
            }
            2 if body.is_empty() => Stored::NotFound,
            _ => return None,
        };
        Some(Self { stored, public, fetched_at_ms: num(0), ttl_ms: num(1), epochs: (num(2), num(3)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(stored: Stored, public: bool) {
        let v = SharedValue { stored, public, fetched_at_ms: 1_700_000_000_000, ttl_ms: 60_000, epochs: (3, 9) };
        assert_eq!(SharedValue::decode(&v.encode()), Some(v));
    }

    #[test]
    fn every_kind_round_trips_and_garbage_is_a_miss() {
        round_trip(Stored::Result { tail: Bytes::from_static(br#""contents":[]}"#) }, true);
        round_trip(
            Stored::Page { items: Bytes::from_static(b"{\"a\":1}"), next: Some("c2".into()), public: false },
            false,
        );
        round_trip(Stored::Page { items: Bytes::new(), next: None, public: true }, true);
        round_trip(Stored::NotFound, false);
        assert_eq!(SharedValue::decode(b"RMX1"), None);
        assert_eq!(SharedValue::decode(b"nope-nope-nope-nope-nope-nope-nope-nope-nope"), None);
        let mut bad = SharedValue {
            stored: Stored::Page { items: Bytes::from_static(b"xy"), next: None, public: true },
            public: true,
            fetched_at_ms: 0,
            ttl_ms: 0,
            epochs: (0, 0),
        }
        .encode();
        bad.truncate(bad.len() - 2);
        assert_eq!(SharedValue::decode(&bad), None);
    }

    #[test]
    fn remaining_ttl_follows_the_wall_clock() {
        let v = SharedValue {
            stored: Stored::NotFound,
            public: false,
            fetched_at_ms: 10_000,
            ttl_ms: 5_000,
            epochs: (0, 0),
        };
        assert_eq!(v.remaining(12_000), Duration::from_millis(3_000));
        assert_eq!(v.remaining(20_000), Duration::ZERO);
        assert_eq!(v.remaining(9_000), Duration::from_millis(5_000));
    }
}
