//! Modern Streamable HTTP upstreams: one POST per request through a pooled hyper-util client,
//! answered with `application/json` or a `text/event-stream` ending in the response.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::reply::Reply;
use super::sse::SseDecoder;
use crate::error::UpstreamError;
use crate::mcp::{self, header_value};

/// The pooled HTTP client shared by every HTTP upstream. `TCP_NODELAY` is set: without it
/// Nagle's algorithm adds ~40 ms to each keep-alive request/response pair on loopback.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Builds the shared client.
pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(10)));
    Client::builder(TokioExecutor::new()).pool_idle_timeout(std::time::Duration::from_secs(60)).build(connector)
}

/// One Streamable HTTP upstream endpoint.
#[derive(Debug)]
pub struct HttpTransport {
    name: String,
    client: HttpClient,
    uri: Uri,
    /// Configured credentials and other static headers.
    headers: HeaderMap,
    max_message: usize,
}

/// The answer to a POST: a decoded reply, or an SSE stream left for the caller to read.
pub enum Opened {
    Reply(Reply),
    Stream(hyper::body::Incoming),
}

/// What to put in the mirrored headers of one request.
pub struct Mirrored<'a> {
    pub method: &'a str,
    pub name: Option<&'a str>,
    pub version: &'a str,
}

impl HttpTransport {
    pub fn new(name: String, client: HttpClient, uri: Uri, headers: HeaderMap, max_message: usize) -> Self {
        Self { name, client, uri, headers, max_message }
    }

    fn err_unavailable(&self, reason: impl ToString) -> UpstreamError {
        UpstreamError::Unavailable { upstream: self.name.clone(), reason: reason.to_string() }
    }

    fn err_protocol(&self, reason: impl ToString) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.name.clone(), reason: reason.to_string() }
    }

    fn err_disconnected(&self, reason: impl ToString) -> UpstreamError {
        UpstreamError::Disconnected { upstream: self.name.clone(), reason: reason.to_string() }
    }

    /// Sends one request and waits for its response.
    pub async fn exchange(&self, id: &str, body: Bytes, mirrored: &Mirrored<'_>) -> Result<Reply, UpstreamError> {
        match self.open(id, body, mirrored).await? {
            Opened::Reply(reply) => Ok(reply),
            Opened::Stream(body) => self.read_sse(id, body).await,
        }
    }

    /// Sends one request; an SSE answer is handed back unread (listen streams), any other
    /// answer is read and decoded.
    pub async fn open(&self, id: &str, body: Bytes, mirrored: &Mirrored<'_>) -> Result<Opened, UpstreamError> {
        let mut req = Request::builder().method(Method::POST).uri(self.uri.clone());
        let h = req.headers_mut().expect("builder is valid");
        h.extend(self.headers.clone());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        h.insert(mcp::H_PROTOCOL_VERSION, header(mirrored.version));
        h.insert(mcp::H_METHOD, header(mirrored.method));
        if let Some(name) = mirrored.name {
            h.insert(mcp::H_NAME, header(&header_value::encode(name)));
        }
        let req = req.body(Full::new(body)).map_err(|e| self.err_protocol(e))?;
        let resp = self.client.request(req).await.map_err(|e| {
            // A connect error never reached the upstream; anything else may have.
            if e.is_connect() { self.err_unavailable(e) } else { self.err_disconnected(e) }
        })?;
        let status = resp.status();
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse && status.is_success() {
            return Ok(Opened::Stream(resp.into_body()));
        }
        let body = Limited::new(resp.into_body(), self.max_message)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    UpstreamError::TooLarge { upstream: self.name.clone(), limit: self.max_message }
                } else {
                    self.err_disconnected(e)
                }
            })?
            .to_bytes();
        match Reply::decode(&body, Some(id)) {
            Ok(reply) => Ok(Opened::Reply(reply)),
            // A non-2xx without a JSON-RPC body is an HTTP failure, not a protocol answer.
            Err(_) if !status.is_success() => {
                Err(UpstreamError::Status { upstream: self.name.clone(), status: status.as_u16() })
            }
            Err(reason) if status == StatusCode::ACCEPTED => {
                Err(self.err_protocol(format!("202 with no response to a request ({reason})")))
            }
            Err(reason) => Err(self.err_protocol(reason)),
        }
    }

    /// The largest message accepted.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    async fn read_sse(&self, id: &str, mut body: hyper::body::Incoming) -> Result<Reply, UpstreamError> {
        let mut decoder = SseDecoder::new(self.max_message);
        loop {
            let frame = match body.frame().await {
                None => return Err(self.err_disconnected("SSE stream ended before the response")),
                Some(Err(e)) => return Err(self.err_disconnected(e)),
                Some(Ok(frame)) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            decoder.push(&data);
            while let Some(event) = decoder
                .next_event()
                .map_err(|e| UpstreamError::TooLarge { upstream: self.name.clone(), limit: e.limit })?
            {
                let message = Bytes::from(event.data);
                if let Ok(reply) = Reply::decode(&message, Some(id)) {
                    return Ok(reply);
                }
                // Request-scoped notifications (progress, log messages) before the response
                // are not relayed yet.
                tracing::trace!(upstream = %self.name, "skipping SSE message before the response");
            }
        }
    }
}

fn header(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// Resolves configured header secrets into a header map.
pub fn static_headers(
    headers: &std::collections::BTreeMap<String, crate::config::SecretSource>,
) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, source) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("{name}: {e}"))?;
        let value = source.resolve()?;
        let value = HeaderValue::from_str(&value).map_err(|e| format!("{name}: {e}"))?;
        map.insert(name, value);
    }
    Ok(map)
}
