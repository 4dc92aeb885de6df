//! The run's schedule: discovery of each endpoint, its warm-up, then the measured rounds
//! (with `--compare`, A then B, then B then A, …, so both see the same machine within
//! seconds of each other), each with its listeners, trigger and progress line; then the
//! figures per endpoint and the ratios between them.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::watch;
use tokio::time::Instant;

use super::args::{BenchArgs, UserHeaders};
use super::counts::Phase;
use super::discover::{Workload, discover};
use super::endpoint::{Endpoint, Era, exchange};
use super::listeners::{self, ListenFigures, Listeners};
use super::load::{self, Live, Plan};
use super::output::{BenchReport, EndpointReport, Summary};
use crate::histogram::Histogram;
use crate::measure::Clock;
use crate::report::{Latency, curve, rates};

/// Workers by default: closed loop, and open loop (the most requests in flight at once).
const CLOSED_WORKERS: usize = 16;
const OPEN_WORKERS: usize = 64;

/// One endpoint's state over the run.
struct State {
    ep: Arc<Endpoint>,
    wl: Arc<Workload>,
    discovery: Phase,
    warmup: Phase,
    measured: Phase,
    elapsed: Duration,
    unsent: u64,
    listen: Option<ListenFigures>,
    trigger: Option<BTreeMap<u16, u64>>,
    notes: Vec<String>,
}

pub async fn run_all(
    args: &BenchArgs,
    headers: &UserHeaders,
    endpoints: Vec<Arc<Endpoint>>,
    trigger: Option<Arc<Endpoint>>,
    stop: watch::Receiver<bool>,
) -> Result<BenchReport> {
    let secrets = &headers.secrets;
    let mut states = Vec::new();
    for ep in endpoints {
        let mut discovery = Phase::default();
        let wl =
            discover(&ep, args, &mut discovery, secrets).await.with_context(|| format!("discovering {}", ep.url))?;
        let mut notes = wl.notes.clone();
        if args.listeners > 0 && wl.era != Era::Modern {
            notes.push("--listeners needs a 2026-07-28 server (subscriptions/listen); none were opened".into());
        }
        states.push(State {
            ep,
            wl: Arc::new(wl),
            discovery,
            warmup: Phase::default(),
            measured: Phase::default(),
            elapsed: Duration::ZERO,
            unsent: 0,
            listen: None,
            trigger: None,
            notes,
        });
    }
    let plan = Plan {
        mix: args.mix.clone(),
        zipf_s: args.zipf,
        rate: args.rate,
        workers: args.concurrency.unwrap_or(if args.rate.is_some() { OPEN_WORKERS } else { CLOSED_WORKERS }),
        timeout: args.timeout,
        cap: None,
        seed: args.seed,
    };
    let progress = !args.quiet;
    if !args.warmup.is_zero() {
        for st in &mut states {
            let live = Arc::new(Live::default());
            let ready =
                load::prepare(st.ep.clone(), st.wl.clone(), plan.clone(), secrets.clone(), live.clone(), stop.clone())
                    .await;
            // Measurement begins where the warm-up ends: all of this is warm-up.
            let clock = Clock::starting_now(args.warmup, Duration::ZERO);
            let ticker =
                progress.then(|| tokio::spawn(progress_line(format!("warm-up {}", st.ep.url), live.clone(), clock)));
            let s = ready.run(clock).await;
            if let Some(t) = ticker {
                t.abort();
            }
            st.warmup.merge(&s.warmup);
        }
    }
    let rounds = if states.len() > 1 { args.rounds } else { 1 };
    let segment = args.duration / rounds;
    for r in 0..rounds {
        let order: Vec<usize> =
            if r % 2 == 0 { (0..states.len()).collect() } else { (0..states.len()).rev().collect() };
        for i in order {
            if *stop.borrow() {
                break;
            }
            let st = &mut states[i];
            let mut plan = plan.clone();
            // The measured-request cap, split over the rounds.
            plan.cap = args.requests.map(|c| c / u64::from(rounds) + u64::from(r < (c % u64::from(rounds)) as u32));
            let label = if rounds > 1 { format!("round {}/{rounds} {}", r + 1, st.ep.url) } else { st.ep.url.clone() };
            run_segment(args, st, plan, segment, &label, secrets, progress, trigger.as_ref(), stop.clone()).await;
        }
    }
    let interrupted = *stop.borrow();
    Ok(report(args, headers, states, interrupted))
}

