//! The `resmux-load` command line.

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use resmux_load::placement::Placement;
use resmux_load::run::{self, RunOptions};
use resmux_load::scenario::{self, Scenario, Side};

#[derive(Parser)]
#[command(name = "resmux-load", version, about = "Load generator for the resmux MCP proxy")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load-test any MCP endpoint (yours): discover it, build a workload from what it lists,
    /// drive it closed- or open-loop, optionally beside a second endpoint (--compare), and
    /// write JSON, Markdown, SVG and HTML reports with exact per-method counts.
    Bench(Box<resmux_load::bench::BenchArgs>),
    /// Run scenarios and write JSON, Markdown and SVG results.
    Run {
        /// Scenario files, or names in loadtests/scenarios (`hot-read`).
        #[arg(required = true)]
        scenarios: Vec<String>,
        /// Measured time per side, replacing each scenario's (`5s`, `1m`).
        #[arg(long, value_parser = scenario::parse_duration)]
        duration: Option<std::time::Duration>,
        /// Also write the whole run's JSON summary here (`-` for stdout).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Directory for per-scenario results.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
        out: PathBuf,
        /// The resmux binary to run as the proxy (default: `resmux` beside this executable).
        #[arg(long, conflicts_with = "in_process")]
        resmux: Option<PathBuf>,
        /// Run the proxy and the ceiling inside this process instead of as children (no
        /// proxy RSS/CPU figures; for quick checks).
        #[arg(long)]
        in_process: bool,
        /// Run only these sides, replacing each scenario's (`proxy,direct`).
        #[arg(long, value_delimiter = ',', value_parser = parse_side)]
        sides: Option<Vec<Side>>,
    },
    /// Serve the ceiling's fixed body until stdin closes (run by `run`, not by hand).
    #[command(hide = true)]
    ServeCeiling {
        #[arg(long)]
        body: PathBuf,
    },
    /// Instructions per cached `resources/read` of the release proxy, whole process, counted
    /// by callgrind (two runs, `--reads SMALL,LARGE`, subtracted), checked against a budget.
    Instructions {
        /// The resmux binary (default: `resmux` beside this executable).
        #[arg(long)]
        resmux: Option<PathBuf>,
        /// The valgrind executable.
        #[arg(long, default_value = "valgrind")]
        valgrind: std::ffi::OsString,
        /// Cached reads in the short and the long run.
        #[arg(long, value_delimiter = ',', num_args = 2, default_values_t = [200u64, 2200])]
        reads: Vec<u64>,
        /// Bytes of each resource's text.
        #[arg(long, default_value_t = 256)]
        resource_bytes: usize,
        /// The budget file; exit 1 when the count is over its limit.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/budget/instructions.toml"))]
        budget: PathBuf,
        /// Also write the measurement as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Keep each run's callgrind output in this directory (`callgrind.out.READS`), to read
        /// with `callgrind_annotate`.
        #[arg(long)]
        keep: Option<PathBuf>,
        /// Serve the reads on hyper's path (`[listen] lean_requests = false`) instead of the
        /// lean one (the default), to compare the two.
        #[arg(long)]
        hyper_requests: bool,
        /// Count the bare-server ceiling (`serve-ceiling`, answering the proxy's bytes)
        /// instead of the proxy, to read the proxy's count against; the budget is not applied.
        #[arg(long, conflicts_with = "hyper_requests")]
        ceiling: bool,
    },
    /// Start a scenario's proxy (cache warmed) and ceiling for an outside load generator
    /// (wrk, oha): prints `proxy URL`, `ceiling URL`, `keys N`, `ready`; stops when stdin
    /// closes. Used by `loadtests/external/run`.
    Targets {
        /// The scenario whose upstreams, resources and proxy config to use.
        #[arg(default_value = "hot-read")]
        scenario: String,
        /// The resmux binary (default: `resmux` beside this executable).
        #[arg(long)]
        resmux: Option<PathBuf>,
        /// Replace the scenario's resource count.
        #[arg(long)]
        resources: Option<usize>,
        /// Replace the scenario's resource size in bytes.
        #[arg(long)]
        resource_bytes: Option<usize>,
    },
    /// Simulate many replicas in this process, each the real cluster tier, against a Redis
    /// Cluster it starts (6 redis-servers on loopback): Redis load per replica, change
    /// delivery and lease moves as the replica count grows. Writes cluster-sim.{md,json,svg}.
    Sim {
        #[command(flatten)]
        options: resmux_load::sim::SimOptions,
        /// Directory for the results.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
        out: PathBuf,
    },
    /// Plot a sweep over several runs.
    Plot {
        #[command(subcommand)]
        what: PlotWhat,
    },
    /// Parse scenario files and report every problem.
    Check {
        #[arg(required = true)]
        scenarios: Vec<String>,
    },
}

