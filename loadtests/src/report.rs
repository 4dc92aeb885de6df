//! Results as data (the JSON summary) and as a Markdown table. Every figure of a side comes
//! from the same run as the other sides of its scenario, so the ratios compare like with like.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::histogram::Histogram;
use crate::listen::ListenStats;
use crate::procfs::Memory;
use crate::requests::{CacheCounts, Failure, RequestStats, TICK};
use crate::scenario::{Scenario, Side};
use crate::target::Kind;

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

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// `x` with three significant digits (`0.0000272`, `1.00`, `16.0`).
fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".into();
    }
    let decimals = (2.0 - x.abs().log10().floor()).clamp(0.0, 9.0) as usize;
    format!("{x:.decimals$}")
}

/// `n` rounded, with thousands separated by commas.
pub fn thousands(n: f64) -> String {
    let n = n.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// The Markdown section of one scenario.
pub fn markdown(s: &ScenarioReport) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### {}\n", s.name);
    let _ = writeln!(md, "*Figure:* {}  ", s.figure.trim());
    let _ = writeln!(md, "*Load:* {}\n", s.load);
    let any_requests = s.sides.iter().any(|r| r.requests > 0);
    if any_requests {
        let _ = writeln!(
            md,
            "| side | req/s | p50 ms | p90 ms | p99 ms | max ms | requests | errors | upstream req (per req) | cache hit/miss/stale/bypass | proxy RSS KiB (peak) | proxy CPU ms |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
        for r in &s.sides {
            let l = &r.latency_ms;
            let upstream = match (r.upstream_requests, r.upstream_per_request) {
                (Some(u), Some(p)) => format!("{} ({})", thousands(u as f64), significant(p)),
                (Some(u), None) => thousands(u as f64),
                _ => "–".into(),
            };
            let c = &r.cache;
            let cache = if c.hit + c.miss + c.stale + c.bypass + c.other == 0 {
                "–".to_owned()
            } else {
                format!("{}/{}/{}/{}", c.hit, c.miss, c.stale, c.bypass)
            };
            let rss = match (r.proxy_rss_kib, r.proxy_peak_rss_kib) {
                (Some(a), Some(b)) => format!("{} ({})", thousands(a as f64), thousands(b as f64)),
                _ => "–".into(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} | {} | {} |",
                r.side,
                thousands(r.rps),
                l.p50,
                l.p90,
                l.p99,
                l.max,
                thousands(r.requests as f64),
                thousands(r.errors as f64),
                upstream,
                cache,
                rss,
                opt(r.proxy_cpu_ms),
            );
        }
        md.push('\n');
    }
    let listening: Vec<&SideReport> = s.sides.iter().filter(|r| r.listen.is_some()).collect();
    if !listening.is_empty() {
        let _ = writeln!(
            md,
            "| side | listeners | connections | acked | refused | changes | delivered / expected | notify p50 ms | p99 ms | max ms | upstream listens | proxy RSS KiB (peak) | RSS per idle listener KiB |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in listening {
            let l = r.listen.as_ref().expect("filtered");
            let rss = match (r.proxy_rss_kib, r.proxy_peak_rss_kib) {
                (Some(a), Some(b)) => format!("{} ({})", thousands(a as f64), thousands(b as f64)),
                _ => "–".into(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} / {} | {:.3} | {:.3} | {:.3} | {} | {} | {} |",
                r.side,
                thousands(l.listeners as f64),
                thousands(l.connections as f64),
                thousands(l.acked as f64),
                thousands(l.refused as f64),
                l.changes,
                thousands(l.notifications as f64),
                thousands(l.expected as f64),
                l.latency_ms.p50,
                l.latency_ms.p99,
                l.latency_ms.max,
                thousands(l.upstream_listens as f64),
                rss,
                l.rss_per_listener_kib.map_or("–".into(), |k| format!("{k:.2}")),
            );
        }
        md.push('\n');
    }
    if !s.ratios.is_empty() {
        let parts: Vec<String> = s.ratios.iter().map(|(k, v)| format!("{k} **{v}**")).collect();
        let _ = writeln!(md, "Ratios (same run): {}\n", parts.join(", "));
    }
    let mut remarks = Vec::new();
    for r in &s.sides {
        for note in &r.notes {
            remarks.push(format!("- {}: {note}", r.side));
        }
        let failures = r.failures.iter().chain(r.listen.iter().flat_map(|l| l.failures.iter()));
        for (kind, f) in failures {
            remarks.push(format!(
                "- {}: {} × `{kind}` (e.g. {})",
                r.side,
                thousands(f.count as f64),
                f.example.replace('|', "\\|")
            ));
        }
    }
    if !remarks.is_empty() {
        let _ = writeln!(md, "{}\n", remarks.join("\n"));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second() {
        let zero = std::time::Duration::ZERO;
        // The fourth bucket holds answers that arrived after the 0.3 s span.
        let r = rates(&[10, 20, 30, 1], 0.3, zero);
        assert_eq!(r.len(), 3);
        assert!((r[0].1 - 100.0).abs() < 1e-9);
        assert!((r[2].1 - 300.0).abs() < 1e-9);
        let long = rates(&vec![5; 600], 60.0, zero);
        assert_eq!(long.len(), 60);
        assert!(long.iter().all(|(_, v)| (v - 50.0).abs() < 1e-9));
        // Ten 100 ms buckets at 1 s width make one point; a partial bucket counts its share.
        let wide = rates(&[1; 10], 1.0, std::time::Duration::from_secs(1));
        assert_eq!(wide, vec![(0.5, 10.0)]);
        // Events in the first half only: the second half of the span still counts.
        let early = rates(&[1; 5], 1.0, std::time::Duration::from_secs(1));
        assert_eq!(early, vec![(0.5, 5.0)]);
        // 100 whole ticks (the 2 ms after the end dropped), in pairs to stay within 60 points.
        let ten = rates(&[1; 101], 10.002, zero);
        assert_eq!(ten.len(), 50);
        assert!((ten[49].0 - 9.9).abs() < 1e-9 && (ten[49].1 - 10.0).abs() < 1e-9, "{:?}", ten[49]);
        let partial = rates(&[10, 5], 0.15, zero);
        assert!((partial[1].1 - 100.0).abs() < 1e-6, "{partial:?}");
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(0.0), "0");
        assert_eq!(significant(3.0 / 110_473.0), "0.0000272");
        assert_eq!(significant(1.0), "1.00");
        assert_eq!(significant(16.0), "16.0");
        assert_eq!(significant(0.0), "0");
    }

    #[test]
    fn curves_rise_to_the_max() {
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1_000_000);
        }
        let c = curve(&h);
        assert_eq!(c.len(), 81);
        assert!(c.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!((c.last().unwrap().1 - 1000.0).abs() < 10.0);
    }
}
