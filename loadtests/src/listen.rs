//! `subscriptions/listen` streams (reference §5): each listener holds one connection with a
//! listen on the first upstream's `status` resource open, waits for the acknowledgment, then
//! times every `notifications/resources/updated` it receives. The load generator changes the
//! resource itself (`sample.bump()`) at the scenario's rate and notes when; a notification's
//! latency is the time since the latest change, which is right while delivery takes less than
//! one update period (the report flags runs where it does not).
//!
//! A listen the server refuses (today's proxy answers -32601) is a counted failure, not an
//! error of the run.
//!
//! With `streams_per_connection` above 1, listeners are streams of shared HTTP/2
//! connections (prior knowledge) instead of a connection each: what an HTTP/2 front
//! multiplexing its clients onto few connections sends, and the way past a per-process
//! open-file limit below the listener count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use resmux::sample::Sample;
use resmux::upstream::sse::SseDecoder;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::conn::{Conn, Protocol};
use crate::histogram::Histogram;
use crate::measure::{CONNECT_CONCURRENCY, CONNECT_TIMEOUT, Clock, Failure, TICK, add_failure};
use crate::scenario::Principals;
use crate::target::Addressing;
use crate::wire::{self, Op, Outcome, StreamMessage};

mod stream;
use stream::listener;

/// Largest SSE event a listener accepts.
const MAX_EVENT: usize = 1 << 20;
/// Largest refusal body read.
const MAX_REFUSAL: usize = 64 << 10;
/// Loopback source addresses listeners spread over (127.0.0.1 to 127.0.0.N), each with its
/// own ephemeral-port range, when they connect to a loopback endpoint.
const SOURCES: u8 = 8;
/// How long deliveries still in flight get after the last change.
const DRAIN: Duration = Duration::from_secs(3);

/// Shards of the figures recorded per notification: listener `i` records into shard
/// `i % SHARDS`, so the listeners on the two worker threads seldom meet on one lock.
const SHARDS: usize = 16;

/// What a shard of the listeners recorded: latencies, and notifications per [`TICK`].
#[derive(Default)]
struct Recorded {
    latency: Histogram,
    timeline: Vec<u64>,
}

/// State shared by every listener of a side. Counters are atomics; the recorded figures and
/// the failure table sit behind mutexes held for one insert (no lock is held across an await).
struct Shared {
    /// Acknowledged listeners that stopped reading.
    slow: AtomicU64,
    base: Instant,
    /// Nanoseconds after `base` of the latest change, 0 before the first.
    last_change_ns: AtomicU64,
    /// Nanoseconds after `base` when measurement began, 0 before.
    measure_ns: AtomicU64,
    acked: AtomicU64,
    /// Connections the listeners opened (fewer than listeners when they share HTTP/2 ones).
    connections: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
    notifications: AtomicU64,
    unsolicited: AtomicU64,
    wrong_subscription: AtomicU64,
    recorded: [Mutex<Recorded>; SHARDS],
    failures: Mutex<BTreeMap<String, Failure>>,
    /// One permit per listener that has been acknowledged or refused.
    settled: Semaphore,
}

impl Shared {
    fn fail(&self, kind: &str, detail: &str) {
        add_failure(&mut self.failures.lock().expect("failures"), kind, detail);
    }

    fn since_base(&self) -> u64 {
        Instant::now().saturating_duration_since(self.base).as_nanos() as u64
    }
}

/// What the listeners saw.
#[derive(Debug, Clone, Default)]
pub struct ListenStats {
    pub listeners: u64,
    /// Acknowledged listens (reading ones; slow ones are counted apart).
    pub acked: u64,
    /// Acknowledged listens that stopped reading (`slow_listeners`).
    pub slow: u64,
    /// Connections the listeners opened: one each, or one per HTTP/2 connection they share.
    pub connections: u64,
    /// Listens refused or never acknowledged.
    pub refused: u64,
    /// Acknowledged listens whose stream ended before the run did.
    pub dropped: u64,
    /// Changes made (`sample.bump()` calls).
    pub changes: u64,
    pub notifications: u64,
    /// Notifications before any change.
    pub unsolicited: u64,
    /// Notifications whose `subscriptionId` was not the listen's request id.
    pub wrong_subscription: u64,
    /// Time from change to notification, in nanoseconds.
    pub latency: Histogram,
    /// Notifications per [`TICK`] since measurement began.
    pub timeline: Vec<u64>,
    pub failures: BTreeMap<String, Failure>,
    /// Listen streams open at the upstream once every listener had settled: one per listener
    /// without a proxy, and as few as one with a subscription hub.
    pub upstream_listens: u64,
    /// The update period, to judge the latency figures by.
    pub period: Duration,
    /// Proxy RSS (KiB) before the listeners connected, and with all of them open and idle.
    pub proxy_rss_before_kib: Option<u64>,
    pub proxy_rss_idle_kib: Option<u64>,
}

/// Listeners that are open (or refused) and reading.
pub struct Listeners {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
    count: usize,
    /// Proxy RSS (KiB) before the listeners connected, and once all were acknowledged.
    rss: (Option<u64>, Option<u64>),
}

/// An HTTP/2 connection that a group of listeners share, opened by the first to need it
/// (`Err` carries why it could not be, for each of them to count).
type SharedConn = Arc<tokio::sync::OnceCell<Result<Conn, String>>>;

/// How a listener reaches its endpoint: from a source address on a connection of its own,
/// or as a stream of a shared HTTP/2 connection.
#[derive(Clone)]
enum Via {
    Own(Option<std::net::IpAddr>),
    Shared(Option<std::net::IpAddr>, SharedConn),
}

