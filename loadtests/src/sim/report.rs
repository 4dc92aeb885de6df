//! The simulation's report: a Markdown table, two SVG plots (Redis load per replica, and
//! notification latency, against the replica count) and the JSON of every figure.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::SimReport;
use crate::plot::{self, SweepLine};

/// The file names' stem.
const NAME: &str = "cluster-sim";

/// The largest over the smallest of `values` (non-zero), for the flatness target.
fn spread(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.filter(|x| *x > 0.0).collect();
    let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    (!v.is_empty()).then(|| hi / lo)
}

/// The Markdown of a sweep.
pub fn markdown(r: &SimReport) -> String {
    let mut out = format!(
        "### cluster-sim\n\n*Command:* `{}`  \n*Load per point:* {} upstreams per replica; {:.0} local-cache misses (L2 probes) per replica per second over {} keys per upstream, L2 warmed first; interest in {} URIs per upstream per replica; {:.0} changes per second published by the holders; {:.1} s measured; `lease_ttl` {} ms; a 6-node Redis Cluster (3 masters) on loopback, every replica the real cluster tier on a runtime and thread of its own.\n\n",
        r.command,
        r.upstreams,
        r.l2_reads_per_replica_s,
        r.keys,
        r.interest_uris,
        r.changes_per_s,
        r.duration_s,
        r.lease_ttl_ms
    );
    out.push_str(&format!("Plots: [`{NAME}-calls.svg`]({NAME}-calls.svg) (Redis load per replica), [`{NAME}-notify.svg`]({NAME}-notify.svg) (change delivery).\n\n"));
    out.push_str("| replicas | round trips / replica / s | Redis commands / replica / s | per replica per upstream | Redis in / out KiB / replica / s | changes | delivered / expected | notify p50 / p99 / max ms | L2 hits / fills / busy / errors | leases held by the killed replica | leases moved (others) | re-held after ms (lease_ttl) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n");
    for p in &r.points {
        if let Some(e) = &p.error {
            out.push_str(&format!("| {} | failed: {e} |||||||||||\n", p.replicas));
            continue;
        }
        let k = &p.kill;
        out.push_str(&format!(
            "| {} | {:.1} | **{:.1}** | {:.2} | {:.1} / {:.1} | {} | {} / {} | {:.2} / **{:.2}** / {:.2} | {} / {} / {} / {} | {} | {} ({}) | **{}** ({}) |\n",
            p.replicas,
            p.client_calls_per_replica_s,
            p.redis_commands_per_replica_s,
            p.redis_commands_per_replica_upstream_s,
            p.redis_in_bytes_per_replica_s / 1024.0,
            p.redis_out_bytes_per_replica_s / 1024.0,
            p.changes,
            p.delivered,
            p.expected,
            p.notify_ms.p50,
            p.notify_ms.p99,
            p.notify_ms.max,
            p.l2_hits,
            p.l2_fills,
            p.l2_busy,
            p.l2_errors,
            k.victim_held,
            k.moved,
            k.moved_others,
            k.reheld_ms.map_or("never".into(), |ms| ms.to_string()),
            k.lease_ttl_ms,
        ));
    }
    let ok: Vec<_> = r.points.iter().filter(|p| p.error.is_none()).collect();
    out.push_str("\nTargets:\n\n");
    if let (Some(first), Some(last)) = (ok.first(), ok.last()) {
        let cmd = spread(ok.iter().map(|p| p.redis_commands_per_replica_s)).unwrap_or(f64::NAN);
        let trips = spread(ok.iter().map(|p| p.client_calls_per_replica_s)).unwrap_or(f64::NAN);
        let growth = last.redis_commands_per_replica_s / first.redis_commands_per_replica_s;
        out.push_str(&format!(
            "- Redis calls per replica per second flat within 1.2× from {} to {} replicas: Redis commands at {} / at {} = **{growth:.2}×**; largest / smallest over the sweep: commands {cmd:.2}×, round trips {trips:.2}×: {}.\n",
            first.replicas,
            last.replicas,
            last.replicas,
            first.replicas,
            match (cmd <= 1.2, growth <= 1.2) {
                (true, _) => "met",
                (false, true) => "**outside the 1.2× band, but falling, not growing**: a replica's own work is fixed, and the lease holders' work per upstream is shared by more replicas as the fleet grows",
                (false, false) => "**missed**: the load per replica grows with the fleet",
            }
        ));
    }
    let all_within = ok.iter().all(|p| p.kill.within_lease_ttl);
    out.push_str(&format!(
        "- A dead replica's leases held again within `lease_ttl`: {}.\n",
        if all_within { "met at every point" } else { "**missed** at a point above" }
    ));
    let lost: u64 = ok.iter().map(|p| p.expected.saturating_sub(p.delivered)).sum();
    out.push_str(&format!(
        "- Every change reached every follower: {}.\n",
        if lost == 0 { "yes".to_owned() } else { format!("**no**, {lost} missing") }
    ));
    out
}

/// Writes `cluster-sim.{json,md}` and the plots into `out`; returns the files.
pub fn write_outputs(r: &SimReport, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = out.join(format!("{NAME}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let md = out.join(format!("{NAME}.md"));
    std::fs::write(&md, markdown(r))?;
    let ok: Vec<_> = r.points.iter().filter(|p| p.error.is_none()).collect();
    let line = |label: &str, f: &dyn Fn(&super::Point) -> f64| SweepLine {
        label: label.to_owned(),
        points: ok.iter().map(|p| (p.replicas as f64, f(p))).collect(),
    };
    let calls = out.join(format!("{NAME}-calls.svg"));
    plot::sweep(
        "Redis load per simulated replica against replicas",
        "replicas",
        "per replica per second",
        false,
        vec![
            line("Redis commands (INFO commandstats, 3 masters)", &|p| p.redis_commands_per_replica_s),
            line("round trips (the replicas' own count)", &|p| p.client_calls_per_replica_s),
        ],
        &calls,
    )?;
    let notify = out.join(format!("{NAME}-notify.svg"));
    plot::sweep(
        "Change delivery, holder's publish to every follower",
        "replicas",
        "ms",
        false,
        vec![line("p50", &|p| p.notify_ms.p50), line("p99", &|p| p.notify_ms.p99), line("max", &|p| p.notify_ms.max)],
        &notify,
    )?;
    Ok(vec![json, md, calls, notify])
}
