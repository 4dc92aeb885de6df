//! The metrics' label sets and their bounded value sets: every label value comes from a fixed
//! list (known methods, outcomes, scopes, rejection reasons) or the configured upstream names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::KNOWN;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Downstream {
    pub(super) method: &'static str,
    /// `hit`, `miss`, `stale`, `bypass`, or `error`.
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Upstream {
    pub(super) upstream: String,
    /// `ok`, `error` (a JSON-RPC error answer), or the failure kind.
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Reason {
    pub(super) reason: &'static str,
}

/// A config reload's outcome: `applied`, `unchanged` or `rejected`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReloadOutcome {
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ByMethod {
    pub(super) method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamMethod {
    pub(super) upstream: String,
    pub(super) method: &'static str,
}

/// A cache series: its upstream and the partition, `public` or `private`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Scoped {
    pub(super) upstream: String,
    pub(super) scope: &'static str,
}

/// A narrowed cache scope: its upstream, and why the answer was kept per caller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Narrowed {
    pub(super) upstream: String,
    /// `untrusted` (the upstream's `public` not believed) or `filtered` (the answer was
    /// narrowed by `[[upstream.allow]]` for its caller).
    pub(super) reason: &'static str,
}

/// [`Narrowed`] reasons, indexed by [`super::NarrowReason`].
pub(super) const NARROW_REASONS: [&str; 2] = ["untrusted", "filtered"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct EraLabel {
    pub(super) upstream: String,
    /// `modern`, `legacy` or `unknown`.
    pub(super) era: &'static str,
}

/// Partition label values, indexed by [`scope_index`].
pub(super) const SCOPES: [&str; 2] = ["public", "private"];

pub(super) fn scope_index(public: bool) -> usize {
    if public { 0 } else { 1 }
}

/// Downstream outcome label values, indexed by [`outcome_index`]; slot 0 of
/// `Inner::totals` is the sum, so a slot here is one more there.
pub(super) const OUTCOMES: [&str; 6] = ["hit", "miss", "stale", "bypass", "error", "stream"];

pub(super) fn outcome_index(outcome: &str) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(4)
}

/// The slot of a method label: its place in [`KNOWN`], or the last one (`other`).
pub(super) fn method_index(method: &str) -> usize {
    KNOWN.iter().position(|m| *m == method).unwrap_or(KNOWN.len())
}

pub(super) fn method_label(index: usize) -> &'static str {
    KNOWN.get(index).copied().unwrap_or("other")
}

/// Why a downstream connection or request was refused by a transport limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A request head did not arrive within `[listen] header_timeout`.
    HeaderTimeout,
    /// A request body did not arrive within `[listen] body_timeout`.
    BodyTimeout,
    /// A request head exceeded `[listen] max_header_bytes`.
    HeaderTooLarge,
    /// A connection over `[listen] max_connections_per_ip`.
    PerIp,
    /// A request over `[listen] requests_per_second` for its principal.
    Rate,
    /// A request without valid credentials, or without the scope it needs (401/403).
    Auth,
    /// A request whose `Origin` is not allowed.
    Origin,
    /// A request whose `Host` is not allowed (DNS rebinding).
    Host,
    /// A request body over `[listen] max_body_bytes`.
    BodyTooLarge,
    /// A request refused by a count bound: listeners, legacy sessions, held calls.
    Limit,
}

impl Rejection {
    pub const ALL: [Rejection; 10] = [
        Self::HeaderTimeout,
        Self::BodyTimeout,
        Self::HeaderTooLarge,
        Self::PerIp,
        Self::Rate,
        Self::Auth,
        Self::Origin,
        Self::Host,
        Self::BodyTooLarge,
        Self::Limit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::BodyTimeout => "body_timeout",
            Self::HeaderTooLarge => "header_too_large",
            Self::PerIp => "per_ip",
            Self::Rate => "rate",
            Self::Auth => "auth",
            Self::Origin => "origin",
            Self::Host => "host",
            Self::BodyTooLarge => "body_too_large",
            Self::Limit => "limit",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Named {
    pub(super) upstream: String,
}

pub(super) fn latency() -> Histogram {
    // 100 µs .. ~13 s in powers of two: loopback hits to slow upstreams.
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

pub(super) fn delivery() -> Histogram {
    // 50 µs .. ~1.6 s: a change is written as soon as its listener's task runs.
    Histogram::new(exponential_buckets(0.00005, 2.0, 16))
}
