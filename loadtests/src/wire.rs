//! MCP 2026-07-28 on the wire, as a conforming client sends it (reference §1.4, §2.1): every
//! request carries `MCP-Protocol-Version`, `Mcp-Method` and, for `resources/read`,
//! `tools/call` and `prompts/get`, `Mcp-Name`, with `_meta` holding the protocol version and
//! client capabilities. Answers may be `application/json` or `text/event-stream`; both are
//! classified here without building a JSON tree.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use resmux::mcp::{self, header_value, method as m};
use resmux::upstream::sse::SseDecoder;
use serde::Deserialize;
use serde_json::value::RawValue;

/// `_meta` of every request: version, capabilities, and who is asking.
pub const META: &str = concat!(
    r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","#,
    r#""io.modelcontextprotocol/clientCapabilities":{},"#,
    r#""io.modelcontextprotocol/clientInfo":{"name":"resmux-load","version":"0.1.0"}}"#
);

/// One request a client can make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Read { uri: String },
    List,
    Call { tool: String, a: i64, b: i64 },
    Discover,
    Listen { uri: String },
}

impl Op {
    pub fn method(&self) -> &'static str {
        match self {
            Op::Read { .. } => m::RESOURCES_READ,
            Op::List => m::RESOURCES_LIST,
            Op::Call { .. } => m::TOOLS_CALL,
            Op::Discover => m::DISCOVER,
            Op::Listen { .. } => m::LISTEN,
        }
    }

    /// The value the `Mcp-Name` header mirrors, for the methods that have one.
    fn name(&self) -> Option<&str> {
        match self {
            Op::Read { uri } => Some(uri),
            Op::Call { tool, .. } => Some(tool),
            _ => None,
        }
    }

    /// The JSON-RPC body, `id` being raw JSON (`7` or `"listen-7"`).
    pub fn body(&self, id: &str) -> String {
        let params = match self {
            Op::Read { uri } => format!(r#"{{"uri":{},{META}}}"#, json_string(uri)),
            Op::List | Op::Discover => format!("{{{META}}}"),
            Op::Call { tool, a, b } => {
                format!(r#"{{"name":{},"arguments":{{"a":{a},"b":{b}}},{META}}}"#, json_string(tool))
            }
            Op::Listen { uri } => {
                format!(r#"{{"notifications":{{"resourceSubscriptions":[{}]}},{META}}}"#, json_string(uri))
            }
        };
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{}","params":{params}}}"#, self.method())
    }

    /// The whole HTTP request to `host` (an `ip:port`), headers mirroring the body.
    pub fn request(&self, host: &HeaderValue, auth: Option<&HeaderValue>, id: &str) -> Request<Full<Bytes>> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header(HOST, host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"))
            .header(mcp::H_PROTOCOL_VERSION, HeaderValue::from_static(mcp::MODERN_VERSION))
            .header(mcp::H_METHOD, HeaderValue::from_static(self.method()));
        if let Some(auth) = auth {
            req = req.header(http::header::AUTHORIZATION, auth.clone());
        }
        if let Some(name) = self.name() {
            // The encoded form is visible ASCII by construction.
            let value =
                HeaderValue::from_str(&header_value::encode(name)).expect("encoded header values are visible ASCII");
            req = req.header(mcp::H_NAME, value);
        }
        req.body(Full::new(Bytes::from(self.body(id)))).expect("static parts are valid")
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// How an exchange ended, as the report counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A JSON-RPC result.
    Ok,
    /// Anything else; `kind` groups like failures, `detail` is one example.
    Failed { kind: String, detail: String },
}

impl Outcome {
    pub fn failed(kind: impl Into<String>, detail: impl Into<String>) -> Self {
        Outcome::Failed { kind: kind.into(), detail: detail.into() }
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

/// A JSON-RPC `error` object.
#[derive(Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    #[serde(default)]
    pub message: String,
}

/// Whether a response's content type is an SSE stream.
pub fn is_sse(content_type: Option<&HeaderValue>) -> bool {
    content_type.and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// The JSON-RPC response in a complete answer: the JSON body itself, or the event of an SSE
/// body that carries the response (an `id` and no `method`). `None` when an SSE body holds no
/// response.
pub fn response_json(sse: bool, body: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    if !sse {
        return Some(std::borrow::Cow::Borrowed(body));
    }
    let mut decoder = SseDecoder::new(body.len() + 1);
    decoder.push(body);
    // A trailing blank line dispatches an event the stream ended without terminating.
    decoder.push(b"\n\n");
    while let Ok(Some(event)) = decoder.next_event() {
        let is_response =
            serde_json::from_str::<Envelope>(&event.data).is_ok_and(|env| env.id.is_some() && env.method.is_none());
        if is_response {
            return Some(std::borrow::Cow::Owned(event.data.into_bytes()));
        }
    }
    None
}

/// Classifies a complete answer: the JSON body, or the JSON-RPC response inside an SSE body.
pub fn classify(status: StatusCode, sse: bool, body: &[u8]) -> Outcome {
    let Some(json) = response_json(sse, body) else {
        return Outcome::failed(
            format!("http {} sse without response", status.as_u16()),
            String::from_utf8_lossy(&body[..body.len().min(200)]),
        );
    };
    match serde_json::from_slice::<Envelope>(&json) {
        Ok(env) => classify_envelope(status, env),
        Err(_) => {
            Outcome::failed(format!("http {}", status.as_u16()), String::from_utf8_lossy(&body[..body.len().min(200)]))
        }
    }
}

fn classify_envelope(status: StatusCode, env: Envelope<'_>) -> Outcome {
    match (env.result, env.error) {
        (Some(_), None) if status.is_success() => Outcome::Ok,
        (_, Some(e)) => Outcome::failed(format!("http {} rpc {}", status.as_u16(), e.code), e.message),
        _ => Outcome::failed(format!("http {} no result", status.as_u16()), "response without result or error"),
    }
}

/// A message on a listen stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamMessage {
    /// `notifications/subscriptions/acknowledged`; `subscription` is the raw JSON id it carries.
    Ack { subscription: Option<String> },
    /// `notifications/resources/updated` for `uri`.
    Updated { uri: String, subscription: Option<String> },
    /// The listen's final response (the server ended the subscription).
    End(Outcome),
    /// Any other notification.
    Other(String),
}

#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<String>,
    #[serde(borrow, default)]
    params: Option<NotificationParams<'a>>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct NotificationParams<'a> {
    #[serde(default)]
    uri: Option<String>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<SubscriptionMeta<'a>>,
}

#[derive(Deserialize)]
struct SubscriptionMeta<'a> {
    #[serde(borrow, default, rename = "io.modelcontextprotocol/subscriptionId")]
    subscription: Option<&'a RawValue>,
}

/// Parses one SSE event of a listen stream.
pub fn stream_message(data: &str) -> Result<StreamMessage, String> {
    let n: Notification = serde_json::from_str(data).map_err(|e| e.to_string())?;
    let subscription =
        n.params.as_ref().and_then(|p| p.meta.as_ref()).and_then(|m| m.subscription).map(|r| r.get().to_owned());
    match (n.method.as_deref(), n.id) {
        (Some(m::ACKNOWLEDGED), _) => Ok(StreamMessage::Ack { subscription }),
        (Some(m::RESOURCES_UPDATED), _) => {
            Ok(StreamMessage::Updated { uri: n.params.and_then(|p| p.uri).unwrap_or_default(), subscription })
        }
        (Some(other), _) => Ok(StreamMessage::Other(other.to_owned())),
        (None, Some(_)) => Ok(StreamMessage::End(match (n.result, n.error) {
            (_, Some(e)) => Outcome::failed(format!("listen ended rpc {}", e.code), e.message),
            (Some(_), None) => Outcome::Ok,
            (None, None) => Outcome::failed("listen ended", "response without result"),
        })),
        (None, None) => Err("message with neither method nor id".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_mirror_their_body_in_headers() {
        let host = HeaderValue::from_static("127.0.0.1:9");
        let op = Op::Read { uri: "up0+up0://item/3".into() };
        let auth = HeaderValue::from_static("Bearer t");
        let req = op.request(&host, Some(&auth), "7");
        let h = req.headers();
        assert_eq!(h["mcp-protocol-version"], "2026-07-28");
        assert_eq!(h["mcp-method"], "resources/read");
        assert_eq!(h["mcp-name"], "up0+up0://item/3");
        assert_eq!(h["host"], "127.0.0.1:9");
        assert_eq!(h["authorization"], "Bearer t");
        let body: serde_json::Value = serde_json::from_str(&op.body("7")).unwrap();
        assert_eq!(body["id"], 7);
        assert_eq!(body["params"]["uri"], "up0+up0://item/3");
        assert_eq!(body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        assert!(body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].is_object());

        let call = Op::Call { tool: "up1__add".into(), a: 2, b: 3 };
        let req = call.request(&host, None, "8");
        assert!(req.headers().get("authorization").is_none());
        assert_eq!(req.headers()["mcp-name"], "up1__add");
        let body: serde_json::Value = serde_json::from_str(&call.body("8")).unwrap();
        assert_eq!(body["params"]["arguments"]["b"], 3);

        let listen = Op::Listen { uri: "up0://status".into() };
        assert!(listen.request(&host, None, "\"l-1\"").headers().get("mcp-name").is_none());
        let body: serde_json::Value = serde_json::from_str(&listen.body("\"l-1\"")).unwrap();
        assert_eq!(body["id"], "l-1");
        assert_eq!(body["params"]["notifications"]["resourceSubscriptions"][0], "up0://status");
        for op in [Op::List, Op::Discover] {
            let body: serde_json::Value = serde_json::from_str(&op.body("1")).unwrap();
            assert!(body["params"]["_meta"].is_object());
        }
    }

    #[test]
    fn answers_are_classified() {
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#;
        assert_eq!(classify(StatusCode::OK, false, ok), Outcome::Ok);
        let err = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#;
        assert_eq!(
            classify(StatusCode::NOT_FOUND, false, err),
            Outcome::failed("http 404 rpc -32601", "Method not found")
        );
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, false, b"upstream down"),
            Outcome::Failed { kind, .. } if kind == "http 502"
        ));
        let sse = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n: keep\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        assert_eq!(classify(StatusCode::OK, true, sse), Outcome::Ok);
        assert!(matches!(
            classify(StatusCode::OK, true, b"data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"),
            Outcome::Failed { .. }
        ));
    }

    #[test]
    fn listen_stream_messages_are_recognised() {
        let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"l-1"},"notifications":{}}}"#;
        assert_eq!(stream_message(ack).unwrap(), StreamMessage::Ack { subscription: Some("\"l-1\"".into()) });
        let upd = r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"l-1"},"uri":"up0://status"}}"#;
        assert_eq!(
            stream_message(upd).unwrap(),
            StreamMessage::Updated { uri: "up0://status".into(), subscription: Some("\"l-1\"".into()) }
        );
        let end = r#"{"jsonrpc":"2.0","id":"l-1","result":{"resultType":"complete"}}"#;
        assert_eq!(stream_message(end).unwrap(), StreamMessage::End(Outcome::Ok));
        assert!(stream_message("{}").is_err());
    }
}
