//! Reading an answer for the counts: the HTTP status, and the JSON-RPC response's shape
//! (a complete result, an MRTR `input_required` result, or an error with its code).

use bytes::Bytes;
use http::HeaderValue;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::conn::CACHE_HEADER;
use crate::wire::{self, ErrorObject};

/// What an answer was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A result (`resultType` `complete`, or none, as legacy servers send).
    Complete,
    /// An MRTR `input_required` result: the server asks for input before it answers.
    InputRequired,
    /// A JSON-RPC error, by code.
    Rpc(i64),
    /// No JSON-RPC response: an HTTP error page, an empty body, an SSE stream without one.
    NoResponse,
}

/// One answer, as counted.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub kind: Kind,
    /// The error message, or the start of a body that held no response (empty when ok).
    pub detail: String,
    pub cache: Option<HeaderValue>,
    /// `Mcp-Session-Id` (legacy servers that keep sessions).
    pub session: Option<String>,
}

impl Reply {
    /// Whether the answer is a success: a result, with a 2xx status.
    pub fn is_ok(&self) -> bool {
        (200..300).contains(&self.status) && matches!(self.kind, Kind::Complete | Kind::InputRequired)
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct ResultHead<'a> {
    #[serde(borrow, default, rename = "resultType")]
    result_type: Option<&'a str>,
}

/// Classifies a whole answer.
pub fn classify(parts: &http::response::Parts, body: &[u8]) -> Reply {
    let sse = wire::is_sse(parts.headers.get(http::header::CONTENT_TYPE));
    let status = parts.status.as_u16();
    let mut reply = match wire::response_json(sse, body) {
        None => Reply { status, kind: Kind::NoResponse, detail: snippet(body), cache: None, session: None },
        Some(json) => classify_json(status, &json),
    };
    if reply.kind == Kind::NoResponse || (reply.kind == Kind::Complete && !(200..300).contains(&status)) {
        reply.detail = snippet(body);
    }
    reply.cache = parts.headers.get(CACHE_HEADER).cloned();
    reply.session = parts.headers.get(resmux::mcp::H_SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_owned);
    reply
}

/// Classifies one JSON-RPC response message that came with `status`.
pub fn classify_json(status: u16, json: &[u8]) -> Reply {
    let (kind, detail) = match serde_json::from_slice::<Envelope>(json) {
        Ok(Envelope { error: Some(e), .. }) => (Kind::Rpc(e.code), e.message),
        Ok(Envelope { result: Some(r), error: None }) => {
            let head = serde_json::from_str::<ResultHead>(r.get()).ok();
            match head.and_then(|h| h.result_type) {
                Some("input_required") => (Kind::InputRequired, String::new()),
                _ => (Kind::Complete, String::new()),
            }
        }
        _ => (Kind::NoResponse, snippet(json)),
    };
    Reply { status, kind, detail, cache: None, session: None }
}

/// The `result` of a successful answer, parsed (discovery reads lists and tools from it).
pub fn result_value(parts: &http::response::Parts, body: &Bytes) -> Option<serde_json::Value> {
    let sse = wire::is_sse(parts.headers.get(http::header::CONTENT_TYPE));
    let json = wire::response_json(sse, body)?;
    let mut v: serde_json::Value = serde_json::from_slice(&json).ok()?;
    Some(v.get_mut("result")?.take())
}

fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(status: u16, ct: &str) -> http::response::Parts {
        let (p, _) = http::Response::builder().status(status).header("content-type", ct).body(()).unwrap().into_parts();
        p
    }

    #[test]
    fn answers_are_told_apart() {
        let json = parts(200, "application/json");
        let ok = classify(&json, br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#);
        assert!(ok.is_ok() && ok.kind == Kind::Complete);
        let legacy = classify(&json, br#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#);
        assert_eq!(legacy.kind, Kind::Complete);
        let ir = classify(&json, br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#);
        assert!(ir.is_ok() && ir.kind == Kind::InputRequired);
        let err = classify(
            &parts(404, "application/json"),
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
        );
        assert_eq!((err.status, err.kind.clone(), err.is_ok()), (404, Kind::Rpc(-32601), false));
        let page = classify(&parts(502, "text/html"), b"<html>bad gateway</html>");
        assert_eq!((page.status, page.kind), (502, Kind::NoResponse));
        let sse = parts(200, "text/event-stream");
        let s = classify(&sse, b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32602,\"message\":\"m\"}}\n\n");
        assert_eq!(s.kind, Kind::Rpc(-32602));
        let r = result_value(
            &sse,
            &Bytes::from_static(b"data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[]}}\n\n"),
        );
        assert_eq!(r.unwrap()["tools"], serde_json::json!([]));
    }
}
