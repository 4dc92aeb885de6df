//! Finding and keeping an upstream's protocol era: the `server/discover` probe, the legacy
//! `initialize` handshake, re-initialization when a legacy session expires, and the legacy
//! standalone GET stream that carries unsolicited notifications.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ::http::StatusCode;
use bytes::Bytes;

use super::backoff::Backoff;
use super::discovery::{UpstreamInfo, own_params};
use super::legacy;
use super::sse::SseStream;
use super::{Transport, Upstream, http};
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::Reply;
use crate::jsonrpc::{Incoming, Kind, encode_request};
use crate::mcp;
use crate::mcp::notify::{Change, Unsolicited};

/// An upstream's protocol era, as found by the probe (or pinned in config).
#[derive(Debug, Clone)]
pub enum Era {
    /// Not determined yet (starting, or restarting).
    Unknown,
    Modern,
    Legacy(Arc<UpstreamSession>),
}

/// One legacy session: what `initialize` negotiated.
#[derive(Debug)]
pub struct UpstreamSession {
    /// The negotiated protocol version.
    pub version: String,
    /// `Mcp-Session-Id` (HTTP servers that use sessions).
    pub id: Option<String>,
    /// Bumped on every (re-)initialization, so that subscriptions can be re-made.
    pub generation: u64,
}

/// How long a stdio server gets to answer the probe before it counts as legacy (the spec:
/// "any other error, or a timeout, means legacy").
const STDIO_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl Upstream {
    /// Determines the era (probe, or the pinned version) and sets era and info.
    pub(super) async fn establish(&self) -> Result<(), UpstreamError> {
        let pinned = self.0.config.protocol.as_str();
        if legacy::VERSIONS.contains(&pinned) {
            return self.initialize(pinned).await.map(|_| ());
        }
        let params = own_params();
        let auth = self.proxy_auth().await?;
        let max = self.0.config.max_message_bytes;
        let probe = async {
            self.send_modern(mcp::method::DISCOVER, params.as_bytes(), None, auth.as_deref().map(|a| a.header()), None)
                .await?
                .into_reply(self.name(), max)
        };
        let answer = match &self.0.transport {
            Transport::Stdio(_) => match tokio::time::timeout(STDIO_PROBE_TIMEOUT, probe).await {
                Ok(a) => a,
                Err(_) => Ok(Reply::Error(crate::jsonrpc::RpcError::new(0, "no answer to the probe"))),
            },
            Transport::Http(_) => tokio::time::timeout(self.0.config.timeout, probe).await.map_err(|_| {
                UpstreamError::new(self.name(), UpstreamErrorKind::Timeout { after: self.0.config.timeout })
            })?,
        };
        let modern_only = pinned == mcp::MODERN_VERSION;
        match answer {
            Ok(Reply::Result(result)) => {
                let info = UpstreamInfo::from_result(&result)
                    .map_err(|e| UpstreamError::new(self.name(), UpstreamErrorKind::malformed(e)))?;
                self.0.era.send_replace(Era::Modern);
                self.set_info(Some(info));
                Ok(())
            }
            Ok(reply) if legacy::probe_says_modern(&reply) || modern_only => {
                let reason = format!("server/discover refused: {:?}", reply_error(&reply));
                Err(UpstreamError::new(self.name(), UpstreamErrorKind::Protocol { reason: reason.into() }))
            }
            // A legacy server: an unrecognised error or a 4xx without a modern error body.
            Ok(_) | Err(UpstreamError { kind: UpstreamErrorKind::Status { .. }, .. }) => {
                self.initialize(legacy::VERSIONS[0]).await.map(|_| ())
            }
            Err(e) => Err(e),
        }
    }

    /// Runs the legacy handshake and installs the session. Announces a gap to the hub (a new
    /// session has no subscriptions) and, over HTTP, starts the session's GET stream.
    pub(super) async fn initialize(&self, version: &str) -> Result<Era, UpstreamError> {
        let auth = self.proxy_auth().await?;
        let auth = auth.as_deref().map(|a| a.header());
        let id = self.next_id();
        let body = encode_request(&id, "initialize", &legacy::initialize_params(version));
        let (reply, session_id) = match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::Legacy { version, session: None };
                let ex = t.exchange(id.as_json(), body, &headers, auth, &legacy::answer_server_request, None).await?;
                (ex.reply, ex.session)
            }
            Transport::Stdio(t) => (t.exchange(id.as_json(), body).await?, None),
        };
        let result = match reply {
            Reply::Result(r) => r,
            Reply::Error(e) => {
                return Err(UpstreamError::new(
                    self.name(),
                    UpstreamErrorKind::Protocol { reason: format!("initialize: {e}").into() },
                ));
            }
        };
        let (negotiated, info) = legacy::parse_initialize(&result)
            .map_err(|e| UpstreamError::new(self.name(), UpstreamErrorKind::malformed(e)))?;
        let session = Arc::new(UpstreamSession {
            version: negotiated,
            id: session_id,
            generation: self.0.sessions.fetch_add(1, Ordering::Relaxed) + 1,
        });
        let initialized = legacy::initialized();
        match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::Legacy { version: &session.version, session: session.id.as_deref() };
                t.post_message(initialized, &headers, auth).await?;
            }
            Transport::Stdio(t) => t.send_line(initialized).await?,
        }
        tracing::info!(upstream = %self.name(), version = %session.version, "legacy upstream initialized");
        let era = Era::Legacy(session.clone());
        self.0.era.send_replace(era.clone());
        self.set_info(Some(info));
        let _ = self.0.unsolicited.send(Unsolicited::Gap);
        if matches!(self.0.transport, Transport::Http(_)) {
            self.0.tracker.spawn(get_stream(self.clone(), session, self.0.cancel.child_token()));
        }
        Ok(era)
    }

    /// Replaces an expired legacy session; concurrent callers share one handshake. (Boxed:
    /// the GET stream task calls it, and `initialize` starts that task.)
    pub(super) fn reinitialize<'a>(
        &'a self,
        seen: &'a Era,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Era, UpstreamError>> + Send + 'a>> {
        Box::pin(self.reinitialize_inner(seen))
    }

    async fn reinitialize_inner(&self, seen: &Era) -> Result<Era, UpstreamError> {
        let _one = self.0.reinit.lock().await;
        let current = self.current_era();
        let stale = match (&current, seen) {
            (Era::Legacy(now), Era::Legacy(then)) => now.generation == then.generation,
            _ => true,
        };
        if !stale {
            return Ok(current);
        }
        let version = match seen {
            Era::Legacy(s) => s.version.clone(),
            _ => legacy::VERSIONS[0].to_owned(),
        };
        tracing::info!(upstream = %self.name(), "legacy session expired; initializing again");
        self.initialize(&version).await
    }

    /// Records that a probe finished.
    pub(super) fn mark_probed(&self) {
        self.0.probed.store(true, Ordering::Release);
    }

    /// Forgets the era (a stdio process restarted): it is probed again.
    pub(super) fn reset_era(&self) {
        self.0.era.send_replace(Era::Unknown);
        self.set_info(None);
        let _ = self.0.unsolicited.send(Unsolicited::Gap);
    }

    /// Whether `session` is still the live one.
    fn is_current(&self, session: &UpstreamSession) -> bool {
        matches!(&*self.0.era.borrow(), Era::Legacy(s) if s.generation == session.generation)
    }
}

