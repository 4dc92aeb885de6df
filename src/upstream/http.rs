//! Streamable HTTP upstreams: one POST per request through a pooled hyper-util client,
//! answered with `application/json` or a `text/event-stream` ending in the response; for
//! legacy servers also the session header, the standalone GET stream and DELETE.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{Either, Full};

use super::ProgressSink;
use super::large::{Fetch, LargeBody};
use super::sse::{SseError, SseStream};
pub use crate::client::{HttpClient, client, tls_client};
use crate::error::{Reason, UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::Reply;
use crate::jsonrpc::{Incoming, Kind};
use crate::mcp;
use crate::tls;
use crate::whole::{WholeError, whole};

/// One Streamable HTTP upstream endpoint.
#[derive(Debug)]
pub struct HttpTransport {
    name: std::sync::Arc<str>,
    client: HttpClient,
    uri: Uri,
    /// Configured credentials and other static headers.
    headers: HeaderMap,
    max_message: usize,
}

/// The answer to a POST: a decoded reply, or an SSE stream left for the caller to read.
pub enum Opened {
    Reply(Exchanged),
    Stream { body: hyper::body::Incoming, session: Option<String> },
}

/// A decoded reply with what the HTTP layer said around it.
pub struct Exchanged {
    pub reply: Reply,
    pub status: StatusCode,
    /// The `Mcp-Session-Id` the upstream set (legacy `initialize`).
    pub session: Option<String>,
}

pub use super::headers::{Headers, Mirrored, ParamHeader, StaticHeaderError, static_headers};

/// The `Authorization` value of an upstream credential, when it sends one.
pub type Auth<'a> = Option<&'a HeaderValue>;

/// How a legacy upstream signals "your session is gone": 404, or (as the TypeScript SDK's
/// example servers do) 400 with a -32000 error about the session.
pub fn session_lost(status: StatusCode, reply: Option<&Reply>) -> bool {
    if status == StatusCode::NOT_FOUND {
        return true;
    }
    let Some(Reply::Error(e)) = reply else { return false };
    let m = e.message.to_ascii_lowercase();
    status == StatusCode::BAD_REQUEST && (m.contains("session") || m.contains("not initialized"))
}

impl HttpTransport {
    pub fn new(name: String, client: HttpClient, uri: Uri, headers: HeaderMap, max_message: usize) -> Self {
        Self { name: name.into(), client, uri, headers, max_message }
    }

    fn err_unavailable(&self, reason: impl Into<Reason>) -> UpstreamError {
        UpstreamError::new(self.name.clone(), UpstreamErrorKind::Unavailable { reason: reason.into() })
    }

    fn err_protocol(&self, reason: impl Into<Reason>) -> UpstreamError {
        UpstreamError::new(self.name.clone(), UpstreamErrorKind::Protocol { reason: reason.into() })
    }

    pub(super) fn err_disconnected(&self, reason: impl Into<Reason>) -> UpstreamError {
        UpstreamError::new(self.name.clone(), UpstreamErrorKind::Disconnected { reason: reason.into() })
    }

    /// The header map of a request: configured static headers, the upstream credential
    /// (`auth`, an `Authorization` value) and the protocol headers. Nothing of the
    /// downstream request is copied here: its `Authorization`, cookies and hop-by-hop
    /// headers never reach the upstream.
    fn header_map(&self, headers: &Headers<'_>, auth: Auth<'_>) -> HeaderMap {
        let mut h = self.headers.clone();
        if let Some(auth) = auth {
            h.insert(http::header::AUTHORIZATION, auth.clone());
        }
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        headers.apply(&mut h);
        crate::telemetry::inject_header(&mut h);
        h
    }

    async fn send(
        &self,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<http::Response<hyper::body::Incoming>, UpstreamError> {
        let mut req = Request::builder().method(method).uri(self.uri.clone());
        *req.headers_mut().expect("builder is valid") = headers;
        let req = req.body(Full::new(body)).map_err(|e| self.err_protocol(Reason::of(e)))?;
        self.client.request(req).await.map_err(|e| {
            // A failed handshake, a rejected certificate or a peer's alert (say, a client
            // certificate the server wants): retrying will not change it.
            if tls::find_tls_error(&e).is_some() {
                return UpstreamError::new(self.name.clone(), UpstreamErrorKind::Tls { reason: Reason::of(e) });
            }
            // A connect error never reached the upstream; anything else may have.
            if e.is_connect() { self.err_unavailable(Reason::of(e)) } else { self.err_disconnected(Reason::of(e)) }
        })
    }

    /// Sends one request and waits for its response. Requests the server sends meanwhile on
    /// the response stream (legacy `ping`, `sampling`, …) are answered with `answer`.
    pub async fn exchange(
        &self,
        id: &str,
        body: Bytes,
        headers: &Headers<'_>,
        auth: Auth<'_>,
        answer: &(dyn Fn(&Incoming<'_>) -> Option<Bytes> + Sync),
        progress: Option<&ProgressSink>,
    ) -> Result<Exchanged, UpstreamError> {
        let (fetch, status, session) = self.exchange_read(id, body, headers, auth, answer, progress, None).await?;
        Ok(Exchanged { reply: fetch.into_reply(&self.name, self.max_message)?, status, session })
    }

    /// [`HttpTransport::exchange`], handing a successful answer larger than `large` bytes
    /// back unread (see [`super::large`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn exchange_read(
        &self,
        id: &str,
        body: Bytes,
        headers: &Headers<'_>,
        auth: Auth<'_>,
        answer: &(dyn Fn(&Incoming<'_>) -> Option<Bytes> + Sync),
        progress: Option<&ProgressSink>,
        large: Option<usize>,
    ) -> Result<(Fetch, StatusCode, Option<String>), UpstreamError> {
        match self.open_with(id, body, headers, auth, large).await? {
            Either::Left(Opened::Reply(ex)) => Ok((Fetch::Reply(ex.reply), ex.status, ex.session)),
            Either::Left(Opened::Stream { body, session }) => {
                let fetch = self.read_sse(id, body, headers, auth, answer, progress, large).await?;
                Ok((fetch, StatusCode::OK, session))
            }
            Either::Right((large, session)) => Ok((Fetch::Large(large), StatusCode::OK, session)),
        }
    }

    /// Sends one request; an SSE answer is handed back unread (listen streams), any other
    /// answer is read and decoded.
    pub async fn open(
        &self,
        id: &str,
        body: Bytes,
        headers: &Headers<'_>,
        auth: Auth<'_>,
    ) -> Result<Opened, UpstreamError> {
        match self.open_with(id, body, headers, auth, None).await? {
            Either::Left(opened) => Ok(opened),
            Either::Right(_) => {
                Err(UpstreamError::new(self.name.clone(), UpstreamErrorKind::TooLarge { limit: self.max_message }))
            }
        }
    }

    /// [`HttpTransport::open`]; a successful JSON answer past `large` bytes comes back unread.
    async fn open_with(
        &self,
        id: &str,
        body: Bytes,
        headers: &Headers<'_>,
        auth: Auth<'_>,
        large: Option<usize>,
    ) -> Result<Either<Opened, (LargeBody, Option<String>)>, UpstreamError> {
        let resp = self.send(Method::POST, self.header_map(headers, auth), body).await?;
        let status = resp.status();
        let session = resp.headers().get(mcp::H_SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_owned);
        if is_sse(resp.headers()) && status.is_success() {
            return Ok(Either::Left(Opened::Stream { body: resp.into_body(), session }));
        }
        let body = match large {
            Some(threshold) if status.is_success() => {
                let length = resp.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
                match super::large::collect_or_large(&self.name, resp.into_body(), length, threshold).await? {
                    Ok(body) => body,
                    Err(large) => return Ok(Either::Right((large, session))),
                }
            }
            _ => self.collect(resp.into_body()).await?,
        };
        match Reply::decode(&body, Some(id)) {
            Ok(reply) => Ok(Either::Left(Opened::Reply(Exchanged { reply, status, session }))),
            // A non-2xx without a JSON-RPC body is an HTTP failure, not a protocol answer.
            Err(_) if !status.is_success() => {
                Err(UpstreamError::new(self.name.clone(), UpstreamErrorKind::Status { status: status.as_u16() }))
            }
            Err(reason) if status == StatusCode::ACCEPTED => {
                Err(self.err_protocol(format!("202 with no response to a request ({reason})")))
            }
            Err(e) => Err(UpstreamError::new(self.name.clone(), UpstreamErrorKind::malformed(e))),
        }
    }

    /// POSTs a notification or a response (answered with 202).
    pub async fn post_message(
        &self,
        body: Bytes,
        headers: &Headers<'_>,
        auth: Auth<'_>,
    ) -> Result<StatusCode, UpstreamError> {
        let resp = self.send(Method::POST, self.header_map(headers, auth), body).await?;
        let status = resp.status();
        let _ = self.collect(resp.into_body()).await;
        Ok(status)
    }

    /// Opens the legacy standalone GET stream, resuming after `last_event_id` when given.
    pub async fn get_stream(
        &self,
        headers: &Headers<'_>,
        auth: Auth<'_>,
        last_event_id: Option<&str>,
    ) -> Result<Result<hyper::body::Incoming, StatusCode>, UpstreamError> {
        let mut h = self.header_map(headers, auth);
        h.remove(CONTENT_TYPE);
        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(last) = last_event_id {
            h.insert("last-event-id", header(last));
        }
        let resp = self.send(Method::GET, h, Bytes::new()).await?;
        let status = resp.status();
        if status.is_success() && is_sse(resp.headers()) {
            return Ok(Ok(resp.into_body()));
        }
        let _ = self.collect(resp.into_body()).await;
        Ok(Err(status))
    }

    /// Ends a legacy session (DELETE), best effort.
    pub async fn delete_session(&self, headers: &Headers<'_>, auth: Auth<'_>) {
        let mut h = self.header_map(headers, auth);
        h.remove(CONTENT_TYPE);
        if let Ok(resp) = self.send(Method::DELETE, h, Bytes::new()).await {
            let _ = self.collect(resp.into_body()).await;
        }
    }

    async fn collect(&self, body: hyper::body::Incoming) -> Result<Bytes, UpstreamError> {
        whole(body, self.max_message).await.map_err(|e| match e {
            WholeError::TooLarge { limit } => {
                UpstreamError::new(self.name.clone(), UpstreamErrorKind::TooLarge { limit })
            }
            WholeError::Read(e) => self.err_disconnected(Reason::of_boxed(e)),
        })
    }

    /// The largest message accepted.
    /// The upstream's name, as its errors carry it.
    pub fn name(&self) -> std::sync::Arc<str> {
        self.name.clone()
    }

    pub fn max_message(&self) -> usize {
        self.max_message
    }

    #[allow(clippy::too_many_arguments)]
    async fn read_sse(
        &self,
        id: &str,
        body: hyper::body::Incoming,
        headers: &Headers<'_>,
        auth: Auth<'_>,
        answer: &(dyn Fn(&Incoming<'_>) -> Option<Bytes> + Sync),
        progress: Option<&ProgressSink>,
        large: Option<usize>,
    ) -> Result<Fetch, UpstreamError> {
        let mut stream = SseStream::new(body, self.max_message);
        if let Some(threshold) = large {
            stream = stream.stream_above(threshold);
        }
        loop {
            let message = match stream.next_data().await {
                Ok(Some(message)) => message,
                Ok(None) => return Err(self.err_disconnected("SSE stream ended before the response")),
                // The response is the last event: one this large is it (or not a response
                // at all, which the streaming pass finds out).
                Err(SseError::Large) => {
                    let (prefix, data) = stream.into_data();
                    return Ok(Fetch::Large(LargeBody::sse(self.name.clone(), prefix, data)));
                }
                Err(e) => return Err(self.sse_error(e)),
            };
            if let Ok(reply) = Reply::decode(&message, Some(id)) {
                return Ok(Fetch::Reply(reply));
            }
            let Ok(text) = std::str::from_utf8(&message) else { continue };
            let Ok(msg) = Incoming::parse(text) else { continue };
            match msg.kind {
                // A legacy server may ask the client something while it works on the call.
                Kind::Request => {
                    if let Some(response) = answer(&msg) {
                        let _ = self.post_message(response, headers, auth).await;
                    }
                }
                Kind::Notification if msg.method() == mcp::method::PROGRESS => {
                    if let Some(sink) = progress {
                        // Full: the client is slower than the upstream's reports; this one is dropped.
                        let _ = sink.try_send(message.clone());
                    }
                }
                // Other request-scoped notifications (log messages) are not relayed.
                _ => tracing::trace!(upstream = %self.name, "skipping SSE message before the response"),
            }
        }
    }

    /// The upstream-side error for a broken or oversized SSE stream.
    pub fn sse_error(&self, e: SseError) -> UpstreamError {
        match e {
            SseError::TooLarge { limit } | SseError::NoEvent { limit } => {
                UpstreamError::new(self.name.clone(), UpstreamErrorKind::TooLarge { limit })
            }
            SseError::Body(e) => self.err_disconnected(Reason::of(e)),
            SseError::Large => {
                UpstreamError::new(self.name.clone(), UpstreamErrorKind::TooLarge { limit: self.max_message })
            }
        }
    }
}

fn is_sse(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"))
}

fn header(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}
