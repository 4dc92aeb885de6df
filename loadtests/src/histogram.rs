//! A log-bucketed latency histogram in the manner of HdrHistogram: values below 256 are
//! exact, larger values fall into buckets whose width is at most 1/128 of their lower bound,
//! so every reported percentile is within 0.8 % of the true one. Buckets are allocated up to
//! the largest value seen, so a histogram of sub-second nanosecond latencies stays near
//! 20 KiB, which matters with one histogram per virtual client.

/// Bits of precision: 2^8 exact values, then 128 buckets per power of two.
const SUB_BITS: u32 = 8;
const SUB: u64 = 1 << SUB_BITS;
const HALF: u64 = SUB / 2;

/// Counts of `u64` values (the load generator records nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

/// The bucket holding `v`.
fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb + 1 - SUB_BITS;
    let mantissa = v >> shift;
    (SUB + u64::from(shift - 1) * HALF + (mantissa - HALF)) as usize
}

/// Smallest and largest value of bucket `idx`.
fn bounds(idx: usize) -> (u64, u64) {
    let idx = idx as u64;
    if idx < SUB {
        return (idx, idx);
    }
    let k = idx - SUB;
    let shift = k / HALF + 1;
    let mantissa = k % HALF + HALF;
    let low = mantissa << shift;
    (low, low + ((1u64 << shift) - 1))
}

impl Histogram {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one value.
    pub fn record(&mut self, v: u64) {
        let i = index(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        if self.total == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.total += 1;
        self.sum += u128::from(v);
    }

    /// Adds every value recorded in `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if other.total == 0 {
            return;
        }
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        if self.total == 0 || other.min < self.min {
            self.min = other.min;
        }
        self.max = self.max.max(other.max);
        self.total += other.total;
        self.sum += other.sum;
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Exact smallest value (0 when empty).
    pub fn min(&self) -> u64 {
        self.min
    }

    /// Exact largest value (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Exact mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.sum as f64 / self.total as f64 }
    }

    /// The value at quantile `q` (0.0..=1.0): the highest value of the bucket holding the
    /// `ceil(q * n)`-th smallest value, clamped to the exact min and max. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bounds(i).1.clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 0..SUB {
            h.record(v);
        }
        assert_eq!(h.len(), SUB);
        assert_eq!(h.quantile(0.0), 0);
        assert_eq!(h.quantile(0.5), 127);
        assert_eq!(h.quantile(1.0), 255);
        assert_eq!(h.min(), 0);
        assert_eq!(h.max(), 255);
    }

    #[test]
    fn every_value_lies_in_its_bucket_and_buckets_are_narrow() {
        let mut values: Vec<u64> = (0..20_000).collect();
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend((1..64).map(|s| (1u64 << s) - 1));
        values.extend([u64::MAX, u64::MAX - 1, 123_456_789, 999_999_999_999]);
        for v in values {
            let i = index(v);
            let (lo, hi) = bounds(i);
            assert!(lo <= v && v <= hi, "{v} not in bucket {i} [{lo}, {hi}]");
            assert!((hi - lo) as f64 <= lo as f64 / 128.0 + 1.0, "bucket {i} too wide");
            if v > 0 {
                assert!(index(v - 1) <= i, "index is monotonic at {v}");
            }
        }
    }

    #[test]
    fn percentiles_of_a_uniform_range_are_within_one_percent() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v * 1_000); // 1 µs .. 100 ms in ns
        }
        for (q, exact) in [(0.5, 50_000_000.0), (0.9, 90_000_000.0), (0.99, 99_000_000.0), (0.999, 99_900_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - exact).abs() / exact < 0.01, "q{q}: got {got}, want {exact}");
        }
        assert_eq!(h.quantile(1.0), 100_000_000);
        assert_eq!(h.min(), 1_000);
        assert!((h.mean() - 50_000_500.0).abs() < 1.0);
    }

    #[test]
    fn merging_equals_recording_everything_in_one() {
        let mut all = Histogram::new();
        let mut parts = vec![Histogram::new(), Histogram::new(), Histogram::new()];
        let mut x: u64 = 12345;
        for i in 0..30_000u64 {
            // A cheap deterministic spread over several orders of magnitude.
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = (x >> 40) % (1 + i * 1_000);
            all.record(v);
            parts[(i % 3) as usize].record(v);
        }
        let mut merged = Histogram::new();
        for p in &parts {
            merged.merge(p);
        }
        merged.merge(&Histogram::new());
        assert_eq!(merged, all);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let h = Histogram::new();
        assert!(h.is_empty());
        assert_eq!(h.quantile(0.99), 0);
        assert_eq!(h.max(), 0);
        assert_eq!(h.mean(), 0.0);
    }
}