fn reply_error(reply: &Reply) -> Option<&crate::jsonrpc::RpcError> {
    match reply {
        Reply::Error(e) => Some(e),
        Reply::Result(_) => None,
    }
}

/// The legacy standalone GET stream of one HTTP session: unsolicited notifications in,
/// server requests answered, `retry` and `Last-Event-ID` honoured on reconnect. Every
/// reconnect is announced as a gap, since servers need not replay what was missed.
async fn get_stream(upstream: Upstream, session: Arc<UpstreamSession>, cancel: tokio_util::sync::CancellationToken) {
    let Transport::Http(t) = &upstream.0.transport else { return };
    let headers = http::Headers::Legacy { version: &session.version, session: session.id.as_deref() };
    let mut last_id: Option<String> = None;
    let mut retry = legacy::DEFAULT_RETRY;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    let mut connected_before = false;
    while !cancel.is_cancelled() && upstream.is_current(&session) {
        // The proxy's own credential, fetched anew on each connect (a token may have expired).
        let auth = match upstream.proxy_auth().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(upstream = %upstream.name(), error = %e, "no credential for the legacy GET stream; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
                continue;
            }
        };
        let auth = auth.as_deref().map(|a| a.header());
        let opened = tokio::select! {
            _ = cancel.cancelled() => return,
            r = t.get_stream(&headers, auth, last_id.as_deref()) => r,
        };
        match opened {
            Ok(Ok(body)) => {
                if connected_before {
                    let _ = upstream.0.unsolicited.send(Unsolicited::Gap);
                }
                connected_before = true;
                backoff.reset();
                let mut stream = SseStream::new(body, t.max_message());
                loop {
                    let event = tokio::select! {
                        _ = cancel.cancelled() => return,
                        e = stream.next() => e,
                    };
                    let event = match event {
                        Ok(Some(event)) => event,
                        Ok(None) => break,
                        Err(e) => {
                            // Broken or hostile: dropped, and re-opened after the retry delay.
                            tracing::warn!(upstream = %upstream.name(), error = %t.sse_error(e), "legacy GET stream failed");
                            break;
                        }
                    };
                    if let Some(id) = event.id {
                        last_id = Some(id);
                    }
                    if let Some(ms) = event.retry {
                        retry = Duration::from_millis(ms.min(60_000));
                    }
                    handle_message(&upstream, t, &headers, auth, Bytes::from(event.data)).await;
                }
                tracing::debug!(upstream = %upstream.name(), "legacy GET stream ended; reconnecting");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
            Ok(Err(StatusCode::METHOD_NOT_ALLOWED)) => {
                tracing::info!(upstream = %upstream.name(), "legacy upstream offers no GET stream: no unsolicited notifications");
                return;
            }
            Ok(Err(status)) if status == StatusCode::NOT_FOUND || status == StatusCode::BAD_REQUEST => {
                // The session is gone: a new one starts its own stream.
                let _ = upstream.reinitialize(&Era::Legacy(session.clone())).await;
                return;
            }
            Ok(Err(status)) => {
                tracing::debug!(upstream = %upstream.name(), %status, "legacy GET stream refused; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
            Err(e) => {
                tracing::debug!(upstream = %upstream.name(), error = %e, "legacy GET stream failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        }
    }
}

async fn handle_message(
    upstream: &Upstream,
    t: &http::HttpTransport,
    headers: &http::Headers<'_>,
    auth: http::Auth<'_>,
    message: Bytes,
) {
    let Ok(text) = std::str::from_utf8(&message) else { return };
    let Ok(msg) = Incoming::parse(text) else { return }; // priming events carry no data
    match msg.kind {
        Kind::Notification => {
            if let Some(change) = Change::of(&msg) {
                let _ = upstream.0.unsolicited.send(Unsolicited::Change(change));
            }
        }
        Kind::Request => {
            if let Some(answer) = legacy::answer_server_request(&msg) {
                let _ = t.post_message(answer, headers, auth).await;
            }
        }
        Kind::Response => {}
    }
}
