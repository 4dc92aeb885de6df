//! Writing JSON-RPC messages from raw pieces.

use bytes::Bytes;

use super::incoming::RequestId;
use super::rpc_error::RpcError;

/// Appends `s` as a JSON string literal.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaper writes into any io::Write; a Vec never fails.
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` with `result` spliced in verbatim.
pub fn encode_result(id: &RequestId, result: &[u8]) -> Bytes {
    let id = id.as_json().as_bytes();
    let mut out = Vec::with_capacity(36 + id.len() + result.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id);
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result);
    out.push(b'}');
    Bytes::from(out)
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
