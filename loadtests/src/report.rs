//! Results as data (the JSON summary) and as a Markdown table. Every figure of a side comes
//! from the same run as the other sides of its scenario, so the ratios compare like with like.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::histogram::Histogram;
use crate::listen::ListenStats;
use crate::measure::{Failure, TICK};
use crate::procfs::Memory;
use crate::requests::{CacheCounts, RequestStats};
use crate::scenario::{Scenario, Side};
use crate::target::Kind;

mod markdown;
#[cfg(test)]
mod tests;

pub use markdown::{markdown, thousands};

/// The whole run: every scenario given on the command line.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub tool: &'static str,
    pub version: &'static str,
    /// Seconds since the Unix epoch when the run began.
    pub started_unix_s: u64,
    pub host: Host,
    pub scenarios: Vec<ScenarioReport>,
}

/// The machine, as far as it shapes the figures.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub cpus: usize,
    /// Where the proxy and the ceiling ran: `child processes` or `in-process`.
    pub placement: String,
    pub note: String,
}

/// One scenario: its settings, each side, and the ratios between sides.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub name: String,
    pub figure: String,
    pub load: String,
    pub settings: Scenario,
    pub sides: Vec<SideReport>,
    /// `proxy/ceiling rps`, `proxy/direct rps`, `proxy/direct p99`, …
    pub ratios: BTreeMap<String, f64>,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    pub fn of(h: &Histogram) -> Self {
        let ms = |ns: u64| (ns as f64 / 1e6 * 1000.0).round() / 1000.0;
        Self {
            p50: ms(h.quantile(0.50)),
            p90: ms(h.quantile(0.90)),
            p99: ms(h.quantile(0.99)),
            p999: ms(h.quantile(0.999)),
            max: ms(h.max()),
            mean: (h.mean() / 1e6 * 1000.0).round() / 1000.0,
        }
    }
}

/// Figures of one request kind.
#[derive(Debug, Clone, Serialize)]
pub struct KindReport {
    pub requests: u64,
    pub errors: u64,
    pub latency_ms: Latency,
}

/// Figures of the listeners.
#[derive(Debug, Clone, Serialize)]
pub struct ListenReport {
    pub listeners: u64,
    /// Connections they opened: one each, or one per shared HTTP/2 connection.
    pub connections: u64,
    pub acked: u64,
    pub refused: u64,
    pub dropped: u64,
    pub changes: u64,
    pub notifications: u64,
    /// `changes × acked`: what complete delivery would be.
    pub expected: u64,
    pub unsolicited: u64,
    pub wrong_subscription: u64,
    /// Change-to-notification time.
    pub latency_ms: Latency,
    pub upstream_listens: u64,
    /// Proxy RSS before the listeners connected and with all of them open and idle (KiB),
    /// and the difference per open listener (KiB).
    pub proxy_rss_before_kib: Option<u64>,
    pub proxy_rss_idle_kib: Option<u64>,
    pub rss_per_listener_kib: Option<f64>,
    pub failures: BTreeMap<String, Failure>,
    /// Notifications per second over time: `[seconds since start, per second]`.
    pub throughput: Vec<(f64, f64)>,
    /// `[quantile, ms]` points of the latency distribution, for plots.
    pub latency_curve: Vec<(f64, f64)>,
}

