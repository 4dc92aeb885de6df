//! The request load of one segment (one endpoint, one stretch of time): workers, each on its
//! own connection, sending one request at a time.
//!
//! - **Closed loop** (`--concurrency N`): each of N workers sends its next request when the
//!   last is answered. Latency is from send to the last byte.
//! - **Open loop** (`--rate R`): request *k* is due at `start + k / R`, whatever the answers
//!   do; a free worker takes the next due request and waits for its time. When every worker
//!   is busy, due requests wait for one, and that wait is part of their latency: latency is
//!   measured from the intended send time (coordinated omission corrected, as wrk2 and oha
//!   do). Service time, from the actual send, is kept beside it. Requests due before the end
//!   but not yet sent when it comes are reported as `unsent_scheduled` (the backlog).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use resmux::mcp::method as m;
use resmux::upstream::ParamHeader;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::args::Secrets;
use super::counts::{Phase, Sent};
use super::discover::Workload;
use super::endpoint::{Endpoint, exchange};
use crate::conn::Conn;
use crate::histogram::Histogram;
use crate::measure::{CONNECT_CONCURRENCY, Clock};
use crate::requests::pick;
use crate::scenario::Mix;
use crate::target::Kind;
use crate::zipf::Zipf;

/// Pause after a failed connection attempt, so a dead endpoint costs errors, not a core.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// What the workers do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mix: Mix,
    pub zipf_s: f64,
    /// Open loop at this many requests per second; closed loop when `None`.
    pub rate: Option<f64>,
    pub workers: usize,
    pub timeout: Duration,
    /// Cap on measured requests in the segment.
    pub cap: Option<u64>,
    pub seed: u64,
}

/// Figures any observer can read while the load runs (the progress line).
#[derive(Default)]
pub struct Live {
    pub sent: AtomicU64,
    pub errors: AtomicU64,
    /// Latency of successful answers since the progress line last took it.
    pub recent: Mutex<Histogram>,
}

/// What one segment measured.
#[derive(Debug, Default)]
pub struct SegmentStats {
    pub warmup: Phase,
    pub measured: Phase,
    /// Open loop: requests due before the end that no worker had sent by then.
    pub unsent_scheduled: u64,
}

/// Everything the workers share.
struct Shared {
    ep: Arc<Endpoint>,
    wl: Arc<Workload>,
    plan: Plan,
    secrets: Secrets,
    live: Arc<Live>,
    /// Open loop: the next schedule slot.
    tickets: AtomicU64,
    /// Measured requests begun (against the cap).
    measured_begun: AtomicU64,
    zipf: Zipf,
    none: Arc<[ParamHeader]>,
}

/// Workers that are connected and waiting for the clock.
pub struct Ready {
    tasks: JoinSet<SegmentStats>,
    go: watch::Sender<Option<Clock>>,
}

/// Spawns the workers and waits (up to the request timeout) until each has connected or
/// failed to, so connection setup is not measured and every worker starts on one clock.
pub async fn prepare(
    ep: Arc<Endpoint>,
    wl: Arc<Workload>,
    plan: Plan,
    secrets: Secrets,
    live: Arc<Live>,
    stop: watch::Receiver<bool>,
) -> Ready {
    let shared = Arc::new(Shared {
        zipf: Zipf::new(wl.uris.len().max(1), plan.zipf_s),
        ep,
        wl,
        plan,
        secrets,
        live,
        tickets: AtomicU64::new(0),
        measured_begun: AtomicU64::new(0),
        none: Arc::from(Vec::new()),
    });
    // One value, sent once: the clock every worker starts on.
    let (go, go_rx) = watch::channel(None);
    let connected = Arc::new(Semaphore::new(0));
    let connecting = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for w in 0..shared.plan.workers {
        let start = Start { connected: connected.clone(), connecting: connecting.clone(), go: go_rx.clone() };
        tasks.spawn(worker(w, shared.clone(), start, stop.clone()));
    }
    let all = shared.plan.workers as u32;
    let deadline = shared.plan.timeout + Duration::from_secs(1);
    let _ = tokio::time::timeout(deadline, connected.acquire_many(all)).await;
    Ready { tasks, go }
}

