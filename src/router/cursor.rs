//! The proxy's own list cursors (DESIGN §3): which upstreams still have pages and each one's
//! upstream cursor, with a format version, bound to the list method, to the principal it was
//! issued to and to an expiry, and authenticated with an HMAC so that a tampered, foreign,
//! borrowed or stale token is refused (-32602) and any replica sharing the key accepts it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Format version inside every token (2: bound to an owner and an expiry).
const VERSION: u8 = 2;
/// Truncated MAC length: 128 bits is plenty against forgery of a pagination token.
const MAC_LEN: usize = 16;
/// Longest token accepted, so that a hostile cursor costs bounded work.
pub const MAX_TOKEN: usize = 16 * 1024;

/// Where a merged list stands: the upstreams with pages left, in config order, and the cursor
/// to send each (`None` = its first page).
pub type Positions = Vec<(String, Option<String>)>;

/// Signs and checks cursors.
#[derive(Clone)]
pub struct CursorCodec {
    key: Vec<u8>,
    /// How long a cursor stays usable (`[proxy] cursor_ttl`).
    ttl_ms: u64,
}

/// Default cursor lifetime: long enough for any client's walk of a list, short enough that a
/// leaked cursor soon stops working.
pub const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

#[derive(Serialize, Deserialize)]
struct Payload {
    v: u8,
    m: String,
    /// The owner: a digest of the principal's id, empty for anonymous callers.
    o: String,
    /// Expiry, ms since the Unix epoch (wall clock: every replica reads the same).
    e: u64,
    p: Positions,
}

/// Why a cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("cursor is too long")]
    TooLong,
    #[error("cursor is malformed")]
    Malformed,
    #[error("cursor signature does not verify")]
    BadSignature,
    #[error("cursor has an unknown format version")]
    Version,
    #[error("cursor belongs to another method")]
    WrongMethod,
    #[error("cursor was issued to another caller")]
    WrongOwner,
    #[error("cursor has expired; list again from the first page")]
    Expired,
}

/// The owner tag of a principal id (`None`: anonymous): a truncated SHA-256, so the token,
/// which the client can read, does not carry the identity itself.
pub fn owner_of(id: Option<&str>) -> String {
    use sha2::Digest as _;
    match id {
        None => String::new(),
        Some(id) => Sha256::digest(id.as_bytes())[..8].iter().map(|b| format!("{b:02x}")).collect(),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl CursorCodec {
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec(), ttl_ms: DEFAULT_TTL.as_millis() as u64 }
    }

    /// The same codec issuing cursors that last `ttl`.
    pub fn with_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// A codec with a random key (single replica).
    pub fn random() -> Self {
        Self::new(&rand::random::<[u8; 32]>())
    }

    fn mac(&self, data: &[u8]) -> [u8; MAC_LEN] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(data);
        let full = mac.finalize().into_bytes();
        let mut out = [0; MAC_LEN];
        out.copy_from_slice(&full[..MAC_LEN]);
        out
    }

    /// The token for `positions` of `method`, for the caller `owner` (see [`owner_of`]).
    pub fn encode(&self, method: &str, owner: &str, positions: &Positions) -> String {
        self.encode_at(method, owner, positions, now_ms())
    }

    fn encode_at(&self, method: &str, owner: &str, positions: &Positions, now: u64) -> String {
        let e = now.saturating_add(self.ttl_ms);
        let payload = Payload { v: VERSION, m: method.to_owned(), o: owner.to_owned(), e, p: positions.clone() };
        let mut data = serde_json::to_vec(&payload).expect("payload serializes");
        let mac = self.mac(&data);
        data.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(data)
    }

    /// Checks and opens a token for `method`, presented by `owner`.
    pub fn decode(&self, method: &str, owner: &str, token: &str) -> Result<Positions, CursorError> {
        self.decode_at(method, owner, token, now_ms())
    }

    fn decode_at(&self, method: &str, owner: &str, token: &str, now: u64) -> Result<Positions, CursorError> {
        if token.len() > MAX_TOKEN {
            return Err(CursorError::TooLong);
        }
        let data = URL_SAFE_NO_PAD.decode(token).map_err(|_| CursorError::Malformed)?;
        if data.len() <= MAC_LEN {
            return Err(CursorError::Malformed);
        }
        let (body, mac) = data.split_at(data.len() - MAC_LEN);
        let mut check = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        check.update(body);
        check.verify_truncated_left(mac).map_err(|_| CursorError::BadSignature)?;
        let payload: Payload = serde_json::from_slice(body).map_err(|_| CursorError::Malformed)?;
        if payload.v != VERSION {
            return Err(CursorError::Version);
        }
        if payload.m != method {
            return Err(CursorError::WrongMethod);
        }
        if payload.o != owner {
            return Err(CursorError::WrongOwner);
        }
        if now > payload.e {
            return Err(CursorError::Expired);
        }
        Ok(payload.p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tampering_and_misuse_are_refused() {
        let c = CursorCodec::new(b"k");
        let p = vec![("docs".to_string(), Some("abc".to_string())), ("fs".into(), None)];
        let t = c.encode("resources/list", "", &p);
        assert_eq!(c.decode("resources/list", "", &t).unwrap(), p);
        assert_eq!(c.decode("tools/list", "", &t), Err(CursorError::WrongMethod));
        assert_eq!(CursorCodec::new(b"other").decode("resources/list", "", &t), Err(CursorError::BadSignature));
        let mut bytes = t.clone().into_bytes();
        bytes[3] = if bytes[3] == b'A' { b'B' } else { b'A' };
        assert!(c.decode("resources/list", "", std::str::from_utf8(&bytes).unwrap()).is_err());
        assert_eq!(c.decode("resources/list", "", "!!"), Err(CursorError::Malformed));
        assert_eq!(c.decode("resources/list", "", ""), Err(CursorError::Malformed));
        assert_eq!(c.decode("resources/list", "", &"A".repeat(MAX_TOKEN + 1)), Err(CursorError::TooLong));
    }

    #[test]
    fn a_cursor_serves_only_its_owner_and_only_until_it_expires() {
        let c = CursorCodec::new(b"k").with_ttl(std::time::Duration::from_secs(60));
        let p = vec![("docs".to_string(), Some("abc".to_string()))];
        let (alice, bob) = (owner_of(Some("idp#alice")), owner_of(Some("idp#bob")));
        assert!(!alice.contains("alice"), "the identity itself is not in the token");
        let t = c.encode_at("resources/list", &alice, &p, 1_000_000);
        assert_eq!(c.decode_at("resources/list", &alice, &t, 1_000_000 + 59_999).unwrap(), p);
        assert_eq!(c.decode_at("resources/list", &bob, &t, 1_000_000), Err(CursorError::WrongOwner));
        assert_eq!(c.decode_at("resources/list", "", &t, 1_000_000), Err(CursorError::WrongOwner), "nor anonymous");
        assert_eq!(c.decode_at("resources/list", &alice, &t, 1_000_000 + 60_001), Err(CursorError::Expired));
    }

    proptest! {
        #[test]
        fn round_trips(pos in proptest::collection::vec(("[a-z]{1,8}", proptest::option::of(".{0,40}")), 0..6)) {
            let c = CursorCodec::new(b"secret");
            let t = c.encode("resources/list", "o", &pos);
            prop_assert_eq!(c.decode("resources/list", "o", &t).unwrap(), pos);
        }

        #[test]
        fn garbage_never_panics(s in ".{0,200}") {
            let _ = CursorCodec::new(b"k").decode("resources/list", "", &s);
        }
    }
}
