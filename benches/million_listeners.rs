//! A million listeners in one process (issue #32, item 3): the real proxy and hub behind a
//! real upstream, each listener held as the listen stream its HTTP body pulls, 1,000 streams
//! to a "connection" task that writes their frames to a counting sink (no sockets: the
//! open-file limit does not cap the count). Reports the heap bytes and RSS per idle listener
//! and, for a few changes made upstream, the delivery latency from the change to each
//! listener's frame.
//!
//! `cargo bench --bench million_listeners -- [LISTENERS] [CHANGES] [JSON]` (default 1,000,000 and 5;
//! with JSON, also a report in the shape `resmux-load plot listeners` reads, so the point can
//! join the listener sweep's plot)

#[path = "../tests/listeners/harness.rs"]
mod harness;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use harness::{URI, hold, live, percentile_ms, proxy, rss_kib, until};

#[global_allocator]
static GLOBAL: harness::Counting = harness::Counting;

/// Streams per connection task, as `fanout-100k-h2` puts 1,000 streams on each connection.
const PER_CONNECTION: usize = 1_000;
const WARM: usize = 1_000;

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let changes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let json = args.next();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run(n, changes, json));
}

async fn run(n: usize, changes: usize, json: Option<String>) {
    let p = proxy(WARM + n, |_| {}).await;
    let warm = hold(&p, WARM, 1, 1);
    until(&warm.seen, "the warm-up acknowledgments", |s| s.frames.load(Relaxed) == WARM as u64).await;
    p.up.sample.touch(URI);
    until(&warm.seen, "the warm-up change", |s| s.updates.load(Relaxed) == WARM as u64).await;

    let (heap0, rss0) = (live(), rss_kib().unwrap_or(0));
    let opened = Instant::now();
    let held = hold(&p, n, n.div_ceil(PER_CONNECTION), 1 + WARM as u64);
    until(&held.seen, "the acknowledgments", |s| s.frames.load(Relaxed) == n as u64).await;
    let opened = opened.elapsed();
    let (heap, rss) = (live(), rss_kib().unwrap_or(0));
    let mut rows = Vec::new();
    let mut all = Vec::with_capacity(n * changes);
    for round in 1..=changes {
        held.seen.mark();
        p.up.sample.touch(URI);
        let want = (round * n) as u64;
        until(&held.seen, "the change at every listener", |s| s.updates.load(Relaxed) == want).await;
        let mut l = std::mem::take(&mut *held.seen.latencies.lock().unwrap());
        l.sort_unstable();
        rows.push((percentile_ms(&l, 0.5), percentile_ms(&l, 0.99), percentile_ms(&l, 1.0), l.len()));
        all.extend_from_slice(&l);
    }
    all.sort_unstable();
    let per_heap = (heap - heap0) as f64 / n as f64;
    let per_rss = rss.saturating_sub(rss0) as f64 * 1024.0 / n as f64;
    println!(
        "listeners: {n} in {} connection tasks, opened and acknowledged in {:.1} s",
        n.div_ceil(PER_CONNECTION),
        opened.as_secs_f64()
    );
    println!("heap per idle listener: {per_heap:.0} B (allocator count); RSS per idle listener: {per_rss:.0} B");
    println!("| change | delivered | p50 ms | p99 ms | max ms |");
    println!("|---:|---:|---:|---:|---:|");
    for (i, (p50, p99, max, count)) in rows.iter().enumerate() {
        println!("| {} | {count} / {n} | {p50:.1} | {p99:.1} | {max:.1} |", i + 1);
    }
    let (p50, p99, max) = (percentile_ms(&all, 0.5), percentile_ms(&all, 0.99), percentile_ms(&all, 1.0));
    println!("| all | {} / {} | {p50:.1} | {p99:.1} | {max:.1} |", all.len(), n * changes);
    if let Some(path) = json {
        let report = serde_json::json!({"sides": [{"side": "proxy", "listen": {
            "acked": n,
            "rss_per_listener_kib": per_rss / 1024.0,
            "heap_per_listener_bytes": per_heap,
            "proxy_rss_idle_kib": rss,
            "latency_ms": {"p50": p50, "p99": p99, "max": max},
            "notifications": all.len(),
            "expected": n * changes,
        }}]});
        std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")).expect("write the report");
    }
    held.close().await;
    drop(warm);
    p.app.shutdown().await;
}
