//! Writing JSON-RPC messages from raw pieces.

use bytes::Bytes;

use super::incoming::RequestId;
use super::rpc_error::RpcError;

/// Appends `s` as a JSON string literal.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaper writes into any io::Write; a Vec never fails.
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
}

/// `parts` back to back, in one allocation of exactly their length: `Bytes` takes a `Vec`
/// whose length is its capacity as it is, where any other `Vec` costs it a second allocation.
pub fn concat(parts: &[&[u8]]) -> Bytes {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.extend_from_slice(part);
    }
    Bytes::from(out)
}

const RESULT_OPEN: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
const RESULT_FIELD: &[u8] = b",\"result\":";

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` with `result` spliced in verbatim.
pub fn encode_result(id: &RequestId, result: &[u8]) -> Bytes {
    concat(&[RESULT_OPEN, id.as_json().as_bytes(), RESULT_FIELD, result, b"}"])
}

/// A result's JSON text in two pieces written back to back: a short `head` made for this
/// answer and a `tail` shared with where it is kept (a cache entry), so that writing the
/// answer never copies the tail.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spliced {
    pub head: Bytes,
    pub tail: Bytes,
}

impl Spliced {
    /// Text in one piece.
    pub fn whole(text: Bytes) -> Self {
        Self { head: text, tail: Bytes::new() }
    }

    /// Bytes of text.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Whether it holds no text.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text in one piece (a copy, unless it is in one piece already).
    pub fn to_bytes(&self) -> Bytes {
        if self.tail.is_empty() {
            return self.head.clone();
        }
        concat(&[&self.head, &self.tail])
    }
}

/// [`encode_result`] as pieces to write back to back: the envelope and the result's head,
/// the result's tail (shared, not copied), and the closing brace.
pub fn encode_result_pieces(id: &RequestId, result: &Spliced) -> [Bytes; 3] {
    let head = concat(&[RESULT_OPEN, id.as_json().as_bytes(), RESULT_FIELD, &result.head]);
    [head, result.tail.clone(), Bytes::from_static(b"}")]
}

/// An error response; `id` is `null` when the request's id could not be read.
pub fn encode_error(id: Option<&RequestId>, error: &RpcError) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.map_or("null", |i| i.as_json()).as_bytes());
    out.extend_from_slice(b",\"error\":");
    serde_json::to_writer(&mut out, error).expect("writing to a Vec cannot fail");
    out.push(b'}');
    Bytes::from(out)
}

/// A request with raw `params`.
pub fn encode_request(id: &RequestId, method: &str, params: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(48 + method.len() + params.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_json().as_bytes());
    out.extend_from_slice(b",\"method\":");
    write_json_string(&mut out, method);
    out.extend_from_slice(b",\"params\":");
    out.extend_from_slice(params);
    out.push(b'}');
    Bytes::from(out)
}

/// A notification with raw `params`.
pub fn encode_notification(method: &str, params: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(40 + method.len() + params.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    write_json_string(&mut out, method);
    out.extend_from_slice(b",\"params\":");
    out.extend_from_slice(params);
    out.push(b'}');
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{Incoming, Kind};

    #[test]
    fn encoded_messages_decode() {
        let id = RequestId::number(42);
        let r = encode_result(&id, br#"{"a":1}"#);
        let m = Incoming::parse(std::str::from_utf8(&r).unwrap()).unwrap();
        assert_eq!(m.kind, Kind::Response);
        let e = encode_error(None, &RpcError::new(-32700, "bad \"json\""));
        let m = Incoming::parse(std::str::from_utf8(&e).unwrap()).unwrap();
        assert!(m.error.is_some());
        let q = encode_request(&id, "resources/read", br#"{"uri":"x"}"#);
        assert_eq!(Incoming::parse(std::str::from_utf8(&q).unwrap()).unwrap().method(), "resources/read");
    }
}
