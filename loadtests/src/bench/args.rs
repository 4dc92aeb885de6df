//! The `bench` command line: every flag, how it is read, and the secrets it carries (which no
//! output may show).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::scenario::{Mix, parse_duration};

/// `resmux-load bench URL [options]`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Example:\n  resmux-load bench http://127.0.0.1:8080/mcp --mix read=8,list=1,call=1 --rate 2000 \\\n      --duration 30s --warmup 5s --bearer-env MCP_TOKEN --json report.json\n\nEvery request sent is counted once, by method and phase (discovery, warmup, measured); a\ntoken given with --bearer-env or an Authorization/Cookie header never appears in any output."
)]
pub struct BenchArgs {
    /// The MCP endpoint to load: `http://` or `https://`, with its path (`http://127.0.0.1:8080/mcp`).
    /// 2026-07-28 or legacy (2025-xx), found by the spec's `server/discover` probe.
    pub url: String,
    /// A second endpoint to run against in interleaved rounds (e.g. the same server behind
    /// resmux): every figure is reported for both, with its ratio (compare / URL).
    #[arg(long, value_name = "URL2")]
    pub compare: Option<String>,
    /// Interleaved rounds with --compare: `--duration` of measurement per endpoint is split
    /// over them, and the endpoint that goes first alternates.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// A request header, `'Name: value'` (repeatable). Values of `Authorization`, `Cookie` and
    /// `Proxy-Authorization` are redacted in every output.
    #[arg(long = "header", short = 'H', value_name = "'K: V'")]
    pub headers: Vec<String>,
    /// Send `Authorization: Bearer $VAR` (the token is read from the environment variable, never
    /// printed).
    #[arg(long, value_name = "VAR")]
    pub bearer_env: Option<String>,
    /// Measured time per endpoint (at most 1h). The run always ends: this, or --requests.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Load before measurement (counted apart, as the `warmup` phase), per endpoint.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Stop after this many measured requests per endpoint (or at --duration, whichever first).
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Closed loop: N clients, each sending its next request when the last is answered (default
    /// 16). In the open loop (--rate): most requests in flight at once (default 64), each on
    /// its own connection.
    #[arg(long, short = 'c', value_name = "N")]
    pub concurrency: Option<usize>,
    /// Open loop: send R requests per second on a fixed schedule, whatever the answers do.
    /// Latency is measured from each request's intended send time (coordinated omission
    /// corrected, as wrk2 and oha do); service time from the actual send is reported beside it.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Weights of the requests drawn: `read` (resources/read of a listed URI), `list`
    /// (resources/list, first page), `call` (tools/call), `discover` (server/discover).
    #[arg(long, default_value = "read=1", value_parser = parse_mix)]
    pub mix: Mix,
    /// Zipf exponent over the listed URIs in listing order (0 = uniform; 1.1 = a few hot URIs).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// The tool `call` invokes (default: the first listed tool whose schema needs no argument).
    #[arg(long)]
    pub tool: Option<String>,
    /// The tool's arguments, a JSON object (default `{}`).
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// Hold N `subscriptions/listen` streams on the hottest URIs while measuring; reports
    /// acknowledgment latency and notifications received (2026-07-28 servers).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub listeners: usize,
    /// POST here (body `{}`) at --trigger-rate while measuring, to make the changes listeners
    /// are told of: delivery latency is the time from the POST to each notification.
    #[arg(long, value_name = "URL")]
    pub trigger_url: Option<String>,
    /// Trigger POSTs per second.
    #[arg(long, default_value_t = 1.0, value_name = "HZ")]
    pub trigger_rate: f64,
    /// HTTP version: `auto` (HTTP/1.1 on http, ALPN on https), `1.1`, or `2` (prior knowledge
    /// on http).
    #[arg(long, default_value = "auto", value_parser = ["auto", "1.1", "2"])]
    pub http: String,
    /// Extra CA certificates (PEM) to trust for https, beside the built-in Mozilla roots.
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// A request unanswered after this long is an error (`timeout`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Most URIs the workload keeps from `resources/list` (every page is still walked).
    #[arg(long, default_value_t = 100_000)]
    pub max_uris: usize,
    /// Most `resources/list` pages walked during discovery.
    #[arg(long, default_value_t = 10_000)]
    pub max_pages: usize,
    /// Write the JSON report here (`-` for stdout).
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<PathBuf>,
    /// Directory for bench.json, bench.md, the SVG plots and bench.html.
    #[arg(long, default_value = "resmux-bench")]
    pub out: PathBuf,
    /// Exit with status 2 when the measured error rate (errors / requests) is above this
    /// fraction (`0.01` = 1 %).
    #[arg(long, value_name = "FRACTION")]
    pub max_error_rate: Option<f64>,
    /// Seeds the choice of requests (the same sequence on both endpoints).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No live progress line.
    #[arg(long)]
    pub quiet: bool,
}

/// Longest measured time accepted.
const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Most clients or in-flight requests.
pub const MAX_CONCURRENCY: usize = 10_000;
/// Most listeners.
pub const MAX_LISTENERS: usize = 10_000;

/// `read=8,list=1,call=1`.
pub fn parse_mix(text: &str) -> Result<Mix, String> {
    let mut mix = Mix::default();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, weight) = part.split_once('=').ok_or_else(|| format!("`{part}`: expected NAME=WEIGHT"))?;
        let weight: u32 = weight.trim().parse().map_err(|_| format!("`{part}`: the weight is not a whole number"))?;
        if weight > 1_000_000 {
            return Err(format!("`{part}`: weights are at most 1000000"));
        }
        let slot = match name.trim() {
            "read" => &mut mix.read,
            "list" => &mut mix.list,
            "call" => &mut mix.call,
            "discover" => &mut mix.discover,
            other => return Err(format!("unknown request kind `{other}` (read, list, call, discover)")),
        };
        *slot = weight;
    }
    if mix.total() == 0 {
        return Err("the mix has no weight".into());
    }
    Ok(mix)
}