/// Opens `count` listeners and waits (up to `deadline`) until each is acknowledged or refused.
/// Every `slow_every`-th listener (when set) stops reading once acknowledged. With
/// `streams_per_connection` above 1, that many listeners share each HTTP/2 connection.
pub async fn open(
    count: usize,
    addressing: &Addressing,
    principals: Principals,
    deadline: Duration,
    slow_every: Option<usize>,
    streams_per_connection: usize,
) -> Listeners {
    let shared = Arc::new(Shared {
        base: Instant::now(),
        last_change_ns: AtomicU64::new(0),
        measure_ns: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        slow: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        notifications: AtomicU64::new(0),
        unsolicited: AtomicU64::new(0),
        wrong_subscription: AtomicU64::new(0),
        recorded: Default::default(),
        failures: Mutex::new(BTreeMap::new()),
        settled: Semaphore::new(0),
    });
    // One value, never queued: a later send replaces it, and "stop" is sent once.
    let (stop, stop_rx) = watch::channel(false);
    let connect_limit = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let mut tasks = JoinSet::new();
    // Per endpoint: the HTTP/2 connection being filled, the streams given out on it, and the
    // connections opened so far.
    let mut filling: Vec<Option<(SharedConn, usize)>> = vec![None; addressing.endpoints.len()];
    let mut connections = 0;
    for i in 0..count {
        let auth = principals.authorization(&format!("listener-{i}"));
        let slow = slow_every.is_some_and(|k| i % k == 0);
        let (ep, op) = addressing.listen_for(i);
        let addr = addressing.endpoints[ep];
        let via = if streams_per_connection > 1 {
            let slot = &mut filling[ep];
            if slot.as_ref().is_none_or(|(_, n)| *n >= streams_per_connection) {
                *slot = Some((Arc::default(), 0));
                connections += 1;
            }
            let (conn, n) = slot.as_mut().expect("just filled");
            *n += 1;
            Via::Shared(source_for(connections, addr), conn.clone())
        } else {
            Via::Own(source_for(i, addr))
        };
        tasks.spawn(listener(i, (addr, via), auth, op, shared.clone(), connect_limit.clone(), stop_rx.clone(), slow));
    }
    let _ = tokio::time::timeout(deadline, shared.settled.acquire_many(count as u32)).await;
    Listeners { shared, tasks, stop, count, rss: (None, None) }
}

/// Listener `i`'s source address: spread over [`SOURCES`] loopback
/// addresses when `addr` is loopback IPv4; otherwise the kernel's choice.
fn source_for(i: usize, addr: std::net::SocketAddr) -> Option<std::net::IpAddr> {
    match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_loopback() => {
            Some(std::net::Ipv4Addr::new(127, 0, 0, 1 + (i % SOURCES as usize) as u8).into())
        }
        _ => None,
    }
}

impl Listeners {
    /// Notes the proxy's memory before the listeners connected and once they were settled.
    pub fn proxy_memory(&mut self, before: Option<crate::procfs::Memory>, idle: Option<crate::procfs::Memory>) {
        self.rss = (before.map(|m| m.rss_kib), idle.map(|m| m.rss_kib));
    }

    /// Listens acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.shared.acked.load(Ordering::Relaxed)
    }

    /// Notes when measurement begins (for the notification timeline).
    pub fn measuring_from(&self, clock: &Clock) {
        let ns = clock.measure.saturating_duration_since(self.shared.base).as_nanos() as u64;
        self.shared.measure_ns.store(ns.max(1), Ordering::Relaxed);
    }

    /// Changes `sample`'s `status` at `hz` from `clock.measure` until `clock.end`, noting the
    /// time of each change before making it, so no notification can precede its change.
    /// Returns the number of changes made.
    pub async fn drive_changes(&self, sample: &Sample, hz: f64, clock: &Clock) -> u64 {
        let period = Duration::from_secs_f64(1.0 / hz);
        let mut ticks = tokio::time::interval_at(clock.measure, period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = 0;
        loop {
            let at = ticks.tick().await;
            if at >= clock.end {
                return changes;
            }
            let ns = self.shared.since_base().max(1);
            self.shared.last_change_ns.store(ns, Ordering::Relaxed);
            sample.bump();
            changes += 1;
        }
    }

    /// Waits until every acknowledged listener has had every change (or [`DRAIN`] passes),
    /// then closes every stream and collects the figures.
    pub async fn finish(mut self, changes: u64, period: Duration, upstream_listens: u64) -> ListenStats {
        let expected = changes * self.acked();
        let deadline = Instant::now() + DRAIN;
        while self.shared.notifications.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = self.stop.send(true);
        let closing = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), closing).await.is_err() {
            self.tasks.abort_all();
        }
        let s = &self.shared;
        let (mut latency, mut timeline) = (Histogram::new(), Vec::new());
        for shard in &s.recorded {
            let shard = shard.lock().expect("recorded");
            latency.merge(&shard.latency);
            if shard.timeline.len() > timeline.len() {
                timeline.resize(shard.timeline.len(), 0);
            }
            timeline.iter_mut().zip(&shard.timeline).for_each(|(t, n)| *t += n);
        }
        ListenStats {
            listeners: self.count as u64,
            acked: s.acked.load(Ordering::Relaxed),
            slow: s.slow.load(Ordering::Relaxed),
            connections: s.connections.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            changes,
            notifications: s.notifications.load(Ordering::Relaxed),
            unsolicited: s.unsolicited.load(Ordering::Relaxed),
            wrong_subscription: s.wrong_subscription.load(Ordering::Relaxed),
            latency,
            timeline,
            failures: s.failures.lock().expect("failures").clone(),
            upstream_listens,
            period,
            proxy_rss_before_kib: self.rss.0,
            proxy_rss_idle_kib: self.rss.1,
        }
    }
}
