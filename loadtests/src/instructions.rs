//! Instructions per cached `resources/read`, counted by callgrind for the whole proxy process
//! (every thread: hyper, tokio, the handler, the allocator), as a regression gate.
//!
//! Instruction counts do not depend on how busy the machine is, so unlike req/s they can gate
//! CI on a shared 2-core box. The proxy (`resmux serve`, release build) runs under
//! `valgrind --tool=callgrind` twice, in front of one sample upstream in this process: once
//! serving `small` cached reads and once `large`, each after the same start-up, warm-up (one
//! miss per key) and shutdown (SIGTERM). The difference of the two totals divided by
//! `large - small` is the cost of one cached read, start-up and shutdown cancelling out.
//! Every counted read must be answered `resmux-cache: hit`. With `ceiling` the same two runs
//! count the bare-server ceiling instead, answering the same bytes: what a read costs with no
//! proxy work at all.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::ceiling::CeilingProcess;
use crate::conn::Conn;
use crate::proxy::Proxy;
use crate::scenario::Scenario;
use crate::target::{Addressing, sample_spec};
use crate::wire::Outcome;

/// Distinct URIs the reads cycle over (each fetched once, as a miss, before counting).
const KEYS: usize = 10;

/// Time for the proxy to start under valgrind (about 50× slower than natively).
const READY: Duration = Duration::from_secs(120);

/// Time for the proxy to exit after SIGTERM under valgrind (callgrind writes its file then).
const EXIT: Duration = Duration::from_secs(60);

/// The committed budget (`loadtests/budget/instructions.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Instructions per cached read.
    pub per_read: u64,
    /// The fraction above `per_read` that still passes (0.10 = 10 %).
    pub tolerance: f64,
}

impl Budget {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let budget: Budget = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if budget.per_read == 0 || !(0.0..=1.0).contains(&budget.tolerance) {
            bail!("{}: per_read must be > 0 and tolerance within 0..=1", path.display());
        }
        Ok(budget)
    }

    /// The most instructions per read that pass.
    pub fn limit(&self) -> u64 {
        (self.per_read as f64 * (1.0 + self.tolerance)).floor() as u64
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub resmux: PathBuf,
    pub valgrind: OsString,
    /// Cached reads in the short and the long run.
    pub small: u64,
    pub large: u64,
    /// Bytes of each resource's text.
    pub resource_bytes: usize,
    /// Where to keep each run's callgrind output (`callgrind.out.READS`, for
    /// `callgrind_annotate`); `None`: deleted after counting.
    pub keep: Option<PathBuf>,
    /// Serve the reads on hyper's path (`[listen] lean_requests = false`), to compare it with
    /// the lean one (the default).
    pub hyper_requests: bool,
    /// Count the bare-server ceiling (`resmux-load serve-ceiling`, the binary `ceiling`,
    /// answering the proxy's bytes for key 0) instead of the proxy: the floor the proxy's
    /// count is read against. Its answers carry no `resmux-cache` header.
    pub ceiling: Option<PathBuf>,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub small_reads: u64,
    pub large_reads: u64,
    pub small_total: u64,
    pub large_total: u64,
    pub per_read: u64,
    pub resource_bytes: usize,
}

/// Runs the proxy under callgrind twice and returns instructions per cached read.
pub async fn measure(opts: &Options) -> Result<Measured> {
    if opts.large <= opts.small {
        bail!("the long run ({}) must serve more reads than the short one ({})", opts.large, opts.small);
    }
    let small_total = run_once(opts, opts.small).await.context("short run")?;
    let large_total = run_once(opts, opts.large).await.context("long run")?;
    let Some(diff) = large_total.checked_sub(small_total) else {
        bail!("the long run counted fewer instructions ({large_total}) than the short one ({small_total})");
    };
    Ok(Measured {
        small_reads: opts.small,
        large_reads: opts.large,
        small_total,
        large_total,
        per_read: diff / (opts.large - opts.small),
        resource_bytes: opts.resource_bytes,
    })
}

fn scenario(resource_bytes: usize, hyper_requests: bool) -> Scenario {
    let mut text = format!(
        "figure = \"instructions per cached read\"\nclients = 1\nresources = {KEYS}\nresource_bytes = {resource_bytes}\n"
    );
    if hyper_requests {
        text.push_str("[proxy_config.listen]\nlean_requests = false\n");
    }
    Scenario::parse("instructions", &text).unwrap_or_else(|e| panic!("the built-in scenario is valid: {e:?}"))
}

