//! Live per-upstream figures for the admin listener: requests, failures, and the latency of the
//! most recent requests (a fixed window, so quantiles cost nothing on the request path and the
//! memory is bounded).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Latencies kept for quantiles, per upstream.
const WINDOW: usize = 1024;

/// Counters and a latency window of one upstream.
#[derive(Default)]
pub struct Stats {
    requests: AtomicU64,
    failures: AtomicU64,
    /// Ring of recent latencies in microseconds, and the next slot.
    window: Mutex<(Vec<u32>, usize)>,
}

/// A copy of the figures at one moment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StatsSnapshot {
    pub requests: u64,
    pub failures: u64,
    /// Median and 99th percentile of the last requests, in milliseconds (0 before any).
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Stats {
    /// One request finished after `took`; `failed` when it got no answer (a JSON-RPC error
    /// answer is an answer).
    pub fn record(&self, took: Duration, failed: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        let micros = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
        let mut w = self.window.lock().expect("stats lock");
        let (ring, next) = &mut *w;
        if ring.len() < WINDOW {
            ring.push(micros);
        } else {
            ring[*next] = micros;
        }
        *next = (*next + 1) % WINDOW;
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let mut sorted = self.window.lock().expect("stats lock").0.clone();
        sorted.sort_unstable();
        let q = |p: f64| {
            if sorted.is_empty() {
                return 0.0;
            }
            let i = ((sorted.len() - 1) as f64 * p).round() as usize;
            f64::from(sorted[i]) / 1000.0
        };
        StatsSnapshot {
            requests: self.requests.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            p50_ms: q(0.5),
            p99_ms: q(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_recent_window() {
        let s = Stats::default();
        assert_eq!(s.snapshot().p99_ms, 0.0);
        for ms in 1..=100 {
            s.record(Duration::from_millis(ms), ms % 10 == 0);
        }
        let snap = s.snapshot();
        assert_eq!((snap.requests, snap.failures), (100, 10));
        assert_eq!(snap.p50_ms, 51.0);
        assert_eq!(snap.p99_ms, 99.0);
        // The window forgets: after WINDOW fast requests the slow ones are gone.
        for _ in 0..WINDOW {
            s.record(Duration::from_micros(500), false);
        }
        assert_eq!(s.snapshot().p99_ms, 0.5);
    }
}
