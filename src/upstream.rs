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
pub mod legacy;
pub mod listen;
pub mod relay;
mod reply;
pub mod sse;
pub mod stats;
pub mod stdio;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use credential::OnBehalf;
pub use discovery::UpstreamInfo;
pub use legacy::{Era, Unsolicited};
pub use reply::Reply;

use crate::config::{Transport as TransportConfig, UpstreamConfig};
use crate::error::UpstreamError;
use crate::jsonrpc::{RequestId, encode_request};
use crate::mcp;
use crate::telemetry::Metrics;

/// Where an upstream's `notifications/progress` for one request go: whole JSON-RPC messages,
/// as the upstream sent them (its token is the client's, passed through on HTTP, where the
/// notification travels on the request's own response stream). Bounded, and fed with
/// `try_send`: when the client reads slower than the upstream reports, intermediate reports
/// are dropped (progress is a hint; the response itself never goes through here).
pub type ProgressSink = tokio::sync::mpsc::Sender<Bytes>;

/// Handle to one upstream server. Clones share everything.
#[derive(Clone)]
pub struct Upstream(Arc<Inner>);

struct Inner {
    config: UpstreamConfig,
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
    /// The proxy's cancellation, for tasks started later (legacy GET streams).
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

/// How long a request waits for the era of an upstream still being probed before it goes
/// ahead in modern form.
const ERA_WAIT: Duration = Duration::from_secs(2);

impl Upstream {
    /// Builds the handle and starts what it runs in the background (a stdio process's
    /// supervisor, the discovery loop) on `tracker`, stopping on `cancel`.
    pub fn start(
        config: UpstreamConfig,
        client: &http::HttpClient,
        metrics: &Metrics,
        cancel: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<Self, String> {
        let unsolicited = broadcast::channel(1024).0;
        let mut credential = credential::Credential::Static;
        let transport = match config.transport() {
            TransportConfig::Http { url } => {
                let uri = url.parse().map_err(|e| format!("upstream `{}`: {e}", config.name))?;
                let headers = http::static_headers(&config.headers)
                    .map_err(|e| format!("upstream `{}` headers: {}", config.name, crate::tls::error_chain(&e)))?;
                credential = credential::Credential::from_config(&config.name, &config.credential)
                    .map_err(|e| format!("upstream `{}` {}", config.name, crate::tls::error_chain(&e)))?;
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
        self.generation().saturating_sub(1) + self.0.sessions.load(Ordering::Relaxed).saturating_sub(1)
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

    /// Sends one request with ready-made `params` and returns the upstream's answer in
    /// 2026-07-28 shape. The mirrored headers are derived from `params` (see
    /// [`headers`]). Requests other
    /// than `tools/call` are retried once when the failure means the request may not have
    /// been processed; a legacy session that expired is re-initialized first.
    ///
    /// This is a request of the proxy's own ([`OnBehalf::Proxy`]); a caller's goes through
    /// [`Upstream::request_with`].
    pub async fn request(&self, method: &str, params: &[u8]) -> Result<Reply, UpstreamError> {
        self.request_with(method, params, None, OnBehalf::Proxy).await
    }

    /// [`Upstream::request`] on behalf of `on` (whose upstream credential it carries),
    /// relaying the upstream's progress notifications to `progress`.
    pub async fn request_with(
        &self,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        on: OnBehalf<'_>,
    ) -> Result<Reply, UpstreamError> {
        let started = Instant::now();
        let span = crate::telemetry::upstream_span(self.name(), method);
        let result = self.request_inner(method, params, progress, on).instrument(span).await;
        let outcome = match &result {
            Ok(Reply::Result(_)) => "ok",
            Ok(Reply::Error(_)) => "error",
            Err(UpstreamError::Timeout { .. }) => "timeout",
            Err(UpstreamError::Unavailable { .. }) => "unavailable",
            Err(UpstreamError::Tls { .. }) => "tls",
            Err(UpstreamError::Credential { .. }) => "credential",
            Err(_) => "failed",
        };
        let took = started.elapsed();
        self.0.metrics.upstream(self.name(), outcome);
        self.0.meter.request_seconds(method, took.as_secs_f64());
        self.0.stats.record(took, result.is_err());
        result
    }

    async fn request_inner(
        &self,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        on: OnBehalf<'_>,
    ) -> Result<Reply, UpstreamError> {
        let timeout = self.0.config.timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || UpstreamError::Timeout { upstream: self.name().to_owned(), after: timeout };
        // With trace export, `_meta.traceparent` names this upstream request's span.
        let traced = crate::telemetry::with_traceparent(params);
        let params = &*traced;
        let _permit = timeout_at(deadline, self.0.in_flight.acquire())
            .await
            .map_err(|_| timed_out())?
            .expect("semaphore is never closed");
        let mut era = self.wait_era(deadline).await;
        let retries = if method == mcp::method::TOOLS_CALL { 0 } else { 1 };
        let mut attempt = 0;
        let mut refreshed = false;
        loop {
            let auth = timeout_at(deadline, self.auth_for(on)).await.map_err(|_| timed_out())??;
            let header = auth.as_deref().map(|a| a.header());
            let result = timeout_at(deadline, self.send(&era, method, params, progress, header))
                .await
                .map_err(|_| timed_out())
                .and_then(|r| r);
            // A refused token is dropped whatever the method, so the next request fetches a
            // fresh one; an idempotent request is sent once more with it right away.
            if let Some(seen) = &auth
                && unauthorized(&result)
            {
                self.0.credential.invalidate(on, seen).await;
                if !refreshed && retries > 0 {
                    tracing::debug!(upstream = %self.name(), "upstream refused its token (401); refreshing once");
                    refreshed = true;
                    continue;
                }
            }
            match result {
                Err(UpstreamError::SessionLost { .. }) if attempt == 0 => {
                    attempt += 1;
                    era = timeout_at(deadline, self.reinitialize(&era)).await.map_err(|_| timed_out())??;
                }
                Err(e) if e.is_retryable() && attempt < retries => {
                    tracing::debug!(upstream = %self.name(), error = %e, "retrying once");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The credential token for a request on behalf of `on`, when the upstream takes one.
    async fn auth_for(&self, on: OnBehalf<'_>) -> Result<Option<Arc<credential::Issued>>, UpstreamError> {
        self.0.credential.token(on).await.map_err(|e| {
            tracing::warn!(upstream = %self.name(), error = %crate::tls::error_chain(&e), "no upstream credential");
            UpstreamError::Credential { upstream: self.name().to_owned(), source: Arc::new(e) }
        })
    }

    /// The credential token of the proxy's own requests.
    pub(super) async fn proxy_auth(&self) -> Result<Option<Arc<credential::Issued>>, UpstreamError> {
        self.auth_for(OnBehalf::Proxy).await
    }

    /// Exchanged tokens cached now (`token_exchange` upstreams; 0 otherwise).
    pub fn cached_exchanges(&self) -> u64 {
        self.0.credential.cached_exchanges()
    }

    /// The era to send in: known, or (while probing) known within a short wait, or modern.
    async fn wait_era(&self, deadline: Instant) -> Era {
        let mut rx = self.0.era.subscribe();
        let pinned_legacy = legacy::VERSIONS.contains(&self.0.config.protocol.as_str());
        let until = if pinned_legacy {
            deadline
        } else if self.0.probed.load(Ordering::Acquire) {
            Instant::now()
        } else {
            deadline.min(Instant::now() + ERA_WAIT)
        };
        let known = timeout_at(until, rx.wait_for(|e| !matches!(e, Era::Unknown))).await;
        match known {
            Ok(Ok(era)) => era.clone(),
            _ => Era::Modern,
        }
    }

    async fn send(
        &self,
        era: &Era,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        auth: http::Auth<'_>,
    ) -> Result<Reply, UpstreamError> {
        match era {
            Era::Legacy(session) => self.send_legacy(session, method, params, progress, auth).await,
            _ => self.send_modern(method, params, progress, auth).await,
        }
    }

    fn next_id(&self) -> RequestId {
        RequestId::number(self.0.next_id.fetch_add(1, Ordering::Relaxed))
    }

    async fn send_modern(
        &self,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        auth: http::Auth<'_>,
    ) -> Result<Reply, UpstreamError> {
        let id = self.next_id();
        let body: Bytes = encode_request(&id, method, params);
        match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::modern(method, params, |tool| self.0.catalog.param_headers(tool));
                let ex =
                    t.exchange(id.as_json(), body, &headers, auth, &legacy::answer_server_request, progress).await?;
                Ok(ex.reply.with_status(ex.status))
            }
            Transport::Stdio(t) => t.exchange(id.as_json(), body).await,
        }
    }

    async fn send_legacy(
        &self,
        session: &legacy::Session,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        auth: http::Auth<'_>,
    ) -> Result<Reply, UpstreamError> {
        let params = legacy::translate_params(params);
        let id = self.next_id();
        let body = encode_request(&id, method, &params);
        let reply = match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::Legacy { version: &session.version, session: session.id.as_deref() };
                match t.exchange(id.as_json(), body, &headers, auth, &legacy::answer_server_request, progress).await {
                    Ok(ex) if http::session_lost(ex.status, Some(&ex.reply)) => return Err(self.session_lost()),
                    // The proxy's credential was refused: an upstream failure (and a cue to
                    // refresh the token), not an answer for the client.
                    Ok(ex) if ex.status == ::http::StatusCode::UNAUTHORIZED => {
                        return Err(UpstreamError::Status { upstream: self.name().to_owned(), status: 401 });
                    }
                    Ok(ex) => ex.reply,
                    Err(UpstreamError::Status { status: 404, .. }) => return Err(self.session_lost()),
                    Err(e) => return Err(e),
                }
            }
            Transport::Stdio(t) => t.exchange(id.as_json(), body).await?,
        };
        Ok(legacy::translate_reply(method, &params, reply, &self.0.config))
    }

    /// Sends a call whose mid-call questions (legacy server requests with a method in `relay`)
    /// are handed back instead of declined. Only legacy HTTP upstreams ask such questions on
    /// the call's own stream; for any other upstream this is [`Upstream::request`].
    pub async fn call_relayed(
        &self,
        method: &str,
        params: &[u8],
        relay: Vec<String>,
        progress: Option<&ProgressSink>,
        on: OnBehalf<'_>,
    ) -> Result<Relayed, UpstreamError> {
        let timeout = self.0.config.timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || UpstreamError::Timeout { upstream: self.name().to_owned(), after: timeout };
        let era = self.wait_era(deadline).await;
        let (Era::Legacy(session), Transport::Http(t)) = (&era, &self.0.transport) else {
            return self.request_with(method, params, progress, on).await.map(Relayed::Done);
        };
        if relay.is_empty() {
            return self.request_with(method, params, progress, on).await.map(Relayed::Done);
        }
        let auth = timeout_at(deadline, self.auth_for(on)).await.map_err(|_| timed_out())??;
        let header = auth.as_deref().map(|a| a.header());
        let permit = timeout_at(deadline, self.0.in_flight.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .expect("semaphore is never closed");
        let translated = legacy::translate_params(params).into_owned();
        let id = self.next_id();
        let body = encode_request(&id, method, &translated);
        let headers = http::Headers::Legacy { version: &session.version, session: session.id.as_deref() };
        let opened =
            timeout_at(deadline, t.open(id.as_json(), body, &headers, header)).await.map_err(|_| timed_out())??;
        match opened {
            http::Opened::Reply(ex) => {
                if http::session_lost(ex.status, Some(&ex.reply)) {
                    drop(permit);
                    // A fresh session, then the plain path (no questions can be relayed there).
                    self.reinitialize(&era).await?;
                    return self.request_with(method, params, None, on).await.map(Relayed::Done);
                }
                Ok(Relayed::Done(legacy::translate_reply(method, &translated, ex.reply, &self.0.config)))
            }
            http::Opened::Stream { body, .. } => {
                let owned = relay::OwnedHeaders {
                    version: session.version.clone(),
                    session: session.id.clone(),
                    auth: header.cloned(),
                };
                let held = relay::hold(
                    t.clone(),
                    owned,
                    id.as_json().to_owned(),
                    body,
                    relay,
                    legacy::answer_server_request,
                    Some(permit),
                    &self.0.tracker,
                );
                self.next_step(held, method, &translated).await
            }
        }
    }

    /// Answers the pending question of a held call and reads on to its next step.
    pub async fn resume_relayed(
        &self,
        mut held: relay::HeldCall,
        method: &str,
        params: &[u8],
        answer: Bytes,
    ) -> Result<Relayed, UpstreamError> {
        if !held.answer(answer).await {
            return Err(UpstreamError::Disconnected {
                upstream: self.name().to_owned(),
                reason: "held call ended".into(),
            });
        }
        let translated = legacy::translate_params(params).into_owned();
        self.next_step(held, method, &translated).await
    }

    async fn next_step(
        &self,
        mut held: relay::HeldCall,
        method: &str,
        translated: &[u8],
    ) -> Result<Relayed, UpstreamError> {
        let timeout = self.0.config.timeout;
        let step = tokio::time::timeout(timeout, held.next())
            .await
            .map_err(|_| UpstreamError::Timeout { upstream: self.name().to_owned(), after: timeout })?;
        match step {
            relay::Step::Asked(question) => Ok(Relayed::Asked(question, held)),
            relay::Step::Done(Ok(reply)) => {
                Ok(Relayed::Done(legacy::translate_reply(method, translated, reply, &self.0.config)))
            }
            relay::Step::Done(Err(e)) => Err(match e {
                UpstreamError::Disconnected { reason, .. } => {
                    UpstreamError::Disconnected { upstream: self.name().to_owned(), reason }
                }
                other => other,
            }),
        }
    }

    fn session_lost(&self) -> UpstreamError {
        UpstreamError::SessionLost { upstream: self.name().to_owned() }
    }

    /// Opens a `subscriptions/listen` for `filter` (upstream URIs). The returned stream yields
    /// the acknowledgment, the changes, and how it ended. Modern upstreams only.
    pub async fn listen(&self, filter: &listen::Filter) -> Result<listen::UpstreamListen, UpstreamError> {
        let mut params: serde_json::Value = serde_json::from_str(&discovery::own_params()).expect("valid JSON");
        params["notifications"] = filter.to_json();
        let params = serde_json::to_vec(&params).expect("serializable");
        let method = mcp::method::LISTEN;
        let id = self.next_id();
        let body = encode_request(&id, method, &params);
        let id_json = id.as_json().to_owned();
        match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::modern(method, &params, |_| Arc::from(Vec::new()));
                let auth = self.proxy_auth().await?;
                match t.open(&id_json, body, &headers, auth.as_deref().map(|a| a.header())).await? {
                    http::Opened::Stream { body, .. } => {
                        Ok(listen::UpstreamListen::http(id_json, body, t.max_message()))
                    }
                    http::Opened::Reply(ex) => {
                        let end = match ex.reply {
                            Reply::Error(e) => listen::ListenEnd::Refused(e),
                            Reply::Result(_) => listen::ListenEnd::Graceful,
                        };
                        Ok(listen::UpstreamListen::answered(id_json, listen::ListenEvent::End(end)))
                    }
                }
            }
            Transport::Stdio(t) => {
                let (messages, guard) = t.open_listen(&id_json, body).await?;
                Ok(listen::UpstreamListen::stdio(id_json, messages, guard))
            }
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

/// Whether the upstream refused the request's credential: HTTP 401, with or without a
/// JSON-RPC error body.
fn unauthorized(result: &Result<Reply, UpstreamError>) -> bool {
    match result {
        Err(UpstreamError::Status { status, .. }) => *status == 401,
        Ok(Reply::Error(e)) => e.http_status == Some(401),
        _ => false,
    }
}

/// The outcome of a call that may ask the client questions.
pub enum Relayed {
    Done(Reply),
    /// The upstream asked something; the call is held until the client answers.
    Asked(relay::ServerRequest, relay::HeldCall),
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("name", &self.name()).finish()
    }
}