/// One run: start under callgrind, warm every key, `reads` counted hits, SIGTERM; the total
/// instructions callgrind counted.
async fn run_once(opts: &Options, reads: u64) -> Result<u64> {
    let s = scenario(opts.resource_bytes, opts.hyper_requests);
    let upstream = crate::servers::on_servers(resmux::sample::SampleHttp::start(
        resmux::sample::Sample::new(sample_spec(&s, 0)),
        ([127, 0, 0, 1], 0).into(),
    ))
    .await
    .context("starting the sample upstream")?;
    let dir = std::env::temp_dir().join(format!("resmux-instructions-{}-{reads}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("callgrind.out");
    let wrapper: Vec<OsString> = vec![
        opts.valgrind.clone(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}", out.display()).into(),
    ];
    let result = async {
        let status = match &opts.ceiling {
            None => {
                let ups = vec![("up0".to_owned(), upstream.url())];
                let proxy = Proxy::spawn(&wrapper, &opts.resmux, &ups, &s, READY).await?;
                let served = serve_reads(proxy.addr, reads, true).await;
                let status = proxy.terminate(EXIT).await?;
                served?;
                status
            }
            Some(exe) => {
                let body = crate::target::read_answer_bytes(&s).await?;
                let ceiling = CeilingProcess::spawn_under(&wrapper, exe, &body, READY).await?;
                let served = serve_reads(ceiling.addr, reads, false).await;
                let status = ceiling.finish(EXIT).await?;
                served?;
                status
            }
        };
        if !status.success() {
            bail!("the server under callgrind exited with {status}");
        }
        let total = total_instructions(&out)?;
        if let Some(keep) = &opts.keep {
            std::fs::create_dir_all(keep).with_context(|| format!("creating {}", keep.display()))?;
            let kept = keep.join(format!("callgrind.out.{reads}"));
            std::fs::copy(&out, &kept).with_context(|| format!("keeping {}", kept.display()))?;
        }
        Ok(total)
    }
    .await;
    upstream.stop();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// One keep-alive connection: each key once (misses), then `reads` reads cycling over the keys,
/// each of which must be answered, and be a cached hit when `hits`.
async fn serve_reads(addr: std::net::SocketAddr, reads: u64, hits: bool) -> Result<()> {
    let addressing = Addressing::replicas(vec![addr]);
    let mut conn = Conn::open(addr, Duration::from_secs(10), None).await?;
    let ops: Vec<_> = (0..KEYS).map(|k| addressing.read(k).1).collect();
    for op in &ops {
        let answer = conn.call(op).await?;
        if answer.outcome != Outcome::Ok {
            bail!("warm-up read failed: {:?}", answer.outcome);
        }
    }
    for n in 0..reads {
        let answer = conn.call(&ops[n as usize % KEYS]).await?;
        let hit = answer.cache.as_ref().is_some_and(|v| v == "hit");
        if answer.outcome != Outcome::Ok || (hits && !hit) {
            let want = if hits { "a cached hit" } else { "answered" };
            bail!("read {n} was not {want}: {:?}, resmux-cache {:?}", answer.outcome, answer.cache);
        }
    }
    Ok(())
}

/// The `totals:` (or `summary:`) line of a callgrind output file: instructions of every thread.
fn total_instructions(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_total(&text).with_context(|| format!("{}: no totals line", path.display()))
}

fn parse_total(text: &str) -> Option<u64> {
    let line = text.lines().rev().find(|l| l.starts_with("totals:") || l.starts_with("summary:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The gate's verdict as one line, and whether it passes.
pub fn verdict(m: &Measured, budget: &Budget) -> (bool, String) {
    let limit = budget.limit();
    let pass = m.per_read <= limit;
    let change = (m.per_read as f64 / budget.per_read as f64 - 1.0) * 100.0;
    let line = format!(
        "instructions per cached read: {} (budget {}, limit {} at +{:.0} %; {:+.1} % of budget): {}",
        m.per_read,
        budget.per_read,
        limit,
        budget.tolerance * 100.0,
        change,
        if pass { "ok" } else { "OVER BUDGET" }
    );
    (pass, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_line_is_read() {
        let text = "version: 1\nevents: Ir\nfn=main\n1 5\nsummary: 123\n\n\ntotals: 456789\n";
        assert_eq!(parse_total(text), Some(456789));
        assert_eq!(parse_total("summary: 42\n"), Some(42));
        assert_eq!(parse_total("events: Ir\n"), None);
    }

    #[test]
    fn the_committed_budget_parses_and_the_limit_is_ten_percent_above() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("budget/instructions.toml");
        let budget = Budget::load(&path).unwrap();
        assert!((0.0..=0.2).contains(&budget.tolerance));
        let b = Budget { per_read: 1000, tolerance: 0.10 };
        assert_eq!(b.limit(), 1100);
        let m = |per_read| Measured {
            small_reads: 1,
            large_reads: 2,
            small_total: 0,
            large_total: per_read,
            per_read,
            resource_bytes: 0,
        };
        assert!(verdict(&m(1100), &b).0);
        assert!(!verdict(&m(1101), &b).0);
    }
}
