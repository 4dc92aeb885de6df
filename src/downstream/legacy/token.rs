//! Legacy `Mcp-Session-Id`s. A session id is a signed token, not a lookup key alone: it names
//! the negotiated protocol version and a random nonce, with an HMAC over both, so that any
//! replica sharing the proxy's secret accepts it without shared state, and a forged or
//! mistyped id is refused before any table is consulted.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::mcp;

/// The random part of a session id; it names the session in this process's table.
pub type Nonce = [u8; 16];

/// Format version inside every token, so that the layout can change without misreading.
const FORMAT: u8 = 1;
/// Truncated MAC length: 128 bits is plenty against forging a session id.
const MAC_LEN: usize = 16;
/// Bytes before the MAC: format, version index, nonce.
const BODY_LEN: usize = 2 + 16;
/// Length of the encoded token (base64url without padding of body + MAC).
const TOKEN_LEN: usize = ((BODY_LEN + MAC_LEN) * 4).div_ceil(3);
/// Label that derives the session key from the shared secret, so that a session id and a
/// list cursor are never signed with the same key.
const DERIVE_LABEL: &[u8] = b"resmux legacy Mcp-Session-Id key v1";

/// Signs and checks session ids.
#[derive(Clone)]
pub struct SessionKey {
    key: [u8; 32],
}

/// What a valid session id says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    pub nonce: Nonce,
    /// The protocol version negotiated at `initialize`.
    pub version: &'static str,
}

impl SessionKey {
    /// The key derived from the proxy's configured secret.
    pub fn derive(secret: &[u8]) -> Self {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
        mac.update(DERIVE_LABEL);
        Self { key: mac.finalize().into_bytes().into() }
    }

    /// A random key: session ids are valid in this process only.
    pub fn random() -> Self {
        Self { key: rand::random() }
    }

    /// A new session id for `version` (one of [`mcp::SUPPORTED_LEGACY`]), bound to the
    /// principal `owner` (its id; empty for anonymous): the MAC covers it, so the id verifies
    /// for that principal only, on any replica.
    pub fn mint(&self, version: &str, owner: &str) -> (String, Verified) {
        let index = mcp::SUPPORTED_LEGACY.iter().position(|v| *v == version).expect("a supported legacy version");
        let nonce: Nonce = rand::random();
        let mut bytes = Vec::with_capacity(BODY_LEN + MAC_LEN);
        bytes.push(FORMAT);
        bytes.push(index as u8);
        bytes.extend_from_slice(&nonce);
        let mac = self.mac(&bytes, owner);
        bytes.extend_from_slice(&mac);
        (URL_SAFE_NO_PAD.encode(&bytes), Verified { nonce, version: mcp::SUPPORTED_LEGACY[index] })
    }

    /// Checks a session id; `None` for anything this key did not sign for `owner`.
    pub fn verify(&self, token: &str, owner: &str) -> Option<Verified> {
        if token.len() != TOKEN_LEN {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        let (body, mac) = bytes.split_at_checked(BODY_LEN)?;
        let mut check = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        check.update(body);
        check.update(&(owner.len() as u64).to_le_bytes());
        check.update(owner.as_bytes());
        // Constant-time comparison of the truncated MAC.
        check.verify_truncated_left(mac).ok()?;
        if body[0] != FORMAT {
            return None;
        }
        let version = *mcp::SUPPORTED_LEGACY.get(body[1] as usize)?;
        Some(Verified { nonce: body[2..].try_into().ok()?, version })
    }

    fn mac(&self, body: &[u8], owner: &str) -> [u8; MAC_LEN] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(body);
        mac.update(&(owner.len() as u64).to_le_bytes());
        mac.update(owner.as_bytes());
        let full = mac.finalize().into_bytes();
        full[..MAC_LEN].try_into().expect("MAC_LEN <= 32")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_id_verifies_with_the_same_key_only() {
        let key = SessionKey::derive(b"shared secret");
        let (token, minted) = key.mint("2025-06-18", "");
        assert_eq!(token.len(), TOKEN_LEN);
        assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{token}");
        assert_eq!(key.verify(&token, ""), Some(minted));
        assert_eq!(minted.version, "2025-06-18");
        // Another replica with the same secret accepts it; another secret does not.
        assert_eq!(SessionKey::derive(b"shared secret").verify(&token, ""), Some(minted));
        assert_eq!(SessionKey::derive(b"other").verify(&token, ""), None);
        assert_eq!(SessionKey::random().verify(&token, ""), None);
        // Bound to its owner: another principal's id does not verify.
        let (mine, _) = key.mint("2025-06-18", "alice");
        assert!(key.verify(&mine, "alice").is_some());
        assert_eq!(key.verify(&mine, "bob"), None);
        assert_eq!(key.verify(&mine, ""), None);
    }

    #[test]
    fn tampered_or_malformed_ids_are_refused() {
        let key = SessionKey::random();
        let (token, _) = key.mint("2025-11-25", "");
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let forged = String::from_utf8(bytes).unwrap();
            if forged != token {
                assert_eq!(key.verify(&forged, ""), None, "flipped byte {i}");
            }
        }
        for bad in ["", "x", "not a token at all", &token[1..], &format!("{token}A")] {
            assert_eq!(key.verify(bad, ""), None, "{bad}");
        }
    }

    #[test]
    fn ids_are_unique() {
        let key = SessionKey::random();
        let a = key.mint("2025-11-25", "").0;
        let b = key.mint("2025-11-25", "").0;
        assert_ne!(a, b);
    }
}
