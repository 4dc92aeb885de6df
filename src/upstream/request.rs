//! The request path of an [`Upstream`]: credential, in-flight slot, the era to speak, the
//! deadline, one retry on a fresh connection or session, and translation of legacy answers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::Instrument;

use bytes::Bytes;
use tokio::time::{Instant, timeout_at};

use super::{Era, Fetch, OnBehalf, ProgressSink, Reply, Transport, Upstream, credential, http, legacy};
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::{RequestId, encode_request};
use crate::mcp;

/// How long a request waits for the era of an upstream still being probed before it goes
/// ahead in modern form.
const ERA_WAIT: Duration = Duration::from_secs(2);
impl Upstream {
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
        let fetched = self.metered(method, params, progress, on, None).await?;
        fetched.into_reply(self.name(), self.0.config.max_message_bytes)
    }

    /// A `resources/read` whose successful answer, when larger than `large` bytes, comes
    /// back unread, to be relayed (HTTP upstreams; a stdio upstream's answer is a bounded line).
    pub async fn read_with(&self, params: &[u8], on: OnBehalf<'_>, large: usize) -> Result<Fetch, UpstreamError> {
        self.metered(mcp::method::RESOURCES_READ, params, None, on, Some(large)).await
    }

    async fn metered(
        &self,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        on: OnBehalf<'_>,
        large: Option<usize>,
    ) -> Result<Fetch, UpstreamError> {
        let started = Instant::now();
        let span = crate::telemetry::upstream_span(self.name(), method);
        let result = self.request_inner(method, params, progress, on, large).instrument(span).await;
        let outcome = match &result {
            Ok(Fetch::Reply(Reply::Result(_)) | Fetch::Large(_)) => "ok",
            Ok(Fetch::Reply(Reply::Error(_))) => "error",
            Err(UpstreamError { kind: UpstreamErrorKind::Timeout { .. }, .. }) => "timeout",
            Err(UpstreamError { kind: UpstreamErrorKind::Unavailable { .. }, .. }) => "unavailable",
            Err(UpstreamError { kind: UpstreamErrorKind::Tls { .. }, .. }) => "tls",
            Err(UpstreamError { kind: UpstreamErrorKind::Credential { .. }, .. }) => "credential",
            Err(_) => "failed",
        };
        let took = started.elapsed();
        self.0.metrics.upstream(self.name(), outcome);
        self.0.meter.request_seconds(method, took.as_secs_f64());
        self.0.stats.record(took, result.is_err());
        result
    }

    pub(super) async fn request_inner(
        &self,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        on: OnBehalf<'_>,
        large: Option<usize>,
    ) -> Result<Fetch, UpstreamError> {
        let timeout = self.0.config.timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || UpstreamError::new(self.name(), UpstreamErrorKind::Timeout { after: timeout });
        // With trace export, `_meta.traceparent` names this upstream request's span.
        let traced = crate::telemetry::with_traceparent(params);
        let params = &*traced;
        // Owned: a relayed answer keeps the slot until its last byte.
        let permit = timeout_at(deadline, self.0.in_flight.clone().acquire_owned())
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
            let result = timeout_at(deadline, self.send(&era, method, params, progress, header, large))
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
                Err(UpstreamError { kind: UpstreamErrorKind::SessionLost, .. }) if attempt == 0 => {
                    attempt += 1;
                    era = timeout_at(deadline, self.reinitialize(&era)).await.map_err(|_| timed_out())??;
                }
                Err(e) if e.is_retryable() && attempt < retries => {
                    tracing::debug!(upstream = %self.name(), error = %e, "retrying once");
                    attempt += 1;
                }
                Ok(Fetch::Large(mut body)) => {
                    body.hold(permit);
                    return Ok(Fetch::Large(body));
                }
                other => return other,
            }
        }
    }

    /// The credential token for a request on behalf of `on`, when the upstream takes one.
    pub(super) async fn auth_for(&self, on: OnBehalf<'_>) -> Result<Option<Arc<credential::Issued>>, UpstreamError> {
        self.0.credential.token(on).await.map_err(|e| {
            tracing::warn!(upstream = %self.name(), error = %crate::error::chain(&e), "no upstream credential");
            UpstreamError::new(
                self.name(),
                UpstreamErrorKind::Credential { transient: e.is_transient(), source: Arc::new(e) },
            )
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
    pub(super) async fn wait_era(&self, deadline: Instant) -> Era {
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

    pub(super) async fn send(
        &self,
        era: &Era,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        auth: http::Auth<'_>,
        large: Option<usize>,
    ) -> Result<Fetch, UpstreamError> {
        match era {
            Era::Legacy(session) => self.send_legacy(session, method, params, progress, auth, large).await,
            _ => self.send_modern(method, params, progress, auth, large).await,
        }
    }

    pub(super) fn next_id(&self) -> RequestId {
        RequestId::number(self.0.next_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(super) async fn send_modern(
        &self,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        auth: http::Auth<'_>,
        large: Option<usize>,
    ) -> Result<Fetch, UpstreamError> {
        let id = self.next_id();
        let body: Bytes = encode_request(&id, method, params);
        match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::modern(method, params, |tool| self.0.catalog.param_headers(tool));
                let answer = &legacy::answer_server_request;
                let (fetch, status, _) =
                    t.exchange_read(id.as_json(), body, &headers, auth, answer, progress, large).await?;
                Ok(match fetch {
                    Fetch::Reply(reply) => Fetch::Reply(reply.with_status(status)),
                    Fetch::Large(b) => Fetch::Large(b.answering(id.as_json(), self.0.config.timeout)),
                })
            }
            Transport::Stdio(t) => t.exchange(id.as_json(), body).await.map(Fetch::Reply),
        }
    }

    pub(super) async fn send_legacy(
        &self,
        session: &super::UpstreamSession,
        method: &str,
        params: &[u8],
        progress: Option<&ProgressSink>,
        auth: http::Auth<'_>,
        large: Option<usize>,
    ) -> Result<Fetch, UpstreamError> {
        let params = legacy::translate_params(params);
        let id = self.next_id();
        let body = encode_request(&id, method, &params);
        let reply = match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::Legacy { version: &session.version, session: session.id.as_deref() };
                let answer = &legacy::answer_server_request;
                match t.exchange_read(id.as_json(), body, &headers, auth, answer, progress, large).await {
                    Ok((Fetch::Large(b), ..)) => {
                        let mut b = b.answering(id.as_json(), self.0.config.timeout);
                        b.legacy = true;
                        return Ok(Fetch::Large(b));
                    }
                    Ok((Fetch::Reply(reply), status, _)) if http::session_lost(status, Some(&reply)) => {
                        return Err(self.session_lost());
                    }
                    // The proxy's credential was refused: an upstream failure (and a cue to
                    // refresh the token), not an answer for the client.
                    Ok((_, status, _)) if status == ::http::StatusCode::UNAUTHORIZED => {
                        return Err(UpstreamError::new(self.name(), UpstreamErrorKind::Status { status: 401 }));
                    }
                    Ok((Fetch::Reply(reply), ..)) => reply,
                    Err(UpstreamError { kind: UpstreamErrorKind::Status { status: 404, .. }, .. }) => {
                        return Err(self.session_lost());
                    }
                    Err(e) => return Err(e),
                }
            }
            Transport::Stdio(t) => t.exchange(id.as_json(), body).await?,
        };
        Ok(Fetch::Reply(legacy::translate_reply(method, &params, reply, &self.0.config)))
    }

    pub(super) fn session_lost(&self) -> UpstreamError {
        UpstreamError::new(self.name(), UpstreamErrorKind::SessionLost)
    }
}

/// Whether the upstream refused the request's credential: HTTP 401, with or without a
/// JSON-RPC error body.
fn unauthorized(result: &Result<Fetch, UpstreamError>) -> bool {
    match result {
        Err(UpstreamError { kind: UpstreamErrorKind::Status { status, .. }, .. }) => *status == 401,
        Ok(Fetch::Reply(Reply::Error(e))) => e.http_status == Some(401),
        _ => false,
    }
}
