//! Decoding of one incoming JSON-RPC message into a borrowed envelope.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::rpc_error::{RpcError, code};

/// A JSON-RPC request id, kept as its raw JSON text (a string or an integer) so that it is
/// echoed with exactly the type and spelling the peer used. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Arc<str>);

impl RequestId {
    /// Checks that `raw` is a JSON string or integer, as JSON-RPC ids must be in MCP.
    pub fn from_raw(raw: &RawValue) -> Option<Self> {
        let text = raw.get();
        let ok = match text.as_bytes().first() {
            Some(b'"') => true,
            Some(b'-' | b'0'..=b'9') => text.bytes().skip(1).all(|b| b.is_ascii_digit()),
            _ => false,
        };
        ok.then(|| Self(Arc::from(text)))
    }

    /// An integer id.
    pub fn number(n: u64) -> Self {
        Self(Arc::from(itoa::Buffer::new().format(n)))
    }

    /// The raw JSON text of the id.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// The id as a raw JSON value.
    pub fn as_raw(&self) -> &RawValue {
        // The text came from a parsed RawValue or from itoa, so it is valid JSON.
        serde_json::from_str(&self.0).expect("request ids are valid JSON")
    }

    /// The integer value, when the id is an integer.
    pub fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an envelope is, by its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// A decoded message. Payloads are borrowed from the input text.
#[derive(Debug)]
pub struct Incoming<'a> {
    pub kind: Kind,
    pub id: Option<RequestId>,
    pub method: Option<Cow<'a, str>>,
    pub params: Option<&'a RawValue>,
    pub result: Option<&'a RawValue>,
    pub error: Option<&'a RawValue>,
}

/// Why a message could not be decoded, with the JSON-RPC code it maps to.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MessageError {
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {reason}")]
    Invalid { reason: String, id: Option<RequestId> },
}

impl MessageError {
    /// The JSON-RPC error for this failure.
    pub fn to_rpc(&self) -> RpcError {
        match self {
            Self::Parse(m) => RpcError::new(code::PARSE_ERROR, format!("Parse error: {m}")),
            Self::Invalid { reason, .. } => RpcError::new(code::INVALID_REQUEST, format!("Invalid request: {reason}")),
        }
    }

    /// The id of the offending message, when it could be read.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Self::Parse(_) => None,
            Self::Invalid { id, .. } => id.as_ref(),
        }
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// `Some` for any present value, `null` included (plain `Option` would map `null` to `None`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// The nesting depth (arrays and objects) [`Incoming::parse`] accepts: MCP messages nest a
/// handful of levels, tool arguments and results a few more.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// The largest configurable depth: serde_json refuses deeper input on its own.
pub const MAX_DEPTH_LIMIT: usize = 128;

