//! Plots of sweeps over several runs (`resmux-load plot`): latency against offered rate from
//! `loadtests/external/run oha` with several rates, and proxy RSS and delivery latency
//! against listeners from fanout runs at several listener counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::plot::{self, SweepLine};

fn read(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// p50 and p99 (the median over rounds) against offered rate, per side, from the JSON of
/// `loadtests/external/run oha`; returns the Markdown table of the points.
pub fn rates(json: &Path, out: &Path) -> Result<String> {
    let run = read(json)?;
    let rows = run["rows"].as_array().context("no rows: not the JSON of `external/run oha`")?;
    // (side, percentile) → rate → values over rounds.
    let mut by: BTreeMap<(String, &str), BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for row in rows {
        let (Some(side), Some(rate)) = (row["side"].as_str(), row["rate"].as_u64()) else {
            bail!("a row without side or rate: {row}")
        };
        for q in ["p50_ms", "p99_ms"] {
            let v = row[q].as_f64().with_context(|| format!("a row without {q}"))?;
            by.entry((side.to_owned(), q)).or_default().entry(rate).or_default().push(v);
        }
    }
    let mut lines = Vec::new();
    let mut md =
        String::from("| side | percentile | offered req/s | latency ms (median of rounds) |\n|---|---|---:|---:|\n");
    for ((side, q), points) in by {
        let q = q.trim_end_matches("_ms");
        let points: Vec<(f64, f64)> = points.into_iter().map(|(rate, v)| (rate as f64, median(v))).collect();
        for (rate, ms) in &points {
            md.push_str(&format!("| {side} | {q} | {rate:.0} | {ms:.3} |\n"));
        }
        lines.push(SweepLine { label: format!("{side} {q}"), points });
    }
    plot::sweep(
        "hot cached read, open loop (oha): latency against offered rate",
        "offered rate (req/s)",
        "latency (ms, log scale)",
        true,
        lines,
        out,
    )?;
    Ok(md)
}

/// One fanout run: acknowledged listeners, proxy RSS per idle listener (KiB) and idle (MiB),
/// delivery p99, notifications delivered and expected.
struct ListenPoint {
    listeners: f64,
    kib_each: f64,
    rss_mib: f64,
    p99_ms: f64,
    delivered: u64,
    expected: u64,
}

/// Proxy RSS per idle listener and notification delivery p99 against listeners, one line per
/// label, from fanout scenario results (`LABEL=FILE.json`); writes `PREFIX-rss.svg` and
/// `PREFIX-delivery.svg` and returns the Markdown table of the points.
pub fn listeners(prefix: &Path, runs: &[String]) -> Result<(String, Vec<PathBuf>)> {
    let mut by: BTreeMap<String, Vec<ListenPoint>> = BTreeMap::new();
    for arg in runs {
        let (label, file) = arg.split_once('=').with_context(|| format!("`{arg}`: expected LABEL=FILE.json"))?;
        let report = read(Path::new(file))?;
        let sides = report["sides"].as_array().with_context(|| format!("{file}: no sides"))?;
        let side = sides.iter().find(|s| s["side"] == "proxy").with_context(|| format!("{file}: no proxy side"))?;
        let l = &side["listen"];
        let field = |v: &Value, what: &str| v.as_f64().with_context(|| format!("{file}: no {what}"));
        let point = ListenPoint {
            listeners: field(&l["acked"], "acked listeners")?,
            kib_each: field(&l["rss_per_listener_kib"], "RSS per listener")?,
            rss_mib: field(&l["proxy_rss_idle_kib"], "idle RSS")? / 1024.0,
            p99_ms: field(&l["latency_ms"]["p99"], "delivery p99")?,
            delivered: l["notifications"].as_u64().unwrap_or(0),
            expected: l["expected"].as_u64().unwrap_or(0),
        };
        by.entry(label.to_owned()).or_default().push(point);
    }
    let mut md = String::from(
        "| path | listeners | proxy RSS MiB (idle) | RSS per idle listener KiB | delivery p99 ms | delivered / expected |\n|---|---:|---:|---:|---:|---:|\n",
    );
    let (mut rss, mut delivery) = (Vec::new(), Vec::new());
    for (label, mut points) in by {
        points.sort_by(|a, b| a.listeners.total_cmp(&b.listeners));
        for p in &points {
            md.push_str(&format!(
                "| {label} | {:.0} | {:.1} | {:.2} | {:.1} | {} / {} |\n",
                p.listeners, p.rss_mib, p.kib_each, p.p99_ms, p.delivered, p.expected
            ));
        }
        rss.push(SweepLine {
            label: label.clone(),
            points: points.iter().map(|p| (p.listeners, p.kib_each)).collect(),
        });
        delivery.push(SweepLine { label, points: points.iter().map(|p| (p.listeners, p.p99_ms)).collect() });
    }
    let name = |suffix: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    let (rss_svg, delivery_svg) = (name("-rss.svg"), name("-delivery.svg"));
    plot::sweep("proxy RSS per idle listener", "listeners", "KiB per listener", false, rss, &rss_svg)?;
    plot::sweep(
        "notification delivery p99, upstream change to arrival",
        "listeners",
        "ms",
        false,
        delivery,
        &delivery_svg,
    )?;
    Ok((md, vec![rss_svg, delivery_svg]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn a_rates_sweep_plots_the_median_of_rounds() {
        let dir = std::env::temp_dir().join(format!("resmux-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("oha.json");
        let row = |side: &str, rate: u64, p99: f64| serde_json::json!({"side": side, "round": 1, "rate": rate, "p50_ms": p99 / 4.0, "p99_ms": p99});
        let rows =
            vec![row("proxy", 1000, 1.0), row("proxy", 1000, 3.0), row("proxy", 1000, 2.0), row("ceiling", 1000, 0.5)];
        std::fs::write(&json, serde_json::json!({"rows": rows}).to_string()).unwrap();
        let svg = dir.join("rates.svg");
        let md = rates(&json, &svg).unwrap();
        assert!(md.contains("| proxy | p99 | 1000 | 2.000 |"), "{md}");
        assert!(md.contains("| ceiling | p99 | 1000 | 0.500 |"), "{md}");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
