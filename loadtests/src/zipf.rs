//! A Zipf sampler over ranks `0..n`: rank `k` is drawn with probability proportional to
//! `1 / (k + 1)^s`. Real resource traffic is skewed like this (a few hot documents, a long
//! tail), and the skew decides how much a cache helps, so the hot-read figures depend on it.
//! `s = 0` is uniform. The cumulative table is built once and shared by every client.

use std::sync::Arc;

use rand::{Rng, RngExt};

/// Draws ranks; cheap to clone.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// Cumulative probabilities; the last is exactly 1.0.
    cdf: Arc<[f64]>,
}

impl Zipf {
    /// A sampler over `n >= 1` ranks with exponent `s >= 0`.
    pub fn new(n: usize, s: f64) -> Self {
        assert!(n >= 1, "Zipf needs at least one rank");
        assert!(s.is_finite() && s >= 0.0, "Zipf exponent must be >= 0");
        let mut cdf: Vec<f64> = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 0..n {
            acc += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        // Rounding must not leave a gap above the last rank.
        *cdf.last_mut().expect("n >= 1") = 1.0;
        Self { cdf: cdf.into() }
    }

    /// Number of ranks.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Probability of rank `k`.
    pub fn probability(&self, k: usize) -> f64 {
        match k {
            0 => self.cdf[0],
            _ => self.cdf[k] - self.cdf[k - 1],
        }
    }

    /// Draws one rank.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let u: f64 = rng.random();
        // First rank whose cumulative probability exceeds u; u < 1.0 = the last entry.
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn frequencies(z: &Zipf, draws: usize, seed: u64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut counts = vec![0usize; z.len()];
        for _ in 0..draws {
            counts[z.sample(&mut rng)] += 1;
        }
        counts.iter().map(|c| *c as f64 / draws as f64).collect()
    }

    #[test]
    fn one_rank_is_always_drawn() {
        let z = Zipf::new(1, 1.2);
        let mut rng = SmallRng::seed_from_u64(1);
        assert!((0..1000).all(|_| z.sample(&mut rng) == 0));
        assert_eq!(z.probability(0), 1.0);
    }

    #[test]
    fn exponent_zero_is_uniform() {
        let z = Zipf::new(10, 0.0);
        for f in frequencies(&z, 200_000, 7) {
            assert!((f - 0.1).abs() < 0.005, "frequency {f}");
        }
    }

    #[test]
    fn frequencies_follow_the_power_law() {
        let z = Zipf::new(100, 1.0);
        // 1 / H(100), H(100) = 5.18738
        assert!((z.probability(0) - 0.192776).abs() < 1e-5);
        assert!((z.probability(1) - z.probability(0) / 2.0).abs() < 1e-9);
        let f = frequencies(&z, 400_000, 42);
        for k in [0, 1, 4, 9, 49] {
            let p = z.probability(k);
            assert!((f[k] - p).abs() < 0.1 * p + 0.001, "rank {k}: {} vs {p}", f[k]);
        }
        assert!(f[0] > f[1] && f[1] > f[9] && f[9] > f[99]);
    }

    #[test]
    fn probabilities_sum_to_one_and_draws_are_reproducible() {
        let z = Zipf::new(1000, 1.1);
        let sum: f64 = (0..1000).map(|k| z.probability(k)).sum();
        assert!((sum - 1.0).abs() < 1e-9);
        let mut a = SmallRng::seed_from_u64(3);
        let mut b = SmallRng::seed_from_u64(3);
        let xs: Vec<usize> = (0..100).map(|_| z.sample(&mut a)).collect();
        let ys: Vec<usize> = (0..100).map(|_| z.sample(&mut b)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|k| *k < 1000));
    }
}
