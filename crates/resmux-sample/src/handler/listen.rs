//! The sample's `subscriptions/listen`: accepted listens, their events and messages.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Handled, Sample};
use resmux_proto::jsonrpc::{RawObject, RpcError, code};
use resmux_proto::mcp::{self, method as m};

/// An accepted `subscriptions/listen`.
pub struct Listen {
    /// The `notifications` object of the acknowledgment.
    pub ack: Value,
    pub uris: Vec<String>,
    pub resources_list_changed: bool,
}

impl Sample {
    /// Changes the `status` resource now and notifies listeners.
    pub fn bump(&self) {
        self.0.status.fetch_add(1, Ordering::Relaxed);
        let _ = self.0.updates.send(SampleEvent::Updated(self.0.status_uri.clone()));
    }

    /// Announces a change of any URI to the listen streams subscribed to it.
    pub fn touch(&self, uri: &str) {
        let _ = self.0.updates.send(SampleEvent::Updated(uri.to_owned()));
    }

    /// Announces `notifications/resources/list_changed`.
    pub fn change_list(&self) {
        let _ = self.0.updates.send(SampleEvent::ListChanged);
    }

    /// Listen streams open now.
    pub fn listens_open(&self) -> u64 {
        self.0.listens_open.load(Ordering::Relaxed)
    }

    /// Listen streams opened since start.
    pub fn listens_total(&self) -> u64 {
        self.0.listens_total.load(Ordering::Relaxed)
    }

    /// Ends every open listen stream: with a result (`graceful`), or with
    /// `notifications/cancelled`.
    pub fn end_listens(&self, graceful: bool) {
        let _ = self.0.updates.send(SampleEvent::End { graceful });
    }

    /// Receives the events for listen streams.
    pub fn subscribe_updates(&self) -> broadcast::Receiver<SampleEvent> {
        self.0.updates.subscribe()
    }

    /// The subscribed URIs of every open listen stream.
    pub fn active_subscriptions(&self) -> Vec<Vec<String>> {
        let mut v: Vec<Vec<String>> = self.0.active.lock().expect("active").values().cloned().collect();
        v.sort();
        v
    }

    pub(crate) fn listen_opened(&self, listen: &Listen) -> ListenGuard {
        self.0.listens_open.fetch_add(1, Ordering::Relaxed);
        let n = self.0.listens_total.fetch_add(1, Ordering::Relaxed);
        self.0.active.lock().expect("active").insert(n, listen.uris.clone());
        ListenGuard(self.clone(), n)
    }

    pub(super) fn listen(&self, params: &RawObject<'_>) -> Handled {
        let filter: Value =
            params.get("notifications").and_then(|n| serde_json::from_str(n.get()).ok()).unwrap_or(Value::Null);
        if !filter.is_object() {
            return Handled::Error(RpcError::new(code::INVALID_PARAMS, "missing notifications filter"));
        }
        let uris: Vec<String> = filter["resourceSubscriptions"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        let list_changed = filter["resourcesListChanged"].as_bool() == Some(true);
        let mut ack = serde_json::Map::new();
        if !uris.is_empty() {
            ack.insert("resourceSubscriptions".into(), json!(uris));
        }
        if list_changed {
            ack.insert("resourcesListChanged".into(), json!(true));
        }
        Handled::Listen(Listen { ack: Value::Object(ack), uris, resources_list_changed: list_changed })
    }
}

/// Forgets a listen stream when it ends.
pub(crate) struct ListenGuard(Sample, u64);

impl Drop for ListenGuard {
    fn drop(&mut self) {
        self.0.0.listens_open.fetch_sub(1, Ordering::Relaxed);
        self.0.0.active.lock().expect("active").remove(&self.1);
    }
}

/// What happens on the listen streams.
#[derive(Debug, Clone)]
pub enum SampleEvent {
    Updated(String),
    ListChanged,
    End { graceful: bool },
}

/// What a listen stream does about one event.
pub enum ListenStep {
    Skip,
    Send(String),
    /// Send this last message, then end the stream.
    End(String),
}

impl Listen {
    /// The step listen `sub_id` (raw JSON id) takes for `event`.
    pub fn step(&self, sub_id: &str, event: &SampleEvent) -> ListenStep {
        match event {
            SampleEvent::Updated(uri) if self.uris.contains(uri) => ListenStep::Send(updated_notification(sub_id, uri)),
            SampleEvent::ListChanged if self.resources_list_changed => ListenStep::Send(format!(
                r#"{{"jsonrpc":"2.0","method":"{}","params":{{"_meta":{{"{}":{sub_id}}}}}}}"#,
                m::RESOURCES_LIST_CHANGED,
                mcp::META_SUBSCRIPTION_ID
            )),
            SampleEvent::End { graceful: true } => ListenStep::End(format!(
                r#"{{"jsonrpc":"2.0","id":{sub_id},"result":{{"resultType":"complete","_meta":{{"{}":{sub_id}}}}}}}"#,
                mcp::META_SUBSCRIPTION_ID
            )),
            SampleEvent::End { graceful: false } => ListenStep::End(format!(
                r#"{{"jsonrpc":"2.0","method":"{}","params":{{"requestId":{sub_id},"reason":"server ending the subscription"}}}}"#,
                m::CANCELLED
            )),
            _ => ListenStep::Skip,
        }
    }
}

/// The notification for a changed URI on listen `sub_id` (raw JSON id).
pub fn updated_notification(sub_id: &str, uri: &str) -> String {
    let uri = serde_json::to_string(uri).expect("string");
    format!(
        r#"{{"jsonrpc":"2.0","method":"{}","params":{{"_meta":{{"{}":{sub_id}}},"uri":{uri}}}}}"#,
        m::RESOURCES_UPDATED,
        mcp::META_SUBSCRIPTION_ID
    )
}

/// The acknowledgment of listen `sub_id`.
pub fn ack_notification(sub_id: &str, notifications: &Value) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"{}","params":{{"_meta":{{"{}":{sub_id}}},"notifications":{notifications}}}}}"#,
        m::ACKNOWLEDGED,
        mcp::META_SUBSCRIPTION_ID
    )
}
