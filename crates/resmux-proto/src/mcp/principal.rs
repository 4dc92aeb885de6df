//! Who is asking: the caller behind a request, as every layer that keys, authorizes or
//! credentials by caller sees it. The proxy's `auth` module decides who a caller is; the cache,
//! the upstream credentials and the telemetry only need the answer, so it lives here, below
//! all of them.

use std::collections::BTreeSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Who an authenticated caller is.
pub struct Identity {
    /// `iss#sub` for a JWT, the key's `principal` for an API key.
    pub id: String,
    pub groups: BTreeSet<String>,
    pub scopes: BTreeSet<String>,
    /// The JWT the caller presented, kept for the token exchange of an upstream with
    /// `kind = "token_exchange"` (never forwarded as is). `None` for API keys: a key is the
    /// proxy's own secret and never leaves it.
    pub token: Option<BearerToken>,
}

/// A bearer token a caller presented: zeroed when dropped, and its `Debug` shows nothing of
/// it.
pub struct BearerToken(zeroize::Zeroizing<String>);

impl BearerToken {
    pub fn new(token: &str) -> Self {
        Self(zeroize::Zeroizing::new(token.to_owned()))
    }

    /// The token, for the one place that sends it on (the token exchange request).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// A downstream caller.
#[derive(Clone)]
pub enum Principal {
    /// Authentication is off (or the transport is a local stdio client).
    Anonymous,
    /// An authenticated caller; equal and hashed by id alone.
    User(Arc<Identity>),
}

impl Principal {
    /// A user principal (tests, and the authenticator).
    pub fn user(id: &str, groups: &[&str], scopes: &[&str]) -> Self {
        Principal::User(Arc::new(Identity {
            id: id.to_owned(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            token: None,
        }))
    }

    /// A user principal that presented `token` (tests: a JWT caller).
    pub fn with_token(id: &str, token: &str) -> Self {
        Principal::User(Arc::new(Identity {
            id: id.to_owned(),
            groups: BTreeSet::new(),
            scopes: BTreeSet::new(),
            token: Some(BearerToken::new(token)),
        }))
    }

    /// The identity, for an authenticated caller.
    pub fn identity(&self) -> Option<&Identity> {
        match self {
            Principal::Anonymous => None,
            Principal::User(i) => Some(i),
        }
    }

    /// The id (empty for anonymous).
    pub fn id(&self) -> &str {
        self.identity().map_or("", |i| i.id.as_str())
    }
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Principal::Anonymous, Principal::Anonymous) => true,
            (Principal::User(a), Principal::User(b)) => a.id == b.id,
            _ => false,
        }
    }
}

impl Eq for Principal {}

impl Hash for Principal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Principal::Anonymous => state.write_u8(0),
            Principal::User(i) => {
                state.write_u8(1);
                i.id.hash(state);
            }
        }
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("anonymous"),
            Principal::User(i) => write!(f, "user:{}", i.id),
        }
    }
}
