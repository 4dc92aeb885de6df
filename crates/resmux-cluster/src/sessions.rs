//! Legacy sessions' subscriptions in Redis: a set per session (named by a keyed hash of the
//! session's nonce), refreshed on every change, expiring after twice the idle time, so that a
//! replica adopting the session continues it with its subscriptions.

use std::time::Duration;

use super::{Cluster, ClusterError};

/// What Redis knows of a session this replica has not seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adopted {
    /// It was ended (DELETE) on some replica: the id gets 404.
    Ended,
    /// It goes on, subscribed to these URIs (none for a session never seen anywhere).
    Subscribed(Vec<String>),
}

impl Cluster {
    /// The name of session `nonce`'s record (a keyed hash: nonces are never stored).
    pub fn session_name(&self, nonce: &[u8]) -> String {
        self.digest(&[b"session", nonce])
    }

    fn session_key(&self, nonce: &[u8]) -> String {
        format!("{}sess:{}", self.0.config.prefix, self.session_name(nonce))
    }

    fn tombstone_key(&self, nonce: &[u8]) -> String {
        format!("{}sess-ended:{}", self.0.config.prefix, self.session_name(nonce))
    }

    /// Sessions ended on other replicas, by record name.
    pub fn ended_sessions(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        self.0.ended_sessions.subscribe()
    }

    /// What Redis knows of session `nonce`.
    pub async fn adopt_session(&self, nonce: &[u8]) -> Result<Adopted, ClusterError> {
        let mut p = redis::pipe();
        p.cmd("EXISTS").arg(self.tombstone_key(nonce)).cmd("SMEMBERS").arg(self.session_key(nonce));
        let (ended, uris): (u8, Vec<String>) = self.run_pipeline("adopt session", &p).await?;
        Ok(if ended == 1 { Adopted::Ended } else { Adopted::Subscribed(uris) })
    }

    /// Records session `nonce`'s subscription set as `uris`, kept for `keep`.
    pub async fn store_session(&self, nonce: &[u8], uris: &[String], keep: Duration) -> Result<(), ClusterError> {
        let key = self.session_key(nonce);
        let mut p = redis::pipe();
        p.atomic().cmd("DEL").arg(&key).ignore();
        if !uris.is_empty() {
            p.cmd("SADD").arg(&key).arg(uris).ignore();
            p.cmd("PEXPIRE").arg(&key).arg(keep.as_millis().max(1) as u64).ignore();
        }
        self.run_pipeline("store session", &p).await
    }

    /// Keeps the subscriptions of live sessions `nonces` for another `keep`.
    pub async fn touch_sessions(&self, nonces: &[Vec<u8>], keep: Duration) -> Result<(), ClusterError> {
        if nonces.is_empty() {
            return Ok(());
        }
        let mut p = redis::pipe();
        for n in nonces {
            p.cmd("PEXPIRE").arg(self.session_key(n)).arg(keep.as_millis().max(1) as u64).ignore();
        }
        self.run_pipeline("touch sessions", &p).await
    }

    /// Ends session `nonce` everywhere (DELETE): its subscriptions go, the replicas holding
    /// it end it, and its id gets 404 on every replica for `keep`.
    pub async fn end_session(&self, nonce: &[u8], keep: Duration) -> Result<(), ClusterError> {
        let mut p = redis::pipe();
        p.cmd("DEL").arg(self.session_key(nonce)).ignore();
        p.cmd("SET").arg(self.tombstone_key(nonce)).arg(1).arg("PX").arg(keep.as_millis().max(1) as u64).ignore();
        let msg = serde_json::json!({"r": &*self.0.replica, "k": "session-ended", "s": self.session_name(nonce)});
        p.cmd("PUBLISH").arg(self.channel()).arg(msg.to_string()).ignore();
        self.run_pipeline("end session", &p).await
    }
}
