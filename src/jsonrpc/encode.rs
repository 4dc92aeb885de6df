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
    let mut out = Vec::with_capacity(RESULT_HEAD.len() + id.len() + RESULT_MID.len() + result.len() + 1);
    out.extend_from_slice(RESULT_HEAD);
    out.extend_from_slice(id);
    out.extend_from_slice(RESULT_MID);
    out.extend_from_slice(result);
    out.push(b'}');
    Bytes::from(out)
}

/// A result's JSON text: whole, or a cached entry's stored text with its remaining `ttlMs`
/// still to be written in front (see [`crate::cache::Stored`]). The spliced form is written
/// once, straight into the response envelope: a cache hit copies its body once.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultText {
    Whole(Bytes),
    /// `{"ttlMs":N,` followed by `tail`, the object text after its opening brace.
    Spliced {
        ttl_ms: u64,
        tail: Bytes,
    },
}

impl ResultText {
    /// Bytes of the text, exactly (buffers are sized with it: `Bytes::from` a `Vec` whose
    /// capacity is larger allocates once more).
    pub fn len(&self) -> usize {
        match self {
            ResultText::Whole(b) => b.len(),
            ResultText::Spliced { ttl_ms, tail } => {
                let digits = itoa::Buffer::new().format(*ttl_ms).len();
                TTL_PREFIX.len() + digits + usize::from(tail.first() != Some(&b'}')) + tail.len()
            }
        }
    }

    /// Whether the text is empty (never for a valid result).
    pub fn is_empty(&self) -> bool {
        matches!(self, ResultText::Whole(b) if b.is_empty())
    }

    /// Appends the text to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            ResultText::Whole(b) => out.extend_from_slice(b),
            ResultText::Spliced { ttl_ms, tail } => write_spliced(out, *ttl_ms, tail),
        }
    }

    /// The text as one buffer (a copy only for the spliced form).
    pub fn into_bytes(self) -> Bytes {
        match self {
            ResultText::Whole(b) => b,
            spliced => {
                let mut out = Vec::with_capacity(spliced.len());
                spliced.write_to(&mut out);
                Bytes::from(out)
            }
        }
    }
}

impl From<Bytes> for ResultText {
    fn from(b: Bytes) -> Self {
        ResultText::Whole(b)
    }
}

const TTL_PREFIX: &[u8] = b"{\"ttlMs\":";

/// Writes `{"ttlMs":N` then, unless `tail` closes the object at once, a comma, then `tail`.
pub fn write_spliced(out: &mut Vec<u8>, ttl_ms: u64, tail: &[u8]) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(TTL_PREFIX);
    out.extend_from_slice(digits.format(ttl_ms).as_bytes());
    if tail.first() != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(tail);
}

/// [`encode_result`] of a [`ResultText`], written in one pass.
pub fn encode_result_text(id: &RequestId, result: &ResultText) -> Bytes {
    let id = id.as_json().as_bytes();
    let mut out = Vec::with_capacity(RESULT_HEAD.len() + id.len() + RESULT_MID.len() + result.len() + 1);
    out.extend_from_slice(RESULT_HEAD);
    out.extend_from_slice(id);
    out.extend_from_slice(RESULT_MID);
    result.write_to(&mut out);
    out.push(b'}');
    Bytes::from(out)
}

const RESULT_HEAD: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
const RESULT_MID: &[u8] = b",\"result\":";

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
    fn a_spliced_result_encodes_like_the_whole_text() {
        let id = RequestId::number(7);
        for (tail, whole) in [(&br#""a":1}"#[..], &br#"{"ttlMs":1500,"a":1}"#[..]), (b"}", br#"{"ttlMs":1500}"#)] {
            let spliced = ResultText::Spliced { ttl_ms: 1500, tail: Bytes::copy_from_slice(tail) };
            assert_eq!(&spliced.clone().into_bytes()[..], whole);
            assert_eq!(encode_result_text(&id, &spliced), encode_result(&id, whole));
            assert_eq!(spliced.len(), whole.len());
            let out = encode_result_text(&id, &ResultText::from(Bytes::copy_from_slice(whole)));
            assert_eq!(out, encode_result(&id, whole));
        }
    }

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
