//! What an idle listener costs the proxy, counted by the allocator (stable on a noisy machine,
//! unlike RSS): 10,000 listens on the real hub behind a real upstream, each held as the listen
//! stream its HTTP body pulls, acknowledged and sent one change, then idle.

#[path = "listeners/harness.rs"]
mod harness;

use std::sync::atomic::Ordering::Relaxed;

use harness::{URI, hold, live, proxy, until};

#[global_allocator]
static GLOBAL: harness::Counting = harness::Counting;

const LISTENERS: usize = 10_000;
/// Listeners opened (and sent a change) before counting, so that the runtime's, the feed's
/// and the hub's buffers have reached their working size.
const WARM: usize = 1_000;
/// The bound (issue #32): 2 KiB per idle listener.
const MAX_PER_LISTENER: isize = 2048;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_listeners_cost_at_most_2_kib_each() {
    let p = proxy(WARM + LISTENERS).await;
    let warm = hold(&p, WARM, 10, 1);
    until(&warm.seen, "the warm-up acknowledgments", |s| s.frames.load(Relaxed) == WARM as u64).await;
    p.up.sample.touch(URI);
    until(&warm.seen, "the warm-up change", |s| s.updates.load(Relaxed) == WARM as u64).await;

    let before = live();
    let held = hold(&p, LISTENERS, 10, 1 + WARM as u64);
    until(&held.seen, "the acknowledgments", |s| s.frames.load(Relaxed) == LISTENERS as u64).await;
    assert_eq!(p.app.hub().listener_count(), WARM + LISTENERS);
    p.up.sample.touch(URI);
    until(&held.seen, "the change at every listener", |s| s.updates.load(Relaxed) == LISTENERS as u64).await;
    until(&warm.seen, "the change at the warm-up listeners", |s| s.updates.load(Relaxed) == 2 * WARM as u64).await;
    let idle = live();
    let per = (idle - before) / LISTENERS as isize;
    println!("{LISTENERS} idle listeners: {} bytes live, {per} bytes per listener", idle - before);
    assert!(per <= MAX_PER_LISTENER, "{per} bytes per idle listener, over the bound of {MAX_PER_LISTENER}");
    assert!(per > 0, "the listeners were not counted");

    // Their memory goes with them (the hub's maps keep their capacity, a small part of it).
    held.close().await;
    let start = std::time::Instant::now();
    while p.app.hub().listener_count() != WARM {
        assert!(start.elapsed() < harness::DEADLINE, "the listeners did not leave");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let left = live() - before;
    assert!(left < per * LISTENERS as isize / 4, "{left} bytes still live after the listeners left");
    drop(warm);
    p.app.shutdown().await;
}
