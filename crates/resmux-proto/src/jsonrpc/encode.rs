//! Writing JSON-RPC messages from raw pieces.

use bytes::Bytes;

use super::lexeme::write_json_string;

use super::incoming::RequestId;
use super::inline::Inline;
use super::rpc_error::RpcError;

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
    pub head: Head,
    pub tail: Bytes,
}

impl Spliced {
    /// Text in one piece.
    pub fn whole(text: Bytes) -> Self {
        Self { head: Head::Shared(text), tail: Bytes::new() }
    }

    /// Bytes of text.
    pub fn len(&self) -> usize {
        self.head.as_bytes().len() + self.tail.len()
    }

    /// Whether it holds no text.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text in one piece (a copy, unless it is in one piece already).
    pub fn to_bytes(&self) -> Bytes {
        match &self.head {
            Head::Shared(head) if self.tail.is_empty() => head.clone(),
            _ if self.head.as_bytes().is_empty() => self.tail.clone(),
            head => concat(&[head.as_bytes(), &self.tail]),
        }
    }
}

/// The head of a [`Spliced`] text. A head made for one answer (a cached result's `ttlMs`,
/// `{"ttlMs":N,`, at most 30 bytes) is kept in place, so that a cache hit does not allocate it
/// only to copy it into the envelope.
#[derive(Clone)]
pub enum Head {
    Inline(Inline<30>),
    Shared(Bytes),
}

impl Head {
    /// `parts` back to back: in place when they fit, else in one allocation.
    pub fn of(parts: &[&[u8]]) -> Self {
        Inline::of(parts).map_or_else(|| Self::Shared(concat(parts)), Self::Inline)
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline(bytes) => bytes.as_bytes(),
            Self::Shared(bytes) => bytes,
        }
    }
}

impl Default for Head {
    fn default() -> Self {
        Self::Inline(Inline::default())
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", Bytes::copy_from_slice(self.as_bytes()))
    }
}

/// [`encode_result`] as pieces to write back to back: the envelope and the result's head (in
/// one allocation), the result's tail (shared, not copied), and the closing brace.
pub fn encode_result_pieces(id: &RequestId, result: &Spliced) -> [Bytes; 3] {
    let head = concat(&[RESULT_OPEN, id.as_json().as_bytes(), RESULT_FIELD, result.head.as_bytes()]);
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
    use proptest::prelude::*;

    use super::*;
    use crate::jsonrpc::{Incoming, Kind};

    fn written(s: &str) -> String {
        let mut out = Vec::new();
        write_json_string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    /// Every character below U+0100, alone and inside longer text (the word-at-a-time test
    /// looks at eight bytes at once), is written as serde_json writes it.
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for c in (0u32..0x100).filter_map(char::from_u32) {
            for s in [c.to_string(), format!("abcdefghij{c}klmnopq"), format!("{c}0123456789abcdef")] {
                assert_eq!(written(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
            }
        }
    }

    /// A head is its parts back to back, in place or not, and a spliced text is its head and
    /// tail back to back whichever way it is held.
    #[test]
    fn heads_hold_their_parts_in_place_or_shared() {
        let short = Head::of(&[b"{\"ttlMs\":", b"18446744073709551615", b","]);
        assert!(matches!(short, Head::Inline(_)), "the longest TTL head fits in place");
        assert_eq!(short.as_bytes(), b"{\"ttlMs\":18446744073709551615,");
        let long = Head::of(&[&[b'a'; 20], &[b'b'; 11]]);
        assert!(matches!(long, Head::Shared(_)));
        assert_eq!(long.as_bytes(), [[b'a'; 20].as_slice(), &[b'b'; 11]].concat());
        assert_eq!(Head::of(&[b"ab"]), Head::Shared(Bytes::from_static(b"ab")), "equal by their bytes");
        let tail = Bytes::from_static(b"\"a\":1}");
        for (head, whole) in [(short, &br#"{"ttlMs":18446744073709551615,"a":1}"#[..]), (Head::default(), br#""a":1}"#)]
        {
            let spliced = Spliced { head, tail: tail.clone() };
            assert_eq!((&spliced.to_bytes()[..], spliced.len()), (whole, whole.len()));
        }
        assert_eq!(&Spliced::whole(Bytes::from_static(b"{}")).to_bytes()[..], b"{}");
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(s in any::<String>()) {
            prop_assert_eq!(written(&s), serde_json::to_string(&s).unwrap());
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
