//! Upstream `subscriptions/listen`: one long-lived request whose answer is a stream of change
//! notifications, over an SSE response (HTTP) or interleaved on stdout (stdio).

use bytes::Bytes;
use serde_json::Value;

use super::{Reply, Transport, Upstream, discovery, http};
use crate::error::UpstreamError;
use std::sync::Arc;

use crate::jsonrpc::{Incoming, Kind, RawObject, RpcError, encode_request};
use crate::mcp;
use crate::mcp::method as m;
use crate::mcp::notify::{Change, Filter};

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

/// Why an upstream listen's stream broke (the upstream side).
#[derive(Debug, thiserror::Error)]
enum Broken {
    #[error("answered")]
    Answered,
    #[error("upstream process exited or fell behind")]
    Exited,
    #[error("upstream closed the stream")]
    Closed,
    #[error(transparent)]
    Sse(super::sse::SseError),
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
                m::CANCELLED => {
                    let target = params.as_ref()?.get("requestId")?.get().to_owned();
                    (target == id).then_some(ListenEvent::End(ListenEnd::Cancelled))
                }
                _ => Change::of(&msg).map(ListenEvent::Change),
            }
        }
        Kind::Request => None,
    }
}

impl Upstream {
    /// Opens a `subscriptions/listen` for `filter` (upstream URIs). The returned stream yields
    /// the acknowledgment, the changes, and how it ended. Modern upstreams only.
    pub async fn listen(&self, filter: &crate::mcp::notify::Filter) -> Result<UpstreamListen, UpstreamError> {
        let mut params: serde_json::Value = serde_json::from_str(&discovery::own_params()).expect("valid JSON");
        params["notifications"] = filter.to_json();
        let params = serde_json::to_vec(&params).expect("serializable");
        let method = mcp::method::LISTEN;
        let id = self.next_id();
        let body = encode_request(&id, method, &params);
        let id_json = id.as_json().to_owned();
        match &self.0.transport {
            Transport::Http(t) => {
                let headers = http::Headers::modern(method, &params, |_| Arc::from(Vec::new()));
                let auth = self.proxy_auth().await?;
                match t.open(&id_json, body, &headers, auth.as_deref().map(|a| a.header())).await? {
                    http::Opened::Stream { body, .. } => Ok(UpstreamListen::http(id_json, body, t.max_message())),
                    http::Opened::Reply(ex) => {
                        let end = match ex.reply {
                            Reply::Error(e) => ListenEnd::Refused(e),
                            Reply::Result(_) => ListenEnd::Graceful,
                        };
                        Ok(UpstreamListen::answered(id_json, ListenEvent::End(end)))
                    }
                }
            }
            Transport::Stdio(t) => {
                let (messages, guard) = t.open_listen(&id_json, body).await?;
                Ok(UpstreamListen::stdio(id_json, messages, guard))
            }
        }
    }
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
                    return ListenEvent::End(ListenEnd::Abrupt(reason.to_string()));
                }
            };
            if let Some(event) = classify(&message, &self.id) {
                self.ended = matches!(event, ListenEvent::End(_));
                return event;
            }
        }
    }

    async fn next_message(&mut self) -> Result<Bytes, Broken> {
        match &mut self.source {
            Source::Answered(_) => Err(Broken::Answered),
            Source::Stdio { messages, .. } => messages.recv().await.ok_or(Broken::Exited),
            Source::Http(stream) => match stream.next_data().await {
                Ok(Some(message)) => Ok(message),
                Ok(None) => Err(Broken::Closed),
                Err(e) => Err(Broken::Sse(e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Capability;

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
            Some(ListenEvent::Change(Change::ListChanged(Capability::Prompts)))
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
