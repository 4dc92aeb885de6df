//! The toy service both servers of the framing tests stand in front of. Its answer tells
//! what it was given (method, path, the first `Host`, how many headers, the body), so any
//! difference in how a request was framed shows in the bytes written back. A request marked
//! `x-kind: stream` is answered with a chunked stream, `x-kind: close` with a response that
//! closes the connection, `x-kind: empty` with a 204.

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::body::channel;
use crate::headers::{KnownNames, token_is};
use crate::respond::{Resp, empty, json, plain, with_type};
use crate::service::{ConnEvent, Front, Service};
use crate::whole::whole;

/// The one path the lean path serves.
pub(super) const PATH: &str = "/mcp";

/// The largest body the toy reads.
const MAX_BODY: usize = 1 << 20;

/// The toy's header vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum V {
    Host,
    ContentLength,
    Kind,
}

static NAMES: [HeaderName; 3] = [header::HOST, header::CONTENT_LENGTH, HeaderName::from_static("x-kind")];

impl KnownNames for V {
    const COUNT: usize = 3;
    const CONTENT_LENGTH: Self = Self::ContentLength;

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static HeaderName {
        &NAMES[self as usize]
    }

    fn of(raw: &[u8]) -> Option<Self> {
        [Self::Host, Self::ContentLength, Self::Kind].into_iter().find(|k| token_is(raw, k.name().as_str().as_bytes()))
    }
}

thread_local! {
    /// Requests the lean path served on this thread (each test runs on a thread of its own).
    static LEAN_SERVED: Cell<usize> = const { Cell::new(0) };
}

/// How many requests the lean path has served on this thread.
pub(super) fn lean_served() -> usize {
    LEAN_SERVED.get()
}

#[derive(Clone)]
pub(super) struct Toy;

impl Service for Toy {
    type Known = V;
    const STREAM_MARKER: (V, &'static [u8]) = (V::Kind, b"stream");
    const LABEL: &'static str = "toy";

    async fn serve(&self, req: Request<Incoming>, _: Option<SocketAddr>) -> Resp {
        let (parts, body) = req.into_parts();
        answer(Front::of(&parts), whole(body, MAX_BODY).await.ok())
    }

    fn serve_front<'a>(
        &'a self,
        front: Front<'a, V>,
        body: Full<Bytes>,
        _: Option<SocketAddr>,
    ) -> impl Future<Output = Resp> + Send + 'a {
        LEAN_SERVED.set(LEAN_SERVED.get() + 1);
        async move { answer(front, whole(body, MAX_BODY).await.ok()) }
    }

    fn path(&self) -> &str {
        PATH
    }

    fn max_body(&self) -> usize {
        MAX_BODY
    }

    fn body_timeout(&self) -> Duration {
        Duration::from_secs(100 * 3600)
    }

    fn slow_write(&self) -> Duration {
        Duration::from_secs(100 * 3600)
    }

    fn body_timed_out(&self) -> Resp {
        let mut resp = plain(StatusCode::REQUEST_TIMEOUT, "body timed out");
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    fn refusal(&self) -> Bytes {
        Bytes::from_static(b"HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
    }

    fn observe(&self, _: ConnEvent) {}
}

/// What the toy answers to `front` with `body` (`None`: the body failed).
fn answer(front: Front<'_, V>, body: Option<Bytes>) -> Resp {
    let Some(body) = body else { return plain(StatusCode::BAD_REQUEST, "bad body") };
    let host = front.headers.get_str(V::Host);
    let said = format!(
        "{} {} host={host:?} headers={} body={}:",
        front.method,
        front.path,
        front.headers.iter().count(),
        body.len()
    );
    let said = Bytes::from([said.as_bytes(), &body].concat());
    match front.headers.get(V::Kind) {
        Some(b"stream") => {
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            let _ = tx.try_send(Bytes::from_static(b"a first chunk, sixteen or more bytes long"));
            let _ = tx.try_send(said);
            with_type(StatusCode::OK, channel(rx))
        }
        Some(b"close") => {
            let mut resp = json(StatusCode::OK, said);
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            resp
        }
        Some(b"empty") => empty(StatusCode::NO_CONTENT),
        _ => {
            let mut resp = json(StatusCode::OK, said);
            resp.headers_mut().insert(HeaderName::from_static("x-toy"), HeaderValue::from_static("1"));
            resp
        }
    }
}
