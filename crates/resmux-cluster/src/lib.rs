//! resmux-cluster: replicas sharing state through Redis (`[cluster]`, DESIGN §9,
//! `docs/scaling.md`). It knows the cache's keys and the MCP change vocabulary, and nothing of
//! HTTP or of the proxy's router: the proxy hands it keys and values and gets events back.
//!
//! - [`config`]: the `[cluster]` section.
//! - `conn`: the connection to one Redis or a Redis Cluster, and every client of it, built
//!   with the TLS of `tls` (`rediss://`: a private CA, a client certificate).
//! - `health`: the probe that marks Redis up or degraded, and the cause it last saw.
//! - [`l2`]: a second cache tier behind each replica's moka cache, with cross-replica
//!   single-flight (a short fill lock per key, taken by the probe that missed) and epochs kept
//!   in Redis, so that a fill that raced a notification on another replica is never stored as
//!   fresh; [`fill`]: the fill lock, and the fill written after the answer, bounded;
//!   [`fillwait`]: the replicas waiting for another's fill, woken by its notice.
//! - [`bus`]: one pub/sub channel carrying what the upstream listens saw (`updated`,
//!   `list_changed`, resync), the holders' live filters, and interest changes.
//! - [`lease`]: per upstream, one replica holds the upstream listen under a lease with a
//!   fencing token; the others follow, admitting its events by [`fence`]. Redis unreachable: every replica goes solo (its own
//!   listens, its own cache) until Redis is back and the leases are re-established.
//! - [`interest`]: each replica's interest in each upstream, as changes on the bus and a set
//!   per replica in Redis, for the holder of the upstream's listen; and which replicas run it.
//! - [`sessions`]: legacy sessions' subscriptions, so another replica can continue a session.
//! - [`members`]: which upstream (name and content generation) each slot stands for; a
//!   reload installs and retires slots, and leases, interest and the bus follow.
//! - [`stats`]: the counters behind `/metrics` and `/readyz`'s cluster view.
//!
//! Every Redis call has a deadline (`op_timeout`); while Redis is unreachable no request waits
//! on it at all (the health probe decides when to try again).

mod bus;
pub mod config;
mod conn;
mod fence;
mod fill;
mod fillwait;
mod health;
mod interest;
mod l2;
mod lease;
mod members;
mod purge;
mod sessions;
mod spread;
mod stats;
pub use spread::preferred as preferred_listen_holder;
mod subscribe;
mod tls;
mod value;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hmac::{KeyInit, Mac};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use bus::{Event, Inbound};
pub use fill::FillLock;
pub use fillwait::FillWait;
pub use l2::{Probe, SharedKey};
pub use lease::Role;
pub use sessions::Adopted;
pub use stats::Stats;
pub use value::{SharedValue, now_ms};

pub use crate::config::{ClusterConfig, RedisTarget};
use resmux_proto::mcp::notify::Filter;

