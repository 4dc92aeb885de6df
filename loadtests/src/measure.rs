//! What every load phase measures with: the run's clock, the timeline's bucket width, the
//! connection bounds, and the failure table. A leaf, so that the request, listen and cluster
//! phases share it without depending on each other.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// Width of one throughput-timeline bucket.
pub const TICK: Duration = Duration::from_millis(100);
/// Connection attempts in flight at once: well under the listen backlog (1,024 for tokio
/// listeners), so a thousand clients connecting do not overflow it and retry on SYN timeouts.
pub const CONNECT_CONCURRENCY: usize = 256;
/// Time for one connection attempt.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// When a run starts, when measurement starts (after warmup), and when it ends.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub start: Instant,
    pub measure: Instant,
    pub end: Instant,
}

impl Clock {
    pub fn starting_now(warmup: Duration, duration: Duration) -> Self {
        let start = Instant::now();
        let measure = start + warmup;
        Self { start, measure, end: measure + duration }
    }
}

/// A failure class with its count and one example.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub count: u64,
    pub example: String,
}

/// Adds one failure to a table keyed by class.
pub fn add_failure(table: &mut BTreeMap<String, Failure>, kind: &str, detail: &str) {
    let f = table.entry(kind.to_owned()).or_default();
    if f.count == 0 {
        f.example = detail.chars().take(200).collect();
    }
    f.count += 1;
}

/// Adds the failures of `from` to `into`, keeping the first example of each class.
pub fn merge_failures(into: &mut BTreeMap<String, Failure>, from: &BTreeMap<String, Failure>) {
    for (k, f) in from {
        let e = into.entry(k.clone()).or_default();
        if e.count == 0 {
            e.example = f.example.clone();
        }
        e.count += f.count;
    }
}
