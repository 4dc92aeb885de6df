//! The `targets` command: the servers of a scenario's `proxy` and `ceiling` sides, started
//! and left running for a load generator that is not ours (wrk, oha; see
//! `loadtests/external/`). The proxy's cache is warmed first (every key read once), so every
//! read the generator sends is a hit. One line per endpoint on stdout, then `ready`; the
//! servers stop when stdin closes.

use std::time::Duration;

use anyhow::{Result, bail};
use tokio::io::AsyncWriteExt;

use crate::conn::Conn;
use crate::placement::Placement;
use crate::scenario::{Scenario, Side};
use crate::target::Target;
use crate::wire::Outcome;

/// Starts both sides of `s`, warms the proxy, prints `proxy URL`, `ceiling URL`, `keys N`
/// and `ready`, and serves until stdin closes.
pub async fn serve(s: &Scenario, placement: &Placement) -> Result<()> {
    let proxy = Target::start(s, Side::Proxy, placement).await?;
    let ceiling = match Target::start(s, Side::Ceiling, placement).await {
        Ok(c) => c,
        Err(e) => {
            proxy.stop().await;
            return Err(e);
        }
    };
    let result = async {
        let addr = proxy.addressing.endpoints[0];
        let mut conn = Conn::open(addr, Duration::from_secs(10), None).await?;
        let keys = s.resources * s.upstreams;
        for key in 0..keys {
            let answer = conn.call(&proxy.addressing.read(key).1).await?;
            if answer.outcome != Outcome::Ok {
                bail!("warming key {key} failed: {:?}", answer.outcome);
            }
        }
        let warmed = proxy.upstream_total();
        let stop = crate::ceiling::StopSignal::install();
        let mut out = tokio::io::stdout();
        let lines = format!(
            "proxy http://{}/mcp\nceiling http://{}/mcp\nkeys {keys}\nready\n",
            addr, ceiling.addressing.endpoints[0]
        );
        out.write_all(lines.as_bytes()).await?;
        out.flush().await?;
        stop.wait().await;
        let upstream = proxy.upstream_total() - warmed;
        eprintln!("resmux-load targets: {upstream} upstream requests after the warm-up (0: every read a hit)");
        Ok(())
    }
    .await;
    proxy.stop().await;
    ceiling.stop().await;
    result
}
