//! Building downstream HTTP responses: JSON-RPC answers and errors with the statuses the
//! spec's table prescribes, plain and empty responses.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};

use super::body::{Body, full};
use super::validate::Rejected;
use crate::error::Error;
use crate::jsonrpc::{RequestId, encode_error, encode_result_text};
use crate::router::Answer;

/// Response header naming how the cache took part.
pub const H_CACHE: &str = "resmux-cache";

/// [`H_CACHE`] as a header name, validated once at compile time rather than per answer.
const CACHE_HEADER: http::HeaderName = http::HeaderName::from_static(H_CACHE);

pub type Resp = Response<Body>;

/// A routed answer: 200 with the result or the relayed error, and the cache headers.
pub fn answer(id: &RequestId, answer: Answer) -> Resp {
    let (status, body) = match &answer.outcome {
        Ok(result) => (StatusCode::OK, encode_result_text(id, result)),
        Err(err) => {
            let status = StatusCode::from_u16(err.downstream_status()).unwrap_or(StatusCode::OK);
            (status, encode_error(Some(id), err))
        }
    };
    let mut resp = json(status, body);
    let h = resp.headers_mut();
    h.insert(CACHE_HEADER, HeaderValue::from_static(answer.cache.as_str()));
    if let Some(age) = answer.age {
        h.insert(http::header::AGE, HeaderValue::from(age));
    }
    resp
}

/// A validation failure.
pub fn rejected(r: Rejected) -> Resp {
    error(r.id.as_ref(), r.error.into())
}

/// A failure, with the status and JSON-RPC error of the spec's table.
pub fn error(id: Option<&RequestId>, e: Error) -> Resp {
    let (status, err) = e.to_jsonrpc();
    json(status, encode_error(id, &err))
}

pub fn json(status: StatusCode, body: Bytes) -> Resp {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub fn plain(status: StatusCode, text: &str) -> Resp {
    let mut resp = Response::new(full(Bytes::from(text.to_owned())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

pub fn empty(status: StatusCode) -> Resp {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}
