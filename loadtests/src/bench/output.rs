//! The bench's report: the JSON (every count, per endpoint, phase and method), a Markdown
//! summary, the SVG plots (`run`'s latency and throughput charts) and one self-contained HTML
//! page holding the tables and the plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::counts::Phase;
use super::listeners::ListenFigures;
use crate::plot::{self, SweepLine};
use crate::report::{Latency, thousands};

/// The whole bench run.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub tool: &'static str,
    pub version: &'static str,
    pub started_unix_s: u64,
    pub settings: serde_json::Value,
    /// The run was stopped (SIGINT) before its end: the figures are partial.
    pub interrupted: bool,
    pub endpoints: Vec<EndpointReport>,
    /// With --compare: each figure of the second endpoint divided by the first's.
    pub ratios: BTreeMap<String, f64>,
    /// The measured error rate of the worst endpoint, and whether --max-error-rate passed.
    pub error_rate: f64,
    pub max_error_rate: Option<f64>,
    pub passed: bool,
}

/// One endpoint's figures.
#[derive(Debug, Serialize)]
pub struct EndpointReport {
    pub url: String,
    /// `2026-07-28`, or the legacy version negotiated.
    pub protocol: String,
    /// `HTTP/1.1` or `HTTP/2`, as the connections settled.
    pub http: Option<&'static str>,
    pub server_info: Option<serde_json::Value>,
    pub resources_listed: u64,
    pub uris_in_workload: usize,
    pub list_pages: u64,
    pub tool: Option<String>,
    /// Requests sent per method over every phase: what the server's own counters should show.
    pub sent_by_method: BTreeMap<&'static str, u64>,
    pub discovery: Phase,
    pub warmup: Phase,
    pub measured: Phase,
    pub summary: Summary,
    pub listen: Option<ListenFigures>,
    /// Trigger POSTs sent and their answers by HTTP status (`0`: no answer).
    pub trigger: Option<BTreeMap<u16, u64>>,
    /// Successful answers per second over measured time.
    pub throughput: Vec<(f64, f64)>,
    /// `[quantile, ms]` points, for plots.
    pub latency_curve: Vec<(f64, f64)>,
    pub notes: Vec<String>,
}

/// The measured phase in a few figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub error_rate: f64,
    /// Measured time: from the start of measurement to the last answer, over every round.
    pub elapsed_s: f64,
    /// Successful answers per second.
    pub rps: f64,
    /// `closed` or `open`.
    pub mode: &'static str,
    /// Open loop: the schedule's rate.
    pub offered_rate: Option<f64>,
    /// Open loop: requests due before the end but not sent by then.
    pub unsent_scheduled: u64,
    /// From the intended send time (open loop) or the send (closed loop).
    pub latency_ms: Latency,
    /// From the actual send.
    pub service_ms: Latency,
}

/// The Markdown summary.
pub fn markdown(r: &BenchReport) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## resmux-load bench{}\n", if r.interrupted { " (interrupted: partial)" } else { "" });
    for e in &r.endpoints {
        let s = &e.summary;
        let server = e.server_info.as_ref().and_then(|v| v.get("name")).and_then(|v| v.as_str()).unwrap_or("?");
        let _ = writeln!(md, "### {}\n", e.url);
        let _ = writeln!(
            md,
            "Server `{server}`, protocol {} over {}; {} resources listed over {} page(s), {} in the workload{}.\n",
            e.protocol,
            e.http.unwrap_or("?"),
            e.resources_listed,
            e.list_pages,
            e.uris_in_workload,
            e.tool.as_ref().map_or(String::new(), |t| format!("; tool `{t}`"))
        );
        let sent: Vec<String> = e.sent_by_method.iter().map(|(m, n)| format!("{m} {n}")).collect();
        let _ = writeln!(
            md,
            "Requests sent over every phase (what the server's own counters should show): {}.\n",
            sent.join(", ")
        );
        let _ = writeln!(
            md,
            "| loop | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | service p99 ms | requests | errors | unsent |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let l = &s.latency_ms;
        let loop_ = s.offered_rate.map_or("closed".to_owned(), |r| format!("open, {} req/s", thousands(r)));
        let _ = writeln!(
            md,
            "| {loop_} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} |\n",
            thousands(s.rps),
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            s.service_ms.p99,
            thousands(s.requests as f64),
            thousands(s.errors as f64),
            s.unsent_scheduled
        );
        let _ = writeln!(
            md,
            "| method | phase | sent | ok | errors | by code | p50 ms | p99 ms | cache hit/miss/stale/bypass |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---|---:|---:|---|");
        for (name, phase) in [("discovery", &e.discovery), ("warmup", &e.warmup), ("measured", &e.measured)] {
            for (method, m) in &phase.methods {
                let mut codes: Vec<String> = m.rpc_errors.iter().map(|(c, n)| format!("rpc {c}: {n}")).collect();
                codes.extend(
                    m.http_status
                        .iter()
                        .filter(|(c, _)| !(200..300).contains(*c))
                        .map(|(c, n)| format!("http {c}: {n}")),
                );
                if m.rpc_errors_other > 0 {
                    codes.push(format!("rpc (other codes): {}", m.rpc_errors_other));
                }
                if m.timeouts > 0 {
                    codes.push(format!("timeout: {}", m.timeouts));
                }
                if m.broken > 0 {
                    codes.push(format!("connection: {}", m.broken));
                }
                let c = &m.cache;
                let cache = if c.hit + c.miss + c.stale + c.bypass == 0 {
                    "–".to_owned()
                } else {
                    format!("{}/{}/{}/{}", c.hit, c.miss, c.stale, c.bypass)
                };
                let _ = writeln!(
                    md,
                    "| {method} | {name} | {} | {} | {} | {} | {:.3} | {:.3} | {cache} |",
                    m.sent,
                    m.ok,
                    m.errors,
                    if codes.is_empty() { "–".into() } else { codes.join(", ") },
                    m.latency_ms.p50,
                    m.latency_ms.p99
                );
            }
        }
        md.push('\n');
        if let Some(l) = &e.listen {
            let _ = writeln!(
                md,
                "Listeners: {} opened, {} acknowledged (ack p50 {:.3} / p99 {:.3} ms), {} refused, {} notifications received{}.\n",
                l.listeners,
                l.acked,
                l.ack_ms.p50,
                l.ack_ms.p99,
                l.refused,
                l.notifications,
                if l.delivery_ms.max > 0.0 {
                    format!(
                        ", delivery p50 {:.3} / p99 {:.3} ms after the trigger",
                        l.delivery_ms.p50, l.delivery_ms.p99
                    )
                } else {
                    String::new()
                }
            );
        }
        if let Some(t) = &e.trigger {
            let parts: Vec<String> = t.iter().map(|(c, n)| format!("{c}: {n}")).collect();
            let _ = writeln!(md, "Trigger POSTs by status: {}\n", parts.join(", "));
        }
        let failures = [&e.discovery, &e.warmup, &e.measured].into_iter().flat_map(|p| p.failures.iter());
        for (kind, f) in failures {
            let _ = writeln!(md, "- {} × `{kind}` (e.g. {})", f.count, f.example.replace('|', "\\|"));
        }
        for n in &e.notes {
            let _ = writeln!(md, "- {n}");
        }
        md.push('\n');
    }
    if !r.ratios.is_empty() {
        let _ = writeln!(md, "### Ratios (compare / base, same run, interleaved rounds)\n");
        let _ = writeln!(md, "| figure | ratio |\n|---|---:|");
        for (k, v) in &r.ratios {
            let _ = writeln!(md, "| {k} | {v:.3} |");
        }
        md.push('\n');
    }
    if let Some(max) = r.max_error_rate {
        let verdict = if r.passed { "pass" } else { "FAIL" };
        let _ = writeln!(md, "Error rate {:.4} against --max-error-rate {max}: **{verdict}**\n", r.error_rate);
    }
    md
}

