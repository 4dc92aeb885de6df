//! The legacy sessions of this process, keyed by the nonce inside their signed ids.
//!
//! Bounded: at most `max` live sessions. Sessions idle (no request, no open stream) for longer
//! than `idle` are evicted by a periodic sweep, and first of all when the table is full. An
//! evicted or deleted session leaves a tombstone, so that its id gets 404 (the legacy "session
//! expired, initialize again") instead of silently coming back without its subscriptions;
//! tombstones are bounded too, oldest forgotten first. A valid id this process has never seen
//! (minted by a replica sharing the secret, or before a restart) is adopted as a fresh session.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::session::DownstreamSession;
use super::token::{Nonce, SessionKey};
use crate::auth::Principal;
use crate::cluster::Cluster;
use crate::error::{DownstreamError, Error};

/// Cheap handle over the table.
#[derive(Clone)]
pub struct SessionTable(Arc<Inner>);

struct Inner {
    key: SessionKey,
    /// Most live sessions.
    max: usize,
    /// Most live sessions of one authenticated principal; 0 = no per-principal bound.
    per_principal: usize,
    /// Quiet time after which a session without a stream is evicted.
    idle: Duration,
    table: Mutex<Table>,
    /// Where sessions' subscriptions are shared with the other replicas, in a cluster.
    cluster: Option<Cluster>,
}

#[derive(Default)]
struct Table {
    live: HashMap<Nonce, Arc<DownstreamSession>>,
    ended: Tombstones,
}

/// Nonces of sessions this process ended, at most `cap`, oldest forgotten first.
#[derive(Default)]
struct Tombstones {
    order: VecDeque<Nonce>,
    set: HashSet<Nonce>,
}

impl Tombstones {
    fn insert(&mut self, nonce: Nonce, cap: usize) {
        if !self.set.insert(nonce) {
            return;
        }
        self.order.push_back(nonce);
        while self.order.len() > cap {
            let old = self.order.pop_front().expect("non-empty");
            self.set.remove(&old);
        }
    }
}

impl SessionTable {
    pub fn new(key: SessionKey, max: usize, idle: Duration) -> Self {
        Self::with_per_principal(key, max, 0, idle)
    }

    /// As [`SessionTable::new`], with at most `per_principal` live sessions for each authenticated
    /// principal (0 = no such bound; anonymous callers have none either).
    pub fn with_per_principal(key: SessionKey, max: usize, per_principal: usize, idle: Duration) -> Self {
        Self(Arc::new(Inner { key, max: max.max(1), per_principal, idle, table: Mutex::default(), cluster: None }))
    }

