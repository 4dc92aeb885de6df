//! The `resmux` command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use resmux::app::App;
use resmux::config::{self, Config, UpstreamConfig};
use resmux::sample::{Sample, SampleHttp, SampleSpec};

#[derive(Parser)]
#[command(name = "resmux", version, about = "A caching, multiplexing proxy for MCP resources")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy with a configuration file.
    Serve {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Serve one MCP client on stdin/stdout (for apps that launch MCP servers as processes).
    /// Stdout carries JSON-RPC only; logs go to stderr.
    Stdio {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Check a configuration file and report every error at once. Secrets that do not
    /// resolve here (an unset environment variable, a missing file) are reported as warnings,
    /// since CI has none; `serve` still refuses to start without them.
    Check {
        #[arg(short, long)]
        config: PathBuf,
        /// Treat unresolvable secrets as errors too (check on the machine that will serve).
        #[arg(long)]
        require_secrets: bool,
    },
    /// Make a running `serve` reload its config file (`POST /admin/reload` on its admin
    /// listener) and print what changed, or every error; exit 1 when the reload was refused.
    Reload {
        /// The admin listener, e.g. `http://127.0.0.1:9090`. Default: `[admin] addr` of
        /// `--config`.
        #[arg(long, conflicts_with = "config")]
        admin: Option<String>,
        /// The config file the proxy runs (its `[admin] addr` is used).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Operate on a running `serve`'s cache through its admin listener.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Probe an admin endpoint (container HEALTHCHECK): exit 0 on a 2xx answer within 3 s.
    Health {
        #[arg(long, default_value = "http://127.0.0.1:9090/healthz")]
        url: String,
    },
    /// Run the proxy in front of two built-in sample upstreams (HTTP and stdio).
    Demo {
        /// Where the proxy listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        /// Where the admin listener (dashboard, metrics, health) listens.
        #[arg(long, default_value = "127.0.0.1:9090")]
        admin_addr: SocketAddr,
    },
    /// Run a built-in sample MCP server on stdio (or HTTP with --http).
    #[command(hide = true)]
    SampleUpstream {
        #[arg(long, value_enum, default_value = "notes")]
        profile: ProfileArg,
        /// Serve Streamable HTTP on this address instead of stdio.
        #[arg(long)]
        http: Option<SocketAddr>,
        /// Offer the `crash` tool (ends the process).
        #[arg(long)]
        crashable: bool,
        /// Generated resources (profile `generated`).
        #[arg(long, default_value_t = 25)]
        count: usize,
        /// Change the `status` resource every this many milliseconds (0: the profile's default).
        #[arg(long, default_value_t = 0)]
        tick_ms: u64,
        /// Speak the legacy 2025-11-25 session revision (`initialize`, `Mcp-Session-Id`, no
        /// `ttlMs`/`cacheScope`), as TypeScript SDK 1.x servers do; HTTP only.
        #[arg(long, requires = "http")]
        legacy: bool,
    },
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Remove entries (`POST /admin/cache/purge`; with [cluster], on every replica and in
    /// Redis) and print how many this replica removed; exit 1 when refused.
    Purge {
        /// The admin listener, e.g. `http://127.0.0.1:9090`. Default: `[admin] addr` of
        /// `--config`.
        #[arg(long, conflicts_with = "config")]
        admin: Option<String>,
        /// The config file the proxy runs (its `[admin] addr` is used).
        #[arg(short, long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        what: PurgeWhat,
    },
}

/// What to purge: exactly one.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct PurgeWhat {
    /// Reads of this URI, as clients see it (namespaced, e.g. `docs+file:///a.md`).
    #[arg(long)]
    uri: Option<String>,
    /// Reads of every URI, as clients see it, starting with this.
    #[arg(long)]
    uri_prefix: Option<String>,
    /// Everything cached from this upstream, its lists too.
    #[arg(long)]
    upstream: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProfileArg {
    Docs,
    Notes,
    Generated,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config: path } => {
            let config = config::load(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
            let telemetry = resmux::telemetry::install(&config.log, &config.telemetry)?;
            let reload = config.reload.clone();
            let app = App::start(config).await?;
            app.reload_from(&path, &reload);
            shutdown_signal().await;
            app.shutdown().await;
            telemetry.shutdown().await;
        }
        Command::Stdio { config } => {
            let config = config::load(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
            let telemetry = resmux::telemetry::install(&config.log, &config.telemetry)?;
            App::stdio(config, tokio::io::stdin(), tokio::io::stdout()).await?;
            telemetry.shutdown().await;
        }
        Command::Check { config, require_secrets } => {
            let loaded = if require_secrets {
                config::load(&config).map(|c| (c, Vec::new()))
            } else {
                config::load_without_secrets(&config)
            };
            match loaded {
                Ok((c, warnings)) => {
                    for w in &warnings {
                        eprintln!(
                            "{}: warning: {}: {} (serve will refuse to start without it)",
                            config.display(),
                            w.path,
                            w.message
                        );
                    }
                    println!("{}: ok ({} upstreams)", config.display(), c.upstreams.len());
                }
                Err(e) => {
                    eprint!("{e}");
                    std::process::exit(1);
                }
            }
        }
        Command::Health { url } => {
            let ok = tokio::time::timeout(std::time::Duration::from_secs(3), probe(&url)).await;
            match ok {
                Ok(Ok(status)) if status.is_success() => println!("{url}: {status}"),
                Ok(Ok(status)) => anyhow::bail!("{url}: {status}"),
                Ok(Err(e)) => anyhow::bail!("{url}: {e}"),
                Err(_) => anyhow::bail!("{url}: no answer within 3 s"),
            }
        }
        Command::Demo { addr, admin_addr } => demo(addr, admin_addr).await?,
        Command::Reload { admin, config } => reload(admin, config).await?,
        Command::Cache { command: CacheCommand::Purge { admin, config, what } } => purge(admin, config, what).await?,
        Command::SampleUpstream { profile, http, crashable, count, tick_ms, legacy } => {
            resmux::telemetry::init(&Default::default());
            let mut spec = match profile {
                ProfileArg::Docs => SampleSpec::docs(),
                ProfileArg::Notes => SampleSpec::notes(),
                ProfileArg::Generated => SampleSpec::generated("gen", count),
            };
            spec.crashable = crashable;
            spec.legacy = legacy;
            if tick_ms > 0 {
                spec.tick = Some(std::time::Duration::from_millis(tick_ms));
            }
            match http {
                Some(addr) => {
                    let server = SampleHttp::start(Sample::new(spec), addr).await?;
                    eprintln!("sample upstream on {}", server.url());
                    shutdown_signal().await;
                }
                None => resmux::sample::serve_stdio(Sample::new(spec)).await?,
            }
        }
    }
    Ok(())
}

/// The admin listener's base URL: `--admin`, else `[admin] addr` of `--config`, else the
/// default address.
fn admin_base(admin: Option<String>, config: Option<PathBuf>, what: &str) -> Result<String> {
    Ok(match (admin, config) {
        (Some(url), _) => url.trim_end_matches('/').to_owned(),
        (None, Some(path)) => {
            let (c, _) = config::load_without_secrets(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
            match c.admin.socket_addr() {
                Ok(Some(addr)) => format!("http://{addr}"),
                _ => anyhow::bail!("{}: [admin] addr is not set; {what} needs the admin listener", path.display()),
            }
        }
        (None, None) => "http://127.0.0.1:9090".to_owned(),
    })
}

/// POSTs `body` (JSON) to the admin listener at `url` through the proxy's own HTTP client;
/// returns the status and the answer's body.
async fn admin_post(url: &str, body: Vec<u8>, wait: std::time::Duration) -> Result<(http::StatusCode, bytes::Bytes)> {
    use http_body_util::BodyExt;
    let client = resmux::upstream::http::client();
    let req = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
    let answer = async {
        let resp = client.request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, body))
    };
    tokio::time::timeout(wait, answer).await.map_err(|_| anyhow::anyhow!("{url}: no answer within {wait:?}"))?
}

/// `resmux reload`: asks the admin listener to reload and prints its answer.
async fn reload(admin: Option<String>, config: Option<PathBuf>) -> Result<()> {
    let url = format!("{}/admin/reload", admin_base(admin, config, "reload")?);
    let (status, body) = admin_post(&url, Vec::new(), std::time::Duration::from_secs(120)).await?;
    let v: serde_json::Value =
        serde_json::from_slice(&body).with_context(|| format!("{url}: {status}: not a reload answer"))?;
    if let Some(report) = v.get("report").filter(|_| status.is_success()) {
        let names = |k: &str| {
            let list: Vec<&str> = report[k].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
            if list.is_empty() { "-".to_owned() } else { list.join(", ") }
        };
        println!("reloaded ({url})");
        for k in ["added", "removed", "changed", "unchanged", "not_ready"] {
            println!("  {k:<10} {}", names(k));
        }
        println!("  swap       {} µs", report["swap_micros"]);
        return Ok(());
    }
    eprintln!("reload refused ({url}, {status}); the running config stays:");
    for e in v["errors"].as_array().into_iter().flatten() {
        eprintln!("  {}", e.as_str().unwrap_or_default());
    }
    std::process::exit(1);
}

/// `resmux cache purge`: asks the admin listener to purge and prints how many entries went.
async fn purge(admin: Option<String>, config: Option<PathBuf>, what: PurgeWhat) -> Result<()> {
    let url = format!("{}/admin/cache/purge", admin_base(admin, config, "cache purge")?);
    let body = match what {
        PurgeWhat { uri: Some(uri), .. } => serde_json::json!({ "uri": uri }),
        PurgeWhat { uri_prefix: Some(prefix), .. } => serde_json::json!({ "uri_prefix": prefix }),
        PurgeWhat { upstream: Some(name), .. } => serde_json::json!({ "upstream": name }),
        PurgeWhat { .. } => anyhow::bail!("give one of --uri, --uri-prefix, --upstream"),
    };
    let (status, answer) = admin_post(&url, body.to_string().into_bytes(), std::time::Duration::from_secs(60)).await?;
    let v: serde_json::Value =
        serde_json::from_slice(&answer).with_context(|| format!("{url}: {status}: not a purge answer"))?;
    match (status.is_success(), v["purged"].as_u64()) {
        (true, Some(n)) => {
            let shared = v["shared"].as_u64().map(|s| format!(", {s} shared values in Redis")).unwrap_or_default();
            println!("purged {n} {}{shared}", if n == 1 { "entry" } else { "entries" });
            Ok(())
        }
        _ => {
            eprintln!("purge failed ({url}, {status}): {}", v["error"].as_str().unwrap_or("no reason given"));
            std::process::exit(1);
        }
    }
}

/// One GET through the proxy's own HTTP client.
async fn probe(url: &str) -> Result<http::StatusCode> {
    use http_body_util::BodyExt;
    let client = resmux::upstream::http::client();
    let req = http::Request::get(url).body(http_body_util::Full::new(bytes::Bytes::new()))?;
    let resp = client.request(req).await?;
    let status = resp.status();
    let _ = resp.into_body().collect().await;
    Ok(status)
}

async fn demo(addr: SocketAddr, admin_addr: SocketAddr) -> Result<()> {
    let mut config = Config::default();
    resmux::telemetry::init(&config.log);
    let docs = SampleHttp::start(Sample::new(SampleSpec::docs()), "127.0.0.1:0".parse()?).await?;
    let exe = std::env::current_exe().context("locating the resmux binary")?;
    let notes = vec![exe.display().to_string(), "sample-upstream".into(), "--profile".into(), "notes".into()];
    config.listen.addr = addr;
    config.admin.addr = admin_addr.to_string();
    config.upstreams = vec![UpstreamConfig::http("docs", &docs.url()), UpstreamConfig::stdio("notes", notes)];
    let app = App::start(config).await?;
    print_demo(app.local_addr(), app.admin_addr());
    shutdown_signal().await;
    app.shutdown().await;
    docs.stop();
    Ok(())
}

fn print_demo(addr: SocketAddr, admin: Option<SocketAddr>) {
    let url = format!("http://{addr}/mcp");
    let call = |method: &str, name: Option<&str>, params: &str| {
        let name_header = name.map(|n| format!(" -H 'Mcp-Name: {n}'")).unwrap_or_default();
        format!(
            "curl -si {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\\n  -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: {method}'{name_header} \\\n  -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"{method}\",\"params\":{{{params}\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{{}}}}}}}}'"
        )
    };
    println!("\nresmux demo: proxy on {url}, in front of `docs` (HTTP) and `notes` (stdio).\n");
    println!("# What the proxy serves\n{}\n", call("server/discover", None, ""));
    println!(
        "# Every resource of both upstreams, first page (follow nextCursor for more)\n{}\n",
        call("resources/list", None, "")
    );
    println!(
        "# Read a document (run twice: the second answer says resmux-cache)\n{}\n",
        call("resources/read", Some("docs+docs://getting-started"), "\"uri\":\"docs+docs://getting-started\",")
    );
    println!(
        "# The resource that changes every 5 s\n{}\n",
        call("resources/read", Some("docs+docs://status"), "\"uri\":\"docs+docs://status\",")
    );
    println!(
        "# Call a tool of the stdio upstream\n{}\n",
        call("tools/call", Some("notes__echo"), "\"name\":\"notes__echo\",\"arguments\":{\"text\":\"hello\"},")
    );
    if let Some(admin) = admin {
        println!(
            "# The admin page (live figures), metrics and health\nhttp://{admin}/   http://{admin}/metrics   http://{admin}/readyz\n"
        );
    }
    println!(
        "# A desktop MCP client pointed at the demo: mcp.json (VS Code, Cursor and others)\n{}\n",
        serde_json::json!({"mcpServers": {"resmux-demo": {"type": "http", "url": url}}})
    );
    println!(
        "# claude_desktop_config.json (stdio clients reach HTTP servers through mcp-remote)\n{}\n",
        serde_json::json!({"mcpServers": {"resmux-demo": {"command": "npx", "args": ["-y", "mcp-remote", url]}}})
    );
    println!("Press Ctrl-C to stop.");
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
