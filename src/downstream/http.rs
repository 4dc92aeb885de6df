//! One downstream HTTP exchange: transport checks (path, method, Host, Origin, size), then the
//! codec; then the era, chosen by the request's shape (reference §7): a request whose `_meta`
//! names a protocol version is modern and validated as such; a legacy `initialize`, or a
//! request carrying an `Mcp-Session-Id` without modern `_meta`, belongs to a legacy session.
//! GET and DELETE exist for legacy sessions only. Answers go back as `application/json` with
//! `resmux-cache` and `age` headers.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ALLOW, CONNECTION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode};
use tracing::Instrument;

use super::deadline::lazy_timeout;
use super::legacy::{self, Legacy, SessionTable};
use super::origin::OriginPolicy;
use super::rate::{RateLimit, retry_after_secs};
use super::respond::{self, Resp, empty, plain};
use super::validate::{self, Body};
use crate::auth::Authenticator;
use crate::config::ListenConfig;
use crate::error::DownstreamError;
use crate::headers::Known;
use crate::hub::Hub;
use crate::jsonrpc::{Incoming, Kind};
use crate::mcp::legacy_method;
use crate::router::{Call, Router};
use crate::telemetry::{Metrics, Rejection};
use crate::whole::{WholeError, whole};

mod service;

/// What the endpoint reads of a request before its body.
type Front<'a> = resmux_http::Front<'a, Known>;

/// The endpoint: a cheap handle shared by every connection.
#[derive(Clone)]
pub struct Endpoint(Arc<Inner>);

struct Inner {
    router: Router,
    hub: Hub,
    legacy: Legacy,
    sessions: SessionTable,
    auth: Arc<Authenticator>,
    path: String,
    max_body: usize,
    /// How long a request body may take to arrive.
    body_timeout: std::time::Duration,
    policy: OriginPolicy,
    metrics: Metrics,
    /// Where metrics are served (GET); empty disables.
    metrics_path: String,
    /// The per-principal request rate.
    rate: RateLimit,
    /// Deepest JSON nesting accepted in a request body.
    max_depth: usize,
}

impl Endpoint {
    pub fn new(
        router: Router,
        hub: Hub,
        auth: Arc<Authenticator>,
        listen: &ListenConfig,
        sessions: SessionTable,
        metrics: Metrics,
    ) -> Self {
        Self(Arc::new(Inner {
            metrics,
            metrics_path: listen.metrics_path.clone(),
            legacy: Legacy::new(router.clone(), hub.clone()),
            router,
            hub,
            sessions,
            auth,
            path: listen.path.clone(),
            max_body: listen.max_body_bytes,
            body_timeout: listen.body_timeout,
            rate: RateLimit::new(listen.requests_per_second, listen.request_burst, listen.limit_loopback),
            max_depth: listen.max_json_depth,
            policy: OriginPolicy::new(&listen.allowed_origins, &listen.allowed_hosts, listen.addr),
        }))
    }

    /// Drops idle rate-limit buckets periodically until `cancel` (see [`super::rate`]).
    pub fn start_pruner(&self, cancel: &tokio_util::sync::CancellationToken, tracker: &tokio_util::task::TaskTracker) {
        self.0.rate.start_pruner(cancel, tracker);
    }

    /// 429 with `Retry-After` for a caller over its request rate.
    fn throttled(&self, wait: std::time::Duration) -> Resp {
        self.0.metrics.rejection(Rejection::Rate);
        let secs = retry_after_secs(wait);
        let e = DownstreamError::LimitReached(format!("request rate exceeded; retry after {secs} s"));
        let mut resp = respond::error(None, e.into());
        resp.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
        resp
    }

    /// Counts a request refused by a count bound (listeners, sessions, held calls).
    fn count_limit(&self, e: &crate::error::Error) {
        if matches!(e, crate::error::Error::Downstream(DownstreamError::LimitReached(_))) {
            self.0.metrics.rejection(Rejection::Limit);
        }
    }

