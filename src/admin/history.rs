//! The recent history the admin page charts: request and hit counts sampled at a fixed
//! interval into a bounded ring, so a freshly opened page shows the last minutes at once.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::telemetry::Totals;

/// Samples kept: at the sampler's 2 s, the last 5 minutes.
const POINTS: usize = 150;

/// One interval's traffic.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Point {
    /// Seconds since the Unix epoch at the end of the interval.
    pub t: u64,
    /// Downstream requests answered in the interval.
    pub requests: u64,
    /// Of those, answered from the cache.
    pub hits: u64,
    /// Of those, fetched from an upstream into the cache.
    pub misses: u64,
}

/// A bounded ring of points, and the totals of the previous sample.
#[derive(Default)]
pub struct History {
    inner: Mutex<(VecDeque<Point>, Option<Totals>)>,
}

impl History {
    /// Records the interval that ends now, from cumulative `totals`.
    pub fn sample(&self, totals: &Totals) {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut inner = self.inner.lock().expect("history lock");
        let (points, last) = &mut *inner;
        if let Some(prev) = last {
            if points.len() == POINTS {
                points.pop_front();
            }
            points.push_back(Point {
                t,
                requests: totals.all.saturating_sub(prev.all),
                hits: totals.hit.saturating_sub(prev.hit),
                misses: totals.miss.saturating_sub(prev.miss),
            });
        }
        *last = Some(*totals);
    }

    /// The points, oldest first.
    pub fn points(&self) -> Vec<Point> {
        self.inner.lock().expect("history lock").0.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_deltas_and_bounded() {
        let h = History::default();
        h.sample(&Totals { all: 10, hit: 5, ..Totals::default() });
        assert!(h.points().is_empty(), "the first sample is only a baseline");
        h.sample(&Totals { all: 25, hit: 12, miss: 3, ..Totals::default() });
        let p = h.points();
        assert_eq!((p[0].requests, p[0].hits, p[0].misses), (15, 7, 3));
        for i in 0..(POINTS as u64 + 10) {
            h.sample(&Totals { all: 100 + i, ..Totals::default() });
        }
        assert_eq!(h.points().len(), POINTS);
    }
}
