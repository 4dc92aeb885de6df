//! What a test or load run asks of a running sample: the requests it received, failures to
//! inject, and its legacy sessions. Kept beside the handler so that the records and the session
//! store stay plain data that the handler fills.

use super::super::record::{Failure, Recorded};
use super::Sample;

impl Sample {
    /// Every HTTP request received so far, oldest first.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.recorder().requests()
    }

    /// The requests received so far for JSON-RPC `method`.
    pub fn recorded_of(&self, method: &str) -> Vec<Recorded> {
        self.recorded().into_iter().filter(|r| r.method.as_deref() == Some(method)).collect()
    }

    /// Forgets the requests recorded so far.
    pub fn clear_recorded(&self) {
        self.recorder().clear();
    }

    /// Fails the next `n` HTTP requests for `method` (each still recorded) the way `how` says.
    pub fn fail_next(&self, method: &str, n: u32, how: Failure) {
        self.recorder().fail_next(method, n, how);
    }
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
