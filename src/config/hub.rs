//! `[hub]`: downstream `subscriptions/listen` and the upstream listens behind them (DESIGN §5).

use std::time::Duration;

use serde::Deserialize;

/// Limits and timings of the subscription hub.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// Most listen streams open at once, all principals together. Default 20,000.
    pub max_listeners: usize,
    /// Most listen streams one credentialed principal may hold open (anonymous callers, who
    /// cannot be told apart, are bounded by `max_listeners` alone). Default 64.
    pub max_listens_per_principal: usize,
    /// Most URIs in one listen's `resourceSubscriptions`. Default 1,000.
    pub max_uris_per_listen: usize,
    /// How long an upstream subscription outlives its last listener, so that a client that
    /// re-listens at once does not make the upstream listen churn. Default 2 s.
    #[serde(with = "humantime_serde")]
    pub linger: Duration,
    /// Interval of SSE keep-alive comments on idle listen streams. Default 15 s.
    #[serde(with = "humantime_serde")]
    pub keepalive: Duration,
    /// A listener whose connection accepts no writes for this long is closed; the client
    /// re-listens. A listen stream whose changes have waited this long untaken is dropped by
    /// the hub when the next change comes. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub slow_listener_timeout: Duration,
    /// How long an upstream gets to acknowledge a listen before the attempt counts as failed.
    /// Default 10 s.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
    /// Longest wait between attempts to re-open a dropped upstream listen (backoff doubles
    /// from 100 ms, jittered). Default 30 s.
    #[serde(with = "humantime_serde")]
    pub reconnect_max: Duration,
    /// How long an upstream listen waits after its URI set grows before re-listening, so that
    /// a burst of new listeners or newly cached reads costs one re-listen (each re-listen
    /// sends the whole set). Default 20 ms.
    #[serde(with = "humantime_serde")]
    pub relisten_debounce: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            max_listeners: 20_000,
            max_listens_per_principal: 64,
            max_uris_per_listen: 1_000,
            linger: Duration::from_secs(2),
            keepalive: Duration::from_secs(15),
            slow_listener_timeout: Duration::from_secs(30),
            ack_timeout: Duration::from_secs(10),
            reconnect_max: Duration::from_secs(30),
            relisten_debounce: Duration::from_millis(20),
        }
    }
}
