//! The request load: `clients` virtual clients, each on its own keep-alive connection(s),
//! each sending one request at a time (a closed loop) drawn from the scenario's mix. Every
//! client connects first and all start together, so connection setup is outside the
//! measurement and a stampede really arrives at once. Each client keeps its own histograms
//! and counters (no shared state on the hot path but one atomic ticket counter when a request
//! cap is set) and they are merged when the run ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::histogram::Histogram;
use crate::measure::{CONNECT_CONCURRENCY, CONNECT_TIMEOUT, Clock, Failure, TICK, add_failure, merge_failures};
use crate::scenario::{Mix, Principals};
use crate::target::{Addressing, Kind};
use crate::wire::Outcome;
use crate::zipf::Zipf;

/// Pause after a failed reconnect, so a dead endpoint costs errors, not a spinning core.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// What the request load does.
#[derive(Debug, Clone)]
pub struct RequestPlan {
    pub clients: usize,
    /// Cap on measured requests, across clients.
    pub cap: Option<u64>,
    pub per_client: Option<u64>,
    pub timeout: Duration,
    pub mix: Mix,
    pub zipf: Zipf,
    pub seed: u64,
    /// Whether each client presents its own credential.
    pub principals: Principals,
}

/// `resmux-cache` header values seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheCounts {
    pub hit: u64,
    pub miss: u64,
    pub stale: u64,
    pub bypass: u64,
    /// Any other value.
    pub other: u64,
    /// No header (the upstream itself, the ceiling, or an error before the router).
    pub absent: u64,
}

impl CacheCounts {
    pub fn add(&mut self, value: Option<&http::HeaderValue>) {
        match value.map(|v| v.as_bytes()) {
            None => self.absent += 1,
            Some(b"hit") => self.hit += 1,
            Some(b"miss") => self.miss += 1,
            Some(b"stale") => self.stale += 1,
            Some(b"bypass") => self.bypass += 1,
            Some(_) => self.other += 1,
        }
    }

    pub fn merge(&mut self, o: &CacheCounts) {
        self.hit += o.hit;
        self.miss += o.miss;
        self.stale += o.stale;
        self.bypass += o.bypass;
        self.other += o.other;
        self.absent += o.absent;
    }
}

/// Latencies and errors of one request kind.
#[derive(Debug, Clone, Default)]
pub struct KindStats {
    /// Latency of successful answers, in nanoseconds.
    pub latency: Histogram,
    pub errors: u64,
}

/// Everything measured by the request load (one client's, or all merged).
#[derive(Debug, Clone, Default)]
pub struct RequestStats {
    /// Latency of successful answers, in nanoseconds.
    pub latency: Histogram,
    pub ok: u64,
    pub errors: u64,
    /// Indexed like [`Kind::ALL`].
    pub by_kind: [KindStats; 4],
    pub failures: BTreeMap<String, Failure>,
    pub cache: CacheCounts,
    /// Successful answers per [`TICK`] since measurement began.
    pub timeline: Vec<u64>,
    /// Completion time of the last measured answer, after measurement began.
    pub last_done: Option<Duration>,
    /// Clients that could not connect before the start.
    pub clients_unconnected: u64,
}

impl RequestStats {
    fn record(
        &mut self,
        kind: Kind,
        elapsed: Duration,
        outcome: &Outcome,
        cache: Option<&http::HeaderValue>,
        since_measure: Duration,
    ) {
        let k = &mut self.by_kind[kind as usize];
        match outcome {
            Outcome::Ok => {
                let ns = elapsed.as_nanos() as u64;
                self.latency.record(ns);
                k.latency.record(ns);
                self.ok += 1;
                let slot = (since_measure.as_nanos() / TICK.as_nanos()) as usize;
                if slot >= self.timeline.len() {
                    self.timeline.resize(slot + 1, 0);
                }
                self.timeline[slot] += 1;
            }
            Outcome::Failed { kind: class, detail } => {
                self.errors += 1;
                k.errors += 1;
                add_failure(&mut self.failures, &format!("{}: {class}", kind.method()), detail);
            }
        }
        self.cache.add(cache);
        self.last_done = Some(self.last_done.map_or(since_measure, |d| d.max(since_measure)));
    }

    /// Adds another client's figures.
    pub fn merge(&mut self, o: &RequestStats) {
        self.latency.merge(&o.latency);
        self.ok += o.ok;
        self.errors += o.errors;
        for (a, b) in self.by_kind.iter_mut().zip(&o.by_kind) {
            a.latency.merge(&b.latency);
            a.errors += b.errors;
        }
        merge_failures(&mut self.failures, &o.failures);
        self.cache.merge(&o.cache);
        if o.timeline.len() > self.timeline.len() {
            self.timeline.resize(o.timeline.len(), 0);
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            *a += b;
        }
        self.last_done = match (self.last_done, o.last_done) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.clients_unconnected += o.clients_unconnected;
    }

    /// Requests measured, successful or not.
    pub fn requests(&self) -> u64 {
        self.ok + self.errors
    }
}

/// Picks a request kind by the mix's weights.
pub fn pick(mix: &Mix, rng: &mut SmallRng) -> Kind {
    let total = mix.total();
    let mut x = rng.random_range(0..total);
    for (w, kind) in
        [(mix.read, Kind::Read), (mix.list, Kind::List), (mix.call, Kind::Call), (mix.discover, Kind::Discover)]
    {
        if x < w {
            return kind;
        }
        x -= w;
    }
    Kind::Read
}

