//! The MCP endpoint as `resmux_http`'s [`Service`]: what the acceptor and the lean path ask
//! of it (its path, bounds, refusals) and where they count what they refused.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::body::Incoming;
use resmux_http::{ConnEvent, Service};

use super::{Endpoint, Front};
use crate::downstream::respond::Resp;
use crate::error::{DownstreamError, Error};
use crate::headers::Known;
use crate::jsonrpc::encode_error;
use crate::mcp::method::LISTEN;
use crate::telemetry::Rejection;

impl Service for Endpoint {
    type Known = Known;

    /// A listen is told by its `Mcp-Method` header, which every modern request mirrors from
    /// its body (reference §2.1).
    const STREAM_MARKER: (Known, &'static [u8]) = (Known::Method, LISTEN.as_bytes());

    const LABEL: &'static str = "mcp";

    fn serve(&self, req: Request<Incoming>, peer: Option<SocketAddr>) -> impl Future<Output = Resp> + Send {
        self.serve_from(req, peer)
    }

    fn serve_front<'a>(
        &'a self,
        front: Front<'a>,
        body: Full<Bytes>,
        peer: Option<SocketAddr>,
    ) -> impl Future<Output = Resp> + Send + 'a {
        Endpoint::serve_front(self, front, body, peer)
    }

    fn path(&self) -> &str {
        Endpoint::path(self)
    }

    fn max_body(&self) -> usize {
        Endpoint::max_body(self)
    }

    fn body_timeout(&self) -> Duration {
        Endpoint::body_timeout(self)
    }

    fn slow_write(&self) -> Duration {
        Endpoint::slow_write(self)
    }

    fn body_timed_out(&self) -> Resp {
        Endpoint::body_timed_out(self)
    }

    fn refusal(&self) -> Bytes {
        refusal()
    }

    fn observe(&self, event: ConnEvent) {
        let metrics = self.telemetry();
        match event {
            ConnEvent::RefusedPerIp => metrics.rejection(Rejection::PerIp),
            ConnEvent::HeaderTooLarge => metrics.rejection(Rejection::HeaderTooLarge),
            ConnEvent::HeaderTimeout => metrics.rejection(Rejection::HeaderTimeout),
            ConnEvent::IdleClosed => metrics.idle_closed(),
        }
    }
}

/// The answer to a connection over `max_connections_per_ip`: 429, a JSON-RPC error, and
/// `Retry-After`.
fn refusal() -> Bytes {
    let (status, err) =
        Error::from(DownstreamError::LimitReached("too many connections from this address".into())).to_jsonrpc();
    let body = encode_error(None, &err);
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    [head.as_bytes(), &body[..]].concat().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_429() {
        let r = refusal();
        let text = std::str::from_utf8(&r).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"), "{head}");
        assert!(head.contains("retry-after: 1") && head.contains("connection: close"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(v["id"].is_null());
        assert_eq!(v["error"]["code"], -32600);
    }
}
