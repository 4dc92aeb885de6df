//! The cluster tier's counters.

use std::sync::atomic::AtomicU64;

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