/// Whether `text` nests arrays and objects deeper than `max`. One pass over the bytes, without
/// recursion, strings skipped (a bracket inside a string does not count); it stops at the
/// first level past `max`, so a 100,000-deep `[[[[…` costs `max` bytes. Malformed input is
/// left to the parser.
pub fn depth_exceeds(text: &str, max: usize) -> bool {
    // Nesting needs an opening bracket per level: text with at most `max` of them, the usual
    // request, cannot exceed it. They are found with `memchr` (SIMD), which stops at the
    // `max + 1`-th, so only bracket-heavy text pays for the exact walk below.
    if memchr::memchr2_iter(b'[', b'{', text.as_bytes()).nth(max).is_none() {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text.as_bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

impl<'a> Incoming<'a> {
    /// Decodes one message from `text`, nested at most [`DEFAULT_MAX_DEPTH`] deep.
    pub fn parse(text: &'a str) -> Result<Self, MessageError> {
        Self::parse_limited(text, DEFAULT_MAX_DEPTH)
    }

    /// Decodes one message from `text`, nested at most `max_depth` deep; deeper input is a
    /// parse error (`-32700`), found before any of it is parsed.
    pub fn parse_limited(text: &'a str, max_depth: usize) -> Result<Self, MessageError> {
        if depth_exceeds(text, max_depth) {
            return Err(MessageError::Parse(format!("JSON nested deeper than {max_depth} levels")));
        }
        let env: Envelope<'a> = match serde_json::from_str(text) {
            Ok(env) => env,
            Err(e) if e.is_data() => {
                // Well-formed JSON of the wrong shape (not an object, wrong field types).
                return Err(MessageError::Invalid { reason: e.to_string(), id: None });
            }
            Err(e) => return Err(MessageError::Parse(e.to_string())),
        };
        let id = match env.id {
            None => None,
            // An error answering a request whose id could not be read carries `"id": null`.
            Some(raw) if raw.get() == "null" && env.error.is_some() && env.method.is_none() => None,
            Some(raw) => Some(RequestId::from_raw(raw).ok_or_else(|| MessageError::Invalid {
                reason: "id must be a string or an integer".into(),
                id: None,
            })?),
        };
        let invalid = |reason: &str| MessageError::Invalid { reason: reason.into(), id: id.clone() };
        if env.jsonrpc.as_deref() != Some("2.0") {
            return Err(invalid("jsonrpc must be \"2.0\""));
        }
        let kind = match (&env.method, &id, env.result.is_some() || env.error.is_some()) {
            (Some(_), Some(_), false) => Kind::Request,
            (Some(_), None, false) => Kind::Notification,
            (None, Some(_), true) => Kind::Response,
            (None, None, true) => Kind::Response, // an error answering an unreadable id
            _ => return Err(invalid("not a request, notification or response")),
        };
        if env.result.is_some() && env.error.is_some() {
            return Err(invalid("a response carries result or error, not both"));
        }
        if let Some(p) = env.params
            && !p.get().starts_with('{')
        {
            return Err(invalid("params must be an object"));
        }
        Ok(Self { kind, id, method: env.method, params: env.params, result: env.result, error: env.error })
    }

    /// The method name, or "" for responses.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_notification_response() {
        let r = Incoming::parse(r#"{"jsonrpc":"2.0","id":"a","method":"m","params":{}}"#).unwrap();
        assert_eq!(r.kind, Kind::Request);
        assert_eq!(r.id.unwrap().as_json(), "\"a\"");
        let n = Incoming::parse(r#"{"jsonrpc":"2.0","method":"m"}"#).unwrap();
        assert_eq!(n.kind, Kind::Notification);
        let s = Incoming::parse(r#"{"jsonrpc":"2.0","id":7,"result":{"x":1}}"#).unwrap();
        assert_eq!(s.kind, Kind::Response);
        assert_eq!(s.result.unwrap().get(), r#"{"x":1}"#);
    }

    #[test]
    fn bad_messages() {
        assert!(matches!(Incoming::parse("{"), Err(MessageError::Parse(_))));
        assert!(matches!(Incoming::parse("[]"), Err(MessageError::Invalid { .. })));
        for bad in [
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
        ] {
            assert!(matches!(Incoming::parse(bad), Err(MessageError::Invalid { .. })), "{bad}");
        }
    }

    #[test]
    fn nesting_depth_is_capped_without_recursion() {
        let deep = "[".repeat(100_000);
        assert!(matches!(Incoming::parse(&deep), Err(MessageError::Parse(m)) if m.contains("deeper than 64")));
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":{}1{}}}}}"#,
            "[".repeat(62),
            "]".repeat(62)
        );
        assert!(Incoming::parse(&body).is_ok(), "64 levels pass");
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":{}1{}}}}}"#,
            "[".repeat(63),
            "]".repeat(63)
        );
        assert!(matches!(Incoming::parse(&body), Err(MessageError::Parse(_))), "65 do not");
        // Brackets inside strings, escaped quotes included, do not count.
        let s = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"s":"\"{}"}}}}"#, "[".repeat(200));
        assert!(Incoming::parse(&s).is_ok());
        assert!(!depth_exceeds("[[]]", 2) && depth_exceeds("[[[]]]", 2));
    }

    #[test]
    fn invalid_keeps_the_id_when_readable() {
        let e = Incoming::parse(r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#).unwrap_err();
        assert_eq!(e.id().unwrap().as_json(), "3");
    }
}
