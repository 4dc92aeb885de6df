//! Jittered exponential backoff for reconnects and restarts.

use std::time::Duration;

/// Exponential backoff from `base`, doubling up to `max`, each delay jittered to 50–100 % so
/// that many proxies restarting at once do not reconnect in lockstep.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max: max.max(base), attempt: 0 }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.base.saturating_mul(1u32 << self.attempt.min(20));
        self.attempt = self.attempt.saturating_add(1);
        let full = exp.min(self.max);
        full.mul_f64(0.5 + rand::random::<f64>() * 0.5)
    }

    /// Starts over after a healthy period.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d.iter().all(|x| *x <= Duration::from_secs(1)));
        assert!(d[7] >= Duration::from_millis(500));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
