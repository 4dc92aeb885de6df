//! Periodic background work (sweeps, prunes, samples) on the proxy's task tree: one place for
//! the interval, its missed-tick policy and its cancel arm.

use std::time::Duration;

use tokio::time::{MissedTickBehavior, interval};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs `work` every `period` on `tracker` until `cancel`. A tick missed under load is
/// delayed, not bunched: these jobs are idempotent sweeps, and running one twice in a row
/// would only cost time.
pub fn every(
    period: Duration,
    cancel: &CancellationToken,
    tracker: &TaskTracker,
    mut work: impl FnMut() + Send + 'static,
) {
    let cancel = cancel.clone();
    tracker.spawn(async move {
        let mut tick = interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => work(),
            }
        }
    });
}
