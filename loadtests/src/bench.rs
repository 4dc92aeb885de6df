//! `resmux-load bench URL`: load any MCP endpoint (2026-07-28 or legacy, http or https,
//! HTTP/1.1 or HTTP/2), or two side by side.
//!
//! ```text
//!  args ─► discover (probe, every resources/list page, the tool) ─► workload
//!       ─► warm-up per endpoint ─► rounds: A B, B A, … (closed or open loop, listeners, trigger)
//!       ─► counts per endpoint / phase / method ─► JSON, Markdown, SVG, HTML; ratios B/A
//! ```
//!
//! Modules: [`args`] the flags, [`endpoint`] connections and requests of either era,
//! [`reply`] reading answers, [`counts`] exact per-method counts, [`discover`] the workload,
//! [`load`] the closed and open loops, [`listeners`] listen streams, [`output`] the reports.

pub mod args;
pub mod counts;
pub mod discover;
pub mod endpoint;
pub mod listeners;
pub mod load;
pub mod output;
pub mod reply;
mod rounds;

use std::sync::Arc;

use anyhow::{Context, Result};

pub use args::BenchArgs;
use endpoint::{Endpoint, HttpChoice};
use output::BenchReport;

/// Runs the bench as the command line asked, writes its outputs, and returns the exit
/// status: 0; 2 when the error rate is above `--max-error-rate`; 130 when interrupted (the
/// partial report is written all the same).
pub async fn main(args: BenchArgs) -> Result<i32> {
    let headers = args.validate()?;
    let secrets = headers.secrets.clone();
    let report = match run(&args, headers).await {
        Ok(r) => r,
        // Errors may quote what a server sent back, which may echo a credential.
        Err(e) => anyhow::bail!("{}", secrets.redact(&format!("{e:#}"))),
    };
    let text = serde_json::to_string_pretty(&report)?;
    match &args.json {
        Some(p) if p.as_os_str() == "-" => println!("{text}"),
        Some(p) => std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?,
        None => {}
    }
    for path in output::write(&report, &args.out)? {
        eprintln!("resmux-load: wrote {}", path.display());
    }
    if args.json.as_ref().is_none_or(|p| p.as_os_str() != "-") {
        println!("{}", output::markdown(&report));
    }
    Ok(match (report.interrupted, report.passed) {
        // As a shell reports a command ended by SIGINT, so that a script does not take the
        // partial figures for a whole run.
        (true, _) => 130,
        (false, true) => 0,
        (false, false) => 2,
    })
}

/// Runs the bench and returns its report.
pub async fn run(args: &BenchArgs, headers: args::UserHeaders) -> Result<BenchReport> {
    let http = HttpChoice::parse(&args.http)?;
    let ca = args.ca_file.as_deref();
    let endpoint = |url: &str, h: http::HeaderMap| Endpoint::parse(url, http, ca, h, args.timeout).map(Arc::new);
    let mut endpoints = vec![endpoint(&args.url, headers.map.clone())?];
    if let Some(url) = &args.compare {
        endpoints.push(endpoint(url, headers.map.clone())?);
    }
    // The trigger is the user's own service, not the endpoint: it gets none of the headers.
    let trigger = args.trigger_url.as_deref().map(|u| endpoint(u, http::HeaderMap::new())).transpose()?;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let interrupt = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\nresmux-load: interrupted; finishing the requests in flight and writing the partial report");
            let _ = stop_tx.send(true);
        }
        // A second interrupt does not wait for the report.
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(130);
        }
    });
    let result = rounds::run_all(args, &headers, endpoints, trigger, stop.clone()).await;
    interrupt.abort();
    result
}