/// Clients that are connected and waiting for the start.
pub struct Prepared {
    tasks: JoinSet<RequestStats>,
    go: watch::Sender<Option<Clock>>,
    clients: usize,
}

/// Spawns the clients and waits (up to `deadline`) until each has connected or failed to.
pub async fn prepare(plan: Arc<RequestPlan>, addressing: Arc<Addressing>, deadline: Duration) -> Prepared {
    // One value, never queued: the start clock is sent once and every client reads it.
    let (go, go_rx) = watch::channel(None);
    let ready = Arc::new(Semaphore::new(0));
    let connect_limit = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let tickets = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for idx in 0..plan.clients {
        tasks.spawn(client(
            idx,
            plan.clone(),
            addressing.clone(),
            ready.clone(),
            connect_limit.clone(),
            go_rx.clone(),
            tickets.clone(),
        ));
    }
    // Each client adds one permit once connected (or failed); a client that cannot connect
    // within the deadline is simply late, and will find the run under way.
    let _ = tokio::time::timeout(deadline, ready.acquire_many(plan.clients as u32)).await;
    Prepared { tasks, go, clients: plan.clients }
}

impl Prepared {
    /// Starts every client on `clock` and merges their figures when the last one ends.
    /// Clients end by themselves (time, caps, per-request timeouts); `grace` after the end is
    /// the backstop for any that do not.
    pub async fn run(mut self, clock: Clock, grace: Duration) -> RequestStats {
        let _ = self.go.send(Some(clock));
        let mut total = RequestStats::default();
        let backstop = tokio::time::sleep_until(clock.end + grace);
        tokio::pin!(backstop);
        let mut finished = 0;
        loop {
            tokio::select! {
                joined = self.tasks.join_next() => match joined {
                    Some(Ok(stats)) => { total.merge(&stats); finished += 1; }
                    Some(Err(_)) => finished += 1,
                    None => break,
                },
                _ = &mut backstop => {
                    self.tasks.abort_all();
                    add_failure(&mut total.failures, "client stuck past the end",
                        &format!("{} of {} clients aborted", self.clients - finished, self.clients));
                    break;
                }
            }
        }
        total
    }
}

async fn client(
    idx: usize,
    plan: Arc<RequestPlan>,
    addressing: Arc<Addressing>,
    ready: Arc<Semaphore>,
    connect_limit: Arc<Semaphore>,
    mut go: watch::Receiver<Option<Clock>>,
    tickets: Arc<AtomicU64>,
) -> RequestStats {
    let mut stats = RequestStats::default();
    let auth = plan.principals.authorization(&format!("client-{idx}"));
    let mut conns: Vec<Option<Conn>> = Vec::with_capacity(addressing.endpoints.len());
    {
        let _permit = connect_limit.acquire().await.expect("never closed");
        for ep in &addressing.endpoints {
            conns.push(Conn::open(*ep, CONNECT_TIMEOUT, auth.clone()).await.ok());
        }
    }
    if conns.iter().any(Option::is_none) {
        stats.clients_unconnected = 1;
    }
    ready.add_permits(1);
    let Ok(clock) = go.wait_for(Option::is_some).await.map(|c| c.expect("is some")) else {
        return stats;
    };
    // Seeds differ per client but repeat across runs and sides: each side sees the same keys.
    let mut rng = SmallRng::seed_from_u64(plan.seed ^ (idx as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut sent = 0u64;
    loop {
        let now = Instant::now();
        if now >= clock.end || plan.per_client.is_some_and(|n| sent >= n) {
            break;
        }
        let measuring = now >= clock.measure;
        if measuring
            && let Some(cap) = plan.cap
            && tickets.fetch_add(1, Ordering::Relaxed) >= cap
        {
            break;
        }
        let kind = pick(&plan.mix, &mut rng);
        let (ep, op) = addressing.op(kind, idx, &mut rng, &plan.zipf);
        sent += 1;
        if conns[ep].as_ref().is_none_or(Conn::is_closed) {
            match Conn::open(addressing.endpoints[ep], CONNECT_TIMEOUT, auth.clone()).await {
                Ok(c) => conns[ep] = Some(c),
                Err(e) => {
                    conns[ep] = None;
                    if measuring {
                        let done = Instant::now().saturating_duration_since(clock.measure);
                        let failed = Outcome::failed("connect", format!("{e:#}"));
                        stats.record(kind, Duration::ZERO, &failed, None, done);
                    }
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            }
        }
        let conn = conns[ep].as_mut().expect("connected above");
        let t0 = Instant::now();
        let result = tokio::time::timeout(plan.timeout, conn.call(&op)).await;
        let t1 = Instant::now();
        let (outcome, cache) = match result {
            Ok(Ok(answer)) => (answer.outcome, answer.cache),
            Ok(Err(e)) => {
                conns[ep] = None;
                (Outcome::failed("connection", format!("{e:#}")), None)
            }
            Err(_) => {
                // The answer may still come; the connection cannot be reused before it does.
                conns[ep] = None;
                (Outcome::failed("timeout", format!("no answer within {:?}", plan.timeout)), None)
            }
        };
        if measuring {
            stats.record(kind, t1 - t0, &outcome, cache.as_ref(), t1.saturating_duration_since(clock.measure));
        }
    }
    stats
}

#[cfg(test)]
mod tests;