/// Header values no output may show, and how to hide them.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    values: Vec<String>,
}

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Headers whose values are secret whatever they hold.
fn is_secret_header(name: &HeaderName) -> bool {
    matches!(name.as_str(), "authorization" | "proxy-authorization" | "cookie")
}

impl Secrets {
    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        out
    }

    fn add(&mut self, value: &str) {
        let value = value.trim();
        // A value this short would redact ordinary text; it is still never printed as a header.
        if value.len() >= 4 && !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_owned());
            // The token alone, too: a server may echo it without its scheme.
            if let Some((_, token)) = value.split_once(' ') {
                self.add(token);
            }
        }
    }
}

/// The request headers and their printable form.
#[derive(Debug, Clone, Default)]
pub struct UserHeaders {
    pub map: HeaderMap,
    /// `Name: value` per header, secrets redacted: what reports show.
    pub shown: Vec<String>,
    pub secrets: Secrets,
}

impl BenchArgs {
    /// Parses `argv` (its first item the command's name) as the `bench` command line.
    pub fn from_argv<I, T>(argv: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchArgs,
        }
        <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args)
    }

    /// Checks the flags against each other and reads the headers and the bearer token.
    pub fn validate(&self) -> Result<UserHeaders> {
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            bail!("--duration must be above 0 and at most 1h");
        }
        if self.warmup > MAX_DURATION {
            bail!("--warmup is at most 1h");
        }
        if let Some(rate) = self.rate
            && !(rate > 0.0 && rate <= 10_000_000.0)
        {
            bail!("--rate must be above 0 and at most 10000000");
        }
        if self.concurrency.is_some_and(|c| c == 0 || c > MAX_CONCURRENCY) {
            bail!("--concurrency must be between 1 and {MAX_CONCURRENCY}");
        }
        if self.listeners > MAX_LISTENERS {
            bail!("--listeners is at most {MAX_LISTENERS}");
        }
        if !(self.zipf >= 0.0 && self.zipf <= 10.0) {
            bail!("--zipf must be between 0 and 10");
        }
        if !(self.trigger_rate > 0.0 && self.trigger_rate <= 1000.0) {
            bail!("--trigger-rate must be above 0 and at most 1000");
        }
        if self.max_error_rate.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
            bail!("--max-error-rate is a fraction between 0 and 1");
        }
        if self.max_uris == 0 || self.max_pages == 0 {
            bail!("--max-uris and --max-pages must be above 0");
        }
        if let Some(args) = &self.args {
            let v: serde_json::Value = serde_json::from_str(args).context("--args is not JSON")?;
            if !v.is_object() {
                bail!("--args must be a JSON object");
            }
        }
        let mut out = UserHeaders::default();
        for h in &self.headers {
            // Not shown when malformed: it may hold the secret.
            let (name, value) = h.split_once(':').context("a --header has no `:` (expected 'Name: value')")?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .with_context(|| format!("--header: `{}` is not a header name", name.trim()))?;
            self.insert(&mut out, name, value.trim(), false)?;
        }
        if let Some(var) = &self.bearer_env {
            let token = std::env::var(var).with_context(|| format!("--bearer-env: ${var} is not set"))?;
            if token.trim().is_empty() {
                bail!("--bearer-env: ${var} is empty");
            }
            self.insert(&mut out, http::header::AUTHORIZATION, &format!("Bearer {}", token.trim()), true)?;
        }
        Ok(out)
    }

    fn insert(&self, out: &mut UserHeaders, name: HeaderName, value: &str, secret: bool) -> Result<()> {
        let secret = secret || is_secret_header(&name);
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            // The value itself is not shown: it may be the secret.
            anyhow::anyhow!("--header {name}: the value is not a valid header value")
        })?;
        if secret {
            v.set_sensitive(true);
            out.secrets.add(value);
            out.shown.push(format!("{name}: {REDACTED}"));
        } else {
            out.shown.push(format!("{name}: {value}"));
        }
        out.map.append(name, v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_reject_nonsense() {
        assert_eq!(parse_mix("read=8,list=1,call=1").unwrap(), Mix { read: 8, list: 1, call: 1, discover: 0 });
        assert_eq!(parse_mix(" discover=2 ").unwrap().discover, 2);
        assert!(parse_mix("read=0").is_err());
        assert!(parse_mix("write=1").is_err());
        assert!(parse_mix("read").is_err());
        assert!(parse_mix("read=-1").is_err());
    }

    #[test]
    fn secrets_are_redacted_wherever_they_appear() {
        let mut s = Secrets::default();
        s.add("Bearer s3cr3t-token");
        assert_eq!(s.redact("got Bearer s3cr3t-token back"), format!("got {REDACTED} back"));
        assert_eq!(s.redact("echo: s3cr3t-token"), format!("echo: {REDACTED}"));
        assert_eq!(s.redact("nothing here"), "nothing here");
    }
}
