//! Upstream `subscriptions/listen`: one long-lived request whose answer is a stream of change
//! notifications, over an SSE response (HTTP) or interleaved on stdout (stdio).

use std::collections::BTreeSet;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::jsonrpc::{Incoming, Kind, RawObject, RpcError, raw_str};
use crate::mcp::method as m;

/// What a listen asks for, in the upstream's own URIs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub resources_list_changed: bool,
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    pub uris: BTreeSet<String>,
}

/// A list whose change an upstream can announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// `resources/list` and `resources/templates/list`.
    Resources,
    Tools,
    Prompts,
}

impl ListKind {
    pub const ALL: [ListKind; 3] = [ListKind::Resources, ListKind::Tools, ListKind::Prompts];

    /// The notification that announces it.
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Resources => m::RESOURCES_LIST_CHANGED,
            ListKind::Tools => m::TOOLS_LIST_CHANGED,
            ListKind::Prompts => m::PROMPTS_LIST_CHANGED,
        }
    }

    /// The filter field that asks for it.
    pub fn filter_key(self) -> &'static str {
        match self {
            ListKind::Resources => "resourcesListChanged",
            ListKind::Tools => "toolsListChanged",
            ListKind::Prompts => "promptsListChanged",
        }
    }

    /// The capability object that declares it.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Resources => "resources",
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
        }
    }
}

impl Filter {
    /// Whether it asks for nothing.
    pub fn is_empty(&self) -> bool {
        !self.resources_list_changed && !self.tools_list_changed && !self.prompts_list_changed && self.uris.is_empty()
    }

    pub fn list(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Resources => self.resources_list_changed,
            ListKind::Tools => self.tools_list_changed,
            ListKind::Prompts => self.prompts_list_changed,
        }
    }

    pub fn set_list(&mut self, kind: ListKind, on: bool) {
        match kind {
            ListKind::Resources => self.resources_list_changed = on,
            ListKind::Tools => self.tools_list_changed = on,
            ListKind::Prompts => self.prompts_list_changed = on,
        }
    }

    /// The `notifications` object of a listen request or acknowledgment.
    pub fn to_json(&self) -> Value {
        let mut obj = serde_json::Map::new();
        for kind in ListKind::ALL {
            if self.list(kind) {
                obj.insert(kind.filter_key().into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            obj.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(obj)
    }

    /// Reads a `notifications` object. Unknown fields are ignored; wrong types are an error.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let obj = v.as_object().ok_or("`notifications` must be an object")?;
        let mut f = Filter::default();
        for kind in ListKind::ALL {
            match obj.get(kind.filter_key()) {
                None | Some(Value::Null) => {}
                Some(Value::Bool(b)) => f.set_list(kind, *b),
                Some(_) => return Err(format!("`{}` must be a boolean", kind.filter_key())),
            }
        }
        match obj.get("resourceSubscriptions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    let uri = item.as_str().ok_or("`resourceSubscriptions` must hold strings")?;
                    f.uris.insert(uri.to_owned());
                }
            }
            Some(_) => return Err("`resourceSubscriptions` must be an array".into()),
        }
        Ok(f)
    }
}

/// One thing that changed upstream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    Updated(String),
    ListChanged(ListKind),
}

/// How a listen ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ListenEnd {
    /// The upstream answered the listen with a result (its graceful teardown).
    Graceful,
    /// The upstream sent `notifications/cancelled` for it (the other teardown the spec names).
    Cancelled,
    /// The upstream refused or failed the listen with an error.
    Refused(RpcError),
    /// The stream broke.
    Abrupt(String),
}

/// What a listen stream delivers.
#[derive(Debug, Clone, PartialEq)]
pub enum ListenEvent {
    Ack(Filter),
    Change(Change),
    End(ListenEnd),
}

/// Classifies one message of listen `id` (raw JSON id). `None` for messages that do not
/// concern the listen (request-scoped notifications, keep-alives).
pub fn classify(message: &Bytes, id: &str) -> Option<ListenEvent> {
    let text = std::str::from_utf8(message).ok()?;
    let msg = Incoming::parse(text).ok()?;
    match msg.kind {
        Kind::Response => {
            if msg.id.as_ref().map(|i| i.as_json()) != Some(id) {
                return None;
            }
            Some(ListenEvent::End(match msg.error {
                Some(e) => ListenEnd::Refused(
                    serde_json::from_str(e.get()).unwrap_or_else(|_| RpcError::new(-32603, "malformed error")),
                ),
                None => ListenEnd::Graceful,
            }))
        }
        Kind::Notification => {
            let params = msg.params.and_then(|p| RawObject::parse(p).ok());
            match msg.method() {
                m::ACKNOWLEDGED => {
                    let notifications: Value = params
                        .as_ref()
                        .and_then(|p| p.get("notifications"))
                        .and_then(|n| serde_json::from_str(n.get()).ok())
                        .unwrap_or(Value::Object(Default::default()));
                    Some(ListenEvent::Ack(Filter::from_json(&notifications).unwrap_or_default()))
                }
                m::RESOURCES_UPDATED => {
                    let uri = params.as_ref()?.get("uri").and_then(raw_str)?.into_owned();
                    Some(ListenEvent::Change(Change::Updated(uri)))
                }
                m::CANCELLED => {
                    let target = params.as_ref()?.get("requestId")?.get().to_owned();
                    (target == id).then_some(ListenEvent::End(ListenEnd::Cancelled))
                }
                other => ListKind::ALL
                    .into_iter()
                    .find(|k| k.method() == other)
                    .map(|k| ListenEvent::Change(Change::ListChanged(k))),
            }
        }
        Kind::Request => None,
    }
}

