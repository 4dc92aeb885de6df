//! The cluster scenario (`scenarios/cluster.toml`, `resmux-load run cluster`): several resmux
//! replicas in front of one sample upstream, the load generator itself acting as the
//! round-robin front (request `n` of the run goes to replica `n % replicas`, listener `i` to
//! replica `i % replicas`). The same measurement runs twice in one run, on fresh upstreams
//! and replicas each time: first with no `[cluster]` (independent replicas), then with a
//! `redis-server` the generator starts on a free loopback port (`--save "" --appendonly no`)
//! and kills at the end. Each mode measures, in this order:
//!
//! 1. **Reads**: `requests` reads (Zipf `zipf_s` over `resources` keys) from `clients`
//!    closed-loop clients, cold (every cache empty), then as many again, warm; the upstream's
//!    `resources/read` count per 10,000 reads.
//! 2. **Hit-path probes**, one request at a time on cold keys the reads never touch (keys
//!    `resources..resources + probe_keys`): each key read on replica A (an upstream fetch, with
//!    Redis behind an L2 miss and the fill lock), again on A (a local hit), then once on
//!    replica B (with Redis an L2 hit; without, another upstream fetch).
//! 3. **Listeners**: `listeners` listens on `up0://status` spread over the replicas; once
//!    acknowledged and settled, the upstream listens open (and ever opened), then `changes`
//!    bumps at `update_hz` and delivered / expected notifications.
//!
//! Each replica's `/readyz` `cluster` object (L2 hits, misses, fills, lock waits, listen
//! roles) is read after each phase.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use resmux::mcp::method as m;
use resmux::sample::Sample;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::conn::Conn;
use crate::histogram::Histogram;
use crate::listen;
use crate::measure::{CONNECT_TIMEOUT, Clock, Failure, add_failure};
use crate::placement::Placement;
use crate::proxy::Proxy;
use crate::report::Latency;
use crate::requests::CacheCounts;
pub use crate::scenario::ClusterSpec;
use crate::scenario::Scenario;
use crate::servers::on_servers;
use crate::target::{Addressing, sample_spec, upstream_name};
use crate::wire::{Op, Outcome};
use crate::zipf::Zipf;

mod phases;
mod redis;
mod report;
use phases::{listeners, probe, reads};
pub use redis::{Redis, SharedRedis};
pub use report::{markdown, write_outputs};

/// The secret every replica shares (`proxy.cursor_secret`); a load test's, not a real one.
const SHARED_SECRET: &str = "resmux-load-cluster-shared-secret-0123456789";
/// How long Redis and the replicas' cluster tier get to come up.
const UP_DEADLINE: Duration = Duration::from_secs(20);
/// How long listeners get to connect and be acknowledged.
const LISTEN_DEADLINE: Duration = Duration::from_secs(60);

/// One replica: the proxy and its admin address.
struct Replica {
    proxy: Proxy,
    admin: SocketAddr,
}

/// The replica config: the scenario's, plus an admin listener, the shared secret, and the
/// cluster table when there is a Redis.
fn replica_scenario(s: &Scenario, spec: &ClusterSpec, admin: SocketAddr, redis: Option<&SharedRedis>) -> Scenario {
    let mut r = s.clone();
    let mut extra: toml::Table = toml::from_str(&format!(
        "[admin]\naddr = \"{admin}\"\n[proxy]\ncursor_secret = {{ value = \"{SHARED_SECRET}\" }}\n"
    ))
    .expect("static TOML");
    if let Some(redis) = redis {
        let cluster: toml::Table =
            toml::from_str(&format!("{}\nlease_ttl = \"{}ms\"\n", redis.target(), spec.lease_ttl.0.as_millis()))
                .expect("static TOML");
        extra.insert("cluster".into(), cluster.into());
    }
    for (k, v) in extra {
        match (r.proxy_config.get_mut(&k), v) {
            (Some(toml::Value::Table(base)), toml::Value::Table(over)) => base.extend(over),
            (_, v) => {
                r.proxy_config.insert(k, v);
            }
        }
    }
    r
}