/// Why a Redis call did not succeed. The request it served goes on without Redis.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("redis `{op}` failed")]
    Redis {
        op: &'static str,
        #[source]
        source: redis::RedisError,
    },
    #[error("redis `{op}` took longer than the op_timeout")]
    Timeout { op: &'static str },
    #[error("redis is unreachable (the health probe has not seen it back yet)")]
    Unavailable,
    #[error("redis: no node of the Redis Cluster is connected, and a seed node alone fails")]
    Seeds(#[source] redis::RedisError),
}

/// Why the cluster tier could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSetupError {
    #[error("cluster.redis_url (or redis_nodes) is not a valid Redis URL")]
    Url(#[source] redis::RedisError),
    #[error("cluster: cannot make a Redis client of redis_url (or redis_nodes) and the tls_* files")]
    Client(#[source] redis::RedisError),
    #[error("cluster.{key}: cannot read `{}`", path.display())]
    TlsFile {
        key: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cluster: tls_cert_file and tls_key_file go together")]
    TlsPair,
    #[error("cluster: the tls_* files apply only to a rediss:// (TLS) Redis, and the Redis URL is not rediss://")]
    TlsNeedsRediss,
    #[error("cluster: cannot read a secret")]
    Secret(#[source] resmux_proto::secret::SecretError),
    #[error("cluster: no key for private partitions (set cluster.key_secret or proxy.cursor_secret)")]
    NoKey,
}

/// Cheap handle over the cluster tier.
#[derive(Clone)]
pub struct Cluster(Arc<Inner>);

struct Inner {
    config: ClusterConfig,
    /// How to reach Redis (one Redis or a Redis Cluster).
    backend: conn::Backend,
    conn: conn::Conn,
    /// HMAC key naming private partitions.
    key: Vec<u8>,
    /// This replica's random id.
    replica: Arc<str>,
    /// Per upstream slot: the upstream it stands for (Redis keys use names and generations,
    /// not slots, which differ between replicas).
    members: members::Members,
    /// Bumped when the running slots change: the bus subscriber follows.
    channels_changed: watch::Sender<u64>,
    healthy: AtomicBool,
    /// Flipped by the health probe; readiness and the admin page read it.
    health: watch::Sender<bool>,
    /// Why Redis is degraded, as the last failed call or probe saw it (for `/readyz`).
    down_because: arc_swap::ArcSwapOption<String>,
    /// Wakes the health probe when a call failed, so that a brief failure is confirmed or
    /// cleared at once instead of at the next tick.
    probe_now: tokio::sync::Notify,
    stats: Stats,
    outbox: mpsc::Sender<bus::Outgoing>,
    outbox_rx: std::sync::Mutex<Option<mpsc::Receiver<bus::Outgoing>>>,
    inbox: mpsc::Sender<Inbound>,
    inbox_rx: std::sync::Mutex<Option<mpsc::Receiver<Inbound>>>,
    /// Legacy sessions ended (DELETE) on another replica, by their record's name.
    ended_sessions: tokio::sync::broadcast::Sender<Arc<str>>,
    /// Per upstream: whether this replica holds its listen.
    roles: Vec<watch::Sender<Role>>,
    /// Per upstream: the replica holding its listen, as the lease keeper last saw it.
    holders: Vec<watch::Sender<Option<Arc<str>>>>,
    /// The live replicas, as the lease keeper's last heartbeat saw them.
    live: watch::Sender<Arc<[String]>>,
    /// Wakes the lease keeper for a round now (another replica claimed a lease held here).
    keeper_now: tokio::sync::Notify,
    /// Flight leaders waiting here for another replica's fill.
    fill_waiters: fillwait::Waiters,
    /// Fills and lock releases written after the answer.
    writes: fill::Writes,
    /// Per upstream (while holding it): the union of the other live replicas' interest.
    remote: Vec<watch::Sender<Filter>>,
    /// Per upstream slot: this replica's interest as written, and (holding it) the others'.
    interest: Vec<interest::Interest>,
    /// Per upstream: which holder's events are admitted, so a deposed holder's late events
    /// are dropped.
    fence: Vec<fence::Fence>,
    /// When this replica last learnt of a change, by the Redis name of the epoch it bumps:
    /// a shared value fetched before it is not taken, even while the bump is still on its
    /// way to Redis (the holder applies a change locally before its publisher has bumped the
    /// epoch there).
    changed_at: moka::sync::Cache<String, u64>,
}

/// Most change times remembered. A forgotten one only loses the guard for a change older
/// than an hour, past which every shared value has expired (TTLs are clamped to `max_ttl`).
const MAX_CHANGE_TIMES: u64 = 1 << 16;

/// Most inbound events waiting for the hub.
const INBOX: usize = 4096;

impl Cluster {
    /// The cluster tier for `config` with room for `slots` upstream slots (see
    /// [`Cluster::install`]), or `None` when `[cluster]` is absent. Connects lazily: a Redis
    /// that is down at start is retried by the health probe.
    pub fn new(
        config: &ClusterConfig,
        cursor_secret: Option<&str>,
        slots: usize,
    ) -> Result<Option<Self>, ClusterSetupError> {
        let Some(target) = config.target().map_err(ClusterSetupError::Secret)? else { return Ok(None) };
        let key = match &config.key_secret {
            Some(s) => s.resolve().map_err(ClusterSetupError::Secret)?,
            None => cursor_secret.ok_or(ClusterSetupError::NoKey)?.to_owned(),
        };
        let backend = conn::Backend::new(&target, config)?;
        let conn = backend.connect_lazily(config).map_err(ClusterSetupError::Client)?;
        let (outbox, outbox_rx) = mpsc::channel(config.max_outbox);
        let (inbox, inbox_rx) = mpsc::channel(INBOX);
        let n = slots;
        let replica: Arc<str> = format!("{:016x}", rand::random::<u64>()).into();
        Ok(Some(Self(Arc::new(Inner {
            config: config.clone(),
            backend,
            conn,
            key: key.into_bytes(),
            replica,
            members: (0..n).map(|_| arc_swap::ArcSwap::from_pointee(members::Member::vacant())).collect(),
            channels_changed: watch::channel(0).0,
            // Optimistic until the first probe: requests try Redis at once.
            healthy: AtomicBool::new(true),
            health: watch::channel(true).0,
            down_because: arc_swap::ArcSwapOption::empty(),
            probe_now: tokio::sync::Notify::new(),
            stats: Stats::default(),
            outbox,
            outbox_rx: std::sync::Mutex::new(Some(outbox_rx)),
            inbox,
            inbox_rx: std::sync::Mutex::new(Some(inbox_rx)),
            ended_sessions: tokio::sync::broadcast::channel(256).0,
            roles: (0..n).map(|_| watch::channel(Role::Follower).0).collect(),
            holders: (0..n).map(|_| watch::channel(None).0).collect(),
            live: watch::channel(Arc::from([])).0,
            keeper_now: tokio::sync::Notify::new(),
            fill_waiters: fillwait::Waiters::default(),
            writes: fill::Writes::new(config.max_pending_fills),
            remote: (0..n).map(|_| watch::channel(Filter::default()).0).collect(),
            interest: (0..n).map(|_| interest::Interest::default()).collect(),
            fence: (0..n).map(|_| fence::Fence::default()).collect(),
            changed_at: moka::sync::Cache::builder()
                .max_capacity(MAX_CHANGE_TIMES)
                .time_to_live(Duration::from_secs(3600))
                .build(),
        }))))
    }

    /// Starts the health probe, the bus (publisher and subscriber) and the lease keeper on
    /// `tracker`, until `cancel`; once cancelled, `tracker` also waits for the fills still
    /// being written (requests have drained by then), so shutdown gives them its grace.
    pub fn start(&self, cancel: &CancellationToken, tracker: &TaskTracker) {
        self.drain_writes_on(cancel, tracker);
        tracker.spawn(self.clone().health_probe(cancel.clone()));
        let outbox = self.0.outbox_rx.lock().expect("outbox").take().expect("started once");
        tracker.spawn(bus::publisher(self.clone(), outbox, cancel.clone()));
        tracker.spawn(subscribe::subscriber(self.clone(), cancel.clone()));
        tracker.spawn(lease::keeper(self.clone(), cancel.clone()));
    }

    /// What the other replicas announced, for the hub (taken once).
    pub fn take_inbox(&self) -> Option<mpsc::Receiver<Inbound>> {
        self.0.inbox_rx.lock().expect("inbox").take()
    }

    /// The settings.
    pub fn config(&self) -> &ClusterConfig {
        &self.0.config
    }

    /// Whether Redis is a Redis Cluster (`redis_nodes`) rather than one Redis.
    pub fn is_redis_cluster(&self) -> bool {
        self.0.backend.is_cluster()
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.0.replica
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.0.stats
    }

    /// Whether Redis answered the last call or probe.
    pub fn healthy(&self) -> bool {
        self.0.healthy.load(Ordering::Relaxed)
    }

    /// Follows [`Cluster::healthy`].
    pub fn health_watch(&self) -> watch::Receiver<bool> {
        self.0.health.subscribe()
    }

    /// Whether this replica holds upstream `index`'s listen (or is on its own).
    pub fn role(&self, index: usize) -> watch::Receiver<Role> {
        self.0.roles[index].subscribe()
    }

    /// What the other replicas want from upstream `index`, while this one holds its listen.
    pub fn remote_interest(&self, index: usize) -> watch::Receiver<Filter> {
        self.0.remote[index].subscribe()
    }

    /// The start of every Redis name of upstream slot `index`, with its `{name}` hash tag:
    /// every key of one upstream lives in one slot of a Redis Cluster, so that one script can
    /// read its value, epochs and lock together (see `members.rs` for the generation).
    fn tag(&self, index: usize) -> String {
        self.member(index).tag.clone()
    }

    /// A keyed hash of `data`, hex, for Redis key names (never raw identities or URIs).
    fn digest(&self, data: &[&[u8]]) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0.key).expect("any key length");
        for d in data {
            mac.update(&(d.len() as u64).to_be_bytes());
            mac.update(d);
        }
        let out = mac.finalize().into_bytes();
        out[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Runs `call` with the op deadline, counting and reporting a failure. While Redis is
    /// known to be down nothing is tried.
    async fn bounded<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, ClusterError> {
        if !self.healthy() {
            return Err(ClusterError::Unavailable);
        }
        self.0.stats.calls.fetch_add(1, Ordering::Relaxed);
        let result = tokio::time::timeout(self.0.config.op_timeout, call).await;
        self.outcome(op, result)
    }

    async fn query<T: redis::FromRedisValue>(&self, op: &'static str, cmd: &redis::Cmd) -> Result<T, ClusterError> {
        let mut conn = self.0.conn.clone();
        self.bounded(op, cmd.query_async::<T>(&mut conn)).await
    }

    async fn eval<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        script: &redis::Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, ClusterError> {
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(*k);
        }
        for a in args {
            invocation.arg(*a);
        }
        let mut conn = self.0.conn.clone();
        self.bounded(op, invocation.invoke_async::<T>(&mut conn)).await
    }

    async fn run_pipeline<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        pipeline: &redis::Pipeline,
    ) -> Result<T, ClusterError> {
        let mut conn = self.0.conn.clone();
        self.bounded(op, pipeline.query_async::<T>(&mut conn)).await
    }

    fn outcome<T>(
        &self,
        op: &'static str,
        result: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Result<T, ClusterError> {
        let err = match result {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(source)) => ClusterError::Redis { op, source },
            Err(_) => ClusterError::Timeout { op },
        };
        self.0.stats.errors.fetch_add(1, Ordering::Relaxed);
        self.set_healthy(false, Some(&err));
        Err(err)
    }
}
