//! Listeners held in this process over in-memory streams: the real proxy (`App`) in front of a
//! real sample upstream on loopback, its real hub, and the real listen streams
//! ([`ListenStream`], what a listen's HTTP body pulls), polled by "connection" tasks that
//! write each frame to a counting sink. Shared by `tests/listeners.rs` and the
//! million-listener measurement (`benches/million_listeners.rs`), which include this file.
//!
//! Memory is counted by a global allocator that each including binary installs (the one
//! documented exception to the crate's `forbid(unsafe_code)`: a test binary's own allocator).

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::Stream;
use futures_util::stream::SelectAll;
use resmux::app::App;
use resmux::auth::Principal;
use resmux::config::{Config, UpstreamConfig};
use resmux::downstream::ListenStream;
use resmux::jsonrpc::RequestId;
use resmux::mcp::notify::Filter;
use resmux::sample::{Sample, SampleHttp, SampleSpec};
use tokio::sync::Notify;

/// Counts the bytes live on the heap.
pub struct Counting;

/// Bytes allocated and not yet freed.
pub static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The URI every listener watches.
pub const URI: &str = "docs://status";

/// Upper bound for any wait.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The proxy in front of its upstream.
pub struct Proxy {
    pub up: SampleHttp,
    pub app: App,
}

