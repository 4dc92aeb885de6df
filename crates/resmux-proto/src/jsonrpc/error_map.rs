//! The one mapping from an [`Error`] to the JSON-RPC error object and HTTP status that the
//! spec's table prescribes (reference §1.3, §2.1). It sits in the codec, above the error kinds,
//! so that `error` stays a leaf every layer can name.

use http::StatusCode;
use serde_json::json;

use super::{RpcError, code};
use crate::error::{DownstreamError, Error, UpstreamErrorKind, chain};

impl Error {
    /// The HTTP status and JSON-RPC error object for this failure.
    pub fn to_jsonrpc(&self) -> (StatusCode, RpcError) {
        use DownstreamError as D;
        let msg = self.to_string();
        match self {
            Error::Downstream(d) => match d {
                D::Parse(_) => (StatusCode::BAD_REQUEST, RpcError::new(code::PARSE_ERROR, msg)),
                D::InvalidRequest(_) => (StatusCode::BAD_REQUEST, RpcError::new(code::INVALID_REQUEST, msg)),
                D::MethodNotFound(m) => {
                    (StatusCode::NOT_FOUND, RpcError::new(code::METHOD_NOT_FOUND, msg).with_data(json!({"method": m})))
                }
                D::MissingMeta(_) | D::InvalidParams(_) => {
                    (StatusCode::BAD_REQUEST, RpcError::new(code::INVALID_PARAMS, msg))
                }
                // Answered like "resource not found" (HTTP 200), which is what a client
                // treats them as: the URI names nothing it can read.
                D::ResourceNotFound { uri } | D::AmbiguousUri { uri } | D::InvalidUri { uri, .. } => {
                    (StatusCode::OK, RpcError::new(code::INVALID_PARAMS, msg).with_data(json!({"uri": uri})))
                }
                D::HeaderMismatch(_) => (StatusCode::BAD_REQUEST, RpcError::new(code::HEADER_MISMATCH, msg)),
                D::UnsupportedVersion { requested, supported } => (
                    StatusCode::BAD_REQUEST,
                    RpcError::new(code::UNSUPPORTED_PROTOCOL_VERSION, msg)
                        .with_data(json!({"supported": supported, "requested": requested})),
                ),
                D::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, RpcError::new(code::INVALID_REQUEST, msg)),
                D::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, RpcError::new(code::INVALID_REQUEST, msg)),
                D::OriginNotAllowed | D::HostNotAllowed => {
                    (StatusCode::FORBIDDEN, RpcError::new(code::INVALID_REQUEST, msg))
                }
                D::HttpMethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, RpcError::new(code::INVALID_REQUEST, msg)),
                D::UnsupportedMediaType => {
                    (StatusCode::UNSUPPORTED_MEDIA_TYPE, RpcError::new(code::INVALID_REQUEST, msg))
                }
                D::LimitReached(_) => (StatusCode::TOO_MANY_REQUESTS, RpcError::new(code::INVALID_REQUEST, msg)),
                D::SessionNotFound => (StatusCode::NOT_FOUND, RpcError::new(code::INVALID_REQUEST, msg)),
                D::StreamConflict => (StatusCode::CONFLICT, RpcError::new(code::INVALID_REQUEST, msg)),
                D::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, RpcError::new(code::INVALID_REQUEST, msg)),
            },
            Error::Upstream(u) => {
                let status = match u.kind {
                    UpstreamErrorKind::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
                    _ => StatusCode::BAD_GATEWAY,
                };
                let mut data = json!({
                    "side": "upstream",
                    "upstream": u.upstream(),
                    "retryable": self.is_retryable(),
                });
                if let UpstreamErrorKind::Tls { reason } = &u.kind {
                    data["tls"] = json!(reason.to_string());
                }
                if let UpstreamErrorKind::Credential { source, .. } = &u.kind {
                    data["credential"] = json!(chain(source.as_ref()));
                }
                (status, RpcError::new(code::INTERNAL_ERROR, msg).with_data(data))
            }
            Error::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                RpcError::new(code::INTERNAL_ERROR, msg).with_data(json!({"side": "internal", "retryable": true})),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::UpstreamError;

    #[test]
    fn spec_table() {
        let cases: Vec<(Error, u16, i64)> = vec![
            (DownstreamError::Parse("x".into()).into(), 400, -32700),
            (DownstreamError::MethodNotFound("ping".into()).into(), 404, -32601),
            (DownstreamError::MissingMeta("x".into()).into(), 400, -32602),
            (DownstreamError::ResourceNotFound { uri: "x:y".into() }.into(), 200, -32602),
            (DownstreamError::AmbiguousUri { uri: "https://a".into() }.into(), 200, -32602),
            (
                DownstreamError::InvalidUri {
                    uri: "x".into(),
                    problem: std::sync::Arc::new(crate::mcp::uri::BadUri::NoScheme),
                }
                .into(),
                200,
                -32602,
            ),
            (DownstreamError::HeaderMismatch("x".into()).into(), 400, -32020),
            (DownstreamError::UnsupportedVersion { requested: "1".into(), supported: vec![] }.into(), 400, -32022),
            (DownstreamError::BodyTooLarge { limit: 1 }.into(), 413, -32600),
            (DownstreamError::BodyTimeout { after: Duration::from_secs(1) }.into(), 408, -32600),
            (DownstreamError::OriginNotAllowed.into(), 403, -32600),
            (DownstreamError::SessionNotFound.into(), 404, -32600),
            (DownstreamError::StreamConflict.into(), 409, -32600),
            (UpstreamError::new("a", UpstreamErrorKind::Timeout { after: Duration::from_secs(1) }).into(), 504, -32603),
        ];
        for (err, status, code) in cases {
            let (s, e) = err.to_jsonrpc();
            assert_eq!((s.as_u16(), e.code), (status, code), "{err}");
        }
    }
}