/// `_meta.subscriptionId` of a notification line (raw JSON), for demultiplexing on stdio.
pub fn subscription_of(msg: &Incoming<'_>) -> Option<String> {
    let params = RawObject::parse(msg.params?).ok()?;
    if msg.method() == m::CANCELLED {
        return params.get("requestId").map(|r| r.get().to_owned());
    }
    let meta = RawObject::parse(params.get("_meta")?).ok()?;
    meta.get(crate::mcp::META_SUBSCRIPTION_ID).map(|r| r.get().to_owned())
}

/// An open upstream listen. Dropping it cancels the listen: an HTTP stream is closed, a stdio
/// listen gets `notifications/cancelled`.
pub struct UpstreamListen {
    id: String,
    source: Source,
    ended: bool,
}

enum Source {
    Http(super::sse::SseStream),
    Stdio {
        messages: tokio::sync::mpsc::Receiver<Bytes>,
        _guard: super::stdio::ListenGuard,
    },
    /// The upstream answered at once (an error, or an empty result).
    Answered(Option<ListenEvent>),
}

impl UpstreamListen {
    pub(super) fn http(id: String, body: hyper::body::Incoming, max_event: usize) -> Self {
        let source = Source::Http(super::sse::SseStream::new(body, max_event));
        Self { id, source, ended: false }
    }

    pub(super) fn stdio(
        id: String,
        messages: tokio::sync::mpsc::Receiver<Bytes>,
        guard: super::stdio::ListenGuard,
    ) -> Self {
        Self { id, source: Source::Stdio { messages, _guard: guard }, ended: false }
    }

    pub(super) fn answered(id: String, event: ListenEvent) -> Self {
        Self { id, source: Source::Answered(Some(event)), ended: false }
    }

    /// The next event. After an `End`, every call returns `End` again.
    pub async fn next(&mut self) -> ListenEvent {
        if self.ended {
            return ListenEvent::End(ListenEnd::Abrupt("listen already ended".into()));
        }
        if let Source::Answered(event) = &mut self.source {
            self.ended = true;
            return event.take().unwrap_or(ListenEvent::End(ListenEnd::Abrupt("no answer".into())));
        }
        loop {
            let message = match self.next_message().await {
                Ok(m) => m,
                Err(reason) => {
                    self.ended = true;
                    return ListenEvent::End(ListenEnd::Abrupt(reason));
                }
            };
            if let Some(event) = classify(&message, &self.id) {
                self.ended = matches!(event, ListenEvent::End(_));
                return event;
            }
        }
    }

    async fn next_message(&mut self) -> Result<Bytes, String> {
        match &mut self.source {
            Source::Answered(_) => Err("answered".into()),
            Source::Stdio { messages, .. } => {
                messages.recv().await.ok_or_else(|| "upstream process exited or fell behind".to_owned())
            }
            Source::Http(stream) => match stream.next_data().await {
                Ok(Some(message)) => Ok(message),
                Ok(None) => Err("upstream closed the stream".into()),
                Err(e) => Err(e.to_string()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_round_trip_and_errors() {
        let v = json!({"resourcesListChanged": true, "resourceSubscriptions": ["a://1", "a://2"], "x": 1});
        let f = Filter::from_json(&v).unwrap();
        assert!(f.resources_list_changed && !f.tools_list_changed);
        assert_eq!(f.to_json(), json!({"resourcesListChanged": true, "resourceSubscriptions": ["a://1", "a://2"]}));
        assert!(Filter::from_json(&json!({"resourceSubscriptions": "a"})).is_err());
        assert!(Filter::from_json(&json!([])).is_err());
        assert!(Filter::default().is_empty());
    }

    #[test]
    fn classifies_the_messages_of_a_listen() {
        let c = |s: &str| classify(&Bytes::from(s.to_owned()), "7");
        assert_eq!(
            c(
                r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":7},"notifications":{"toolsListChanged":true}}}"#
            ),
            Some(ListenEvent::Ack(Filter { tools_list_changed: true, ..Default::default() }))
        );
        assert_eq!(
            c(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://x"}}"#),
            Some(ListenEvent::Change(Change::Updated("a://x".into())))
        );
        assert_eq!(
            c(r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed","params":{}}"#),
            Some(ListenEvent::Change(Change::ListChanged(ListKind::Prompts)))
        );
        assert_eq!(c(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#), Some(ListenEvent::End(ListenEnd::Graceful)));
        assert_eq!(c(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#), None);
        assert_eq!(
            c(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#),
            Some(ListenEvent::End(ListenEnd::Cancelled))
        );
        assert_eq!(c(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#), None);
    }
}
