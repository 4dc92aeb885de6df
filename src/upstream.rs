//! Upstream MCP servers. An [`Upstream`] is a cheap handle over one server: its transport
//! (Streamable HTTP or a supervised stdio process), its protocol era (modern, or a legacy
//! session), in-flight limit, deadline, id remapping, one retry for idempotent requests, and
//! what discovery told about it.

pub mod backoff;
pub mod catalog;
pub mod credential;
mod discovery;
mod era;
mod headers;
pub mod http;
pub mod large;
pub mod legacy;
pub mod listen;
pub mod relay;

mod request;
pub use resmux_http::sse;
pub mod stats;
pub mod stdio;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::mcp::notify::Unsolicited;
pub use credential::OnBehalf;
pub use discovery::UpstreamInfo;
pub use era::{Era, UpstreamSession};
// The request headers a 2026-07-28 or legacy request carries, for other clients (resmux-load).
pub use crate::jsonrpc::{Malformed, Reply};
pub use headers::{Headers, ParamHeader};
pub use large::{Fetch, LargeBody};
pub use relay::Relayed;

use crate::config::{Transport as TransportConfig, UpstreamConfig};
use crate::mcp;
use crate::telemetry::Metrics;

/// Where an upstream's `notifications/progress` for one request go: whole JSON-RPC messages,
/// as the upstream sent them (its token is the client's, passed through on HTTP, where the
/// notification travels on the request's own response stream). Bounded, and fed with
/// `try_send`: when the client reads slower than the upstream reports, intermediate reports
/// are dropped (progress is a hint; the response itself never goes through here).
pub type ProgressSink = tokio::sync::mpsc::Sender<Bytes>;

/// Why an upstream's handle could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("upstream `{upstream}`: {source}")]
    Url {
        upstream: String,
        #[source]
        source: ::http::uri::InvalidUri,
    },
    #[error("upstream `{upstream}` headers: {}", crate::error::chain(.source))]
    Headers {
        upstream: String,
        #[source]
        source: http::StaticHeaderError,
    },
    /// Its own TLS settings (`tls_ca_file`, a client certificate) cannot be loaded.
    #[error("upstream `{upstream}` TLS: {}", crate::error::chain(.source))]
    Tls {
        upstream: String,
        #[source]
        source: crate::tls::TlsError,
    },
    #[error("upstream `{upstream}` {}", crate::error::chain(.source))]
    Credential {
        upstream: String,
        #[source]
        source: credential::CredentialSetupError,
    },
}

/// Handle to one upstream server. Clones share everything.
#[derive(Clone)]
pub struct Upstream(Arc<Inner>);

struct Inner {
    config: UpstreamConfig,
    /// Its identity while it runs (see [`Upstream::slot`]).
    slot: u32,
    transport: Transport,
    /// How requests authenticate to the upstream (HTTP only; `Static` for stdio).
    credential: credential::Credential,
    /// Bounds concurrent requests to this upstream (`max_in_flight`); waiters queue fairly and
    /// give up at their deadline.
    in_flight: Arc<Semaphore>,
    /// Upstream-side JSON-RPC ids: one counter per upstream, so that requests of many
    /// downstream clients can share one channel without colliding.
    next_id: AtomicU64,
    /// What discovery (or a legacy `initialize`) said; `None` until then.
    info: RwLock<Option<Arc<UpstreamInfo>>>,
    /// Bumped each time `info` changes.
    info_version: watch::Sender<u64>,
    /// The protocol era and, for legacy servers, the live session.
    era: watch::Sender<Era>,
    /// Serializes legacy re-initialization (one handshake however many requests saw the
    /// session expire).
    reinit: tokio::sync::Mutex<()>,
    /// Legacy notifications that came unasked (and gaps in them), for the hub. Bounded: a
    /// consumer that lags sees `Lagged` and treats it as a gap.
    unsolicited: broadcast::Sender<Unsolicited>,
    /// Legacy session numbering.
    sessions: AtomicU64,
    /// Whether a probe has finished (either way): until then requests wait briefly for the
    /// era; afterwards an unknown era means unreachable, and requests fail fast.
    probed: std::sync::atomic::AtomicBool,
    /// This upstream's own cancellation (a child of the proxy's): stopping it ends its
    /// discovery, its stdio child and its legacy GET stream, and nothing else.
    cancel: CancellationToken,
    /// Its tools and prompts by name, for routing calls and mirroring tool arguments.
    catalog: catalog::Catalog,
    /// Live figures for the admin listener.
    stats: stats::Stats,
    metrics: Metrics,
    /// This upstream's metric handles, resolved once.
    meter: crate::telemetry::metrics::UpstreamMeter,
    /// The proxy's task tracker: the legacy GET stream and held calls run on it.
    tracker: TaskTracker,
}