/// Starts a sample upstream and the proxy in front of it, with room for `listeners` and the
/// config `tweak`ed, and waits until the upstream is discovered (a listen on [`URI`] is
/// honoured).
pub async fn proxy(listeners: usize, tweak: impl FnOnce(&mut Config)) -> Proxy {
    let up = SampleHttp::start(Sample::new(SampleSpec::generated("docs", 3)), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind sample");
    let mut cfg = Config::default();
    cfg.listen.addr = "127.0.0.1:0".parse().unwrap();
    cfg.upstreams = vec![UpstreamConfig::http("docs", &up.url())];
    cfg.hub.max_listeners = listeners + 1;
    tweak(&mut cfg);
    let app = App::start(cfg).await.expect("proxy starts");
    let start = Instant::now();
    loop {
        let sub = app.hub().subscribe(&Principal::Anonymous, RequestId::number(0), &filter()).expect("subscribe");
        if !sub.honoured.uris.is_empty() {
            break;
        }
        drop(sub);
        assert!(start.elapsed() < DEADLINE, "the upstream was not discovered in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Proxy { up, app }
}

/// A listen on [`URI`].
pub fn filter() -> Filter {
    Filter { uris: BTreeSet::from([URI.to_owned()]), ..Filter::default() }
}

/// What the connections saw.
#[derive(Default)]
pub struct Seen {
    /// Frames written.
    pub frames: AtomicU64,
    pub bytes: AtomicU64,
    /// Frames with a `resources/updated` notification.
    pub updates: AtomicU64,
    /// Per update frame, microseconds from [`Seen::mark`] to its write (`u32::MAX` when not
    /// kept: past [`Seen::keep`]).
    pub latencies: std::sync::Mutex<Vec<u32>>,
    /// When the change being timed was made upstream.
    pub marked: std::sync::Mutex<Option<Instant>>,
    pub changed: Notify,
}

impl Seen {
    /// Starts timing a change made now.
    pub fn mark(&self) {
        *self.marked.lock().unwrap() = Some(Instant::now());
        self.latencies.lock().unwrap().clear();
    }
}

/// What one connection task saw in one poll, handed to [`Seen`] at its end: shared counters
/// touched per frame would cost the harness a contended cache line per delivery.
#[derive(Default)]
struct Batch {
    frames: u64,
    bytes: u64,
    updates: u64,
    latencies: Vec<u32>,
}

impl Batch {
    fn frame(&mut self, frame: &[u8], marked: Option<Instant>) {
        self.frames += 1;
        self.bytes += frame.len() as u64;
        static UPDATED: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"resources/updated"));
        if UPDATED.find(frame).is_some() {
            self.updates += 1;
            if let Some(at) = marked {
                self.latencies.push(at.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
        }
    }

    /// Hands the counts over (latencies first: a reader that sees the updates counted finds
    /// their latencies there).
    fn flush(&mut self, seen: &Seen) {
        if self.frames == 0 {
            return;
        }
        if !self.latencies.is_empty() {
            seen.latencies.lock().unwrap().append(&mut self.latencies);
        }
        seen.bytes.fetch_add(std::mem::take(&mut self.bytes), Relaxed);
        seen.updates.fetch_add(std::mem::take(&mut self.updates), Relaxed);
        seen.frames.fetch_add(std::mem::take(&mut self.frames), Relaxed);
        seen.changed.notify_waiters();
    }
}

/// Listeners held by `connections` tasks (as HTTP/2 streams share a connection), each task
/// polling its streams when woken and writing their frames to a counting sink.
pub struct Held {
    pub seen: Arc<Seen>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Opens `n` listens on [`URI`] in `proxy`'s hub, spread over `connections` tasks.
pub fn hold(proxy: &Proxy, n: usize, connections: usize, first_id: u64) -> Held {
    let seen = Arc::new(Seen::default());
    let per = n.div_ceil(connections.max(1));
    let mut tasks = Vec::new();
    let hub = proxy.app.hub();
    let mut id = first_id;
    let mut left = n;
    while left > 0 {
        let take = per.min(left);
        left -= take;
        let mut streams = Vec::with_capacity(take);
        for _ in 0..take {
            let sub = hub.subscribe(&Principal::Anonymous, RequestId::number(id), &filter()).expect("subscribe");
            id += 1;
            streams.push(Box::pin(ListenStream::sse(sub)));
        }
        let seen = seen.clone();
        tasks.push(tokio::spawn(connection(streams, seen)));
    }
    Held { seen, tasks }
}

impl Held {
    /// Ends every stream (and so its listener).
    pub async fn close(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// One connection: polls the streams that were woken (each stream has its own waker, as
/// each HTTP/2 stream of a hyper connection is its own task), and writes what they yield to
/// the sink. Polling every stream on each wake instead would cost the harness O(streams²)
/// per change and hide the proxy's own delivery time.
async fn connection(streams: Vec<Pin<Box<ListenStream>>>, seen: Arc<Seen>) {
    let mut streams: SelectAll<Pin<Box<ListenStream>>> = streams.into_iter().collect();
    let mut batch = Batch::default();
    std::future::poll_fn(|cx: &mut Context<'_>| {
        let marked = *seen.marked.lock().unwrap();
        while let Poll::Ready(Some(frame)) = Pin::new(&mut streams).poll_next(cx) {
            batch.frame(&frame, marked);
        }
        batch.flush(&seen);
        Poll::<()>::Pending
    })
    .await
}

/// Waits (at most [`DEADLINE`]) until `done` holds of `seen`, polling every 5 ms.
pub async fn until(seen: &Seen, what: &str, done: impl Fn(&Seen) -> bool) {
    until_within(DEADLINE, seen, what, done).await;
}

/// [`until`], waiting at most `deadline`.
pub async fn until_within(deadline: Duration, seen: &Seen, what: &str, done: impl Fn(&Seen) -> bool) {
    let start = Instant::now();
    while !done(seen) {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Bytes live on the heap now.
pub fn live() -> isize {
    LIVE.load(Relaxed)
}

/// The proxy's RSS in KiB (this process's, from /proc).
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// This process's CPU time (user and system) in microseconds, from /proc.
pub fn cpu_us() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at state; utime and stime
    // are the 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let (utime, stime): (u64, u64) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?);
    Some((utime + stime) * 1_000_000 / 100)
}

/// The p-th percentile of `sorted` microseconds, in milliseconds.
pub fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1000.0
}

/// Streams per connection task in [`measure`], as `fanout-100k-h2` puts 1,000 streams on each
/// connection.
const PER_CONNECTION: usize = 1_000;
/// Listeners opened (and sent a change) before counting in [`measure`].
const WARM: usize = 1_000;

/// Holds `n` listeners, makes `changes` changes upstream, prints heap and RSS per idle
/// listener and the delivery latency of each change (and writes them to `json`, in the shape
/// `resmux-load plot listeners` reads).
pub async fn measure(n: usize, changes: usize, json: Option<String>) {
    let p = proxy(WARM + n, |_| {}).await;
    let warm = hold(&p, WARM, 1, 1);
    until(&warm.seen, "the warm-up acknowledgments", |s| s.frames.load(Relaxed) == WARM as u64).await;
    p.up.sample.touch(URI);
    until(&warm.seen, "the warm-up change", |s| s.updates.load(Relaxed) == WARM as u64).await;

    let (heap0, rss0) = (live(), rss_kib().unwrap_or(0));
    let opened = Instant::now();
    let held = hold(&p, n, n.div_ceil(PER_CONNECTION), 1 + WARM as u64);
    // A bound that grows with the count: a million acknowledgments take minutes unoptimised.
    let deadline = DEADLINE + Duration::from_millis(n as u64);
    until_within(deadline, &held.seen, "the acknowledgments", |s| s.frames.load(Relaxed) == n as u64).await;
    let opened = opened.elapsed();
    let (heap, rss) = (live(), rss_kib().unwrap_or(0));
    let mut rows = Vec::new();
    let mut all = Vec::with_capacity(n * changes);
    let cpu0 = cpu_us();
    for round in 1..=changes {
        held.seen.mark();
        p.up.sample.touch(URI);
        let want = (round * n) as u64;
        until_within(deadline, &held.seen, "the change at every listener", |s| s.updates.load(Relaxed) == want).await;
        // The connections hand their latencies over after counting the frames.
        until_within(deadline, &held.seen, "every latency", |s| s.latencies.lock().unwrap().len() == n).await;
        let mut l = std::mem::take(&mut *held.seen.latencies.lock().unwrap());
        l.sort_unstable();
        rows.push((percentile_ms(&l, 0.5), percentile_ms(&l, 0.99), percentile_ms(&l, 1.0), l.len()));
        all.extend_from_slice(&l);
    }
    let cpu_per = cpu_us().zip(cpu0).map_or(f64::NAN, |(b, a)| (b - a) as f64 / (n * changes) as f64);
    all.sort_unstable();
    let per_heap = (heap - heap0) as f64 / n as f64;
    let per_rss = rss.saturating_sub(rss0) as f64 * 1024.0 / n as f64;
    println!(
        "listeners: {n} in {} connection tasks, opened and acknowledged in {:.1} s",
        n.div_ceil(PER_CONNECTION),
        opened.as_secs_f64()
    );
    println!("heap per idle listener: {per_heap:.0} B (allocator count); RSS per idle listener: {per_rss:.0} B");
    println!("CPU per delivered notification (this process: proxy, upstream and sink): {cpu_per:.2} µs");
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
            "process_cpu_us_per_notification": cpu_per,
            "expected": n * changes,
        }}]});
        std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")).expect("write the report");
    }
    held.close().await;
    drop(warm);
    p.app.shutdown().await;
}
