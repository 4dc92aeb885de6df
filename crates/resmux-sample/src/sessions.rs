//! The legacy sample's session store: each session's subscribed URIs, the streams open, and
//! questions awaiting an answer. The handler owns it; the legacy server uses it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The sessions of a legacy sample: their subscribed URIs.
#[derive(Default)]
pub struct SampleSessions {
    pub(super) map: Mutex<HashMap<String, HashSet<String>>>,
    pub(super) next: Mutex<u64>,
    /// `initialize` requests served.
    pub initializations: Mutex<u64>,
    /// GET streams open now.
    pub(super) streams: std::sync::atomic::AtomicU64,
    /// Questions the server asked mid-call, awaiting the client's answer, by request id.
    pub(super) asked: Mutex<HashMap<String, tokio::sync::oneshot::Sender<serde_json::Value>>>,
}
