//! What the acceptor and the lean path serve: a [`Service`], the application behind an HTTP
//! listener. It answers requests in either of the two shapes a request reaches it in (hyper's
//! parse, or the lean path's [`Front`] and whole body), and says what the connection layer
//! needs to know of it (its path, its body bounds, its refusal, where rejections are counted).
//!
//! The acceptor and the lean path are generic over it, so they are compiled for the one
//! service the binary serves: the hot path makes no dynamic call through this trait.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;

use crate::conn_timer::{ConnTimer, Tracked};
use crate::headers::{Headers, KnownNames};
use crate::respond::Resp;

/// What a service reads of a request before its body.
pub struct Front<'a, K> {
    pub method: &'a Method,
    /// The target's path.
    pub path: &'a str,
    /// The target's authority (an absolute-form target's), which stands for `Host`.
    pub authority: Option<&'a str>,
    pub headers: Headers<'a, K>,
}

impl<'a, K> Front<'a, K> {
    /// The head of a request hyper parsed.
    pub fn of(parts: &'a http::request::Parts) -> Self {
        Self {
            method: &parts.method,
            path: parts.uri.path(),
            authority: parts.uri.authority().map(http::uri::Authority::as_str),
            headers: Headers::Map(&parts.headers),
        }
    }
}

impl<K> Clone for Front<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Front<'_, K> {}

/// Something the connection layer refused or closed, for the service to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent {
    /// A connection over `max_connections_per_ip`, answered with [`Service::refusal`].
    RefusedPerIp,
    /// A head over `max_header_bytes` (hyper answered 431).
    HeaderTooLarge,
    /// A head not finished within `header_timeout` of its first byte.
    HeaderTimeout,
    /// A connection closed after `idle_timeout` with nothing in flight.
    IdleClosed,
}

/// The application behind a listener. Cloned once per connection: make it a cheap handle.
pub trait Service: Clone + Send + Sync + 'static {
    /// The headers it reads by name; the lean path notes where they are as it parses a head.
    type Known: KnownNames;

    /// The header that marks a request whose answer is a stream, and the value that does:
    /// the lean path takes such requests only with `Limits::lean_streams`, and others only
    /// with `Limits::lean_requests`. At most one such header is allowed on a lean request.
    const STREAM_MARKER: (Self::Known, &'static [u8]);

    /// A name for its listener in traces.
    const LABEL: &'static str;

    /// Serves a request hyper parsed, from `peer` (its port tells its connection apart from
    /// the peer's others).
    fn serve(&self, req: Request<Incoming>, peer: Option<SocketAddr>) -> impl Future<Output = Resp> + Send;

    /// Serves a request the lean path read: its head as `front`, its body whole.
    fn serve_front<'a>(
        &'a self,
        front: Front<'a, Self::Known>,
        body: Full<Bytes>,
        peer: Option<SocketAddr>,
    ) -> impl Future<Output = Resp> + Send + 'a;

    /// The one path the lean path serves (any other request is hyper's).
    fn path(&self) -> &str;

    /// The largest request body it accepts.
    fn max_body(&self) -> usize;

    /// How long a request body may take after its head.
    fn body_timeout(&self) -> Duration;

    /// How long one write to a client may take.
    fn slow_write(&self) -> Duration;

    /// The answer to a request whose body did not arrive within [`Self::body_timeout`]
    /// (it should say `connection: close`; the connection closes after it anyway).
    fn body_timed_out(&self) -> Resp;

    /// The whole HTTP/1.1 answer, head and body, to a connection refused for its peer's
    /// connection count (it should say `connection: close`). Made once per listener.
    fn refusal(&self) -> Bytes;

    /// Counts something the connection layer did.
    fn observe(&self, event: ConnEvent);
}

/// `service` as hyper calls it on one connection from `peer`: each request is in flight on
/// the connection's `timer` until its response body is done.
pub(crate) fn for_hyper<S: Service>(
    service: S,
    timer: Arc<ConnTimer>,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = http::Response<Tracked<crate::body::Body>>,
    Error = Infallible,
    Future: Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    service_fn(move |req| {
        let in_flight = timer.begin();
        let service = service.clone();
        // Boxed: hyper keeps an HTTP/2 stream's task the size of this future for the
        // stream's whole life, and a listen stream lives for hours after its request was
        // answered; boxed, the request's state is freed once it is.
        Box::pin(async move {
            Ok::<_, Infallible>(service.serve(req, Some(peer)).await.map(|b| Tracked::new(b, in_flight)))
        })
    })
}
