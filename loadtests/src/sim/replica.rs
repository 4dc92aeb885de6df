//! One simulated replica: the real cluster tier (`resmux::cluster::Cluster`, its own random
//! id and its own Redis connections) on a single-threaded runtime of its own, driven as the
//! hub drives it (`src/hub/replicas.rs`, `src/router/shared.rs`): lease keeper, bus and health
//! probe started; interest published every lease period and when it changes, the holder's
//! live filter announced; the other replicas' interest read when a notice asks; changes taken
//! from the bus; misses of the local cache probing the L2, taking the fill lock and filling.
//! Only the HTTP side and the upstream are left out: a "fetch" is an answer made up here.
//!
//! Killing a replica drops its runtime mid-flight, as a crash would: nothing is released, its
//! connections close, and the others must find out through the lease expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use resmux::cache::{BaseKey, CachedMethod, Owner, Stored};
use resmux::cluster::{Cluster, ClusterConfig, Event, Inbound, Probe, Role};
use resmux::mcp::notify::{Change, Filter};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Shared, SimOptions};

/// The secret every simulated replica shares (names private partitions); a test's.
const SECRET: &str = "resmux-load-sim-shared-secret-0123456789abcdef";

/// How a replica ends.
pub(super) enum Stop {
    /// Cancelled: the lease keeper releases what it holds, as on a clean shutdown.
    Clean,
    /// Its runtime dropped at once, as a crash.
    Kill,
}

/// The driver's handle on one simulated replica.
pub(super) struct Handle {
    pub cluster: Cluster,
    stop: Option<oneshot::Sender<Stop>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The made-up URI of key `k` of upstream `u`.
pub(super) fn uri(u: usize, k: usize) -> String {
    format!("sim://up{u}/item/{k}")
}

/// The cache key of a read of `uri` on upstream `u`.
fn base_key(u: usize, uri: &str) -> BaseKey {
    BaseKey {
        upstream: u as u32,
        method: CachedMethod::ResourcesRead,
        era: 0,
        params: serde_json::json!({ "uri": uri }).to_string().into(),
    }
}

/// The configuration every simulated replica shares.
pub(super) fn config(o: &SimOptions, seeds: &[String], prefix: &str) -> ClusterConfig {
    ClusterConfig {
        redis_nodes: seeds.to_vec(),
        prefix: prefix.to_owned(),
        lease_ttl: o.lease_ttl,
        // Generous: 100 replicas share this process's cores, and a slow answer under that
        // load must not read as a Redis outage.
        op_timeout: Duration::from_millis(500),
        ..ClusterConfig::default()
    }
}

impl Handle {
    /// Starts replica `n` on a thread and runtime of its own.
    pub(super) async fn start(n: usize, o: &SimOptions, config: ClusterConfig, shared: Arc<Shared>) -> Result<Self> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let o = o.clone();
        let thread = std::thread::Builder::new().name(format!("sim-replica-{n}")).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::from(e)));
                    return;
                }
            };
            rt.block_on(run(n, o, config, shared, ready_tx, stop_rx));
            // Whatever is still running (everything, after a kill) is dropped where it stands.
            rt.shutdown_background();
        })?;
        let cluster = ready_rx.await.context("a simulated replica's thread ended at start")??;
        Ok(Self { cluster, stop: Some(stop_tx), thread: Some(thread) })
    }

    /// Ends the replica; returns once its thread is gone.
    pub(super) async fn stop(mut self, how: Stop) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(how);
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    /// Upstreams whose listen this replica holds.
    pub(super) fn held(&self, upstreams: usize) -> Vec<usize> {
        (0..upstreams).filter(|&i| matches!(*self.cluster.role(i).borrow(), Role::Holder(_))).collect()
    }
}