    /// 408 with `Connection: close` for a body not in within `body_timeout` of its head.
    fn body_timed_out(&self) -> Resp {
        self.0.metrics.rejection(Rejection::BodyTimeout);
        let mut resp = respond::error(None, DownstreamError::BodyTimeout { after: self.0.body_timeout }.into());
        resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    /// The MCP endpoint's path.
    fn path(&self) -> &str {
        &self.0.path
    }

    /// The largest request body accepted.
    fn max_body(&self) -> usize {
        self.0.max_body
    }

    /// How long a request body may take after its head.
    fn body_timeout(&self) -> std::time::Duration {
        self.0.body_timeout
    }

    /// How long one write to a client may take: the slow-listener time.
    fn slow_write(&self) -> std::time::Duration {
        self.0.hub.config().slow_listener_timeout
    }

    /// The metrics the listener counts its rejections in.
    fn telemetry(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The Prometheus text exposition (the data listener's optional copy of the admin
    /// listener's `/metrics`).
    fn metrics(&self) -> Resp {
        let mut resp = plain(StatusCode::OK, &crate::status::metrics_text(&self.0.router, &self.0.hub));
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        );
        resp
    }

    /// 401 or 403 with the `WWW-Authenticate` challenge (RFC 6750 §3, RFC 9728 §5.1).
    fn refuse(&self, e: &crate::auth::AuthError) -> Resp {
        self.0.metrics.rejection(Rejection::Auth);
        tracing::debug!(error = %e, cause = ?std::error::Error::source(e).map(ToString::to_string), "request refused");
        let (status, challenge) = self.0.auth.challenge(e);
        let text = match e {
            crate::auth::AuthError::Missing => "authentication required",
            crate::auth::AuthError::Invalid(_) => "invalid token",
            crate::auth::AuthError::InsufficientScope => "insufficient scope",
        };
        let mut resp = plain(status, text);
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
        }
        resp
    }

    /// Serves one HTTP request from an unknown peer (anonymous callers share one rate bucket).
    pub async fn serve<B>(&self, req: Request<B>) -> Resp
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.serve_from(req, None).await
    }

