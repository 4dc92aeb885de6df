//! `resmux-load sim`: many replicas simulated in one process against a real Redis Cluster
//! (6 `redis-server`s on loopback, [`crate::rcluster`]), speaking the real key, lease and bus
//! protocol because each is the real cluster tier ([`replica`]). A sweep over replica
//! counts; per point, on a fresh key prefix of one shared Redis Cluster:
//!
//! 1. start the replicas; wait until every one sees all of them live, every upstream has one
//!    lease holder, and a change of every upstream has reached every follower (the bus is
//!    subscribed everywhere); warm the L2 (every key read once);
//! 2. measure for `duration`: the replicas' own Redis round trips (`Stats::calls`) and the
//!    commands the masters counted (`INFO commandstats`, summed over the 3 masters), while the
//!    holders publish `changes` changes per second, each timed from the holder's `announce`
//!    to its arrival in every follower's inbox;
//! 3. kill the replica holding the most leases (its runtime dropped: nothing released) and
//!    time until every upstream's lease is held again by a survivor, and count the leases
//!    that moved.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use resmux::cluster::{Event, Role};
use resmux::mcp::notify::Change;
use serde::Serialize;
use tokio::time::Instant;

use crate::histogram::Histogram;
use crate::rcluster::RedisCluster;
use crate::report::Latency;

mod kill;
mod replica;
mod report;
use replica::{Handle, ReadCounts, Stop};
pub use report::{markdown, write_outputs};

/// What a sweep runs with (`resmux-load sim`'s options).
#[derive(Debug, Clone, clap::Args)]
pub struct SimOptions {
    /// Replica counts, one point each (each point well under a minute).
    #[arg(long, value_delimiter = ',', default_values_t = [3usize, 10, 30, 100])]
    pub replicas: Vec<usize>,
    /// Upstreams (leases, bus channels) of every replica.
    #[arg(long, default_value_t = 10)]
    pub upstreams: usize,
    /// Keys per upstream the L2 reads draw from (uniformly).
    #[arg(long, default_value_t = 200)]
    pub keys: usize,
    /// Local-cache misses per replica per second, each an L2 probe (0: none).
    #[arg(long, default_value_t = 20.0)]
    pub l2_reads: f64,
    /// URIs per upstream in each replica's published interest.
    #[arg(long, default_value_t = 10)]
    pub interest_uris: usize,
    /// Changes per second the lease holders publish, over the upstreams in turn.
    #[arg(long, default_value_t = 10.0)]
    pub changes: f64,
    /// Measured time per point.
    #[arg(long, default_value = "8s", value_parser = crate::scenario::parse_duration)]
    pub duration: Duration,
    /// `lease_ttl` of the simulated replicas.
    #[arg(long, default_value = "2s", value_parser = crate::scenario::parse_duration)]
    pub lease_ttl: Duration,
    /// The redis-server binary (redis-cli is taken from beside it, or PATH); the
    /// `RESMUX_REDIS_SERVER` environment variable overrides it.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
}

/// Most replicas in one point: each is a thread, a runtime and its Redis connections.
pub const MAX_REPLICAS: usize = 200;

impl SimOptions {
    /// The rules a sweep breaks.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let mut check = |ok: bool, msg: &str| (!ok).then(|| p.push(msg.to_owned()));
        check(!self.replicas.is_empty(), "--replicas needs at least one count");
        check(
            self.replicas.iter().all(|&n| (2..=MAX_REPLICAS).contains(&n)),
            "each replica count must be within 2..=200",
        );
        check((1..=100).contains(&self.upstreams), "--upstreams must be within 1..=100");
        check(self.keys <= 100_000, "--keys must be at most 100000");
        check((0.0..=1_000.0).contains(&self.l2_reads), "--l2-reads must be within 0..=1000 per second");
        check(self.interest_uris <= 10_000, "--interest-uris must be at most 10000");
        check(self.changes > 0.0 && self.changes <= 1_000.0, "--changes must be within (0, 1000] per second");
        check(
            self.duration >= Duration::from_millis(500) && self.duration <= Duration::from_secs(50),
            "--duration must be within 500ms..=50s",
        );
        check(
            (Duration::from_millis(300)..=Duration::from_secs(30)).contains(&self.lease_ttl),
            "--lease-ttl must be within 300ms..=30s",
        );
        p
    }
}

/// What the replicas share with the driver: when each change was published, and what arrived.
#[derive(Default)]
pub(crate) struct Shared {
    sent: Mutex<HashMap<String, std::time::Instant>>,
    latency: Mutex<Histogram>,
    arrived: AtomicU64,
    /// Arrivals of a change whose send time is unknown (not this point's): never expected.
    unknown: AtomicU64,
    reads: ReadCounts,
}

