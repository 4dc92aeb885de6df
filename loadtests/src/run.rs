//! Running a scenario: each side in turn on fresh upstreams (and a fresh proxy), listeners
//! first (opened and acknowledged), then clients (connected), then everything starts on one
//! clock; upstream counters and proxy CPU are read when measurement begins and ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::listen::{self, ListenStats};
use crate::measure::Clock;
use crate::placement::Placement;
use crate::procfs;
use crate::report::{self, Host, RunReport, ScenarioReport, SideExtras, SideReport};
use crate::requests::{self, RequestPlan, RequestStats};
use crate::scenario::{Scenario, Side};
use crate::target::Target;
use crate::zipf::Zipf;

/// Sockets this process keeps besides the load's own (runtime, files, upstream pools).
const FD_MARGIN: u64 = 512;
/// How long clients and listeners get to connect before the start; listeners get one more
/// millisecond each past the first 60,000.
const SETUP_DEADLINE: Duration = Duration::from_secs(60);

/// How to run scenarios.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub placement: Placement,
    /// Replaces every scenario's `duration`.
    pub duration: Option<Duration>,
    /// Replaces every scenario's `sides`.
    pub sides: Option<Vec<Side>>,
}

/// Runs one scenario, every side, and computes the ratios between sides.
pub async fn run_scenario(s: &Scenario, opts: &RunOptions) -> ScenarioReport {
    let mut s = s.clone();
    if let Some(d) = opts.duration {
        s.duration.0 = d;
    }
    if let Some(sides) = &opts.sides {
        s.sides = sides.clone();
    }
    let mut sides = Vec::new();
    for &side in &s.sides {
        eprintln!("resmux-load: {} / {side} …", s.name);
        let report = match run_side(&s, side, &opts.placement).await {
            Ok(r) => r,
            Err(e) => SideReport::failed(side, &e),
        };
        sides.push(report);
    }
    ScenarioReport {
        name: s.name.clone(),
        figure: s.figure.trim().to_owned(),
        load: s.load_line(),
        ratios: report::ratios(&sides),
        settings: s,
        sides,
    }
}

/// Runs one side.
pub async fn run_side(s: &Scenario, side: Side, placement: &Placement) -> Result<SideReport> {
    let target = Target::start(s, side, placement).await.with_context(|| format!("starting the {side} side"))?;
    let result = drive(s, &target).await;
    target.stop().await;
    result
}

/// Listeners this side can hold within the open-file limit, and a note when it is fewer than
/// asked for: every connection is a socket here, and a second one when the server end lives
/// in this process too.
fn listener_budget(s: &Scenario, target: &Target) -> (usize, Option<String>) {
    let Some(limit) = procfs::open_file_limit() else {
        return (s.listeners, None);
    };
    let per_connection = if target.serves_in_process() { 2 } else { 1 };
    let client_sockets = (s.clients * target.addressing.endpoints.len()) as u64 * per_connection;
    // Listeners sharing HTTP/2 connections need a socket per connection (and per endpoint).
    let streams = s.listen_streams_per_connection as u64;
    let room = limit
        .saturating_sub(FD_MARGIN + client_sockets + per_connection * target.addressing.endpoints.len() as u64)
        / per_connection
        * streams;
    if (s.listeners as u64) <= room {
        return (s.listeners, None);
    }
    let n = room as usize;
    (
        n,
        Some(format!(
            "listeners capped from {} to {n} by the open-file limit ({limit}): each connection ({streams} listener(s)) costs {per_connection} descriptor(s) in this process on the {} side",
            s.listeners, target.side
        )),
    )
}

