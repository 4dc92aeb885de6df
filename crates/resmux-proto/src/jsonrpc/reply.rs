//! An upstream's answer to one request, kept as the received bytes.

use std::sync::Arc;

use bytes::Bytes;

use super::{Incoming, Kind, MessageError, RpcError};

/// A message from an upstream that the proxy cannot use: the upstream side broke the protocol
/// (it becomes [`crate::error::UpstreamErrorKind::Malformed`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Malformed {
    #[error("response is not UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Message(#[from] MessageError),
    #[error("expected a response, got a {0:?}")]
    NotResponse(Kind),
    #[error("response id {got} does not match request id {want}")]
    WrongId { got: String, want: String },
    #[error("response without result or error")]
    NoOutcome,
    #[error("malformed error object: {0}")]
    ErrorObject(#[source] Arc<serde_json::Error>),
    /// A result that is not the JSON it must be.
    #[error(transparent)]
    Json(Arc<serde_json::Error>),
    #[error("capabilities is not an object")]
    Capabilities,
    #[error("InitializeResult without protocolVersion")]
    NoVersion,
    #[error("the server negotiated {0}, which the proxy does not speak")]
    Unspoken(String),
}

impl From<serde_json::Error> for Malformed {
    fn from(e: serde_json::Error) -> Self {
        Malformed::Json(Arc::new(e))
    }
}

/// A JSON-RPC response from an upstream: its `result` as a zero-copy slice of the received
/// message, or its `error`.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The raw JSON text of `result`.
    Result(Bytes),
    /// The upstream's JSON-RPC error, relayed as an answer.
    Error(RpcError),
}

impl Reply {
    /// Keeps the HTTP status of an error answer when it is a 4xx: the spec's error table gives
    /// some errors their own status, and the downstream client must see the same one.
    pub fn with_status(self, status: http::StatusCode) -> Self {
        match self {
            Reply::Error(mut e) if status.is_client_error() => {
                e.http_status = Some(status.as_u16());
                Reply::Error(e)
            }
            other => other,
        }
    }

    /// Decodes a response message, checking it is a response (to `expect_id`, when given).
    pub fn decode(message: &Bytes, expect_id: Option<&str>) -> Result<Self, Malformed> {
        let text = std::str::from_utf8(message).map_err(|_| Malformed::NotUtf8)?;
        let msg = Incoming::parse(text)?;
        if msg.kind != Kind::Response {
            return Err(Malformed::NotResponse(msg.kind));
        }
        if let (Some(want), Some(got)) = (expect_id, &msg.id)
            && got.as_json() != want
        {
            return Err(Malformed::WrongId { got: got.to_string(), want: want.to_owned() });
        }
        if let Some(result) = msg.result {
            return Ok(Reply::Result(message.slice_ref(result.get().as_bytes())));
        }
        let error = msg.error.ok_or(Malformed::NoOutcome)?;
        serde_json::from_str(error.get()).map(Reply::Error).map_err(|e| Malformed::ErrorObject(Arc::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_is_a_slice_and_ids_are_checked() {
        let body = Bytes::from_static(br#"{"jsonrpc":"2.0","id":3,"result":{"ok":true}}"#);
        match Reply::decode(&body, Some("3")).unwrap() {
            Reply::Result(r) => assert_eq!(&r[..], br#"{"ok":true}"#),
            Reply::Error(_) => panic!(),
        }
        assert!(Reply::decode(&body, Some("4")).is_err());
        let err = Bytes::from_static(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"nf"}}"#);
        assert!(matches!(Reply::decode(&err, None).unwrap(), Reply::Error(e) if e.code == -32602));
    }

    #[test]
    fn a_result_nested_past_the_cap_is_refused() {
        let deep = format!(r#"{{"jsonrpc":"2.0","id":3,"result":{{"a":{}1{}}}}}"#, "[".repeat(70), "]".repeat(70));
        let e = Reply::decode(&Bytes::from(deep), Some("3")).unwrap_err();
        assert!(e.to_string().contains("deeper than 64"), "{e}");
        let bomb = Bytes::from("[".repeat(1_000_000));
        assert!(Reply::decode(&bomb, Some("3")).is_err());
    }
}
