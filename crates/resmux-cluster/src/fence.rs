//! Fencing of the listen holders' bus events, per upstream.
//!
//! Every event of a holder carries its lease token. A follower admits an event whose token is
//! at least the highest it has admitted, so a holder that lost its lease while paused cannot
//! publish stale changes after its successor started.
//!
//! That order holds only while Redis never forgets a token it issued. Replication to a Redis
//! Cluster replica is asynchronous: a promoted replica may lack its dead master's last writes,
//! or all of them while its first sync was still under way. The lease script therefore issues
//! tokens no lower than the server's clock in ms (see `lease.rs`), which keeps the order as
//! long as the promoted node's clock is not behind the dead one's by more than the failover
//! took. Past that bound a follower would drop the new holder's events forever, so it also
//! re-baselines on evidence read from Redis itself: a lease whose token is lower than one the
//! follower had admitted before it read the lease is proof of lost writes (without loss, the
//! lease always carries the highest token issued). It then admits the token Redis names as the
//! holder's now, and nothing else up to the highest token admitted before the loss, so a
//! deposed holder's late events are still dropped; the hub resyncs the listeners for what was
//! dropped until then. The bus alone never lowers the fence: a message names any token its
//! sender likes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::mpsc;

use super::{Cluster, Event, Inbound};

/// One upstream's fence, as one follower keeps it.
#[derive(Default, Debug)]
pub(super) struct Fence {
    /// Events with a token below this are dropped (unless `current` names them).
    floor: AtomicU64,
    /// After a loss of writes, the token of the holder Redis names, below the floor (0: none).
    current: AtomicU64,
    /// Whether this replica had seen another holder's token when it last took the lease.
    took_over: AtomicBool,
}

impl Fence {
    /// Whether an event carrying `token` is admitted (raising the floor to it).
    pub(super) fn admits(&self, token: u64) -> bool {
        let floor = self.floor.fetch_max(token, Ordering::AcqRel);
        if token >= floor && self.current.load(Ordering::Acquire) != 0 {
            // A holder at or above the floor (which a loss raised past every earlier token):
            // the one followed after the loss is deposed.
            self.current.store(0, Ordering::Release);
        }
        token >= floor || (token != 0 && token == self.current.load(Ordering::Acquire))
    }

    /// Takes `from`'s state (a slot installed for an upstream another slot runs), or starts
    /// afresh.
    pub(super) fn inherit(&self, from: Option<&Fence>) {
        let load = |a: Option<&AtomicU64>| a.map_or(0, |a| a.load(Ordering::Acquire));
        self.floor.store(load(from.map(|f| &f.floor)), Ordering::Release);
        self.current.store(load(from.map(|f| &f.current)), Ordering::Release);
        self.took_over.store(from.is_some_and(|f| f.took_over.load(Ordering::Acquire)), Ordering::Release);
    }

    /// The floor, read before a lease read so that [`Fence::lease_read`] can tell a lost
    /// write from a lease that changed meanwhile.
    pub(super) fn floor(&self) -> u64 {
        self.floor.load(Ordering::Acquire)
    }

    /// This replica holds the lease with `token`.
    pub(super) fn held(&self, token: u64) {
        let before = self.floor.fetch_max(token, Ordering::AcqRel);
        self.took_over.store(before != 0, Ordering::Release);
        self.current.store(0, Ordering::Release);
    }

    /// The lease carried `token` (`None`: no lease) when read after the floor was
    /// `floor_before`. Whether that is new evidence of lost writes (the fence was
    /// re-baselined).
    pub(super) fn lease_read(&self, token: Option<u64>, floor_before: u64) -> bool {
        let token = token.unwrap_or(0);
        if token == 0 || token >= floor_before {
            // Without a loss, the holder Redis names has the highest token: every lower one
            // is deposed, whether or not this replica heard of the new holder on the bus yet.
            self.floor.fetch_max(token, Ordering::AcqRel);
            self.current.store(0, Ordering::Release);
            return false;
        }
        if self.current.swap(token, Ordering::AcqRel) == token {
            return false;
        }
        // Every token admitted so far may be a deposed holder's: only `current` passes below
        // the old highest plus one.
        self.floor.fetch_max(floor_before.saturating_add(1), Ordering::AcqRel);
        true
    }
}

impl Cluster {
    /// Whether this replica, holding upstream `index`'s lease, took it over from another
    /// holder it knew of (rather than taking the first lease it ever saw, at a fleet's start):
    /// what the predecessor saw last is unknown, so the followers must resync.
    pub fn took_over(&self, index: usize) -> bool {
        self.0.fence[index].took_over.load(Ordering::Acquire)
    }

    /// Records what upstream `index`'s lease held when read (its value `replica:token`, or
    /// none), for the admin view and the fence; `floor_before` is the fence's floor read
    /// before the lease was.
    pub(super) fn lease_read(&self, index: usize, lease: Option<&str>, floor_before: u64) {
        self.note_holder(index, lease);
        let token = lease.and_then(|v| v.rsplit_once(':')).and_then(|(_, t)| t.parse().ok());
        if self.0.fence[index].lease_read(token, floor_before) {
            self.0.stats.fence_rebaselines.fetch_add(1, Ordering::Relaxed);
            // The new holder's events up to now were dropped: its listeners resync.
            let resync = Inbound::Event { upstream: index, event: Event::Resync };
            if let Err(mpsc::error::TrySendError::Full(resync)) = self.0.inbox.try_send(resync) {
                let inbox = self.0.inbox.clone();
                tokio::spawn(async move { inbox.send(resync).await });
            }
            tracing::warn!(
                upstream = &*self.member(index).name,
                token,
                floor_before,
                "the listen lease's token is below one already seen: Redis lost writes (a failover?); \
                 following the holder it names now"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deposed_holder_is_dropped_and_a_lower_token_read_from_redis_is_followed() {
        let f = Fence::default();
        assert!(f.admits(5));
        assert!(f.admits(5));
        assert!(f.admits(9), "a later holder");
        assert!(!f.admits(5), "the deposed holder's late event");
        // A lease read without loss changes nothing.
        assert!(!f.lease_read(Some(9), f.floor()));
        assert!(!f.admits(5));
        // Redis lost the writes that issued 9: a new holder got 7.
        let before = f.floor();
        assert!(!f.admits(7), "the bus alone never lowers the fence");
        assert!(f.lease_read(Some(7), before));
        assert!(!f.lease_read(Some(7), f.floor()), "the same evidence counts once");
        assert!(f.admits(7), "the holder Redis names now");
        assert!(!f.admits(9), "the holder from before the loss is deposed");
        assert!(!f.admits(8));
        assert!(f.admits(10), "a token above every earlier one");
        assert!(!f.admits(7), "the holder followed after the loss is deposed in turn");
        // A lease read raises the floor before any event of its holder arrived.
        assert!(!f.lease_read(Some(20), f.floor()));
        assert!(!f.admits(10), "deposed by the holder Redis names");
        assert!(f.admits(20));
        // A lease read that raced a newer holder's first events is not evidence.
        let g = Fence::default();
        let before = g.floor();
        assert!(g.admits(12));
        assert!(!g.lease_read(Some(11), before));
        assert!(g.admits(12));
        assert!(!g.admits(11));
        // This replica's own lease, once lost, does not admit its token by name.
        g.held(30);
        assert!(!g.lease_read(None, g.floor()));
        assert!(g.admits(31));
        assert!(!g.admits(30));
        assert!(!g.admits(0));
    }
}
