//! Decoding of one incoming JSON-RPC message into a borrowed envelope.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::inline::Inline;
use super::lex::{JsonError, Reader};
use super::raw_object::{RawJson, RawObject};
use super::rpc_error::{RpcError, code};

mod envelope;
use envelope::Envelope;

/// A JSON-RPC request id, kept as its raw JSON text (a string or an integer) so that it is
/// echoed with exactly the type and spelling the peer used. Cheap to clone: an id of up to
/// [`INLINE_ID`] bytes (any integer, most strings) is kept in place, so a request's id costs
/// no allocation and its clones no reference counting; a longer one is shared.
#[derive(Clone)]
pub struct RequestId(IdText);

#[derive(Clone)]
enum IdText {
    /// Copied whole from a `&str`, so always UTF-8.
    Inline(Inline<INLINE_ID>),
    Shared(Arc<str>),
}

/// Bytes of id text kept in place.
const INLINE_ID: usize = 22;

impl RequestId {
    /// Checks that `raw` is a JSON string or integer, as JSON-RPC ids must be in MCP.
    pub fn from_raw<'r>(raw: impl Into<RawJson<'r>>) -> Option<Self> {
        let text = raw.into().get();
        let ok = match text.as_bytes().first() {
            Some(b'"') => true,
            Some(b'-' | b'0'..=b'9') => text.bytes().skip(1).all(|b| b.is_ascii_digit()),
            _ => false,
        };
        ok.then(|| Self::of(text))
    }

    /// An integer id.
    pub fn number(n: u64) -> Self {
        Self::of(itoa::Buffer::new().format(n))
    }

    fn of(text: &str) -> Self {
        Self(Inline::of(&[text.as_bytes()]).map_or_else(|| IdText::Shared(Arc::from(text)), IdText::Inline))
    }

    /// The raw JSON text of the id.
    pub fn as_json(&self) -> &str {
        match &self.0 {
            IdText::Inline(text) => std::str::from_utf8(text.as_bytes()).expect("copied whole from a `&str`"),
            IdText::Shared(text) => text,
        }
    }

    /// The id as a raw JSON value.
    pub fn as_raw(&self) -> &RawValue {
        // The text came from a parsed RawValue or from itoa, so it is valid JSON.
        serde_json::from_str(self.as_json()).expect("request ids are valid JSON")
    }

    /// The integer value, when the id is an integer.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_json().parse().ok()
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &Self) -> bool {
        self.as_json() == other.as_json()
    }
}

impl Eq for RequestId {}

impl std::hash::Hash for RequestId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_json().hash(state);
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
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
    pub params: Option<RawJson<'a>>,
    pub result: Option<RawJson<'a>>,
    pub error: Option<RawJson<'a>>,
    params_object: Option<Result<RawObject<'a>, JsonError>>,
    meta_object: Option<Result<RawObject<'a>, JsonError>>,
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

/// The nesting depth (arrays and objects) [`Incoming::parse`] accepts: MCP messages nest a
/// handful of levels, tool arguments and results a few more.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// The largest configurable depth: what the reader can track (serde_json's own limit too).
pub const MAX_DEPTH_LIMIT: usize = super::lex::MAX_DEPTH;

impl<'a> Incoming<'a> {
    /// Decodes one message from `text`, nested at most [`DEFAULT_MAX_DEPTH`] deep.
    pub fn parse(text: &'a str) -> Result<Self, MessageError> {
        Self::parse_limited(text, DEFAULT_MAX_DEPTH)
    }

    /// Decodes one message from `text`, nested at most `max_depth` deep (at most
    /// [`MAX_DEPTH_LIMIT`]); deeper input is a parse error (`-32700`). One pass: `params`, and
    /// its `_meta`, are read as objects on the way (see [`Incoming::params_object`]).
    pub fn parse_limited(text: &'a str, max_depth: usize) -> Result<Self, MessageError> {
        let mut reader = Reader::new(text, max_depth);
        let mut env = Envelope::default();
        let read = match reader.object(0, |r, key| env.member(r, key)) {
            // Not an object, but JSON only if nothing follows it.
            Err(JsonError::NotObject) => reader.end().and(Err(JsonError::NotObject)),
            read => read.and_then(|()| reader.end()),
        };
        match read {
            Ok(()) => {}
            Err(JsonError::NotObject) => {
                return Err(MessageError::Invalid { reason: "a message must be a JSON object".into(), id: None });
            }
            Err(e) => return Err(MessageError::Parse(e.to_string())),
        }
        if let Some(reason) = env.shape {
            // Well-formed JSON of the wrong shape (wrong field types, a field twice).
            return Err(MessageError::Invalid { reason, id: None });
        }
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
            && !p.is_object()
        {
            return Err(invalid("params must be an object"));
        }
        Ok(Self {
            kind,
            id,
            method: env.method,
            params: env.params,
            result: env.result,
            error: env.error,
            params_object: env.params_object,
            meta_object: env.meta_object,
        })
    }

