//! A cluster run's report as Markdown, and the files it is written to.

use super::*;

/// The Markdown table of a cluster report.
pub fn markdown(r: &ClusterReport) -> String {
    let mut out = format!("### {}\n\n*Figure:* {}  \n*Load:* {}  \n*Front:* {}\n\n", r.name, r.figure, r.load, r.front);
    let label = |m: &ModeReport| match (m.redis, m.redis_cluster) {
        (true, true) => "with Redis Cluster",
        (true, false) => "with Redis",
        (false, _) => "without Redis",
    };
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
            "- {}, summed over replicas after reads and probes: l2_hits {}, l2_misses {}, l2_fills {}, lock_waits {}; listen roles after the listeners: {}\n",
            label(m),
            sum("l2_hits"),
            sum("l2_misses"),
            sum("l2_fills"),
            sum("lock_waits"),
            roles.join(", ")
        ));
        if let Some(calls) = m.probe_redis_calls.filter(|_| m.probes.keys > 0) {
            out.push_str(&format!(
                "- {}, Redis round trips of replica A during the hit-path probes: {calls} for {} cold first reads \
                 and as many local hits (which make none), {:.2} per cold read (its health probe and lease \
                 keeper included)\n",
                label(m),
                m.probes.keys,
                calls as f64 / m.probes.keys as f64
            ));
        }
    }
    for m in &r.modes {
        for (k, f) in m.cold.failures.iter().chain(&m.warm.failures).chain(&m.listen.failures) {
            out.push_str(&format!("- {}: {k} × {} (e.g. {})\n", label(m), f.count, f.example));
        }
    }
    for n in &r.notes {
        out.push_str(&format!("- {n}\n"));
    }
    out.push_str(&targets(r));
    out
}

/// The hit-path targets of issue #31: a cross-replica L2 hit p99 within 2 ms, and the first
/// read of a cold key with Redis within 1.5× the time without.
fn targets(r: &ClusterReport) -> String {
    let (Some(without), Some(with)) = (r.modes.iter().find(|m| !m.redis), r.modes.iter().find(|m| m.redis)) else {
        return String::new();
    };
    if without.error.is_some() || with.error.is_some() {
        return String::new();
    }
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let l2 = with.probes.other_replica_ms.p99;
    let (cold_with, cold_without) = (with.probes.upstream_fetch_ms.p99, without.probes.upstream_fetch_ms.p99);
    let ratio = if cold_without > 0.0 { cold_with / cold_without } else { f64::INFINITY };
    let (p50_with, p50_without) = (with.probes.upstream_fetch_ms.p50, without.probes.upstream_fetch_ms.p50);
    format!(
        "\nTargets:\n\n- cross-replica L2 hit p99 ≤ 2 ms: **{l2:.3} ms**, {}.\n- first read of a cold key with Redis ≤ 1.5× without: p99 {cold_with:.3} / {cold_without:.3} ms = **{ratio:.2}×**, {} (p50 {p50_with:.3} / {p50_without:.3} ms = {:.2}×).\n",
        verdict(l2 <= 2.0),
        verdict(ratio <= 1.5),
        if p50_without > 0.0 { p50_with / p50_without } else { f64::INFINITY },
    )
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