    /// Shares sessions' subscriptions through `cluster`, so that a session continues on
    /// another replica with them.
    pub fn with_cluster(self, cluster: Option<Cluster>) -> Self {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.cluster = cluster;
                Self(Arc::new(inner))
            }
            Err(shared) => Self(shared),
        }
    }

    /// How long Redis keeps a session's record without a change or a touch.
    fn keep(&self) -> Duration {
        self.0.idle * 2
    }

    /// Shares `session` (named by `nonce`) when there is a cluster.
    fn share(&self, session: &DownstreamSession, nonce: Nonce, fresh: bool) {
        if let Some(cluster) = &self.0.cluster {
            session.share(cluster.clone(), nonce, self.keep(), fresh);
        }
    }

    /// Ends the session a request of `principal` names on every replica (DELETE): here, and
    /// in the cluster's record, so that no replica adopts it again.
    pub async fn end_everywhere(&self, token: &str, principal: &Principal) -> Result<(), Error> {
        let nonce = self.end(token, principal)?;
        if let Some(cluster) = &self.0.cluster
            && let Err(e) = cluster.end_session(&nonce, self.keep()).await
        {
            tracing::warn!(error = %e, "cannot record a legacy session's end in redis");
        }
        Ok(())
    }

    /// Ends here a session another replica ended (DELETE there).
    fn ended_elsewhere(&self, name: &str) {
        let mut table = self.0.table.lock().expect("sessions");
        let found = table.live.iter().find(|(_, s)| s.shared_name() == Some(name)).map(|(n, _)| *n);
        if let Some(nonce) = found {
            if let Some(session) = table.live.remove(&nonce) {
                session.end();
            }
            table.ended.insert(nonce, self.0.max);
        }
    }

    /// Keeps the cluster's records of the sessions live here from expiring, every quarter of
    /// the idle time, and ends the sessions other replicas end, until `cancel`.
    fn start_toucher(&self, cancel: &CancellationToken, tracker: &TaskTracker, period: Duration) {
        let Some(cluster) = self.0.cluster.clone() else { return };
        let me = self.clone();
        let cancel = cancel.clone();
        let mut ended = cluster.ended_sessions();
        tracker.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    name = ended.recv() => {
                        match name {
                            Ok(name) => me.ended_elsewhere(&name),
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                                tracing::warn!(missed = n, "missed session ends announced by other replicas");
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        }
                        continue;
                    }
                    _ = tick.tick() => {}
                }
                let nonces: Vec<Vec<u8>> = {
                    let table = me.0.table.lock().expect("sessions");
                    table.live.values().filter_map(|s| s.shared_nonce()).map(|n| n.to_vec()).collect()
                };
                if let Err(e) = cluster.touch_sessions(&nonces, me.keep()).await {
                    tracing::debug!(error = %e, "cannot keep legacy sessions' records in redis");
                }
            }
        });
    }

    /// Sweeps idle sessions periodically until `cancel`.
    pub fn start_sweeper(&self, cancel: &CancellationToken, tracker: &TaskTracker) {
        let me = self.clone();
        // A quarter of the idle time keeps eviction within 25 % of its deadline.
        let period = (self.0.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
        crate::periodic::every(period, cancel, tracker, move || {
            me.sweep();
        });
        self.start_toucher(cancel, tracker, period);
    }

    /// Starts a session of `owner` for `version`; returns its id. At the bound (after
    /// evicting idle sessions) the answer is 429.
    pub fn create(&self, version: &str, owner: &Principal) -> Result<(String, Arc<DownstreamSession>), Error> {
        self.create_at(version, owner, Instant::now())
    }

    fn create_at(
        &self,
        version: &str,
        owner: &Principal,
        now: Instant,
    ) -> Result<(String, Arc<DownstreamSession>), Error> {
        let (token, verified) = self.0.key.mint(version, owner.id());
        let mut table = self.0.table.lock().expect("sessions");
        self.check_owner(&mut table, owner, now)?;
        self.make_room(&mut table, now)?;
        let session = DownstreamSession::new(verified.version, owner.clone(), now);
        self.share(&session, verified.nonce, true);
        table.live.insert(verified.nonce, session.clone());
        Ok((token, session))
    }

    /// The session a request of `principal` names, marked active. A forged or ended id, or
    /// another principal's session, is 404.
    pub fn resolve(&self, token: &str, principal: &Principal) -> Result<Arc<DownstreamSession>, Error> {
        self.resolve_at(token, principal, Instant::now())
    }

    fn resolve_at(&self, token: &str, principal: &Principal, now: Instant) -> Result<Arc<DownstreamSession>, Error> {
        let verified = self.0.key.verify(token, principal.id()).ok_or(DownstreamError::SessionNotFound)?;
        let mut table = self.0.table.lock().expect("sessions");
        if table.ended.set.contains(&verified.nonce) {
            return Err(DownstreamError::SessionNotFound.into());
        }
        if let Some(session) = table.live.get(&verified.nonce) {
            if session.owner != *principal {
                return Err(DownstreamError::SessionNotFound.into());
            }
            session.touch(now);
            return Ok(session.clone());
        }
        self.check_owner(&mut table, principal, now)?;
        self.make_room(&mut table, now)?;
        let session = DownstreamSession::new(verified.version, principal.clone(), now);
        // Minted by another replica (or before a restart): its record there is restored by
        // the first request.
        self.share(&session, verified.nonce, false);
        table.live.insert(verified.nonce, session.clone());
        Ok(session)
    }

    /// Ends the session a request of `principal` names (DELETE); another principal's is 404.
    pub fn end(&self, token: &str, principal: &Principal) -> Result<Nonce, Error> {
        let verified = self.0.key.verify(token, principal.id()).ok_or(DownstreamError::SessionNotFound)?;
        let mut table = self.0.table.lock().expect("sessions");
        if table.ended.set.contains(&verified.nonce)
            || table.live.get(&verified.nonce).is_some_and(|s| s.owner != *principal)
        {
            return Err(DownstreamError::SessionNotFound.into());
        }
        if let Some(session) = table.live.remove(&verified.nonce) {
            session.end();
        }
        table.ended.insert(verified.nonce, self.0.max);
        Ok(verified.nonce)
    }

    /// Evicts the sessions idle for longer than the idle time; returns how many.
    pub fn sweep(&self) -> usize {
        self.sweep_at(Instant::now())
    }

    fn sweep_at(&self, now: Instant) -> usize {
        let mut table = self.0.table.lock().expect("sessions");
        self.evict_idle(&mut table, now)
    }

    /// Live sessions now.
    pub fn len(&self) -> usize {
        self.0.table.lock().expect("sessions").live.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses one more session for `owner` at its per-principal bound (after evicting idle
    /// sessions). A scan of the live sessions: it runs on `initialize` only, and the table is
    /// bounded by `max`.
    fn check_owner(&self, table: &mut Table, owner: &Principal, now: Instant) -> Result<(), Error> {
        let cap = self.0.per_principal;
        if cap == 0 || owner.identity().is_none() {
            return Ok(());
        }
        let count = |t: &Table| t.live.values().filter(|s| s.owner == *owner).count();
        if count(table) >= cap && (self.evict_idle(table, now) == 0 || count(table) >= cap) {
            return Err(DownstreamError::LimitReached(format!(
                "this principal holds its maximum of {cap} legacy sessions; DELETE one or let it idle out"
            ))
            .into());
        }
        Ok(())
    }

    fn make_room(&self, table: &mut Table, now: Instant) -> Result<(), Error> {
        if table.live.len() >= self.0.max && self.evict_idle(table, now) == 0 {
            return Err(DownstreamError::LimitReached(format!(
                "the proxy holds its maximum of {} legacy sessions",
                self.0.max
            ))
            .into());
        }
        Ok(())
    }

    fn evict_idle(&self, table: &mut Table, now: Instant) -> usize {
        let Some(cutoff) = now.checked_sub(self.0.idle) else { return 0 };
        let idle: Vec<Nonce> =
            table.live.iter().filter(|(_, s)| s.idle_since().is_some_and(|t| t <= cutoff)).map(|(n, _)| *n).collect();
        for nonce in &idle {
            if let Some(session) = table.live.remove(nonce) {
                session.end();
            }
            table.ended.insert(*nonce, self.0.max);
        }
        if !idle.is_empty() {
            tracing::debug!(evicted = idle.len(), "evicted idle legacy sessions");
        }
        idle.len()
    }
}

#[cfg(test)]
mod tests;
