//! Upstream answers too large for the buffered path (past the relay threshold, the cache's
//! `max_entry_bytes`): handed to the router unread, as the bytes read so far and the rest of
//! the body, for a streaming pass that relays them to the client (see
//! [`crate::router::Relay`]). Only `resources/read` over HTTP takes this path; a stdio
//! upstream frames by line, and its lines stay bounded by `max_message_bytes`.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::OwnedSemaphorePermit;

use super::sse::SseData;
use crate::error::{Reason, UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::Reply;

/// An upstream's answer to a request that may be relayed.
pub enum Fetch {
    /// Read whole and decoded.
    Reply(Reply),
    /// Past the threshold: left to stream.
    Large(LargeBody),
}

impl Fetch {
    /// The whole reply; a large body here means the caller could not take one.
    pub fn into_reply(self, upstream: &str, limit: usize) -> Result<Reply, UpstreamError> {
        match self {
            Fetch::Reply(r) => Ok(r),
            Fetch::Large(_) => Err(UpstreamError::new(upstream, UpstreamErrorKind::TooLarge { limit })),
        }
    }
}

/// Where the message bytes after the prefix come from.
enum Source {
    /// An `application/json` body.
    Body(hyper::body::Incoming),
    /// The `data:` lines of the last event of an SSE response.
    Sse(SseData),
}

/// One JSON-RPC message, too large to hold, read as it arrives.
pub struct LargeBody {
    prefix: Option<Bytes>,
    source: Source,
    /// The upstream request's id, as JSON.
    pub up_id: Box<str>,
    /// Whether it is a legacy server's answer (whose result lacks `resultType` and hints).
    pub legacy: bool,
    /// The upstream's in-flight slot, held until the relay ends.
    permit: Option<OwnedSemaphorePermit>,
    upstream: Arc<str>,
    /// Longest wait for the next bytes.
    idle: Duration,
}

/// Reads `body` whole when it has at most `threshold` bytes, else hands it back as a large
/// body with what was read so far. `Content-Length` past the threshold skips the buffering.
pub async fn collect_or_large(
    upstream: &Arc<str>,
    mut body: hyper::body::Incoming,
    length: Option<u64>,
    threshold: usize,
) -> Result<Result<Bytes, LargeBody>, UpstreamError> {
    let mut buf = BytesMut::new();
    if length.is_none_or(|n| n <= threshold as u64) {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| disconnected(upstream, e))?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                if buf.len() > threshold {
                    break;
                }
            }
        }
        if buf.len() <= threshold {
            return Ok(Ok(buf.freeze()));
        }
    }
    let prefix = (!buf.is_empty()).then(|| buf.freeze());
    Ok(Err(LargeBody::new(upstream.clone(), prefix, Source::Body(body))))
}

fn disconnected(upstream: &str, e: impl std::error::Error + Send + Sync + 'static) -> UpstreamError {
    UpstreamError::new(upstream, UpstreamErrorKind::Disconnected { reason: Reason::of(e) })
}

impl LargeBody {
    fn new(upstream: Arc<str>, prefix: Option<Bytes>, source: Source) -> Self {
        Self {
            prefix,
            source,
            up_id: "null".into(),
            legacy: false,
            permit: None,
            upstream,
            idle: Duration::from_secs(30),
        }
    }

    /// The data of an SSE event too large to hold.
    pub(super) fn sse(upstream: Arc<str>, prefix: Bytes, data: SseData) -> Self {
        Self::new(upstream, (!prefix.is_empty()).then_some(prefix), Source::Sse(data))
    }

    /// Sets the request it answers, and how long to wait for bytes.
    pub(super) fn answering(mut self, up_id: &str, idle: Duration) -> Self {
        self.up_id = up_id.into();
        self.idle = idle;
        self
    }

    pub(super) fn hold(&mut self, permit: OwnedSemaphorePermit) {
        self.permit = Some(permit);
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &Arc<str> {
        &self.upstream
    }

    /// The next bytes of the message; `None` at its end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        if let Some(prefix) = self.prefix.take() {
            return Ok(Some(prefix));
        }
        let idle = self.idle;
        let upstream = self.upstream.clone();
        let timed_out = || UpstreamError::new(&*upstream, UpstreamErrorKind::Timeout { after: idle });
        loop {
            let next = match &mut self.source {
                Source::Body(body) => match tokio::time::timeout(idle, body.frame()).await {
                    Err(_) => return Err(timed_out()),
                    Ok(None) => None,
                    Ok(Some(Err(e))) => return Err(disconnected(&upstream, e)),
                    Ok(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => Some(data),
                        Err(_) => continue, // trailers
                    },
                },
                Source::Sse(data) => match tokio::time::timeout(idle, data.next()).await {
                    Err(_) => return Err(timed_out()),
                    Ok(r) => r.map_err(|e| disconnected(&upstream, e))?,
                },
            };
            match next {
                Some(data) if data.is_empty() => continue,
                other => {
                    if other.is_none() {
                        self.permit = None;
                    }
                    return Ok(other);
                }
            }
        }
    }
}