impl Shared {
    /// A follower received the change of `uri`.
    fn delivered(&self, uri: &str) {
        let sent = self.sent.lock().map(|s| s.get(uri).copied()).unwrap_or(None);
        match sent {
            Some(at) => {
                if let Ok(mut h) = self.latency.lock() {
                    h.record(at.elapsed().as_nanos() as u64);
                }
                self.arrived.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.unknown.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One point of the sweep.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Point {
    pub replicas: usize,
    pub upstreams: usize,
    /// Time from the first replica's start until every replica was ready.
    pub setup_ms: u64,
    pub measured_s: f64,
    /// Round trips the replicas made (a script or pipeline is one), per replica per second.
    pub client_calls_per_replica_s: f64,
    /// Commands the 3 masters executed (`INFO commandstats`, scripts' inner commands
    /// included), per replica per second.
    pub redis_commands_per_replica_s: f64,
    /// … and per replica per upstream.
    pub redis_commands_per_replica_upstream_s: f64,
    /// Bytes into and out of Redis, per replica per second.
    pub redis_in_bytes_per_replica_s: f64,
    pub redis_out_bytes_per_replica_s: f64,
    /// Commands by name over the window, all replicas.
    pub redis_commands: std::collections::BTreeMap<String, u64>,
    pub changes: u64,
    pub delivered: u64,
    pub expected: u64,
    pub notify_ms: Latency,
    pub l2_hits: u64,
    pub l2_fills: u64,
    pub l2_busy: u64,
    pub l2_errors: u64,
    pub kill: kill::KillReport,
    pub error: Option<String>,
}

/// The whole sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub command: String,
    pub upstreams: usize,
    pub keys: usize,
    pub l2_reads_per_replica_s: f64,
    pub interest_uris: usize,
    pub changes_per_s: f64,
    pub duration_s: f64,
    pub lease_ttl_ms: u64,
    pub points: Vec<Point>,
}

/// Runs the sweep on one Redis Cluster; each point on a key prefix of its own.
pub async fn run(o: &SimOptions, command: String) -> Result<SimReport> {
    let problems = o.problems();
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    eprintln!("resmux-load sim: starting a 6-node Redis Cluster …");
    let server = std::env::var_os("RESMUX_REDIS_SERVER").map_or_else(|| o.redis_server.clone(), PathBuf::from);
    let redis = RedisCluster::start(&server).await?;
    let mut points = Vec::new();
    for (i, &n) in o.replicas.iter().enumerate() {
        eprintln!("resmux-load sim: {n} replicas …");
        let point = match run_point(o, &redis, n, &format!("sim{i}n{n}:")).await {
            Ok(p) => p,
            Err(e) => {
                Point { replicas: n, upstreams: o.upstreams, error: Some(format!("{e:#}")), ..Default::default() }
            }
        };
        points.push(point);
    }
    redis.stop().await;
    Ok(SimReport {
        command,
        upstreams: o.upstreams,
        keys: o.keys,
        l2_reads_per_replica_s: o.l2_reads,
        interest_uris: o.interest_uris,
        changes_per_s: o.changes,
        duration_s: o.duration.as_secs_f64(),
        lease_ttl_ms: o.lease_ttl.as_millis() as u64,
        points,
    })
}

async fn run_point(o: &SimOptions, redis: &RedisCluster, n: usize, prefix: &str) -> Result<Point> {
    let shared = Arc::new(Shared::default());
    let config = replica::config(o, &redis.seeds(), prefix);
    let start = Instant::now();
    let mut handles = Vec::with_capacity(n);
    let mut outcome = Ok(Point::default());
    for r in 0..n {
        match Handle::start(r, o, config.clone(), shared.clone()).await {
            Ok(h) => handles.push(h),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    if outcome.is_ok() {
        outcome = measure(o, redis, &mut handles, &shared, start).await;
    }
    for h in handles {
        h.stop(Stop::Clean).await;
    }
    outcome.map(|p| Point { replicas: n, upstreams: o.upstreams, ..p })
}

/// How long a point's replicas get to settle.
fn settle_deadline(o: &SimOptions) -> Duration {
    Duration::from_secs(30) + 4 * o.lease_ttl
}

/// The replica holding upstream `u`'s lease, if exactly one does.
fn holder(handles: &[Handle], u: usize) -> Option<usize> {
    let mut holders =
        handles.iter().enumerate().filter(|(_, h)| matches!(*h.cluster.role(u).borrow(), Role::Holder(_)));
    let first = holders.next()?.0;
    holders.next().is_none().then_some(first)
}

/// Publishes a change of upstream `u` from its holder; the followers that should receive it.
fn publish(o: &SimOptions, handles: &[Handle], shared: &Shared, u: usize, seq: u64) -> Option<u64> {
    let h = holder(handles, u)?;
    // A key the reads draw from, so that the change invalidates what the replicas read (the
    // next probe of it misses and refills); each key once within a point's changes.
    let uri = replica::uri(u, (seq as usize / o.upstreams) % o.keys.max(1));
    if let Ok(mut sent) = shared.sent.lock() {
        sent.insert(uri.clone(), std::time::Instant::now());
    }
    handles[h].cluster.announce(u, Event::Change(Change::Updated(uri)));
    Some(handles.len() as u64 - 1)
}

/// Waits until every follower received what was published, or `within` passed.
async fn drained(shared: &Shared, expected: u64, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while shared.arrived.load(Ordering::Relaxed) < expected {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

async fn measure(
    o: &SimOptions,
    redis: &RedisCluster,
    handles: &mut Vec<Handle>,
    shared: &Shared,
    start: Instant,
) -> Result<Point> {
    let n = handles.len();
    let deadline = Instant::now() + settle_deadline(o);
    // Everyone sees everyone, and every upstream has one holder.
    while !(handles.iter().all(|h| h.cluster.live_replicas().len() == n)
        && (0..o.upstreams).all(|u| holder(handles, u).is_some()))
    {
        if Instant::now() >= deadline {
            bail!(
                "the {n} replicas did not settle (live sets and one holder per upstream) within {:?}",
                settle_deadline(o)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every bus subscription is in place: a change of each upstream reaches every follower.
    let mut expected = 0;
    let mut seq = 0;
    for u in 0..o.upstreams {
        seq += 1;
        expected += publish(o, handles, shared, u, seq).unwrap_or(0);
    }
    if !drained(shared, expected, deadline.saturating_duration_since(Instant::now())).await {
        bail!(
            "the warm-up changes did not reach every follower ({} of {expected})",
            shared.arrived.load(Ordering::Relaxed)
        );
    }
    // The L2 warm, as a fleet that has been up a while: every key read once.
    let owner = resmux::cache::Owner::Anonymous([0; 16]);
    for u in 0..o.upstreams {
        for k in 0..o.keys {
            replica::read(&handles[(u + k) % n].cluster, u, k, &owner, shared).await;
        }
    }
    let setup_ms = start.elapsed().as_millis() as u64;
    let reads_before = [&shared.reads.hits, &shared.reads.fills, &shared.reads.busy, &shared.reads.errors]
        .map(|c| c.load(Ordering::Relaxed));
    let (arrived_before, latency_before) = (shared.arrived.load(Ordering::Relaxed), expected);
    if let Ok(mut h) = shared.latency.lock() {
        *h = Histogram::new();
    }
    let calls = |hs: &[Handle]| hs.iter().map(|h| h.cluster.stats().calls.load(Ordering::Relaxed)).sum::<u64>();
    let (server_before, calls_before, t0) = (redis.counts().await?, calls(handles), Instant::now());
    let every = Duration::from_secs_f64(1.0 / o.changes);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut changes, mut expected_window) = (0u64, 0u64);
    while t0.elapsed() < o.duration {
        tick.tick().await;
        seq += 1;
        if let Some(e) = publish(o, handles, shared, (seq as usize) % o.upstreams, seq) {
            changes += 1;
            expected_window += e;
        }
    }
    let (server_after, calls_after, secs) = (redis.counts().await?, calls(handles), t0.elapsed().as_secs_f64());
    drained(shared, latency_before + expected_window, Duration::from_secs(5)).await;
    let delivered = shared.arrived.load(Ordering::Relaxed) - arrived_before;
    let notify_ms = shared.latency.lock().map(|h| Latency::of(&h)).unwrap_or_default();
    let reads_after = [&shared.reads.hits, &shared.reads.fills, &shared.reads.busy, &shared.reads.errors]
        .map(|c| c.load(Ordering::Relaxed));
    let server = server_before.delta(&server_after);
    let per_replica = |x: f64| x / n as f64 / secs;
    let kill = kill::kill_one(o, handles).await;
    Ok(Point {
        setup_ms,
        measured_s: secs,
        client_calls_per_replica_s: per_replica((calls_after - calls_before) as f64),
        redis_commands_per_replica_s: per_replica(server.total() as f64),
        redis_commands_per_replica_upstream_s: per_replica(server.total() as f64) / o.upstreams as f64,
        redis_in_bytes_per_replica_s: per_replica(server.net_in as f64),
        redis_out_bytes_per_replica_s: per_replica(server.net_out as f64),
        redis_commands: server.commands,
        changes,
        delivered,
        expected: expected_window,
        notify_ms,
        l2_hits: reads_after[0] - reads_before[0],
        l2_fills: reads_after[1] - reads_before[1],
        l2_busy: reads_after[2] - reads_before[2],
        l2_errors: reads_after[3] - reads_before[3],
        kill,
        ..Point::default()
    })
}