async fn drive(s: &Scenario, target: &Target) -> Result<SideReport> {
    let mut notes = Vec::new();
    let mut listeners = None;
    if s.listeners > 0 {
        let (n, note) = listener_budget(s, target);
        notes.extend(note);
        let slow_every = (s.slow_listeners > 0.0).then(|| (1.0 / s.slow_listeners).round().max(1.0) as usize);
        let before = target.proxy.as_ref().and_then(|p| p.memory());
        let mut l = listen::open(
            n,
            &target.addressing,
            s.principals,
            SETUP_DEADLINE.max(Duration::from_millis(n as u64)),
            slow_every,
            s.listen_streams_per_connection,
        )
        .await;
        // Every listener acknowledged and idle (no change made yet): what they cost.
        l.proxy_memory(before, target.proxy.as_ref().and_then(|p| p.memory()));
        listeners = Some(l);
    }
    // Upstream listen streams once every listener has settled: the fan-out figure.
    let upstream_listens: u64 = target.samples.iter().map(|x| x.listens_open()).sum();

    let plan = Arc::new(RequestPlan {
        clients: s.clients,
        cap: s.requests,
        per_client: s.requests_per_client,
        timeout: s.request_timeout.0,
        mix: s.mix.clone(),
        zipf: Zipf::new(s.keys(), s.zipf_s),
        seed: s.seed,
        principals: s.principals,
    });
    let prepared = requests::prepare(plan, target.addressing.clone(), SETUP_DEADLINE).await;

    let clock = Clock::starting_now(s.warmup.0, s.duration.0);
    if let Some(l) = &listeners {
        l.measuring_from(&clock);
    }
    // Without warmup, measurement begins with the first request: read the counters before
    // any client is released.
    let at_start = s.warmup.0.is_zero().then(|| Snapshot::take(target));
    let changes = async {
        match (&listeners, target.samples.first()) {
            (Some(l), Some(sample)) if l.acked() > 0 => l.drive_changes(sample, s.update_hz, &clock).await,
            _ => 0,
        }
    };
    let before = async {
        match at_start {
            Some(snapshot) => snapshot,
            None => {
                tokio::time::sleep_until(clock.measure).await;
                Snapshot::take(target)
            }
        }
    };
    // Clients end by themselves (time, caps); changes run for the whole duration.
    let grace = s.request_timeout.0 + Duration::from_secs(5);
    let (req, changes, before) = tokio::join!(prepared.run(clock, grace), changes, before);
    let after = Snapshot::take(target);
    let memory = target.proxy.as_ref().and_then(|p| p.memory());

    let listen_stats: Option<ListenStats> = match listeners {
        Some(l) => Some(l.finish(changes, Duration::from_secs_f64(1.0 / s.update_hz), upstream_listens).await),
        None => None,
    };

    let elapsed_s = elapsed(&req, s, &clock);
    let upstream = (side_has_upstreams(target)).then(|| after.upstream.saturating_sub(before.upstream));
    let by_method: BTreeMap<&'static str, u64> = if side_has_upstreams(target) {
        after
            .by_method
            .iter()
            .zip(&before.by_method)
            .map(|((m, a), (_, b))| (*m, a.saturating_sub(*b)))
            .filter(|(_, n)| *n > 0)
            .collect()
    } else {
        BTreeMap::new()
    };
    Ok(SideReport::build(
        target.side,
        &req,
        listen_stats.as_ref(),
        SideExtras {
            elapsed_s,
            upstream_requests: upstream,
            upstream_by_method: by_method,
            proxy_memory: memory,
            proxy_cpu_ms: after.proxy_cpu.zip(before.proxy_cpu).map(|(a, b)| a.saturating_sub(b)),
            loadgen_cpu_ms: after.own_cpu.zip(before.own_cpu).map(|(a, b)| a.saturating_sub(b)),
            notes,
        },
    ))
}

fn side_has_upstreams(target: &Target) -> bool {
    !target.samples.is_empty()
}

/// Seconds of measurement: up to the last answer when a cap ended the load early, else the
/// configured duration (or longer, when answers kept arriving after it).
fn elapsed(req: &RequestStats, s: &Scenario, clock: &Clock) -> f64 {
    let configured = (clock.end - clock.measure).as_secs_f64();
    match req.last_done {
        Some(d) if s.requests.is_some() || s.requests_per_client.is_some() => d.as_secs_f64().max(1e-6),
        Some(d) => d.as_secs_f64().max(configured),
        None => configured,
    }
}

/// Counters read at the start and end of measurement.
struct Snapshot {
    upstream: u64,
    by_method: Vec<(&'static str, u64)>,
    proxy_cpu: Option<u64>,
    own_cpu: Option<u64>,
}

impl Snapshot {
    fn take(target: &Target) -> Self {
        Self {
            upstream: target.upstream_total(),
            by_method: target.upstream_by_method(),
            proxy_cpu: target.proxy.as_ref().and_then(|p| p.cpu_ms()),
            own_cpu: procfs::cpu_ms("self"),
        }
    }
}

/// Files written for one scenario.
pub fn write_outputs(r: &ScenarioReport, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
    let json = out.join(format!("{}.json", r.name));
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    written.push(json);
    let md = out.join(format!("{}.md", r.name));
    std::fs::write(&md, report::markdown(r))?;
    written.push(md);
    let lat = out.join(format!("{}-latency.svg", r.name));
    if crate::plot::latency(r, &lat)? {
        written.push(lat);
    }
    let tp = out.join(format!("{}-throughput.svg", r.name));
    if crate::plot::throughput(r, &tp)? {
        written.push(tp);
    }
    Ok(written)
}

/// The report of a whole run.
pub fn run_report(scenarios: Vec<ScenarioReport>, placement: &Placement) -> RunReport {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    RunReport {
        tool: "resmux-load",
        version: env!("CARGO_PKG_VERSION"),
        started_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        host: Host {
            cpus,
            placement: placement.label().into(),
            note: format!(
                "load generator, in-process upstreams and proxy share these {cpus} CPU(s); figures are relative to each other, not absolute capacity"
            ),
        },
        scenarios,
    }
}
