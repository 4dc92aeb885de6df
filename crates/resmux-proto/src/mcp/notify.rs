//! What changes are announced in: the listen filter, a change as an upstream announces it, and
//! a change as delivered downstream.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::list::Capability;
use super::method as m;
use crate::jsonrpc::{Incoming, RawObject, raw_str};

/// What a listen asks for (in the URIs of whoever it is addressed to).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub resources_list_changed: bool,
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    pub uris: BTreeSet<String>,
}

/// Why a `notifications` object is not a filter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadFilter(String);

impl Filter {
    /// Whether it asks for nothing.
    pub fn is_empty(&self) -> bool {
        !self.resources_list_changed && !self.tools_list_changed && !self.prompts_list_changed && self.uris.is_empty()
    }

    pub fn list(&self, cap: Capability) -> bool {
        match cap {
            Capability::Resources => self.resources_list_changed,
            Capability::Tools => self.tools_list_changed,
            Capability::Prompts => self.prompts_list_changed,
        }
    }

    pub fn set_list(&mut self, cap: Capability, on: bool) {
        match cap {
            Capability::Resources => self.resources_list_changed = on,
            Capability::Tools => self.tools_list_changed = on,
            Capability::Prompts => self.prompts_list_changed = on,
        }
    }

    /// The `notifications` object of a listen request or acknowledgment.
    pub fn to_json(&self) -> Value {
        let mut obj = serde_json::Map::new();
        for cap in Capability::ALL {
            if self.list(cap) {
                obj.insert(cap.filter_key().into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            obj.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(obj)
    }

    /// Reads a `notifications` object. Unknown fields are ignored; wrong types are an error.
    pub fn from_json(v: &Value) -> Result<Self, BadFilter> {
        let bad = |s: &str| BadFilter(s.to_owned());
        let obj = v.as_object().ok_or_else(|| bad("`notifications` must be an object"))?;
        let mut f = Filter::default();
        for cap in Capability::ALL {
            match obj.get(cap.filter_key()) {
                None | Some(Value::Null) => {}
                Some(Value::Bool(b)) => f.set_list(cap, *b),
                Some(_) => return Err(BadFilter(format!("`{}` must be a boolean", cap.filter_key()))),
            }
        }
        match obj.get("resourceSubscriptions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    let uri = item.as_str().ok_or_else(|| bad("`resourceSubscriptions` must hold strings"))?;
                    f.uris.insert(uri.to_owned());
                }
            }
            Some(_) => return Err(bad("`resourceSubscriptions` must be an array")),
        }
        Ok(f)
    }
}

/// One thing that changed upstream, in the upstream's own URIs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    Updated(String),
    ListChanged(Capability),
}

impl Change {
    /// The change a notification announces (`resources/updated` or `*/list_changed`), if any.
    pub fn of(msg: &Incoming<'_>) -> Option<Change> {
        match msg.method() {
            m::RESOURCES_UPDATED => {
                let params = RawObject::parse(msg.params?).ok()?;
                Some(Change::Updated(params.get("uri").and_then(raw_str)?.into_owned()))
            }
            other => Capability::of_changed(other).map(Change::ListChanged),
        }
    }
}

/// Something an upstream said without being asked (legacy), or a gap in what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsolicited {
    Change(Change),
    /// Notifications may have been missed (stream reconnected, session or process replaced).
    Gap,
}

/// A change as delivered downstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// `notifications/resources/updated` for this downstream URI.
    Uri(Arc<str>),
    /// `notifications/{capability}/list_changed`.
    List(Capability),
}

/// The listen a notification belongs to (raw JSON id): its `_meta.subscriptionId`, or the
/// `requestId` of a `notifications/cancelled`. For demultiplexing one stream into listens.
pub fn subscription_of(msg: &Incoming<'_>) -> Option<String> {
    let params = RawObject::parse(msg.params?).ok()?;
    if msg.method() == m::CANCELLED {
        return params.get("requestId").map(|r| r.get().to_owned());
    }
    let meta = RawObject::parse(params.get("_meta")?).ok()?;
    meta.get(super::META_SUBSCRIPTION_ID).map(|r| r.get().to_owned())
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
        assert_eq!(
            Filter::from_json(&json!({"resourceSubscriptions": "a"})).unwrap_err().to_string(),
            "`resourceSubscriptions` must be an array"
        );
        assert!(Filter::from_json(&json!([])).is_err());
        assert!(Filter::default().is_empty());
    }

    #[test]
    fn changes_are_read_from_notifications() {
        let c = |s: &str| Change::of(&Incoming::parse(s).unwrap());
        assert_eq!(
            c(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://x"}}"#),
            Some(Change::Updated("a://x".into()))
        );
        assert_eq!(
            c(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
            Some(Change::ListChanged(Capability::Tools))
        );
        assert_eq!(c(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#), None);
    }
}
