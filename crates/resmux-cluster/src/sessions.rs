//! Legacy sessions' subscriptions in Redis: a set per session (named by a keyed hash of the
//! session's nonce), refreshed on every change, expiring after twice the idle time, so that a
//! replica adopting the session continues it with its subscriptions.

use std::time::Duration;

use futures_util::future::join_all;

use super::{Cluster, ClusterError};

/// Session records are spread over this many hash tags, each with its bus channel (on which a
/// session's end is announced in the same pipeline that records it): a Redis Cluster spreads
/// them over its nodes, and no one channel carries every session's end.
pub(super) const SHARDS: usize = 16;

/// Session records kept alive together by one touch (the rest wait for their turn).
const TOUCH_CONCURRENCY: usize = 32;

/// The shard of session record `name` (a hex digest).
fn shard(name: &str) -> usize {
    name.bytes().next().and_then(|b| (b as char).to_digit(16)).map_or(0, |d| d as usize % SHARDS)
}

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

    /// The hash tag of the shard session `name` is in.
    fn session_tag(&self, name: &str) -> String {
        format!("{}{{sess-{:x}}}", self.0.config.prefix, shard(name))
    }

    /// The bus channel of session shard `shard`.
    pub(super) fn session_channel(&self, shard: usize) -> String {
        format!("{}{{sess-{shard:x}}}:bus", self.0.config.prefix)
    }

    fn session_key(&self, nonce: &[u8]) -> String {
        let name = self.session_name(nonce);
        format!("{}:{name}", self.session_tag(&name))
    }

    fn tombstone_key(&self, nonce: &[u8]) -> String {
        let name = self.session_name(nonce);
        format!("{}:ended:{name}", self.session_tag(&name))
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
        // One call per record: a Redis Cluster spreads them over its nodes, and a multiplexed
        // connection pipelines them anyway.
        let px = keep.as_millis().max(1) as u64;
        for batch in nonces.chunks(TOUCH_CONCURRENCY) {
            let cmds: Vec<redis::Cmd> =
                batch.iter().map(|n| redis::cmd("PEXPIRE").arg(self.session_key(n)).arg(px).to_owned()).collect();
            for touched in join_all(cmds.iter().map(|cmd| self.query::<u8>("touch session", cmd))).await {
                touched?;
            }
        }
        Ok(())
    }

    /// Ends session `nonce` everywhere (DELETE): its subscriptions go, the replicas holding
    /// it end it, and its id gets 404 on every replica for `keep`.
    pub async fn end_session(&self, nonce: &[u8], keep: Duration) -> Result<(), ClusterError> {
        let mut p = redis::pipe();
        p.cmd("DEL").arg(self.session_key(nonce)).ignore();
        p.cmd("SET").arg(self.tombstone_key(nonce)).arg(1).arg("PX").arg(keep.as_millis().max(1) as u64).ignore();
        let msg = serde_json::json!({"r": &*self.0.replica, "k": "session-ended", "s": self.session_name(nonce)});
        let channel = self.session_channel(shard(&self.session_name(nonce)));
        p.cmd(self.publish_command()).arg(channel).arg(msg.to_string()).ignore();
        self.run_pipeline("end session", &p).await
    }
}