/// `GET /readyz` on an admin listener: the `cluster` object, or null.
async fn readiness(admin: SocketAddr) -> serde_json::Value {
    let attempt = async {
        let mut s = TcpStream::connect(admin).await.ok()?;
        let req = format!("GET /readyz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let at = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        serde_json::from_slice::<serde_json::Value>(&buf[at..]).ok()
    };
    match tokio::time::timeout(Duration::from_secs(2), attempt).await {
        Ok(Some(v)) => v.get("cluster").cloned().unwrap_or(serde_json::Value::Null),
        _ => serde_json::Value::Null,
    }
}

/// Figures of one batch of reads.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReadPhase {
    pub reads: u64,
    pub errors: u64,
    /// `resources/read` requests the upstream received during the batch.
    pub upstream_reads: u64,
    /// Distinct keys the batch read that no earlier batch of this mode had read: the fewest
    /// upstream reads a cache shared by every replica could make.
    pub new_keys: u64,
    pub upstream_reads_per_10k: f64,
    pub latency_ms: Latency,
    pub cache: CacheCounts,
    pub failures: std::collections::BTreeMap<String, Failure>,
}

/// Hit-path latencies, one request at a time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Probes {
    pub keys: usize,
    /// First read of a cold key on replica A.
    pub upstream_fetch_ms: Latency,
    /// The same key again on replica A.
    pub local_hit_ms: Latency,
    /// The same key once on replica B: an L2 hit with Redis, an upstream fetch without.
    pub other_replica_ms: Latency,
    /// `resmux-cache` values of each step.
    pub upstream_fetch_cache: CacheCounts,
    pub local_hit_cache: CacheCounts,
    pub other_replica_cache: CacheCounts,
    /// Upstream reads during each step.
    pub upstream_reads: [u64; 3],
    pub errors: u64,
}

/// Figures of the listeners.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ListenPhase {
    pub listeners: u64,
    pub acked: u64,
    pub refused: u64,
    /// Upstream listen streams open before the listeners came (the feeds the cached reads'
    /// watches keep open).
    pub upstream_listens_open_before: u64,
    /// Upstream listen streams open once every listener settled.
    pub upstream_listens_open: u64,
    /// Upstream listens opened since the upstream started (reads included: a feed re-opens,
    /// make-before-break, whenever its watched set grows).
    pub upstream_listens_total: u64,
    /// Upstream listens opened while the listeners connected and settled.
    pub upstream_listens_opened_for_listeners: u64,
    pub changes: u64,
    pub delivered: u64,
    pub expected: u64,
    pub dropped: u64,
    pub notify_ms: Latency,
    pub failures: std::collections::BTreeMap<String, Failure>,
}

/// One mode: without or with Redis.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeReport {
    pub redis: bool,
    /// The Redis is a Redis Cluster (`redis_nodes`), not one Redis.
    pub redis_cluster: bool,
    pub replicas: usize,
    pub cold: ReadPhase,
    pub warm: ReadPhase,
    pub probes: Probes,
    pub listen: ListenPhase,
    /// Each replica's `/readyz` `cluster` object after the reads and probes.
    pub cluster_after_reads: Vec<serde_json::Value>,
    /// … and after the listeners.
    pub cluster_after_listen: Vec<serde_json::Value>,
    /// Round trips replica A made to Redis during the hit-path probes (its cold first reads,
    /// fills included, and its local hits, which make none; its background calls too).
    pub probe_redis_calls: Option<u64>,
    pub error: Option<String>,
}

/// The whole cluster scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub name: String,
    pub figure: String,
    pub load: String,
    pub front: &'static str,
    pub modes: Vec<ModeReport>,
    pub notes: Vec<String>,
}

/// Runs both modes, without Redis first.
pub async fn run(s: &Scenario, placement: &Placement, duration: Option<Duration>) -> ClusterReport {
    let spec = s.cluster.clone().unwrap_or_default();
    let mut notes = Vec::new();
    if duration.is_some() {
        notes.push("--duration does not apply: the cluster scenario is bounded by counts".into());
    }
    let mut modes = Vec::new();
    for redis in [false, true] {
        eprintln!(
            "resmux-load: {} / {} replicas {} Redis …",
            s.name,
            spec.replicas,
            if redis { "with" } else { "without" }
        );
        let report = match run_mode(s, &spec, placement, redis).await {
            Ok(r) => r,
            Err(e) => {
                ModeReport { redis, replicas: spec.replicas, error: Some(format!("{e:#}")), ..Default::default() }
            }
        };
        modes.push(report);
    }
    ClusterReport {
        name: s.name.clone(),
        figure: s.figure.trim().to_owned(),
        load: load_line(s, &spec),
        front: "the load generator: request n to replica n % replicas, listener i to replica i % replicas",
        modes,
        notes,
    }
}

