//! Upstream MCP servers. An [`Upstream`] is a cheap handle over one server: its transport
//! (Streamable HTTP or a supervised stdio process), in-flight limit, deadline, id remapping,
//! one retry for idempotent requests, and what `server/discover` told about it.

pub mod backoff;
mod discovery;
pub mod http;
pub mod listen;
mod reply;
pub mod sse;
pub mod stdio;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use discovery::UpstreamInfo;
pub use reply::Reply;

use crate::config::{Transport as TransportConfig, UpstreamConfig};
use crate::error::UpstreamError;
use crate::jsonrpc::{RequestId, encode_request};
use crate::mcp;

/// Handle to one upstream server. Clones share everything.
#[derive(Clone)]
pub struct Upstream(Arc<Inner>);

struct Inner {
    config: UpstreamConfig,
    transport: Transport,
    /// Bounds concurrent requests to this upstream (`max_in_flight`); waiters queue fairly and
    /// give up at their deadline.
    in_flight: Semaphore,
    /// Upstream-side JSON-RPC ids: one counter per upstream, so that requests of many
    /// downstream clients can share one channel without colliding.
    next_id: AtomicU64,
    /// What the latest successful `server/discover` said; `None` until then.
    info: RwLock<Option<Arc<UpstreamInfo>>>,
    /// Bumped each time `info` changes.
    info_version: watch::Sender<u64>,
}

enum Transport {
    Http(Box<http::HttpTransport>),
    Stdio(stdio::StdioTransport),
}

impl Upstream {
    /// Builds the handle and starts what it runs in the background (a stdio process's
    /// supervisor, the discovery loop) on `tracker`, stopping on `cancel`.
    pub fn start(
        config: UpstreamConfig,
        client: &http::HttpClient,
        cancel: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<Self, String> {
        let transport = match config.transport() {
            TransportConfig::Http { url } => {
                let uri = url.parse().map_err(|e| format!("upstream `{}`: {e}", config.name))?;
                let headers = http::static_headers(&config.headers)
                    .map_err(|e| format!("upstream `{}` headers: {e}", config.name))?;
                Transport::Http(Box::new(http::HttpTransport::new(
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
                };
                Transport::Stdio(stdio::StdioTransport::spawn(spec, cancel.clone(), tracker))
            }
        };
        let upstream = Self(Arc::new(Inner {
            in_flight: Semaphore::new(config.max_in_flight),
            config,
            transport,
            next_id: AtomicU64::new(1),
            info: RwLock::new(None),
            info_version: watch::channel(0).0,
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

    /// What `server/discover` told, once known.
    pub fn info(&self) -> Option<Arc<UpstreamInfo>> {
        self.0.info.read().expect("info lock").clone()
    }

    fn set_info(&self, info: Option<UpstreamInfo>) {
        *self.0.info.write().expect("info lock") = info.map(Arc::new);
        self.0.info_version.send_modify(|v| *v += 1);
    }

    /// Changes whenever what `server/discover` told changes.
    pub fn info_watch(&self) -> watch::Receiver<u64> {
        self.0.info_version.subscribe()
    }

    /// Waits until `server/discover` has answered once, or `deadline`.
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

    /// The protocol version to speak to this upstream.
    pub fn protocol_version(&self) -> &'static str {
        mcp::MODERN_VERSION
    }

    /// The protocol era, as part of cache keys (0: 2026-07-28).
    pub fn era(&self) -> u8 {
        0
    }

    /// Sends one request with ready-made `params` and returns the upstream's answer.
    /// `mcp_name` is mirrored into the `Mcp-Name` header. Requests other than `tools/call`
    /// are retried once when the failure means the request may not have been processed.
    pub async fn request(&self, method: &str, params: &[u8], mcp_name: Option<&str>) -> Result<Reply, UpstreamError> {
        let timeout = self.0.config.timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || UpstreamError::Timeout { upstream: self.name().to_owned(), after: timeout };
        let _permit = timeout_at(deadline, self.0.in_flight.acquire())
            .await
            .map_err(|_| timed_out())?
            .expect("semaphore is never closed");
        let retries = if method == mcp::method::TOOLS_CALL { 0 } else { 1 };
        let mut attempt = 0;
        loop {
            let result = timeout_at(deadline, self.send_once(method, params, mcp_name))
                .await
                .map_err(|_| timed_out())
                .and_then(|r| r);
            match result {
                Err(e) if e.is_retryable() && attempt < retries => {
                    tracing::debug!(upstream = %self.name(), error = %e, "retrying once");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn send_once(&self, method: &str, params: &[u8], mcp_name: Option<&str>) -> Result<Reply, UpstreamError> {
        let id = RequestId::number(self.0.next_id.fetch_add(1, Ordering::Relaxed));
        let body: Bytes = encode_request(&id, method, params);
        match &self.0.transport {
            Transport::Http(t) => {
                let mirrored = http::Mirrored { method, name: mcp_name, version: self.protocol_version() };
                t.exchange(id.as_json(), body, &mirrored).await
            }
            Transport::Stdio(t) => t.exchange(id.as_json(), body).await,
        }
    }

    /// Opens a `subscriptions/listen` for `filter` (upstream URIs). The returned stream yields
    /// the acknowledgment, the changes, and how it ended.
    pub async fn listen(&self, filter: &listen::Filter) -> Result<listen::UpstreamListen, UpstreamError> {
        let mut params: serde_json::Value = serde_json::from_str(&discovery::own_params()).expect("valid JSON");
        params["notifications"] = filter.to_json();
        let params = serde_json::to_vec(&params).expect("serializable");
        let method = mcp::method::LISTEN;
        let id = RequestId::number(self.0.next_id.fetch_add(1, Ordering::Relaxed));
        let body = encode_request(&id, method, &params);
        let id_json = id.as_json().to_owned();
        match &self.0.transport {
            Transport::Http(t) => {
                let mirrored = http::Mirrored { method, name: None, version: self.protocol_version() };
                match t.open(&id_json, body, &mirrored).await? {
                    http::Opened::Stream(stream) => Ok(listen::UpstreamListen::http(id_json, stream, t.max_message())),
                    http::Opened::Reply(Reply::Error(e)) => Ok(listen::UpstreamListen::answered(
                        id_json,
                        listen::ListenEvent::End(listen::ListenEnd::Refused(e)),
                    )),
                    http::Opened::Reply(Reply::Result(_)) => Ok(listen::UpstreamListen::answered(
                        id_json,
                        listen::ListenEvent::End(listen::ListenEnd::Graceful),
                    )),
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

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("name", &self.name()).finish()
    }
}