    /// `params` as an object, read in the same pass as the envelope: `None` without params,
    /// the error when it names a key twice.
    pub fn params_object(&self) -> Option<Result<&RawObject<'a>, &JsonError>> {
        self.params_object.as_ref().map(Result::as_ref)
    }

    /// `params._meta` as an object, read in the same pass: `None` when params or `_meta` is
    /// absent or `_meta` is not an object, the error when it names a key twice.
    pub fn meta_object(&self) -> Option<Result<&RawObject<'a>, &JsonError>> {
        self.meta_object.as_ref().map(Result::as_ref)
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

    /// An id reads back as sent whether it is kept in place or shared (short and long ids,
    /// text of several bytes per character across the boundary), and ids are equal and hash
    /// alike by their text.
    #[test]
    fn ids_of_any_length_read_back_as_sent() {
        use std::hash::BuildHasher;
        let hasher = std::hash::RandomState::new();
        for n in 0..40 {
            for fill in ["a", "é", "\\u00e9"] {
                let text = format!("\"{}\"", fill.repeat(n));
                let id = RequestId::from_raw(RawJson::checked(&text)).expect("a string id");
                assert_eq!(id.as_json(), text);
                let again = RequestId::from_raw(RawJson::checked(&text)).unwrap();
                assert_eq!(id, again.clone());
                assert_eq!(hasher.hash_one(&id), hasher.hash_one(&again));
            }
        }
        for n in [0, 7, u64::MAX] {
            assert_eq!(RequestId::number(n).as_u64(), Some(n));
            assert_eq!(RequestId::number(n).as_json(), n.to_string());
        }
        assert_ne!(RequestId::number(1), RequestId::from_raw(RawJson::checked("\"1\"")).unwrap());
    }

    /// `jsonrpc` and `method` written with escapes read as their values.
    #[test]
    fn escaped_string_members_are_unescaped() {
        let m = Incoming::parse(r#"{"jsonrpc":"2\u002e0","id":1,"method":"m\u0065"}"#).unwrap();
        assert_eq!((m.kind, m.method()), (Kind::Request, "me"));
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
    }

    #[test]
    fn invalid_keeps_the_id_when_readable() {
        let e = Incoming::parse(r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#).unwrap_err();
        assert_eq!(e.id().unwrap().as_json(), "3");
    }

    #[test]
    fn params_and_meta_are_read_in_the_same_pass() {
        let text = r#" { "params" : { "uri" : "a://b" , "_meta" : { "v" : "1" , "c" : { } } } , "jsonrpc":"2.0","id":1,"method":"m"} "#;
        let m = Incoming::parse(text).unwrap();
        assert_eq!(m.params.unwrap().get(), r#"{ "uri" : "a://b" , "_meta" : { "v" : "1" , "c" : { } } }"#);
        let params = m.params_object().unwrap().unwrap();
        assert_eq!(params.get_str("uri").unwrap(), "a://b");
        assert_eq!(params.get("_meta").unwrap().get(), r#"{ "v" : "1" , "c" : { } }"#);
        let meta = m.meta_object().unwrap().unwrap();
        assert_eq!((meta.get_str("v").unwrap().as_ref(), meta.get("c").unwrap().get()), ("1", "{ }"));
        // `_meta` that is not an object, or absent: no meta object.
        let m = Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":[1]}}"#).unwrap();
        assert!(m.params_object().unwrap().is_ok() && m.meta_object().is_none());
        let m = Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).unwrap();
        assert!(m.params_object().is_none() && m.meta_object().is_none());
    }

    #[test]
    fn duplicate_params_keys_are_the_params_error_and_not_a_parse_error() {
        let m = Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}}"#).unwrap();
        assert_eq!(m.params_object().unwrap().unwrap_err(), &JsonError::Duplicate("a".into()));
        let m = Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"v":1,"v":1}}}"#).unwrap();
        assert!(m.params_object().unwrap().is_ok());
        assert_eq!(m.meta_object().unwrap().unwrap_err(), &JsonError::Duplicate("v".into()));
        // Still JSON first: a duplicate in text that is not JSON is a parse error.
        let e = Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}"#).unwrap_err();
        assert!(matches!(e, MessageError::Parse(_)), "{e:?}");
    }

    #[test]
    fn envelope_shape_errors_are_invalid_requests_once_the_text_is_json() {
        for bad in [
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":2,"id":1,"method":"m"}"#,
            r#"["2.0",1,"m"]"#,
            "3",
        ] {
            assert!(matches!(Incoming::parse(bad), Err(MessageError::Invalid { id: None, .. })), "{bad}");
        }
        for bad in
            [r#"{"jsonrpc":"2.0","id":1,"method":7"#, r#"{"jsonrpc":"2.0","id":1,"method":"m"} x"#, "[1,", "[] x"]
        {
            assert!(matches!(Incoming::parse(bad), Err(MessageError::Parse(_))), "{bad}");
        }
        // Escaped member names and values are read unescaped; unknown members are skipped.
        let m = Incoming::parse(r#"{"json\u0072pc":"2.\u0030","id":1,"m\u0065thod":"a\/b","x":[{"y":null}]}"#).unwrap();
        assert_eq!((m.kind, m.method()), (Kind::Request, "a/b"));
        // `null` for a string member counts as absent, as it did with serde.
        assert!(Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"method":null,"result":1}"#).is_ok());
    }
}