    /// Serves one HTTP request from `peer` (anonymous callers are rate-limited by its address),
    /// in its own `request` span (see [`crate::telemetry::request_span`]).
    pub async fn serve_from<B>(&self, req: Request<B>, peer: Option<std::net::SocketAddr>) -> Resp
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = req.into_parts();
        self.serve_front(Front::of(&parts), body, peer).await
    }

    /// Serves one request whose head is `front` and whose body is `body`, from `peer`, in its
    /// own `request` span: [`Self::serve_from`] for a request hyper parsed, the lean path's
    /// own for one it read.
    async fn serve_front<B>(&self, front: Front<'_>, body: B, peer: Option<std::net::SocketAddr>) -> Resp
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (span, traced) = crate::telemetry::request_span(front.headers);
        self.serve_in_span(front, body, peer, traced).instrument(span).await
    }

    async fn serve_in_span<B>(&self, req: Front<'_>, body: B, peer: Option<std::net::SocketAddr>, traced: bool) -> Resp
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = std::time::Instant::now();
        if req.path.starts_with(crate::auth::WELL_KNOWN)
            && *req.method == Method::GET
            && let Some(doc) = self.0.auth.metadata_document(req.path, &self.0.path)
        {
            let mut resp = respond::json(StatusCode::OK, Bytes::from(doc.to_owned()));
            resp.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
            return resp;
        }
        if req.path != self.0.path {
            if !self.0.metrics_path.is_empty() && req.path == self.0.metrics_path && *req.method == Method::GET {
                return self.metrics();
            }
            return plain(StatusCode::NOT_FOUND, "not found");
        }
        let authority = req.authority.or_else(|| req.headers.get_str(Known::Host));
        if let Some(host) = authority
            && !self.0.policy.host_allowed(host)
        {
            self.0.metrics.rejection(Rejection::Host);
            return respond::error(None, DownstreamError::HostNotAllowed.into());
        }
        if let Some(origin) = req.headers.visible(Known::Origin)
            && !origin.is_ok_and(|o| self.0.policy.origin_allowed(o))
        {
            self.0.metrics.rejection(Rejection::Origin);
            return respond::error(None, DownstreamError::OriginNotAllowed.into());
        }
        // Every request authenticates on its own (no handshake to lean on); the header is
        // never logged nor forwarded.
        let principal = match self.0.auth.authenticate(req.headers).await {
            Ok(p) => p,
            Err(e) => return self.refuse(&e),
        };
        crate::telemetry::record_principal(&principal);
        // The rate is per principal, so it is checked once the principal is known; a refused
        // credential costs no bucket (and the authenticator's own work bounds that path).
        if let Err(wait) = self.0.rate.check(&principal, peer.map(|p| p.ip())) {
            return self.throttled(wait);
        }
        // GET and DELETE belong to legacy sessions; without a session id they are the modern
        // endpoint's 405.
        if let Some(session) = req.headers.get(Known::SessionId) {
            if *req.method == Method::GET {
                let get = legacy::http::get(&self.0.legacy, &self.0.sessions, req.headers, session, &principal);
                return Box::pin(get).await;
            }
            if *req.method == Method::DELETE {
                return Box::pin(legacy::http::delete(&self.0.sessions, session, &principal)).await;
            }
        }
        if *req.method != Method::POST {
            let mut resp = respond::error(None, DownstreamError::HttpMethodNotAllowed.into());
            resp.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
            return resp;
        }
        if let Some(ct) = req.headers.visible(Known::ContentType)
            && !ct.is_ok_and(is_json_media_type)
        {
            return respond::error(None, DownstreamError::UnsupportedMediaType.into());
        }
        let declared = req.headers.get_str(Known::ContentLength).and_then(|v| v.parse::<u64>().ok());
        let too_large = || {
            self.0.metrics.rejection(Rejection::BodyTooLarge);
            respond::error(None, DownstreamError::BodyTooLarge { limit: self.0.max_body }.into())
        };
        if declared.is_some_and(|n| n > self.0.max_body as u64) {
            return too_large();
        }
        // A body that trickles in holds the connection and its buffer: it gets `body_timeout`
        // from the head, then 408 and `Connection: close` (the unread rest is never parsed as
        // a next request).
        // The timer is armed only if the body is not in by the second look (see `deadline`).
        let body = match lazy_timeout(self.0.body_timeout, whole(body, self.0.max_body)).await {
            Ok(Ok(b)) => b,
            Ok(Err(WholeError::TooLarge { .. })) => return too_large(),
            Ok(Err(e)) => return plain(StatusCode::BAD_REQUEST, &e.to_string()),
            Err(_) => return self.body_timed_out(),
        };
        let Ok(text) = std::str::from_utf8(&body) else {
            return respond::error(None, DownstreamError::Parse("body is not UTF-8".into()).into());
        };
        let msg = match Incoming::parse_limited(text, self.0.max_depth) {
            Ok(m) => m,
            Err(e) => return respond::rejected(validate::message_error(e)),
        };
        // Only an `initialize` or a request naming a session can be legacy; checking the shape
        // first keeps the modern hot path to one parse of the params.
        let maybe_legacy = msg.method() == legacy_method::INITIALIZE || req.headers.contains(Known::SessionId);
        if maybe_legacy && !validate::is_modern(&msg) {
            crate::telemetry::record_method(msg.method());
            if msg.kind == Kind::Request && msg.method() == legacy_method::INITIALIZE {
                return Box::pin(legacy::http::initialize(&self.0.legacy, &self.0.sessions, &msg, &principal)).await;
            }
            if let Some(session) = req.headers.get(Known::SessionId) {
                let post = legacy::http::post(&self.0.legacy, &self.0.sessions, req.headers, session, &msg, &principal);
                return Box::pin(post).await;
            }
        }
        let checked = match validate::check(crate::headers::mirrored(req.headers), &msg) {
            Ok(Body::Notification) => return empty(StatusCode::ACCEPTED),
            Ok(Body::Request(c)) => c,
            Err(r) => return respond::rejected(r),
        };
        crate::telemetry::record_method(checked.method);
        crate::telemetry::continue_trace(checked.meta, traced);
        if super::progress::wanted(checked.method, checked.meta) {
            self.0.metrics.downstream(checked.method, "stream", started.elapsed().as_secs_f64());
            return super::progress::serve_http(self.0.router.clone(), self.0.hub.tracker(), body.clone(), principal);
        }
        if checked.method == crate::mcp::method::LISTEN {
            return super::listen::open(&self.0.hub, &checked.id, checked.params, &principal, peer).unwrap_or_else(
                |e| {
                    self.count_limit(&e);
                    respond::error(Some(&checked.id), e)
                },
            );
        }
        let call = Call::new(checked.method, checked.params, checked.meta, &principal);
        match self.0.router.handle(&call).await {
            Ok(answer) => {
                self.0.metrics.downstream(checked.method, answer.cache.as_str(), started.elapsed().as_secs_f64());
                respond::answer(&checked.id, answer)
            }
            Err(e) => {
                self.0.metrics.downstream(checked.method, "error", started.elapsed().as_secs_f64());
                self.count_limit(&e);
                if e.side() != crate::error::Side::Downstream {
                    tracing::warn!(method = checked.method, error = %e, "request failed");
                }
                respond::error(Some(&checked.id), e)
            }
        }
    }
}

/// Whether a `Content-Type` value names `application/json` (case-insensitive, parameters
/// allowed), checked without allocating.
fn is_json_media_type(value: &str) -> bool {
    const JSON: &str = "application/json";
    value.trim_start().get(..JSON.len()).is_some_and(|head| head.eq_ignore_ascii_case(JSON))
}