/// Writes bench.json, bench.md, the plots and bench.html into `out`; returns the paths.
pub fn write(r: &BenchReport, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
    let json = out.join("bench.json");
    std::fs::write(&json, serde_json::to_string_pretty(r)?).with_context(|| format!("writing {}", json.display()))?;
    written.push(json);
    let md_text = markdown(r);
    let md = out.join("bench.md");
    std::fs::write(&md, &md_text)?;
    written.push(md);
    let label = |i: usize, e: &EndpointReport| format!("{} {}", if i == 0 { "A" } else { "B" }, e.url);
    let lat = out.join("bench-latency.svg");
    let lines = r.endpoints.iter().enumerate().filter(|(_, e)| !e.latency_curve.is_empty());
    let lines = lines.map(|(i, e)| SweepLine { label: label(i, e), points: e.latency_curve.clone() }).collect();
    let mut svgs = Vec::new();
    if plot::latency_lines("latency distribution (from the intended send time)", lines, &lat)? {
        svgs.push(lat.clone());
        written.push(lat);
    }
    let tp = out.join("bench-throughput.svg");
    let lines: Vec<SweepLine> = r
        .endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.throughput.is_empty())
        .map(|(i, e)| SweepLine { label: label(i, e), points: e.throughput.clone() })
        .collect();
    if !lines.is_empty() {
        plot::sweep("successful answers per second", "seconds of measurement", "per second", false, lines, &tp)?;
        svgs.push(tp.clone());
        written.push(tp);
    }
    let html = out.join("bench.html");
    std::fs::write(&html, html_page(&md_text, &svgs)?)?;
    written.push(html);
    Ok(written)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One page with no outside references: the Markdown's tables as HTML tables, the rest as
/// paragraphs, and the SVGs inlined.
fn html_page(md: &str, svgs: &[PathBuf]) -> Result<String> {
    let mut body = String::new();
    let mut in_table = false;
    for line in md.lines() {
        let t = line.trim();
        if t.starts_with('|') {
            if t.starts_with("|---") {
                continue;
            }
            let cells: Vec<&str> = t.trim_matches('|').split(" | ").map(str::trim).collect();
            let tag = if in_table { "td" } else { "th" };
            if !in_table {
                body.push_str("<table>");
                in_table = true;
            }
            body.push_str("<tr>");
            for c in cells {
                let _ = write!(body, "<{tag}>{}</{tag}>", escape(c).replace("**", ""));
            }
            body.push_str("</tr>");
            continue;
        }
        if in_table {
            body.push_str("</table>");
            in_table = false;
        }
        if let Some(h) = t.strip_prefix("### ") {
            let _ = write!(body, "<h3>{}</h3>", escape(h));
        } else if let Some(h) = t.strip_prefix("## ") {
            let _ = write!(body, "<h2>{}</h2>", escape(h));
        } else if !t.is_empty() {
            let _ = write!(body, "<p>{}</p>", escape(t).replace("**", ""));
        }
    }
    if in_table {
        body.push_str("</table>");
    }
    for svg in svgs {
        let text = std::fs::read_to_string(svg).with_context(|| format!("reading {}", svg.display()))?;
        let _ = write!(body, "<figure>{text}</figure>");
    }
    Ok(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>resmux-load bench</title><style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}th{{background:#eee}}svg{{max-width:100%;height:auto}}</style></head><body>{body}</body></html>\n"
    ))
}