#[derive(Subcommand)]
enum PlotWhat {
    /// p50/p99 against offered rate, per side, from `loadtests/external/run oha` JSON.
    Rates { json: PathBuf, svg: PathBuf },
    /// Proxy RSS per idle listener and delivery p99 against listeners, from fanout results
    /// given as `LABEL=FILE.json` (one line per label): writes `PREFIX-rss.svg` and
    /// `PREFIX-delivery.svg`.
    Listeners {
        prefix: PathBuf,
        #[arg(required = true)]
        runs: Vec<String>,
    },
}

fn parse_side(s: &str) -> Result<Side, String> {
    match s {
        "proxy" => Ok(Side::Proxy),
        "direct" => Ok(Side::Direct),
        "ceiling" => Ok(Side::Ceiling),
        other => Err(format!("unknown side `{other}` (proxy, direct, ceiling)")),
    }
}

fn load_all(args: &[String]) -> Result<Vec<Scenario>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for arg in args {
        match Scenario::load(&scenario::resolve(arg)) {
            Ok(s) => out.push(s),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => {
            let status = resmux_load::bench::main(*args).await?;
            if status != 0 {
                std::process::exit(status);
            }
        }
        Command::Sim { options: o, out } => {
            // Each replica holds a few connections per master, and the process must not run
            // short of descriptors at the largest point.
            let largest = o.replicas.iter().copied().max().unwrap_or(0) as u64;
            resmux_load::procfs::raise_open_file_limit(64 * largest + 1024);
            let mut args = std::env::args().skip(1).collect::<Vec<_>>();
            args.insert(0, "./target/release/resmux-load".into());
            let report = resmux_load::sim::run(&o, args.join(" ")).await?;
            print!("{}", resmux_load::sim::markdown(&report));
            for f in resmux_load::sim::write_outputs(&report, &out)? {
                eprintln!("wrote {}", f.display());
            }
        }
        Command::ServeCeiling { body } => resmux_load::ceiling::serve_child(&body).await?,
        Command::Instructions {
            resmux,
            valgrind,
            reads,
            resource_bytes,
            budget,
            json,
            keep,
            hyper_requests,
            ceiling,
        } => {
            use resmux_load::instructions::{self as ins, Budget, Options};
            let budget = Budget::load(&budget)?;
            let Placement::Processes { resmux, ceiling: exe } = Placement::processes(resmux)? else { unreachable!() };
            let ceiling = ceiling.then_some(exe);
            if ceiling.is_none() && !resmux.is_file() {
                bail!("no resmux binary at {}: `cargo build --release -p resmux -p resmux-load`", resmux.display());
            }
            let opts = Options {
                resmux,
                valgrind,
                small: reads[0],
                large: reads[1],
                resource_bytes,
                keep,
                hyper_requests,
                ceiling,
            };
            let measured = ins::measure(&opts).await?;
            println!(
                "runs: {} reads -> {} instructions, {} reads -> {} instructions",
                measured.small_reads, measured.small_total, measured.large_reads, measured.large_total
            );
            if let Some(p) = json {
                std::fs::write(&p, serde_json::to_string_pretty(&measured)?)
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            if opts.ceiling.is_some() {
                println!("instructions per read, bare ceiling: {} (no budget applies)", measured.per_read);
                return Ok(());
            }
            let (pass, line) = ins::verdict(&measured, &budget);
            println!("{line}");
            if !pass {
                std::process::exit(1);
            }
        }
        Command::Targets { scenario, resmux, resources, resource_bytes } => {
            let mut s = load_all(&[scenario])?.remove(0);
            s.resources = resources.unwrap_or(s.resources);
            s.resource_bytes = resource_bytes.unwrap_or(s.resource_bytes);
            resmux_load::external::serve(&s, &Placement::processes(resmux)?).await?;
        }
        Command::Plot { what: PlotWhat::Rates { json, svg } } => {
            println!("{}", resmux_load::sweep::rates(&json, &svg)?);
            eprintln!("resmux-load: wrote {}", svg.display());
        }
        Command::Plot { what: PlotWhat::Listeners { prefix, runs } } => {
            let (md, written) = resmux_load::sweep::listeners(&prefix, &runs)?;
            println!("{md}");
            for p in written {
                eprintln!("resmux-load: wrote {}", p.display());
            }
        }
        Command::Check { scenarios } => {
            for s in load_all(&scenarios)? {
                println!("{}: ok ({})", s.name, s.load_line());
            }
        }
        Command::Run { scenarios, duration, json, out, resmux, in_process, sides } => {
            let scenarios = load_all(&scenarios)?;
            let placement = if in_process { Placement::InProcess } else { Placement::processes(resmux)? };
            let wants_proxy = scenarios.iter().any(|s| sides.as_ref().unwrap_or(&s.sides).contains(&Side::Proxy));
            if let (true, Placement::Processes { resmux: exe, .. }) = (wants_proxy, &placement)
                && !exe.is_file()
            {
                bail!(
                    "no resmux binary at {}: build both binaries (`cargo build --release -p resmux -p resmux-load`), or pass --resmux PATH or --in-process",
                    exe.display()
                );
            }
            // Both ends of every listener's connection may live on this box: room for them, the
            // clients and a margin, raised here so the proxy child inherits it.
            let sockets = scenarios.iter().map(|s| s.clients * s.upstreams.max(1) + s.listeners).max().unwrap_or(0);
            let want = 2 * sockets as u64 + 4096;
            if let Some(now) = resmux_load::procfs::raise_open_file_limit(want)
                && now < want
            {
                eprintln!("resmux-load: open-file limit {now}, below the {want} these scenarios want");
            }
            let opts = RunOptions { placement: placement.clone(), duration, sides };
            let mut reports = Vec::new();
            for s in &scenarios {
                if s.cluster.is_some() {
                    // Its own report shape (two modes, not sides); not part of latest.*.
                    let report = resmux_load::cluster::run(s, &placement, duration).await;
                    for path in resmux_load::cluster::write_outputs(&report, &out)? {
                        eprintln!("resmux-load: wrote {}", path.display());
                    }
                    println!("{}", resmux_load::cluster::markdown(&report));
                    continue;
                }
                let report = run::run_scenario(s, &opts).await;
                for path in run::write_outputs(&report, &out)? {
                    eprintln!("resmux-load: wrote {}", path.display());
                }
                println!("{}", resmux_load::report::markdown(&report));
                reports.push(report);
            }
            if reports.is_empty() {
                // Only cluster scenarios ran: leave the last run's latest.* as they are.
                return Ok(());
            }
            let summary = run::run_report(reports, &placement);
            let text = serde_json::to_string_pretty(&summary)?;
            std::fs::write(out.join("latest.json"), &text)?;
            let md: String = summary.scenarios.iter().map(resmux_load::report::markdown).collect();
            std::fs::write(out.join("latest.md"), md)?;
            match json {
                Some(p) if p.as_os_str() == "-" => println!("{text}"),
                Some(p) => std::fs::write(&p, &text).with_context(|| format!("writing {}", p.display()))?,
                None => {}
            }
        }
    }
    Ok(())
}
