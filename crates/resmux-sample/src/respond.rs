//! The sample's HTTP responses, shared by its modern and legacy servers.

use std::convert::Infallible;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::mpsc;

use super::handler::Sample;
use super::record::Failure;
use resmux_proto::jsonrpc::{Incoming, Kind, encode_error};

pub(super) type Resp = Response<BoxBody<Bytes, Infallible>>;

/// An injected [`Failure::Close`]: the service fails, and hyper drops the connection
/// without answering.
#[derive(Debug)]
pub(super) struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection closed by an injected failure")
    }
}

impl std::error::Error for Closed {}

/// Records a received message, then applies an injected failure pending for its method:
/// `Ok(Some(_))` is the failed answer, `Err` closes the connection.
pub(super) fn record_and_fail(
    sample: &Sample,
    http_method: &str,
    headers: &http::HeaderMap,
    msg: &Incoming<'_>,
) -> Result<Option<Resp>, Closed> {
    let method = (msg.kind != Kind::Response).then(|| msg.method());
    let params = msg.params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(Value::Null);
    sample.recorder().record(http_method, headers, method, params);
    match method.and_then(|m| sample.recorder().take_failure(m)) {
        None => Ok(None),
        Some(Failure::Close) => Err(Closed),
        Some(Failure::Status(code)) => Ok(Some(status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY)))),
        Some(Failure::Error { status: http, code }) => {
            let err = resmux_proto::jsonrpc::RpcError::new(code, "injected failure");
            let http = StatusCode::from_u16(http).unwrap_or(StatusCode::BAD_REQUEST);
            Ok(Some(json(http, encode_error(msg.id.as_ref(), &err))))
        }
    }
}

/// An SSE response whose events come from `rx`; it ends when every sender is gone.
pub(super) fn sse(mut rx: mpsc::Receiver<Bytes>) -> Resp {
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(|b| Ok::<_, Infallible>(Frame::data(b))))
    }));
    let mut resp = Response::new(BodyExt::boxed(body));
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

pub(super) fn json(code: StatusCode, body: Bytes) -> Resp {
    let mut resp = Response::new(Full::new(body).boxed());
    *resp.status_mut() = code;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub(super) fn status(code: StatusCode) -> Resp {
    let mut resp = Response::new(Full::new(Bytes::new()).boxed());
    *resp.status_mut() = code;
    resp
}
