//! One scenario's report as Markdown: the tables `loadtests/results/` holds.

use std::fmt::Write as _;

use super::{ScenarioReport, SideReport};

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// `x` with three significant digits (`0.0000272`, `1.00`, `16.0`).
pub(super) fn significant(x: f64) -> String {
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