fn load_line(s: &Scenario, spec: &ClusterSpec) -> String {
    format!(
        "{} replicas, 1 upstream × {} resources of {} B; reads: {} clients, {} cold + {} warm reads, Zipf s={}; {} probe keys; {} listeners, {} change(s) at {} Hz",
        spec.replicas,
        s.resources,
        s.resource_bytes,
        s.clients,
        s.requests.unwrap_or(0),
        s.requests.unwrap_or(0),
        s.zipf_s,
        spec.probe_keys,
        s.listeners,
        spec.changes,
        s.update_hz
    )
}

async fn run_mode(s: &Scenario, spec: &ClusterSpec, placement: &Placement, with_redis: bool) -> Result<ModeReport> {
    let redis = if with_redis { Some(SharedRedis::start(spec).await?) } else { None };
    // The probes read keys past the ones the load draws from.
    let mut up = s.clone();
    up.resources = s.resources + spec.probe_keys;
    let server =
        on_servers(resmux::sample::SampleHttp::start(Sample::new(sample_spec(&up, 0)), ([127, 0, 0, 1], 0).into()))
            .await
            .context("starting the sample upstream")?;
    let sample = server.sample.clone();
    let ups = vec![(upstream_name(0), server.url())];
    let mut replicas = Vec::new();
    let mut result = Ok(());
    for _ in 0..spec.replicas {
        let admin = match std::net::TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()) {
            Ok(a) => a,
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        let rs = replica_scenario(s, spec, admin, redis.as_ref());
        match Proxy::start(placement, &ups, &rs).await {
            Ok(proxy) => replicas.push(Replica { proxy, admin }),
            Err(e) => {
                result = Err(e.context("starting a replica"));
                break;
            }
        }
    }
    let report = match result {
        Ok(()) => measure(s, spec, &sample, &replicas, with_redis).await,
        Err(e) => Err(e),
    };
    for r in replicas {
        r.proxy.stop().await;
    }
    server.stop();
    if let Some(r) = redis {
        r.stop().await;
    }
    report
}

async fn measure(
    s: &Scenario,
    spec: &ClusterSpec,
    sample: &Sample,
    replicas: &[Replica],
    with_redis: bool,
) -> Result<ModeReport> {
    if with_redis {
        // Every replica's cluster tier reports Redis up before anything is measured.
        let deadline = Instant::now() + UP_DEADLINE;
        for r in replicas {
            while readiness(r.admin).await["redis"] != "up" {
                if Instant::now() >= deadline {
                    bail!("replica at {} never reported redis up in /readyz", r.proxy.addr);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let endpoints: Vec<SocketAddr> = replicas.iter().map(|r| r.proxy.addr).collect();
    let total = s.requests.unwrap_or(10_000);
    let mut seen = std::collections::HashSet::new();
    let cold = reads(s, &endpoints, sample, total, s.seed, &mut seen).await;
    let warm = reads(s, &endpoints, sample, total, s.seed.wrapping_add(1), &mut seen).await;
    let calls_on_a = |state: &serde_json::Value| state["redis_calls"].as_u64();
    let calls_before = if with_redis { calls_on_a(&readiness(replicas[0].admin).await) } else { None };
    let probes = probe(s, spec, &endpoints, sample).await;
    let mut after_reads = Vec::new();
    for r in replicas {
        after_reads.push(readiness(r.admin).await);
    }
    let listen = listeners(s, spec, &endpoints, sample).await;
    let mut after_listen = Vec::new();
    for r in replicas {
        after_listen.push(readiness(r.admin).await);
    }
    Ok(ModeReport {
        redis: with_redis,
        redis_cluster: with_redis && spec.redis_cluster,
        replicas: replicas.len(),
        cold,
        warm,
        probes,
        listen,
        probe_redis_calls: calls_before.zip(after_reads.first().and_then(calls_on_a)).map(|(b, a)| a.saturating_sub(b)),
        cluster_after_reads: after_reads,
        cluster_after_listen: after_listen,
        error: None,
    })
}
