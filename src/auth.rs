//! Downstream identity: who is asking, which selects the private cache partition.
//!
//! With authentication off, the principal is a keyed hash of the `Authorization` header value
//! (anonymous when absent): requests with the same credential share a partition, and no raw
//! token is ever stored or logged.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// An authenticated (or anonymous) downstream caller.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// No credential presented.
    Anonymous,
    /// A keyed digest of the presented credential.
    Credential([u8; 16]),
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("anonymous"),
            Principal::Credential(d) => {
                write!(f, "cred:{:02x}{:02x}{:02x}{:02x}", d[0], d[1], d[2], d[3])
            }
        }
    }
}

/// Derives principals from request credentials.
#[derive(Clone)]
pub struct Authenticator {
    key: [u8; 32],
}

impl Authenticator {
    /// A deriver with a per-process random key: partitions do not outlive the process, which
    /// is what an in-memory cache needs.
    pub fn new() -> Self {
        Self { key: rand::random() }
    }

    /// The principal for an `Authorization` header value (`None`: anonymous).
    pub fn principal(&self, authorization: Option<&[u8]>) -> Principal {
        match authorization {
            None => Principal::Anonymous,
            Some(value) => {
                let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
                mac.update(value);
                let mut out = [0; 16];
                out.copy_from_slice(&mac.finalize().into_bytes()[..16]);
                Principal::Credential(out)
            }
        }
    }
}

impl Default for Authenticator {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_token_same_principal_and_no_leak_in_debug() {
        let a = Authenticator::new();
        assert_eq!(a.principal(Some(b"Bearer x")), a.principal(Some(b"Bearer x")));
        assert_ne!(a.principal(Some(b"Bearer x")), a.principal(Some(b"Bearer y")));
        assert_eq!(a.principal(None), Principal::Anonymous);
        assert!(!format!("{:?}", a.principal(Some(b"Bearer secret"))).contains("secret"));
    }
}