/// One side of a scenario.
#[derive(Debug, Clone, Serialize)]
pub struct SideReport {
    pub side: Side,
    /// Measured requests, successful or not.
    pub requests: u64,
    pub errors: u64,
    /// Measured time: to the last answer when a cap ended the run early.
    pub elapsed_s: f64,
    /// Successful answers per second.
    pub rps: f64,
    /// Latency of successful answers.
    pub latency_ms: Latency,
    pub by_method: BTreeMap<&'static str, KindReport>,
    pub failures: BTreeMap<String, Failure>,
    /// `resmux-cache` header values seen.
    pub cache: CacheCounts,
    /// Requests the sample upstreams received while measuring (none for the ceiling).
    pub upstream_requests: Option<u64>,
    pub upstream_by_method: BTreeMap<&'static str, u64>,
    /// Upstream requests per downstream request.
    pub upstream_per_request: Option<f64>,
    /// Proxy memory after the load (child process only).
    pub proxy_rss_kib: Option<u64>,
    /// Proxy peak memory (`VmHWM`).
    pub proxy_peak_rss_kib: Option<u64>,
    /// Proxy CPU time while measuring.
    pub proxy_cpu_ms: Option<u64>,
    /// This process's CPU time while measuring: clients plus in-process upstreams (and the
    /// proxy when it runs in-process).
    pub loadgen_cpu_ms: Option<u64>,
    pub listen: Option<ListenReport>,
    /// Successful answers per second over time: `[seconds since start, per second]`.
    pub throughput: Vec<(f64, f64)>,
    /// `[quantile, ms]` points of the latency distribution, for plots.
    pub latency_curve: Vec<(f64, f64)>,
    /// Anything that qualifies the figures (caps applied, failures to start).
    pub notes: Vec<String>,
}

/// Quantiles at which distributions are sampled for plots: evenly spaced in "nines"
/// (x = -log10(1 - q)) from 0 to 99.99 %.
pub fn curve(h: &Histogram) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=80)
        .map(|i| {
            let nines = f64::from(i) * 0.05;
            let q = 1.0 - 10f64.powf(-nines);
            (q, h.quantile(q) as f64 / 1e6)
        })
        .collect()
}

/// Per-second rates from per-[`TICK`] counts over the measured `span` (seconds): at most
/// ~60 points, each at least `min_width` wide (a notification rate sampled finer than its
/// update period only shows the period). Answers that arrived after the span (requests in
/// flight at the end) are left out rather than drawn as a collapse to zero.
pub fn rates(timeline: &[u64], span: f64, min_width: std::time::Duration) -> Vec<(f64, f64)> {
    let tick = TICK.as_secs_f64();
    // Quiet buckets at the end leave the timeline short of the span: they count as zeros.
    let mut timeline = timeline.to_vec();
    // A remainder under a fifth of a tick (answers just after the end, float error in
    // 10.0 / 0.1) is not worth a point of its own.
    timeline.resize((span / tick - 0.2).ceil().max(0.0) as usize, 0);
    let by_width = (min_width.as_secs_f64() / tick).ceil() as usize;
    let group = timeline.len().div_ceil(60).max(by_width).max(1);
    timeline
        .chunks(group)
        .enumerate()
        .map(|(i, c)| {
            let n: u64 = c.iter().sum();
            let from = i as f64 * group as f64 * tick;
            // The last chunk may cover less time than the others.
            let secs = (c.len() as f64 * tick).min(span - from).max(1e-9);
            (from + secs / 2.0, n as f64 / secs)
        })
        .collect()
}

/// Inputs of one side's report besides the load's own figures.
pub struct SideExtras {
    pub elapsed_s: f64,
    pub upstream_requests: Option<u64>,
    pub upstream_by_method: BTreeMap<&'static str, u64>,
    pub proxy_memory: Option<Memory>,
    pub proxy_cpu_ms: Option<u64>,
    pub loadgen_cpu_ms: Option<u64>,
    pub notes: Vec<String>,
}

