//! The legacy sample's session store: each session's subscribed URIs, the streams open, and
//! questions awaiting an answer. The handler owns it; the legacy server uses it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::handler::Sample;

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

impl Sample {
    /// Forgets every legacy session, as a restarted server would: their ids now get 404.
    pub fn drop_sessions(&self) {
        self.sessions().map.lock().expect("sessions").clear();
    }

    /// Legacy GET streams open now.
    pub fn legacy_streams(&self) -> u64 {
        self.sessions().streams.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `initialize` requests served so far (legacy mode).
    pub fn initializations(&self) -> u64 {
        *self.sessions().initializations.lock().expect("sessions")
    }
}