#[allow(clippy::too_many_arguments)]
async fn run_segment(
    args: &BenchArgs,
    st: &mut State,
    plan: Plan,
    segment: Duration,
    label: &str,
    secrets: &super::args::Secrets,
    progress: bool,
    trigger: Option<&Arc<Endpoint>>,
    stop: watch::Receiver<bool>,
) {
    let listening = (args.listeners > 0 && st.wl.era == Era::Modern)
        .then(|| listeners::open(st.ep.clone(), &st.wl.uris, args.listeners, args.timeout, secrets.clone()));
    let listening = match listening {
        Some(l) => Some(l.await),
        None => None,
    };
    let live = Arc::new(Live::default());
    let ready = load::prepare(st.ep.clone(), st.wl.clone(), plan, secrets.clone(), live.clone(), stop.clone()).await;
    let clock = Clock::starting_now(Duration::ZERO, segment);
    let ticker = progress.then(|| tokio::spawn(progress_line(label.to_owned(), live.clone(), clock)));
    let triggering = async {
        match trigger {
            Some(t) => {
                drive_trigger(t, (args.trigger_rate, args.timeout), clock, listening.as_ref(), stop.clone()).await
            }
            None => BTreeMap::new(),
        }
    };
    // Measured time ends with the load's last answer, not with the trigger's last POST.
    let load = async {
        let s = ready.run(clock).await;
        (s, Instant::now())
    };
    let ((s, done), triggered) = tokio::join!(load, triggering);
    if let Some(t) = ticker {
        t.abort();
        // The in-place line is left for the next output to follow.
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
    let mut measured = s.measured;
    // Rounds follow each other on the throughput timeline.
    let offset = (st.elapsed.as_millis() / 100) as usize;
    measured.timeline.splice(0..0, std::iter::repeat_n(0, offset));
    st.measured.merge(&measured);
    st.warmup.merge(&s.warmup);
    st.elapsed += done.saturating_duration_since(clock.measure);
    st.unsent += s.unsent_scheduled;
    if let Some(l) = listening {
        let (figures, phase) = l.finish().await;
        st.measured.merge(&phase);
        st.listen.get_or_insert_with(ListenFigures::default).merge(&figures);
    }
    if trigger.is_some() {
        let t = st.trigger.get_or_insert_with(BTreeMap::new);
        for (k, v) in triggered {
            *t.entry(k).or_default() += v;
        }
    }
}

/// POSTs `{}` to the trigger at `hz` through the segment; answers by status (0: none).
async fn drive_trigger(
    t: &Endpoint,
    (hz, timeout): (f64, Duration),
    clock: Clock,
    listeners: Option<&Listeners>,
    mut stop: watch::Receiver<bool>,
) -> BTreeMap<u16, u64> {
    let mut out = BTreeMap::new();
    let mut ticks = tokio::time::interval_at(clock.measure, Duration::from_secs_f64(1.0 / hz));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn = None;
    loop {
        tokio::select! {
            at = ticks.tick() => if at >= clock.end { break },
            _ = tokio::time::sleep_until(clock.end) => break,
            _ = stop.wait_for(|v| *v) => break,
        }
        if conn.is_none() {
            conn = t.connect().await.ok();
        }
        let Some(c) = conn.as_mut() else {
            *out.entry(0).or_default() += 1;
            continue;
        };
        if let Some(l) = listeners {
            l.triggered();
        }
        let (sent, _) = exchange(c, t.post_json("{}"), timeout).await;
        let status = match sent {
            super::counts::Sent::Answered(r) => r.status,
            _ => {
                conn = None;
                0
            }
        };
        *out.entry(status).or_default() += 1;
    }
    out
}

/// Prints req/s, p50/p99 and errors every second until aborted (in place on a terminal).
async fn progress_line(label: String, live: Arc<Live>, clock: Clock) {
    let tty = std::io::stderr().is_terminal();
    let mut ticks = tokio::time::interval_at(clock.start + Duration::from_secs(1), Duration::from_secs(1));
    let mut last = 0;
    loop {
        let at = ticks.tick().await;
        let sent = live.sent.load(Ordering::Relaxed);
        let h = live.recent.lock().map(|mut h| std::mem::take(&mut *h)).unwrap_or_default();
        let line = format!(
            "[{label}] {:>5.1}s {:>9.0} req/s  p50 {:.3} ms  p99 {:.3} ms  errors {}",
            at.saturating_duration_since(clock.start).as_secs_f64(),
            (sent - last) as f64,
            h.quantile(0.5) as f64 / 1e6,
            h.quantile(0.99) as f64 / 1e6,
            live.errors.load(Ordering::Relaxed)
        );
        last = sent;
        if tty { eprint!("\r{line}   ") } else { eprintln!("{line}") }
    }
}

fn summary(st: &State, rate: Option<f64>) -> Summary {
    let (requests, ok, errors) = st.measured.totals();
    let secs = st.elapsed.as_secs_f64();
    let attempts = requests + st.measured.not_sent;
    Summary {
        requests,
        ok,
        errors,
        error_rate: if attempts > 0 { (errors + st.measured.not_sent) as f64 / attempts as f64 } else { 0.0 },
        elapsed_s: (secs * 1000.0).round() / 1000.0,
        rps: if secs > 0.0 { (ok as f64 / secs).round() } else { 0.0 },
        mode: if rate.is_some() { "open" } else { "closed" },
        offered_rate: rate,
        unsent_scheduled: st.unsent,
        latency_ms: Latency::of(&st.measured.latency),
        service_ms: Latency::of(&st.measured.service),
    }
}

fn report(args: &BenchArgs, headers: &UserHeaders, states: Vec<State>, interrupted: bool) -> BenchReport {
    let mut endpoints = Vec::new();
    for mut st in states {
        let summary = summary(&st, args.rate);
        for p in [&mut st.discovery, &mut st.warmup, &mut st.measured] {
            p.finish();
        }
        let mut sent_by_method = BTreeMap::new();
        for p in [&st.discovery, &st.warmup, &st.measured] {
            for (m, c) in &p.methods {
                *sent_by_method.entry(*m).or_default() += c.sent;
            }
        }
        let latency: &Histogram = &st.measured.latency;
        endpoints.push(EndpointReport {
            url: headers.secrets.redact(&st.ep.url),
            protocol: st.wl.era.label(),
            http: st.ep.http_version(),
            server_info: st.wl.server_info.clone(),
            resources_listed: st.wl.listed,
            uris_in_workload: st.wl.uris.len(),
            list_pages: st.wl.pages,
            tool: st.wl.tool.clone(),
            sent_by_method,
            throughput: rates(&st.measured.timeline, summary.elapsed_s, Duration::ZERO),
            latency_curve: curve(latency),
            summary,
            listen: st.listen.map(|mut l| {
                l.finish();
                l
            }),
            trigger: st.trigger,
            discovery: st.discovery,
            warmup: st.warmup,
            measured: st.measured,
            notes: st.notes,
        });
    }
    let ratios = ratios(&endpoints);
    let error_rate = endpoints.iter().map(|e| e.summary.error_rate).fold(0.0, f64::max);
    let passed =
        args.max_error_rate.is_none_or(|max| error_rate <= max && endpoints.iter().all(|e| e.summary.requests > 0));
    BenchReport {
        tool: "resmux-load bench",
        version: env!("CARGO_PKG_VERSION"),
        started_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        settings: serde_json::json!({
            "url": headers.secrets.redact(&args.url),
            "compare": args.compare.as_deref().map(|u| headers.secrets.redact(u)),
            "rounds": args.rounds,
            "headers": headers.shown,
            "mode": if args.rate.is_some() { "open" } else { "closed" },
            "rate": args.rate,
            "concurrency": args.concurrency,
            "duration_s": args.duration.as_secs_f64(),
            "warmup_s": args.warmup.as_secs_f64(),
            "requests": args.requests,
            "mix": args.mix,
            "zipf": args.zipf,
            "tool": args.tool,
            "listeners": args.listeners,
            "trigger_url": args.trigger_url.as_deref().map(|u| headers.secrets.redact(u)),
            "trigger_rate": args.trigger_rate,
            "http": args.http,
            "timeout_s": args.timeout.as_secs_f64(),
            "seed": args.seed,
        }),
        interrupted,
        endpoints,
        ratios,
        error_rate,
        max_error_rate: args.max_error_rate,
        passed,
    }
}

/// Each figure of the second endpoint divided by the first's.
fn ratios(e: &[EndpointReport]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let [a, b] = e else { return out };
    let mut put = |k: String, x: f64, y: f64| {
        if x > 0.0 && y.is_finite() {
            out.insert(k, ((y / x) * 1000.0).round() / 1000.0);
        }
    };
    let (sa, sb) = (&a.summary, &b.summary);
    put("req/s".into(), sa.rps, sb.rps);
    for (name, x, y) in latency_pairs(&sa.latency_ms, &sb.latency_ms) {
        put(format!("latency {name}"), x, y);
    }
    put("service p50".into(), sa.service_ms.p50, sb.service_ms.p50);
    put("service p99".into(), sa.service_ms.p99, sb.service_ms.p99);
    put("error rate".into(), sa.error_rate, sb.error_rate);
    for (method, ma) in &a.measured.methods {
        if let Some(mb) = b.measured.methods.get(method) {
            put(format!("{method} p50"), ma.latency_ms.p50, mb.latency_ms.p50);
            put(format!("{method} p99"), ma.latency_ms.p99, mb.latency_ms.p99);
        }
    }
    if let (Some(la), Some(lb)) = (&a.listen, &b.listen) {
        put("listen ack p99".into(), la.ack_ms.p99, lb.ack_ms.p99);
        put("delivery p99".into(), la.delivery_ms.p99, lb.delivery_ms.p99);
    }
    out
}

fn latency_pairs(a: &Latency, b: &Latency) -> [(&'static str, f64, f64); 6] {
    [
        ("p50", a.p50, b.p50),
        ("p90", a.p90, b.p90),
        ("p99", a.p99, b.p99),
        ("p99.9", a.p999, b.p999),
        ("max", a.max, b.max),
        ("mean", a.mean, b.mean),
    ]
}