impl SideReport {
    pub fn build(side: Side, req: &RequestStats, listen: Option<&ListenStats>, x: SideExtras) -> Self {
        let requests = req.requests();
        let rps = if x.elapsed_s > 0.0 { req.ok as f64 / x.elapsed_s } else { 0.0 };
        let by_method = Kind::ALL
            .iter()
            .zip(&req.by_kind)
            .filter(|(_, k)| k.latency.len() + k.errors > 0)
            .map(|(kind, k)| {
                (
                    kind.method(),
                    KindReport {
                        requests: k.latency.len() + k.errors,
                        errors: k.errors,
                        latency_ms: Latency::of(&k.latency),
                    },
                )
            })
            .collect();
        let mut notes = x.notes;
        let listen = listen.map(|l| {
            let expected = l.changes * l.acked;
            if l.slow > 0 {
                notes.push(format!(
                    "{} listener(s) stopped reading once acknowledged (slow clients); the figures are the other {}'s",
                    l.slow, l.acked
                ));
            }
            if !l.latency.is_empty() && l.latency.max() as u128 > l.period.as_nanos() {
                notes.push(format!(
                    "some notifications took longer than the update period ({:?}): their latency may be attributed to a later change",
                    l.period
                ));
            }
            ListenReport {
                listeners: l.listeners,
                connections: l.connections,
                acked: l.acked,
                refused: l.refused,
                dropped: l.dropped,
                changes: l.changes,
                notifications: l.notifications,
                expected,
                unsolicited: l.unsolicited,
                wrong_subscription: l.wrong_subscription,
                latency_ms: Latency::of(&l.latency),
                upstream_listens: l.upstream_listens,
                proxy_rss_before_kib: l.proxy_rss_before_kib,
                proxy_rss_idle_kib: l.proxy_rss_idle_kib,
                rss_per_listener_kib: l
                    .proxy_rss_before_kib
                    .zip(l.proxy_rss_idle_kib)
                    .filter(|_| l.acked + l.slow > 0)
                    .map(|(b, i)| ((i.saturating_sub(b) as f64 / (l.acked + l.slow) as f64) * 100.0).round() / 100.0),
                failures: l.failures.clone(),
                throughput: rates(&l.timeline, x.elapsed_s, l.period.max(std::time::Duration::from_secs(1))),
                latency_curve: curve(&l.latency),
            }
        });
        if req.clients_unconnected > 0 {
            notes.push(format!("{} client(s) could not connect before the start", req.clients_unconnected));
        }
        Self {
            side,
            requests,
            errors: req.errors,
            elapsed_s: (x.elapsed_s * 1000.0).round() / 1000.0,
            rps: rps.round(),
            latency_ms: Latency::of(&req.latency),
            by_method,
            failures: req.failures.clone(),
            cache: req.cache,
            upstream_requests: x.upstream_requests,
            upstream_per_request: x.upstream_requests.filter(|_| requests > 0).map(|u| u as f64 / requests as f64),
            upstream_by_method: x.upstream_by_method,
            proxy_rss_kib: x.proxy_memory.map(|m| m.rss_kib),
            proxy_peak_rss_kib: x.proxy_memory.map(|m| m.hwm_kib),
            proxy_cpu_ms: x.proxy_cpu_ms,
            loadgen_cpu_ms: x.loadgen_cpu_ms,
            listen,
            throughput: rates(&req.timeline, x.elapsed_s, std::time::Duration::ZERO),
            latency_curve: curve(&req.latency),
            notes,
        }
    }

    /// A side that could not run.
    pub fn failed(side: Side, error: &anyhow::Error) -> Self {
        let mut r = Self::build(
            side,
            &RequestStats::default(),
            None,
            SideExtras {
                elapsed_s: 0.0,
                upstream_requests: None,
                upstream_by_method: BTreeMap::new(),
                proxy_memory: None,
                proxy_cpu_ms: None,
                loadgen_cpu_ms: None,
                notes: Vec::new(),
            },
        );
        r.notes.push(format!("side did not run: {error:#}"));
        r
    }
}

/// Ratios between the sides of one run.
pub fn ratios(sides: &[SideReport]) -> BTreeMap<String, f64> {
    let get = |s: Side| sides.iter().find(|r| r.side == s && r.rps > 0.0);
    let mut out = BTreeMap::new();
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    for (a, b) in [(Side::Proxy, Side::Ceiling), (Side::Proxy, Side::Direct), (Side::Direct, Side::Ceiling)] {
        if let (Some(x), Some(y)) = (get(a), get(b)) {
            out.insert(format!("{a}/{b} rps"), round(x.rps / y.rps));
            if y.latency_ms.p50 > 0.0 {
                out.insert(format!("{a}/{b} p50"), round(x.latency_ms.p50 / y.latency_ms.p50));
            }
            if y.latency_ms.p99 > 0.0 {
                out.insert(format!("{a}/{b} p99"), round(x.latency_ms.p99 / y.latency_ms.p99));
            }
        }
    }
    out
}
