//! One upstream's metric handles, resolved when it starts.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::RelayMeter;
use super::labels::{method_index, scope_index};

/// Why an answer the upstream called public was kept per caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NarrowReason {
    /// The upstream's `public` is not believed (`trust_public`).
    Untrusted = 0,
    /// The proxy narrowed the answer for its caller (`[[upstream.allow]]`).
    Filtered = 1,
}

/// One upstream's metric handles, resolved when the upstream starts: the request path
/// increments them without building a label set.
#[derive(Clone)]
pub struct UpstreamMeter {
    /// Per scope (public, private).
    pub(super) hits: [Counter; 2],
    pub(super) misses: [Counter; 2],
    pub(super) stale: [Counter; 2],
    pub(super) joins: Counter,
    /// `cache_scope_narrowed`, per [`NarrowReason`].
    pub(super) narrowed: [Counter; 2],
    pub(super) clamped: Counter,
    /// `upstream_request_seconds` per method slot.
    pub(super) seconds: Vec<Histogram>,
    /// Large results relayed.
    pub relay: RelayMeter,
}

impl UpstreamMeter {
    /// A fresh cache hit in the `public` or private partition.
    pub fn cache_hit(&self, public: bool) {
        self.hits[scope_index(public)].inc();
    }

    /// A miss, fetched from the upstream; its scope is that of the answer.
    pub fn cache_miss(&self, public: bool) {
        self.misses[scope_index(public)].inc();
    }

    /// A stale entry served after a failed refetch.
    pub fn cache_stale(&self, public: bool) {
        self.stale[scope_index(public)].inc();
    }

    /// An answer the upstream called public, kept per caller.
    pub fn scope_narrowed(&self, why: NarrowReason) {
        self.narrowed[why as usize].inc();
    }

    /// An answer whose `ttlMs` was lowered to a `max_ttl`.
    pub fn ttl_clamped(&self) {
        self.clamped.inc();
    }

    /// A miss that joined another caller's flight instead of fetching.
    pub fn flight_joined(&self) {
        self.joins.inc();
    }

    /// Latency of one request to the upstream.
    pub fn request_seconds(&self, method: &str, seconds: f64) {
        self.seconds[method_index(method)].observe(seconds);
    }
}