async fn run(
    n: usize,
    o: SimOptions,
    config: ClusterConfig,
    shared: Arc<Shared>,
    ready: oneshot::Sender<Result<Cluster>>,
    stop: oneshot::Receiver<Stop>,
) {
    let cluster = match Cluster::new(&config, Some(SECRET), o.upstreams) {
        Ok(Some(c)) => c,
        Ok(None) => {
            let _ = ready.send(Err(anyhow::anyhow!("the simulated replica's [cluster] is not enabled")));
            return;
        }
        Err(e) => {
            let _ = ready.send(Err(anyhow::Error::from(e).context("starting the cluster tier")));
            return;
        }
    };
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    cluster.start(&cancel, &tracker);
    // Every replica runs the same upstreams (one identity each), as the hub installs them.
    for u in 0..o.upstreams {
        cluster.install(u, &format!("up{u}"), b"resmux-load sim upstream");
    }
    if let Some(inbox) = cluster.take_inbox() {
        tracker.spawn(receive(cluster.clone(), inbox, shared.clone(), cancel.clone()));
    }
    for u in 0..o.upstreams {
        tracker.spawn(interest(cluster.clone(), u, o.interest_uris, cancel.clone()));
    }
    tracker.spawn(reads(cluster.clone(), o.clone(), n as u64, shared, cancel.clone()));
    if ready.send(Ok(cluster)).is_err() {
        cancel.cancel();
    }
    match stop.await {
        Ok(Stop::Clean) | Err(_) => {
            cancel.cancel();
            tracker.close();
            let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
        }
        Ok(Stop::Kill) => {}
    }
}

/// The hub's inbox loop: changes reach a follower's listeners (timed here), a replica's
/// interest notice the holder cannot apply alone makes it read that replica's set.
async fn receive(
    cluster: Cluster,
    mut inbox: tokio::sync::mpsc::Receiver<Inbound>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    loop {
        let msg = tokio::select! {
            _ = cancel.cancelled() => return,
            msg = inbox.recv() => match msg { Some(m) => m, None => return },
        };
        let Inbound::Event { upstream, event } = msg else { continue };
        match event {
            Event::Change(change) if *cluster.role(upstream).borrow() == Role::Follower => {
                cluster.note_change(upstream, Some(&change));
                if let Change::Updated(uri) = &change {
                    shared.delivered(uri);
                }
            }
            Event::Interest => {
                let _ = cluster.refresh_interest(upstream).await;
            }
            _ => {}
        }
    }
}

/// The hub's interest loop for upstream `u`: this replica's listeners want `uris` URIs of it
/// (the same ones on every replica, as popular resources are), published every lease period
/// (unchanged, that only keeps it alive; whole every `interest_resync`), and the holder's live
/// filter announced with it.
async fn interest(cluster: Cluster, u: usize, uris: usize, cancel: CancellationToken) {
    let filter = Filter { uris: (0..uris).map(|k| uri(u, k)).collect(), ..Filter::default() };
    let period = (cluster.config().lease_ttl / 4).max(Duration::from_millis(50));
    loop {
        let _ = cluster.publish_interest(u, &filter).await;
        if matches!(*cluster.role(u).borrow(), Role::Holder(_)) {
            cluster.announce(u, Event::Active(filter.clone()));
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
    }
}

/// Local-cache misses at `o.l2_reads` per second: each probes the L2; a miss takes the fill
/// lock in the same call, "fetches" and fills, as a flight leader does; a miss under another
/// replica's lock is counted and left (the real one waits for the fill's notice).
async fn reads(cluster: Cluster, o: SimOptions, seed: u64, shared: Arc<Shared>, cancel: CancellationToken) {
    if o.l2_reads <= 0.0 || o.keys == 0 {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / o.l2_reads));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let owner = Owner::Anonymous([0; 16]);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (u, k) = (rng.random_range(0..o.upstreams), rng.random_range(0..o.keys));
        read(&cluster, u, k, &owner, &shared).await;
    }
}

/// One L2 read of key `k` of upstream `u`, as `lead_shared` makes it.
pub(super) async fn read(cluster: &Cluster, u: usize, k: usize, owner: &Owner, shared: &Shared) {
    let uri = uri(u, k);
    let key = cluster.shared_key(&base_key(u, &uri), Some(&uri), owner);
    let lock = match cluster.probe(&key).await {
        Ok(Probe::Fresh(_)) => {
            shared.reads.hits.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Probe::Wait) => {
            shared.reads.busy.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Probe::Lead(lock)) => lock,
        Ok(Probe::Unusable) | Err(_) => {
            shared.reads.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let tail = Bytes::from(format!(r#""contents":[{{"uri":"{uri}","text":"{}"}}]}}"#, "x".repeat(256)));
    // Written in the background, as after a real answer; its failures are the tier's
    // `fill_errors`.
    let value = lock.value(Stored::Result { tail }, true, 60_000);
    lock.fill_later(value, || {});
    shared.reads.fills.fetch_add(1, Ordering::Relaxed);
}

/// What the simulated reads found, summed over replicas.
#[derive(Default)]
pub(super) struct ReadCounts {
    pub hits: AtomicU64,
    pub fills: AtomicU64,
    /// Misses under another replica's fill lock.
    pub busy: AtomicU64,
    pub errors: AtomicU64,
}
