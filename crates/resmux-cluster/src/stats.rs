//! The cluster tier's counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the cluster tier, for `/metrics` and the tests.
#[derive(Default, Debug)]
pub struct Stats {
    pub l2_hits: AtomicU64,
    pub l2_misses: AtomicU64,
    pub l2_fills: AtomicU64,
    /// Fills refused because an epoch moved while fetching (another replica saw a change).
    pub l2_fills_raced: AtomicU64,
    /// Misses that waited for another replica's fill.
    pub lock_waits: AtomicU64,
    /// Notices that woke such a wait (the fill, or its failure, was announced).
    pub fill_notices: AtomicU64,
    /// Fills (or lock releases) not written because `max_pending_fills` were pending; their
    /// locks expire by themselves.
    pub fills_dropped: AtomicU64,
    /// Fills (or lock releases) written after the answer that failed.
    pub fill_errors: AtomicU64,
    pub errors: AtomicU64,
    pub published: AtomicU64,
    pub received: AtomicU64,
    /// Events dropped because the outbox was full.
    pub dropped: AtomicU64,
    /// Events received from a deposed listen holder (a fence below the highest seen).
    pub fenced: AtomicU64,
    /// Lease tokens read from Redis below one already admitted: Redis lost writes (a failover
    /// to a replica that lacked them), and the fence now follows the holder Redis names.
    pub fence_rebaselines: AtomicU64,
    /// Redis calls made for interest (writes, reads, announcements).
    pub interest_calls: AtomicU64,
    /// Payload bytes of those calls, both ways (keys, fields, values; not the protocol's
    /// framing).
    pub interest_bytes: AtomicU64,
    /// Interest changes of other replicas applied by a listen holder without a Redis read.
    pub interest_deltas: AtomicU64,
    /// Times a listen holder read every replica's interest again.
    pub interest_resyncs: AtomicU64,
    pub lease_acquired: AtomicU64,
    pub lease_lost: AtomicU64,
    /// Round trips to Redis the command connection made (a script or a pipeline is one; the
    /// health probe's included, the bus subscription's pushes not), so that the Redis load of
    /// one replica can be read against the commands Redis counts.
    pub calls: AtomicU64,
}

impl Stats {
    /// The counters operators read, each with its name (`/readyz`'s key; `/metrics` adds
    /// `_total`) and what it counts: one list, so the two views cannot drift apart.
    pub fn counters(&self) -> [(&'static str, &'static str, u64); 21] {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("errors", "Redis calls that failed or timed out.", n(&self.errors)),
            ("l2_hits", "Misses answered from the shared tier.", n(&self.l2_hits)),
            ("l2_misses", "Misses the shared tier could not answer.", n(&self.l2_misses)),
            ("l2_fills", "Values written to the shared tier.", n(&self.l2_fills)),
            ("l2_fills_raced", "Fills refused because a change raced them.", n(&self.l2_fills_raced)),
            ("lock_waits", "Misses that waited for another replica's fill.", n(&self.lock_waits)),
            ("fill_notices", "Waits woken by a fill's notice.", n(&self.fill_notices)),
            ("fills_dropped", "Fills not written: max_pending_fills were pending.", n(&self.fills_dropped)),
            ("fill_errors", "Fills written after the answer that failed.", n(&self.fill_errors)),
            ("events_published", "Bus events published.", n(&self.published)),
            ("events_received", "Bus messages received.", n(&self.received)),
            ("events_dropped", "Bus events dropped (outbox full or Redis down).", n(&self.dropped)),
            ("events_fenced", "Bus events of a deposed listen holder, dropped.", n(&self.fenced)),
            (
                "fence_rebaselines",
                "Lease tokens read below one already seen (Redis lost writes).",
                n(&self.fence_rebaselines),
            ),
            ("interest_calls", "Redis calls made for interest.", n(&self.interest_calls)),
            ("interest_bytes", "Payload bytes of the interest calls, both ways.", n(&self.interest_bytes)),
            ("interest_deltas", "Interest changes a holder applied without a read.", n(&self.interest_deltas)),
            ("interest_resyncs", "Full reads of every replica's interest by a holder.", n(&self.interest_resyncs)),
            ("leases_acquired", "Upstream listen leases taken.", n(&self.lease_acquired)),
            ("leases_lost", "Upstream listen leases lost or handed over.", n(&self.lease_lost)),
            ("redis_calls", "Round trips to Redis on the command connection.", n(&self.calls)),
        ]
    }
}
