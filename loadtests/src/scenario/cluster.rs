//! The `[cluster]` table of a scenario file: what a cluster scenario (`crate::cluster`)
//! runs with, and the rules it must keep.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Dur, Scenario};

/// The `[cluster]` table of a scenario file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSpec {
    /// Replicas of the proxy. Default 3.
    pub replicas: usize,
    /// Cold keys read one at a time for the hit-path latencies. Default 200.
    pub probe_keys: usize,
    /// Changes made while the listeners are open. Default 4.
    pub changes: u64,
    /// Pause after the last listener is acknowledged, before the upstream listens are counted
    /// (interest is published and leases settle). Default 2 s.
    pub settle: Dur,
    /// `lease_ttl` of the upstream-listen lease. Default 2 s.
    pub lease_ttl: Dur,
    /// The `redis-server` binary. Default `redis-server` (the `RESMUX_REDIS_SERVER`
    /// environment variable overrides it).
    pub redis_server: String,
    /// Share a Redis Cluster (6 nodes: 3 masters, 3 replicas; `[cluster] redis_nodes`)
    /// instead of one Redis. Default false.
    pub redis_cluster: bool,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            replicas: 3,
            probe_keys: 200,
            changes: 4,
            settle: Dur(Duration::from_secs(2)),
            lease_ttl: Dur(Duration::from_secs(2)),
            redis_server: "redis-server".into(),
            redis_cluster: false,
        }
    }
}

impl ClusterSpec {
    /// The rules a cluster scenario breaks.
    pub fn problems(&self, s: &Scenario) -> Vec<String> {
        let mut p = Vec::new();
        let mut check = |ok: bool, msg: &str| {
            if !ok {
                p.push(msg.to_owned());
            }
        };
        check((2..=8).contains(&self.replicas), "`cluster.replicas` must be within 2..=8");
        check(self.probe_keys <= 10_000, "`cluster.probe_keys` must be at most 10000");
        check((1..=100).contains(&self.changes), "`cluster.changes` must be within 1..=100");
        check(self.settle.0 <= Duration::from_secs(30), "`cluster.settle` must be at most 30s");
        check(
            (Duration::from_millis(300)..=Duration::from_secs(60)).contains(&self.lease_ttl.0),
            "`cluster.lease_ttl` must be within [300ms, 1m]",
        );
        check(s.upstreams == 1, "a cluster scenario has one upstream (`upstreams = 1`)");
        check(s.requests.is_some_and(|n| n <= 1_000_000), "a cluster scenario needs `requests` (at most 1000000)");
        check(s.clients >= 1 && s.clients <= 1_000, "a cluster scenario needs 1..=1000 `clients`");
        check(s.resources + self.probe_keys <= super::limits::RESOURCES, "too many resources");
        p
    }

    pub(crate) fn redis_binary(&self) -> PathBuf {
        std::env::var_os("RESMUX_REDIS_SERVER").map_or_else(|| PathBuf::from(&self.redis_server), PathBuf::from)
    }
}
