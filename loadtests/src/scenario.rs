//! A scenario file (`loadtests/scenarios/NAME.toml`): the load shape, the sides to run it
//! against in one run, and the figure it exists to show. Inert data with documented defaults
//! and `deny_unknown_fields`; [`Scenario::parse`] reports every problem at once. Every count
//! and time is bounded, so no scenario can run away.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod cluster;
pub use cluster::ClusterSpec;

/// What the load is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The resmux proxy, in front of in-process sample upstreams.
    Proxy,
    /// The same sample upstreams, with no proxy in between.
    Direct,
    /// A bare hyper server answering every request with a fixed read-sized body: the most
    /// this machine can do over HTTP/1.1 with this client.
    Ceiling,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Proxy => "proxy",
            Side::Direct => "direct",
            Side::Ceiling => "ceiling",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A duration written as `"10s"`, `"500ms"`, `"1m 30s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(Dur).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

/// Parses `"10s"`, `"250ms"`, `"2m"` (the `--duration` flag uses it too).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("invalid duration `{text}`: {e}"))
}

/// Who the clients and listeners are, as the proxy sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Principals {
    /// Each client and each listener presents its own bearer token, as that many distinct
    /// users would: private cache partitions and per-principal limits apply per client.
    #[default]
    Distinct,
    /// No `Authorization` header: everyone is the one anonymous principal.
    Anonymous,
}

impl Principals {
    /// The `Authorization` value of client or listener `who` (`client-3`, `listener-7`).
    pub fn authorization(self, who: &str) -> Option<http::HeaderValue> {
        match self {
            Principals::Anonymous => None,
            Principals::Distinct => {
                Some(http::HeaderValue::from_str(&format!("Bearer resmux-load-{who}")).expect("ASCII token"))
            }
        }
    }
}

/// Relative weights of the request kinds each client draws from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Mix {
    /// `resources/read` of a Zipf-drawn resource.
    pub read: u32,
    /// `resources/list`, first page (merged over every upstream through the proxy).
    pub list: u32,
    /// `tools/call` of the `add` tool (never cacheable).
    pub call: u32,
    /// `server/discover`.
    pub discover: u32,
}

impl Mix {
    fn reads_only() -> Self {
        Self { read: 1, ..Self::default() }
    }

    pub fn total(&self) -> u32 {
        self.read + self.list + self.call + self.discover
    }
}

/// One scenario. Field defaults are in [`Scenario::default`].
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// File stem; not written in the file.
    #[serde(skip_deserializing)]
    pub name: String,
    /// The figure this scenario exists to show (printed above its results).
    pub figure: String,
    /// Sides to run, one after the other, each on fresh upstreams (and a fresh proxy), so
    /// their ratios come from the same run on the same machine. Default `["proxy"]`.
    pub sides: Vec<Side>,
    /// Measured time per side. Default 10 s; at most 10 min.
    pub duration: Dur,
    /// Unmeasured load before the measurement (fills caches, warms connections). Default 0.
    pub warmup: Dur,
    /// Virtual clients, each with one keep-alive connection (per endpoint), sending one
    /// request at a time (closed loop). Default 0.
    pub clients: usize,
    /// Cap on measured requests per side, across clients. Default none.
    pub requests: Option<u64>,
    /// Cap on requests per client (1 with many clients is a stampede). Default none.
    pub requests_per_client: Option<u64>,
    /// A request taking longer counts as an error. Default 10 s.
    pub request_timeout: Dur,
    /// Sample upstreams. Default 1.
    pub upstreams: usize,
    /// Generated resources per upstream. Default 100.
    pub resources: usize,
    /// Size of each resource's text in bytes. Default 1024.
    pub resource_bytes: usize,
    /// Items per upstream list page. Default 50.
    pub page_size: usize,
    /// `ttlMs` the upstreams put on their results. Default 60 s.
    pub ttl_ms: u64,
    /// `cacheScope` of the upstreams' results: public (true) or private. Default true.
    pub public: bool,
    /// Delay each upstream adds to every request (a slow backend). Default 0.
    pub upstream_delay_ms: u64,
    /// Zipf exponent of the resource a read picks (0 = uniform). Default 1.0.
    pub zipf_s: f64,
    /// Request kinds and their weights. Default reads only.
    pub mix: Mix,
    /// `subscriptions/listen` streams held open on the first upstream's `status` resource.
    /// Default 0.
    pub listeners: usize,
    /// Rate at which `status` changes while listeners are open (`sample.bump()`). Default 1.
    pub update_hz: f64,
    /// Fraction of the listeners that stop reading once acknowledged (slow clients): they
    /// hold their streams open unread, and the figures are those of the others. Default 0.
    pub slow_listeners: f64,
    /// Listeners per connection. 1 (the default): each listener holds an HTTP/1.1
    /// connection of its own. Above 1: listeners are streams of HTTP/2 connections (prior
    /// knowledge), this many to each, as behind an HTTP/2 front that multiplexes its clients;
    /// the generated proxy config then sets `[listen] http2 = true` and
    /// `http2_max_concurrent_streams` to this (at least hyper's default, 200). At most 10,000.
    pub listen_streams_per_connection: usize,
    /// Seed of the clients' random choices, for repeatable key sequences. Default 1.
    pub seed: u64,
    /// Distinct users (the default) or one anonymous user.
    pub principals: Principals,
    /// Merged into the generated resmux config (e.g. `[proxy_config.cache] enabled = false`).
    pub proxy_config: toml::Table,
    /// Merged into every generated `[[upstream]]` (e.g. `max_in_flight = 256`).
    pub upstream_config: toml::Table,
    /// Makes this a cluster scenario (`resmux-load run cluster`): several replicas of the
    /// proxy, measured with and without a shared Redis. See `crate::cluster`.
    pub cluster: Option<ClusterSpec>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            name: String::new(),
            figure: String::new(),
            sides: vec![Side::Proxy],
            duration: Dur(Duration::from_secs(10)),
            warmup: Dur(Duration::ZERO),
            clients: 0,
            requests: None,
            requests_per_client: None,
            request_timeout: Dur(Duration::from_secs(10)),
            upstreams: 1,
            resources: 100,
            resource_bytes: 1024,
            page_size: 50,
            ttl_ms: 60_000,
            public: true,
            upstream_delay_ms: 0,
            zipf_s: 1.0,
            mix: Mix::reads_only(),
            listeners: 0,
            update_hz: 1.0,
            slow_listeners: 0.0,
            listen_streams_per_connection: 1,
            seed: 1,
            principals: Principals::Distinct,
            proxy_config: toml::Table::new(),
            upstream_config: toml::Table::new(),
            cluster: None,
        }
    }
}

/// Upper bounds that keep every run finite and within one machine's means.
pub mod limits {
    use std::time::Duration;
    pub const DURATION: Duration = Duration::from_secs(600);
    pub const WARMUP: Duration = Duration::from_secs(60);
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
    /// Each client or listener holds at least one socket; the generator raises its open-file
    /// limit to fit (where the hard limit may be raised) and caps listeners to what fits.
    pub const CONNECTIONS: usize = 110_000;
    /// Listen streams per HTTP/2 connection.
    pub const STREAMS_PER_CONNECTION: usize = 10_000;
    pub const UPSTREAMS: usize = 64;
    pub const RESOURCES: usize = 1_000_000;
    pub const RESOURCE_BYTES: usize = 1 << 20;
    pub const UPDATE_HZ: f64 = 100.0;
}

impl Scenario {
    /// Parses and validates scenario text; `name` is the file stem.
    pub fn parse(name: &str, text: &str) -> Result<Self, Vec<String>> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        s.name = name.to_owned();
        let problems = s.problems();
        if problems.is_empty() { Ok(s) } else { Err(problems) }
    }

    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario");
        Self::parse(name, &text).map_err(|errors| anyhow::anyhow!("{}:\n  {}", path.display(), errors.join("\n  ")))
    }

    /// Every rule the file breaks.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let mut check = |ok: bool, msg: &str| {
            if !ok {
                p.push(msg.to_owned());
            }
        };
        check(!self.figure.trim().is_empty(), "`figure` must say what this scenario shows");
        check(!self.sides.is_empty(), "`sides` must name at least one side");
        let mut sides = self.sides.clone();
        sides.sort();
        sides.dedup();
        check(sides.len() == self.sides.len(), "`sides` lists a side twice");
        check(!self.duration.0.is_zero() && self.duration.0 <= limits::DURATION, "`duration` must be within (0, 10m]");
        check(self.warmup.0 <= limits::WARMUP, "`warmup` must be at most 1m");
        check(
            !self.request_timeout.0.is_zero() && self.request_timeout.0 <= limits::REQUEST_TIMEOUT,
            "`request_timeout` must be within (0, 1m]",
        );
        check(self.clients + self.listeners > 0, "set `clients` or `listeners` (or both)");
        check((0.0..0.5).contains(&self.slow_listeners), "`slow_listeners` must be within [0, 0.5)");
        check(self.clients + self.listeners <= limits::CONNECTIONS, "`clients` + `listeners` must be at most 110000");
        check(
            (1..=limits::STREAMS_PER_CONNECTION).contains(&self.listen_streams_per_connection),
            "`listen_streams_per_connection` must be within 1..=10000",
        );
        check(
            self.listen_streams_per_connection == 1 || self.cluster.is_none(),
            "`listen_streams_per_connection` above 1 is for single-proxy scenarios (a cluster's listeners hold a connection each)",
        );
        check(self.clients == 0 || self.mix.total() > 0, "`mix` needs a positive weight");
        check(self.requests != Some(0), "`requests` must be positive");
        check(self.requests_per_client != Some(0), "`requests_per_client` must be positive");
        check((1..=limits::UPSTREAMS).contains(&self.upstreams), "`upstreams` must be within 1..=64");
        check((1..=limits::RESOURCES).contains(&self.resources), "`resources` must be within 1..=1000000");
        check(self.resource_bytes <= limits::RESOURCE_BYTES, "`resource_bytes` must be at most 1 MiB");
        check(self.page_size >= 1, "`page_size` must be positive");
        check(self.upstream_delay_ms <= 10_000, "`upstream_delay_ms` must be at most 10000");
        check(self.zipf_s.is_finite() && (0.0..=10.0).contains(&self.zipf_s), "`zipf_s` must be within 0..=10");
        check(
            self.listeners == 0
                || (self.update_hz.is_finite() && self.update_hz > 0.0 && self.update_hz <= limits::UPDATE_HZ),
            "`update_hz` must be within (0, 100] when there are listeners",
        );
        if let Some(c) = &self.cluster {
            p.extend(c.problems(self));
        }
        p
    }

    /// Total keys a read draws from: every resource of every upstream.
    pub fn keys(&self) -> usize {
        self.upstreams * self.resources
    }

    /// One line describing the load, for reports.
    pub fn load_line(&self) -> String {
        let mut parts = Vec::new();
        if self.clients > 0 {
            let mut c = format!("{} clients", self.clients);
            if let Some(n) = self.requests_per_client {
                c.push_str(&format!(" × {n} request(s)"));
            }
            parts.push(c);
            let mut mix = Vec::new();
            for (w, name) in [
                (self.mix.read, "read"),
                (self.mix.list, "list"),
                (self.mix.call, "call"),
                (self.mix.discover, "discover"),
            ] {
                if w > 0 {
                    mix.push(format!("{name} {w}"));
                }
            }
            parts.push(format!("mix {}", mix.join(" / ")));
        }
        if self.listeners > 0 {
            let via = match self.listen_streams_per_connection {
                1 => String::new(),
                n => format!(" ({n} per HTTP/2 connection)"),
            };
            parts.push(format!("{} listeners{via}, {} update(s)/s", self.listeners, self.update_hz));
        }
        parts.push(format!(
            "{} upstream(s) × {} resources of {} B, Zipf s={}, upstream delay {} ms",
            self.upstreams, self.resources, self.resource_bytes, self.zipf_s, self.upstream_delay_ms
        ));
        let mut time = format!("{}", humantime::format_duration(self.duration.0));
        if !self.warmup.0.is_zero() {
            time.push_str(&format!(" after {} warmup", humantime::format_duration(self.warmup.0)));
        }
        if let Some(n) = self.requests {
            time.push_str(&format!(", at most {n} requests"));
        }
        parts.push(time);
        parts.join("; ")
    }
}

/// The crate's own scenario directory.
pub fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// A command-line scenario argument: a path, or the name of a file in the scenario directory
/// (`hot-read` for `loadtests/scenarios/hot-read.toml`).
pub fn resolve(arg: &str) -> PathBuf {
    let path = PathBuf::from(arg);
    if path.exists() || arg.contains('/') || arg.ends_with(".toml") {
        return path;
    }
    scenario_dir().join(format!("{arg}.toml"))
}

#[cfg(test)]
mod tests;
