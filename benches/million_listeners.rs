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

#[global_allocator]
static GLOBAL: harness::Counting = harness::Counting;

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let changes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let json = args.next();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(harness::measure(n, changes, json));
}