impl Ready {
    /// Starts every worker on `clock` (warm-up, then measurement) and merges their figures
    /// when the last ends (its end, the cap, or `stop`).
    pub async fn run(mut self, clock: Clock) -> SegmentStats {
        let _ = self.go.send(Some(clock));
        let mut total = SegmentStats::default();
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok(s) = joined {
                total.warmup.merge(&s.warmup);
                total.measured.merge(&s.measured);
                total.unsent_scheduled += s.unsent_scheduled;
            }
        }
        total
    }
}

/// How a worker joins the start.
struct Start {
    connected: Arc<Semaphore>,
    connecting: Arc<Semaphore>,
    go: watch::Receiver<Option<Clock>>,
}

/// The method and params of a request of `kind`.
fn request_of(kind: Kind, s: &Shared, rng: &mut SmallRng) -> (&'static str, String) {
    match kind {
        Kind::Read => (m::RESOURCES_READ, s.wl.read_params(s.zipf.sample(rng).min(s.wl.uris.len().saturating_sub(1)))),
        Kind::List => (m::RESOURCES_LIST, "{}".to_owned()),
        Kind::Discover => (m::DISCOVER, "{}".to_owned()),
        Kind::Call => (m::TOOLS_CALL, s.wl.call.as_ref().map_or_else(|| "{}".to_owned(), |c| c.0.clone())),
    }
}

async fn worker(w: usize, s: Arc<Shared>, mut start: Start, mut stop: watch::Receiver<bool>) -> SegmentStats {
    let mut stats = SegmentStats::default();
    // A failed attempt here is made again, and counted, by the first request.
    let mut conn: Option<Conn> = match start.connecting.acquire().await {
        Ok(_permit) => s.ep.connect().await.ok(),
        Err(_) => None,
    };
    start.connected.add_permits(1);
    let Ok(Some(clock)) = start.go.wait_for(Option::is_some).await.map(|c| *c) else {
        return stats;
    };
    // Seeds differ per worker but repeat across endpoints: both see the same requests.
    let mut rng = SmallRng::seed_from_u64(s.plan.seed ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let period = s.plan.rate.map(|r| 1.0 / r);
    let mut next_id = (w as u64) << 40;
    loop {
        if *stop.borrow() {
            break;
        }
        // When this request is due: its schedule slot (open loop), or now (closed loop).
        let intended = match period {
            Some(p) => {
                let k = s.tickets.fetch_add(1, Ordering::Relaxed);
                let due = clock.start + Duration::from_secs_f64(k as f64 * p);
                if due >= clock.end {
                    break;
                }
                if due > Instant::now() {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due) => {}
                        _ = stop.wait_for(|v| *v) => break,
                    }
                }
                if Instant::now() >= clock.end {
                    // Due in time but not sent in time: the backlog an overloaded server left.
                    stats.unsent_scheduled += 1;
                    continue;
                }
                due
            }
            None => {
                let now = Instant::now();
                if now >= clock.end {
                    break;
                }
                now
            }
        };
        let measuring = intended >= clock.measure;
        if measuring
            && let Some(cap) = s.plan.cap
            && s.measured_begun.fetch_add(1, Ordering::Relaxed) >= cap
        {
            break;
        }
        let (method, params) = request_of(pick(&s.plan.mix, &mut rng), &s, &mut rng);
        let phase = if measuring { &mut stats.measured } else { &mut stats.warmup };
        if conn.as_ref().is_none_or(Conn::is_closed) {
            match s.ep.connect().await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    phase.connect_failed(&format!("{e:#}"), &s.secrets);
                    s.live.errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        next_id += 1;
        let annotations = match (&s.wl.call, method) {
            (Some((_, a)), m::TOOLS_CALL) => a,
            _ => &s.none,
        };
        let req = s.ep.request(&s.wl.era, method, &params, Some(next_id), annotations);
        let sent_at = Instant::now();
        let (sent, _) = exchange(c, req, s.plan.timeout).await;
        let done = Instant::now();
        if !matches!(sent, Sent::Answered(_)) {
            conn = None;
        }
        let ok = matches!(&sent, Sent::Answered(r) if r.is_ok());
        s.live.sent.fetch_add(1, Ordering::Relaxed);
        if !ok {
            s.live.errors.fetch_add(1, Ordering::Relaxed);
        } else if let Ok(mut h) = s.live.recent.lock() {
            h.record((done - intended).as_nanos() as u64);
        }
        let since = done.saturating_duration_since(if measuring { clock.measure } else { clock.start });
        phase.record(method, &sent, (done - intended, done - sent_at), since, &s.secrets);
    }
    stats
}
