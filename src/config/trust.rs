//! `trust_public`: whether an upstream's `public` answers are shared between callers.

use serde::Deserialize;

/// Whether an upstream's `cacheScope: "public"` is believed (DESIGN §4). `public` is a claim,
/// not a fact: several SDKs stamp it on every result by default, so an upstream that knows
/// the caller may well call a per-user answer public. Spelt `"auto"`, `true` or `false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrustPublic {
    /// Believed only where the upstream request carries nothing that identifies the caller
    /// (a static credential, client credentials, or none); behind a per-caller credential
    /// (`token_exchange`) a `public` answer is kept in the caller's partition.
    #[default]
    Auto,
    /// Always believed: the operator vouches that the upstream's `public` is true.
    Always,
    /// Never believed: every answer is kept per caller.
    Never,
}

impl<'de> Deserialize<'de> for TrustPublic {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Spelt {
            Flag(bool),
            Word(String),
        }
        match Spelt::deserialize(d)? {
            Spelt::Flag(true) => Ok(TrustPublic::Always),
            Spelt::Flag(false) => Ok(TrustPublic::Never),
            Spelt::Word(w) if w == "auto" => Ok(TrustPublic::Auto),
            Spelt::Word(w) => {
                Err(serde::de::Error::custom(format!("trust_public is \"auto\", true or false, not \"{w}\"")))
            }
        }
    }
}

impl TrustPublic {
    /// As the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TrustPublic::Auto => "auto",
            TrustPublic::Always => "true",
            TrustPublic::Never => "false",
        }
    }
}

/// What [`TrustPublic`] comes to for one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicPolicy {
    /// `public` answers are shared.
    Trusted,
    /// `auto` behind a per-caller credential: `public` answers are kept per caller.
    PerCaller,
    /// `trust_public = false`: `public` answers are kept per caller.
    Refused,
}

impl PublicPolicy {
    /// Whether a `public` answer may be shared between callers.
    pub fn shares(self) -> bool {
        self == PublicPolicy::Trusted
    }

    /// A short reason, for the admin page and logs.
    pub fn describe(self) -> &'static str {
        match self {
            PublicPolicy::Trusted => "public answers shared",
            PublicPolicy::PerCaller => "public kept per caller (per-caller credential)",
            PublicPolicy::Refused => "public kept per caller (trust_public = false)",
        }
    }
}
