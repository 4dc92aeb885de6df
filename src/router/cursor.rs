//! The proxy's own list cursors (DESIGN §3): which upstreams still have pages and each one's
//! upstream cursor, with a format version, bound to the list method and authenticated with an
//! HMAC so that a tampered or foreign token is refused (-32602) and any replica sharing the key
//! accepts it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Format version inside every token.
const VERSION: u8 = 1;
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
}

#[derive(Serialize, Deserialize)]
struct Payload {
    v: u8,
    m: String,
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
}

impl CursorCodec {
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
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

    /// The token for `positions` of `method`.
    pub fn encode(&self, method: &str, positions: &Positions) -> String {
        let payload = Payload { v: VERSION, m: method.to_owned(), p: positions.clone() };
        let mut data = serde_json::to_vec(&payload).expect("payload serializes");
        let mac = self.mac(&data);
        data.extend_from_slice(&mac);
        URL_SAFE_NO_PAD.encode(data)
    }

    /// Checks and opens a token for `method`.
    pub fn decode(&self, method: &str, token: &str) -> Result<Positions, CursorError> {
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
        let t = c.encode("resources/list", &p);
        assert_eq!(c.decode("resources/list", &t).unwrap(), p);
        assert_eq!(c.decode("tools/list", &t), Err(CursorError::WrongMethod));
        assert_eq!(CursorCodec::new(b"other").decode("resources/list", &t), Err(CursorError::BadSignature));
        let mut bytes = t.clone().into_bytes();
        bytes[3] = if bytes[3] == b'A' { b'B' } else { b'A' };
        assert!(c.decode("resources/list", std::str::from_utf8(&bytes).unwrap()).is_err());
        assert_eq!(c.decode("resources/list", "!!"), Err(CursorError::Malformed));
        assert_eq!(c.decode("resources/list", ""), Err(CursorError::Malformed));
        assert_eq!(c.decode("resources/list", &"A".repeat(MAX_TOKEN + 1)), Err(CursorError::TooLong));
    }

    proptest! {
        #[test]
        fn round_trips(pos in proptest::collection::vec(("[a-z]{1,8}", proptest::option::of(".{0,40}")), 0..6)) {
            let c = CursorCodec::new(b"secret");
            let t = c.encode("resources/list", &pos);
            prop_assert_eq!(c.decode("resources/list", &t).unwrap(), pos);
        }

        #[test]
        fn garbage_never_panics(s in ".{0,200}") {
            let _ = CursorCodec::new(b"k").decode("resources/list", &s);
        }
    }
}