enum Transport {
    Http(Arc<http::HttpTransport>),
    Stdio(stdio::StdioTransport),
}

impl Upstream {
    /// Builds the handle and starts what it runs in the background (a stdio process's
    /// supervisor, the discovery loop) on `tracker`, stopping on `cancel` or [`Upstream::stop`].
    /// `slot` is its identity while it runs (cache keys, the hub's feed, the epochs).
    pub fn start(
        config: UpstreamConfig,
        slot: u32,
        client: &http::HttpClient,
        metrics: &Metrics,
        cancel: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<Self, SetupError> {
        let cancel = &cancel.child_token();
        let unsolicited = broadcast::channel(1024).0;
        let mut credential = credential::Credential::Static;
        let transport = match config.transport() {
            TransportConfig::Http { url } => {
                let upstream = || config.name.clone();
                let uri = url.parse().map_err(|source| SetupError::Url { upstream: upstream(), source })?;
                let headers = http::static_headers(&config.headers)
                    .map_err(|source| SetupError::Headers { upstream: upstream(), source })?;
                credential = credential::Credential::from_config(&config.name, &config.credential)
                    .map_err(|source| SetupError::Credential { upstream: upstream(), source })?;
                Transport::Http(Arc::new(http::HttpTransport::new(
                    config.name.clone(),
                    client.clone(),
                    uri,
                    headers,
                    config.max_message_bytes,
                )))
            }
            TransportConfig::Stdio { command } => {
                let spec = stdio::StdioSpec {
                    name: config.name.clone(),
                    command,
                    env: config.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    cwd: config.cwd.clone(),
                    max_line: config.max_message_bytes,
                    backoff_max: config.restart_backoff_max,
                    unsolicited: unsolicited.clone(),
                };
                Transport::Stdio(stdio::StdioTransport::spawn(spec, cancel.clone(), tracker))
            }
        };
        let meter = metrics.upstream_meter(&config.name);
        let upstream = Self(Arc::new(Inner {
            in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
            config,
            slot,
            transport,
            credential,
            next_id: AtomicU64::new(1),
            info: RwLock::new(None),
            info_version: watch::channel(0).0,
            era: watch::channel(Era::Unknown).0,
            reinit: tokio::sync::Mutex::new(()),
            unsolicited,
            sessions: AtomicU64::new(0),
            probed: std::sync::atomic::AtomicBool::new(false),
            cancel: cancel.clone(),
            catalog: catalog::Catalog::default(),
            stats: stats::Stats::default(),
            meter,
            metrics: metrics.clone(),
            tracker: tracker.clone(),
        }));
        tracker.spawn(discovery::run(upstream.clone(), cancel.clone()));
        Ok(upstream)
    }

    /// Its identity while it runs: the slot its cache entries, epochs, watches and feed are
    /// kept under. Stable across config reloads that leave this upstream untouched; a changed
    /// upstream is a new handle in a new slot. A slot is reused only once every handle on it
    /// is gone and its entries dropped.
    pub fn slot(&self) -> u32 {
        self.0.slot
    }

    /// Stops what it runs in the background: discovery, its stdio child (stdin closed, then
    /// killed after its grace), its legacy GET stream. Requests already in flight on an HTTP
    /// upstream finish; a removed or replaced upstream is stopped once they have.
    pub fn stop(&self) {
        self.0.cancel.cancel();
    }

    /// The configured name.
    pub fn name(&self) -> &str {
        &self.0.config.name
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &UpstreamConfig {
        &self.0.config
    }

    /// Its tools and prompts by name.
    pub fn catalog(&self) -> &catalog::Catalog {
        &self.0.catalog
    }

    /// Requests, failures and recent latency.
    pub fn stats(&self) -> stats::StatsSnapshot {
        self.0.stats.snapshot()
    }

    /// Requests in flight now, and the bound (`max_in_flight`).
    pub fn in_flight(&self) -> (usize, usize) {
        let max = self.0.config.max_in_flight;
        (max.saturating_sub(self.0.in_flight.available_permits()), max)
    }

    /// The era as a label: `modern`, a legacy version, or `unknown` before discovery.
    pub fn era_label(&self) -> String {
        match &*self.0.era.borrow() {
            Era::Legacy(s) => s.version.clone(),
            Era::Modern => "modern".into(),
            Era::Unknown => "unknown".into(),
        }
    }

    /// Its metric handles.
    pub fn meter(&self) -> &crate::telemetry::metrics::UpstreamMeter {
        &self.0.meter
    }

    /// The era as a metric label: `modern`, `legacy` or `unknown`.
    pub fn era_kind(&self) -> &'static str {
        match &*self.0.era.borrow() {
            Era::Legacy(_) => "legacy",
            Era::Modern => "modern",
            Era::Unknown => "unknown",
        }
    }

    /// Times the proxy reconnected since start: stdio processes restarted, legacy sessions
    /// initialized again.
    pub fn reconnects(&self) -> u64 {
        self.generation().saturating_sub(1)
            + self.0.sessions.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(1)
    }

    /// Whether requests reach it over HTTP (where `Mcp-Param-*` headers exist).
    pub fn is_http(&self) -> bool {
        matches!(self.0.transport, Transport::Http(_))
    }

    /// What discovery told, once known.
    pub fn info(&self) -> Option<Arc<UpstreamInfo>> {
        self.0.info.read().expect("info lock").clone()
    }

    fn set_info(&self, info: Option<UpstreamInfo>) {
        *self.0.info.write().expect("info lock") = info.map(Arc::new);
        self.0.info_version.send_modify(|v| *v += 1);
    }

    /// Changes whenever what discovery told changes (era changes included).
    pub fn info_watch(&self) -> watch::Receiver<u64> {
        self.0.info_version.subscribe()
    }

    /// Waits until discovery has answered once, or `deadline`.
    pub async fn wait_info(&self, deadline: Instant) -> Option<Arc<UpstreamInfo>> {
        let mut rx = self.0.info_version.subscribe();
        loop {
            if let Some(info) = self.info() {
                return Some(info);
            }
            if timeout_at(deadline, rx.changed()).await.is_err() {
                return self.info();
            }
        }
    }

    /// The current protocol era.
    pub fn current_era(&self) -> Era {
        self.0.era.borrow().clone()
    }

    /// Changes whenever the era (or the legacy session) changes.
    pub fn era_watch(&self) -> watch::Receiver<Era> {
        self.0.era.subscribe()
    }

    /// Receives legacy notifications the upstream sent unasked, and gaps in them.
    pub fn unsolicited(&self) -> broadcast::Receiver<Unsolicited> {
        self.0.unsolicited.subscribe()
    }

    /// The protocol version spoken to this upstream now.
    pub fn protocol_version(&self) -> &str {
        // The session's version lives as long as the era; a static str is simplest for callers.
        match &*self.0.era.borrow() {
            Era::Legacy(s) => {
                legacy::VERSIONS.iter().find(|v| **v == s.version).copied().unwrap_or(mcp::MODERN_VERSION)
            }
            _ => mcp::MODERN_VERSION,
        }
    }

    /// The protocol era, as part of cache keys (0: 2026-07-28, then the legacy versions).
    pub fn cache_era(&self) -> u8 {
        match &*self.0.era.borrow() {
            Era::Legacy(s) => legacy::era_number(&s.version),
            _ => 0,
        }
    }

    /// For stdio upstreams, the live process generation (0 for HTTP).
    fn generation(&self) -> u64 {
        match &self.0.transport {
            Transport::Http(_) => 0,
            Transport::Stdio(t) => t.generation(),
        }
    }

    /// Waits until a stdio upstream restarts into a generation other than `seen`; never
    /// returns for HTTP upstreams.
    async fn restarted(&self, seen: u64) -> u64 {
        match &self.0.transport {
            Transport::Http(_) => std::future::pending().await,
            Transport::Stdio(t) => t.wait_generation_change(seen).await,
        }
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("name", &self.name()).finish()
    }
}
