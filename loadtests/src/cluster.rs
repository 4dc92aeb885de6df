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

/// The secret every replica shares (`proxy.cursor_secret`); a load test's, not a real one.
const SHARED_SECRET: &str = "resmux-load-cluster-shared-secret-0123456789";
/// How long Redis and the replicas' cluster tier get to come up.
const UP_DEADLINE: Duration = Duration::from_secs(20);
/// How long listeners get to connect and be acknowledged.
const LISTEN_DEADLINE: Duration = Duration::from_secs(60);

/// A `redis-server` of this run's own, on a free loopback port, with no persistence.
pub struct Redis {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Redis {
    /// Starts `redis-server` and waits until it answers `PING`.
    pub async fn start(bin: &Path) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("resmux-load-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        // The port is chosen by binding :0 and released for redis-server to take; a clash in
        // between shows as a failed start, never as a shared Redis.
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} (Debian package redis-server)", bin.display()))?;
        let mut redis = Self { port, child, dir };
        let deadline = Instant::now() + UP_DEADLINE;
        loop {
            if redis.ping().await {
                return Ok(redis);
            }
            if let Ok(Some(status)) = redis.child.try_wait() {
                bail!("redis-server exited during startup ({status})");
            }
            if Instant::now() >= deadline {
                redis.stop().await;
                bail!("redis-server did not answer PING on port {port} within {UP_DEADLINE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// An inline `PING` over RESP.
    async fn ping(&self) -> bool {
        let attempt = async {
            let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
            s.write_all(b"PING\r\n").await.ok()?;
            let mut buf = [0u8; 16];
            let n = s.read(&mut buf).await.ok()?;
            buf[..n].starts_with(b"+PONG").then_some(())
        };
        tokio::time::timeout(Duration::from_millis(500), attempt).await.ok().flatten().is_some()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One replica: the proxy and its admin address.
struct Replica {
    proxy: Proxy,
    admin: SocketAddr,
}

/// The replica config: the scenario's, plus an admin listener, the shared secret, and the
/// cluster table when there is a Redis.
fn replica_scenario(s: &Scenario, spec: &ClusterSpec, admin: SocketAddr, redis: Option<&str>) -> Scenario {
    let mut r = s.clone();
    let mut extra: toml::Table = toml::from_str(&format!(
        "[admin]\naddr = \"{admin}\"\n[proxy]\ncursor_secret = {{ value = \"{SHARED_SECRET}\" }}\n"
    ))
    .expect("static TOML");
    if let Some(url) = redis {
        let cluster: toml::Table =
            toml::from_str(&format!("redis_url = \"{url}\"\nlease_ttl = \"{}ms\"\n", spec.lease_ttl.0.as_millis()))
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
    pub replicas: usize,
    pub cold: ReadPhase,
    pub warm: ReadPhase,
    pub probes: Probes,
    pub listen: ListenPhase,
    /// Each replica's `/readyz` `cluster` object after the reads and probes.
    pub cluster_after_reads: Vec<serde_json::Value>,
    /// … and after the listeners.
    pub cluster_after_listen: Vec<serde_json::Value>,
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
    let redis = if with_redis { Some(Redis::start(&spec.redis_binary()).await?) } else { None };
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
        let rs = replica_scenario(s, spec, admin, redis.as_ref().map(Redis::url).as_deref());
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
        replicas: replicas.len(),
        cold,
        warm,
        probes,
        listen,
        cluster_after_reads: after_reads,
        cluster_after_listen: after_listen,
        error: None,
    })
}

fn item(key: usize) -> Op {
    Op::Read { uri: format!("{}://item/{key}", upstream_name(0)) }
}

/// `total` reads from `s.clients` closed-loop clients, read `n` of the batch on replica
/// `n % replicas`.
async fn reads(
    s: &Scenario,
    endpoints: &[SocketAddr],
    sample: &Sample,
    total: u64,
    seed: u64,
    seen: &mut std::collections::HashSet<usize>,
) -> ReadPhase {
    let before = sample.count(m::RESOURCES_READ);
    let tickets = Arc::new(AtomicU64::new(0));
    let zipf = Arc::new(Zipf::new(s.resources, s.zipf_s));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..s.clients {
        let tickets = tickets.clone();
        let zipf = zipf.clone();
        let endpoints = endpoints.to_vec();
        let auth = s.principals.authorization(&format!("client-{c}"));
        let timeout = s.request_timeout.0;
        tasks.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut conns: Vec<Option<Conn>> = endpoints.iter().map(|_| None).collect();
            let mut latency = Histogram::new();
            let mut cache = CacheCounts::default();
            let mut failures = std::collections::BTreeMap::new();
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut keys = std::collections::HashSet::new();
            loop {
                let n = tickets.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let ep = (n % endpoints.len() as u64) as usize;
                let key = zipf.sample(&mut rng);
                keys.insert(key);
                let op = item(key);
                if conns[ep].as_ref().is_none_or(Conn::is_closed) {
                    match Conn::open(endpoints[ep], CONNECT_TIMEOUT, auth.clone()).await {
                        Ok(conn) => conns[ep] = Some(conn),
                        Err(e) => {
                            errors += 1;
                            add_failure(&mut failures, "connect", &format!("{e:#}"));
                            continue;
                        }
                    }
                }
                let conn = conns[ep].as_mut().expect("connected above");
                let t0 = Instant::now();
                match tokio::time::timeout(timeout, conn.call(&op)).await {
                    Ok(Ok(answer)) => {
                        cache.add(answer.cache.as_ref());
                        match answer.outcome {
                            Outcome::Ok => {
                                ok += 1;
                                latency.record(t0.elapsed().as_nanos() as u64);
                            }
                            Outcome::Failed { kind, detail } => {
                                errors += 1;
                                add_failure(&mut failures, &kind, &detail);
                            }
                        }
                    }
                    Ok(Err(e)) => {
                        conns[ep] = None;
                        errors += 1;
                        add_failure(&mut failures, "connection", &format!("{e:#}"));
                    }
                    Err(_) => {
                        conns[ep] = None;
                        errors += 1;
                        add_failure(&mut failures, "timeout", &format!("no answer within {timeout:?}"));
                    }
                }
            }
            (ok, errors, latency, cache, failures, keys)
        });
    }
    let mut phase = ReadPhase::default();
    let mut latency = Histogram::new();
    while let Some(joined) = tasks.join_next().await {
        let Ok((ok, errors, h, cache, failures, keys)) = joined else { continue };
        for k in keys {
            if seen.insert(k) {
                phase.new_keys += 1;
            }
        }
        phase.reads += ok + errors;
        phase.errors += errors;
        latency.merge(&h);
        phase.cache.merge(&cache);
        for (k, f) in failures {
            let e = phase.failures.entry(k).or_default();
            if e.count == 0 {
                e.example = f.example;
            }
            e.count += f.count;
        }
    }
    phase.upstream_reads = sample.count(m::RESOURCES_READ).saturating_sub(before);
    phase.upstream_reads_per_10k = if phase.reads == 0 {
        0.0
    } else {
        (phase.upstream_reads as f64 * 10_000.0 / phase.reads as f64 * 10.0).round() / 10.0
    };
    phase.latency_ms = Latency::of(&latency);
    phase
}

/// The hit-path probes: see the module comment.
async fn probe(s: &Scenario, spec: &ClusterSpec, endpoints: &[SocketAddr], sample: &Sample) -> Probes {
    let mut p = Probes { keys: spec.probe_keys, ..Default::default() };
    let auth = s.principals.authorization("probe");
    let (Ok(mut a), Ok(mut b)) = (
        Conn::open(endpoints[0], CONNECT_TIMEOUT, auth.clone()).await,
        Conn::open(endpoints[1], CONNECT_TIMEOUT, auth).await,
    ) else {
        p.errors = spec.probe_keys as u64 * 3;
        return p;
    };
    let keys: Vec<usize> = (s.resources..s.resources + spec.probe_keys).collect();
    let mut hist = [Histogram::new(), Histogram::new(), Histogram::new()];
    let mut cache = [CacheCounts::default(); 3];
    for step in 0..3 {
        let before = sample.count(m::RESOURCES_READ);
        let conn = if step < 2 { &mut a } else { &mut b };
        for &k in &keys {
            let op = item(k);
            let t0 = Instant::now();
            match tokio::time::timeout(s.request_timeout.0, conn.call(&op)).await {
                Ok(Ok(answer)) if answer.outcome == Outcome::Ok => {
                    hist[step].record(t0.elapsed().as_nanos() as u64);
                    cache[step].add(answer.cache.as_ref());
                }
                _ => p.errors += 1,
            }
        }
        p.upstream_reads[step] = sample.count(m::RESOURCES_READ).saturating_sub(before);
    }
    p.upstream_fetch_ms = Latency::of(&hist[0]);
    p.local_hit_ms = Latency::of(&hist[1]);
    p.other_replica_ms = Latency::of(&hist[2]);
    [p.upstream_fetch_cache, p.local_hit_cache, p.other_replica_cache] = cache;
    p
}

/// The listeners: see the module comment.
async fn listeners(s: &Scenario, spec: &ClusterSpec, endpoints: &[SocketAddr], sample: &Sample) -> ListenPhase {
    if s.listeners == 0 {
        return ListenPhase::default();
    }
    let addressing = Addressing::replicas(endpoints.to_vec());
    let open_before = sample.listens_open();
    let total_before = sample.listens_total();
    let l = listen::open(s.listeners, &addressing, s.principals, LISTEN_DEADLINE, None, 1).await;
    tokio::time::sleep(spec.settle.0).await;
    let open = sample.listens_open();
    let opened = sample.listens_total();
    let period = Duration::from_secs_f64(1.0 / s.update_hz);
    // The changes start one period from now and run `changes` periods.
    let clock = Clock::starting_now(period, period * spec.changes as u32);
    l.measuring_from(&clock);
    let changes = if l.acked() > 0 { l.drive_changes(sample, s.update_hz, &clock).await } else { 0 };
    let stats = l.finish(changes, period, open).await;
    ListenPhase {
        listeners: stats.listeners,
        acked: stats.acked,
        refused: stats.refused,
        upstream_listens_open_before: open_before,
        upstream_listens_open: open,
        upstream_listens_total: opened,
        upstream_listens_opened_for_listeners: opened.saturating_sub(total_before),
        changes,
        delivered: stats.notifications,
        expected: changes * stats.acked,
        dropped: stats.dropped,
        notify_ms: Latency::of(&stats.latency),
        failures: stats.failures,
    }
}

/// The Markdown table of a cluster report.
pub fn markdown(r: &ClusterReport) -> String {
    let mut out = format!("### {}\n\n*Figure:* {}  \n*Load:* {}  \n*Front:* {}\n\n", r.name, r.figure, r.load, r.front);
    let label = |m: &ModeReport| if m.redis { "with Redis" } else { "without Redis" };
    let int = |n: u64| {
        let s = n.to_string();
        let mut o = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                o.push(',');
            }
            o.push(c);
        }
        o
    };
    for m in &r.modes {
        if let Some(e) = &m.error {
            out.push_str(&format!("- **{}** failed: {e}\n", label(m)));
        }
    }
    out.push_str("| mode | reads cold / warm | errors | upstream reads cold / warm | new keys cold / warm (the least possible) | per 10k reads cold / warm | cache hit/miss cold | read p50 / p99 ms cold | read p50 / p99 ms warm |\n|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
    for m in &r.modes {
        out.push_str(&format!(
            "| {} | {} / {} | {} | {} / {} | {} / {} | **{}** / **{}** | {}/{} | {:.3} / {:.3} | {:.3} / {:.3} |\n",
            label(m),
            int(m.cold.reads),
            int(m.warm.reads),
            m.cold.errors + m.warm.errors,
            int(m.cold.upstream_reads),
            int(m.warm.upstream_reads),
            int(m.cold.new_keys),
            int(m.warm.new_keys),
            m.cold.upstream_reads_per_10k,
            m.warm.upstream_reads_per_10k,
            m.cold.cache.hit,
            m.cold.cache.miss,
            m.cold.latency_ms.p50,
            m.cold.latency_ms.p99,
            m.warm.latency_ms.p50,
            m.warm.latency_ms.p99,
        ));
    }
    out.push_str("\n| mode | listeners (acked) | upstream listens open before → with listeners | opened for the listeners (ever) | changes | delivered / expected | notify p50 / p99 ms |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for m in &r.modes {
        let l = &m.listen;
        out.push_str(&format!(
            "| {} | {} ({}) | {} → **{}** | {} ({}) | {} | {} / {} | {:.3} / {:.3} |\n",
            label(m),
            int(l.listeners),
            int(l.acked),
            l.upstream_listens_open_before,
            l.upstream_listens_open,
            l.upstream_listens_opened_for_listeners,
            l.upstream_listens_total,
            l.changes,
            int(l.delivered),
            int(l.expected),
            l.notify_ms.p50,
            l.notify_ms.p99
        ));
    }
    out.push_str("\nHit path, one request at a time on cold keys (A = replica 0, B = replica 1):\n\n| mode | upstream fetch on A p50 / p99 ms | local hit on A p50 / p99 ms | first read on B p50 / p99 ms | B's cache header | upstream reads (A, A again, B) |\n|---|---:|---:|---:|---|---:|\n");
    for m in &r.modes {
        let p = &m.probes;
        let b = &p.other_replica_cache;
        out.push_str(&format!(
            "| {} | {:.3} / {:.3} | {:.3} / {:.3} | {:.3} / {:.3} ({}) | hit {} / miss {} | {}, {}, {} |\n",
            label(m),
            p.upstream_fetch_ms.p50,
            p.upstream_fetch_ms.p99,
            p.local_hit_ms.p50,
            p.local_hit_ms.p99,
            p.other_replica_ms.p50,
            p.other_replica_ms.p99,
            if m.redis { "L2 hit" } else { "upstream fetch" },
            b.hit,
            b.miss,
            p.upstream_reads[0],
            p.upstream_reads[1],
            p.upstream_reads[2],
        ));
    }
    out.push('\n');
    for m in r.modes.iter().filter(|m| m.redis) {
        let sum = |key: &str| m.cluster_after_reads.iter().map(|c| c[key].as_u64().unwrap_or(0)).sum::<u64>();
        let roles: Vec<String> = m
            .cluster_after_listen
            .iter()
            .map(|c| c["listen_roles"][upstream_name(0)].as_str().unwrap_or("?").to_owned())
            .collect();
        out.push_str(&format!(
            "- with Redis, summed over replicas after reads and probes: l2_hits {}, l2_misses {}, l2_fills {}, lock_waits {}; listen roles after the listeners: {}\n",
            sum("l2_hits"),
            sum("l2_misses"),
            sum("l2_fills"),
            sum("lock_waits"),
            roles.join(", ")
        ));
    }
    for m in &r.modes {
        for (k, f) in m.cold.failures.iter().chain(&m.warm.failures).chain(&m.listen.failures) {
            out.push_str(&format!("- {}: {k} × {} (e.g. {})\n", label(m), f.count, f.example));
        }
    }
    for n in &r.notes {
        out.push_str(&format!("- {n}\n"));
    }
    out
}

/// Writes `NAME.json` and `NAME.md`.
pub fn write_outputs(r: &ClusterReport, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = out.join(format!("{}.json", r.name));
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let md = out.join(format!("{}.md", r.name));
    std::fs::write(&md, markdown(r))?;
    Ok(vec![json, md])
}
