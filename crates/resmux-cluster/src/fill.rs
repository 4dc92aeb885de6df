//! The fill lock a probe took, the fetch under it, and the fill written after the answer.
//!
//! The client is answered as soon as the upstream answers; the fill (or, for an answer that is
//! not cached, the lock's release) follows off the request's path, as a background write. At
//! most `max_pending_fills` such writes run at once: past that a write is dropped and counted,
//! and its lock expires within `lock_ttl` (the replicas waiting for it then take the lock and
//! fetch themselves). A failed write is counted and logged; the client already has its answer.
//! The fill stores only when neither epoch moved since the probe read them, and not when this
//! replica learnt of a change after the fetch began, so a fill that raced an invalidation or a
//! purge never stores what it fetched. The writes in flight at shutdown are waited for within
//! the shutdown's grace (see [`Cluster::start`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::l2::SharedKey;
use super::value::{SharedValue, now_ms};
use super::{Cluster, ClusterError};
use resmux_cache::Stored;

// KEYS: value, scope epoch, stream epoch, lock, wait mark. ARGV: payload, px, scope epoch,
// stream epoch, lock token, publish command, channel, notice. Stores only if neither epoch
// moved; releases the lock if it is still ours; wakes the waiters if any marked the key.
const FILL_LUA: &str = r#"
local s = redis.call('GET', KEYS[2]) or '0'
local t = redis.call('GET', KEYS[3]) or '0'
local stored = 0
if s == ARGV[3] and t == ARGV[4] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  stored = 1
end
if redis.call('GET', KEYS[4]) == ARGV[5] then redis.call('DEL', KEYS[4]) end
if redis.call('DEL', KEYS[5]) == 1 then redis.call(ARGV[6], ARGV[7], ARGV[8]) end
return stored
"#;

// KEYS: lock. ARGV: token, px.
const EXTEND_LUA: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

// KEYS: lock, wait mark. ARGV: token, publish command, channel, notice. Releases the lock if
// it is still ours, and wakes the waiters (they take the lock and fetch themselves).
const UNLOCK_LUA: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('DEL', KEYS[2]) == 1 then redis.call(ARGV[2], ARGV[3], ARGV[4]) end
return 1
"#;

static FILL: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FILL_LUA));
static EXTEND: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(EXTEND_LUA));
static UNLOCK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(UNLOCK_LUA));

/// The background writes of fills and lock releases, bounded.
pub(super) struct Writes {
    pub(super) tracker: TaskTracker,
    slots: Arc<Semaphore>,
}

impl Writes {
    pub(super) fn new(max: usize) -> Self {
        Self { tracker: TaskTracker::new(), slots: Arc::new(Semaphore::new(max.max(1))) }
    }
}

/// The fill lock of one key, held by this replica. Its fill is written with
/// [`FillLock::fill_later`]; dropped without that (the fetch failed, or its answer is not
/// cached), it is released in the background, which wakes the replicas waiting for it.
pub struct FillLock {
    /// Taken by the fill; `None` once the write is handed over. Boxed: the lock travels in
    /// the router's outcome enums, which stay small.
    held: Option<Box<Held>>,
    epochs: (u64, u64),
    fetched_at_ms: u64,
}

struct Held {
    cluster: Cluster,
    key: SharedKey,
    token: String,
}

impl std::fmt::Debug for FillLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lock = self.held.as_ref().map(|h| h.key.lock_name());
        f.debug_struct("FillLock").field("lock", &lock).field("epochs", &self.epochs).finish()
    }
}

impl FillLock {
    /// The lock `token` on `key`, taken at `now_ms` when Redis's epochs were `epochs`.
    pub(super) fn new(cluster: &Cluster, key: SharedKey, token: String, epochs: (u64, u64), now_ms: u64) -> Self {
        Self { held: Some(Box::new(Held { cluster: cluster.clone(), key, token })), epochs, fetched_at_ms: now_ms }
    }

    /// Extends the lock while the fetch runs (a dead holder's lock expires instead). Whether
    /// it was still ours.
    pub async fn extend(&self) -> Result<bool, ClusterError> {
        let Some(h) = &self.held else { return Ok(false) };
        let px = h.cluster.lock_px().to_string();
        let n: u8 =
            h.cluster.eval("extend lock", &EXTEND, &[&h.key.lock], &[h.token.as_bytes(), px.as_bytes()]).await?;
        Ok(n == 1)
    }

    /// The shared form of an answer fetched under this lock, stored for `ttl_ms` (counted from
    /// the probe, which preceded the fetch) in the public partition or the caller's.
    pub fn value(&self, stored: Stored, public: bool, ttl_ms: u64) -> SharedValue {
        SharedValue { stored, public, fetched_at_ms: self.fetched_at_ms, ttl_ms, epochs: self.epochs }
    }

    /// Writes `value` through in the background and releases the lock. `raced` runs when the
    /// fill was refused because a change raced the fetch: whatever the caller kept of the
    /// answer must go too.
    pub fn fill_later(mut self, value: SharedValue, raced: impl FnOnce() + Send + 'static) {
        let Some(held) = self.held.take() else { return };
        let Held { cluster, key, token } = *held;
        cluster.clone().in_background(async move {
            match cluster.fill(&key, &value, &token).await {
                Ok(true) => {}
                Ok(false) => raced(),
                Err(e) => cluster.write_failed("fill", &e),
            }
        });
    }
}

impl Drop for FillLock {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            let Held { cluster, key, token } = *held;
            cluster.clone().in_background(async move {
                if let Err(e) = cluster.unlock(&key, &token).await {
                    cluster.write_failed("release", &e);
                }
            });
        }
    }
}

impl Cluster {
    /// Has `tracker` wait, once `cancel` fires, for the writes still pending.
    pub(super) fn drain_writes_on(&self, cancel: &CancellationToken, tracker: &TaskTracker) {
        let (writes, cancel) = (self.0.writes.tracker.clone(), cancel.clone());
        tracker.spawn(async move {
            cancel.cancelled().await;
            writes.close();
            writes.wait().await;
        });
    }

    /// Runs `write` off the request's path, unless `max_pending_fills` writes are pending
    /// (then it is dropped and counted: a fill's lock expires by itself).
    fn in_background(&self, write: impl Future<Output = ()> + Send + 'static) {
        let (Ok(slot), Ok(runtime)) =
            (self.0.writes.slots.clone().try_acquire_owned(), tokio::runtime::Handle::try_current())
        else {
            self.0.stats.fills_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.0.writes.tracker.spawn_on(
            async move {
                write.await;
                drop(slot);
            },
            &runtime,
        );
    }

    fn write_failed(&self, what: &'static str, error: &ClusterError) {
        self.0.stats.fill_errors.fetch_add(1, Ordering::Relaxed);
        let error = resmux_proto::error::chain(error);
        if self.healthy() {
            tracing::warn!(what, %error, "shared-tier write failed; the answer was served");
        } else {
            // Redis is known to be down, which the health probe has logged once already.
            tracing::debug!(what, %error, "shared-tier write skipped");
        }
    }

    /// Releases the fill lock without filling, and wakes the waiters.
    async fn unlock(&self, key: &SharedKey, token: &str) -> Result<(), ClusterError> {
        let notice = self.filled_notice(key);
        let args: [&[u8]; 4] =
            [token.as_bytes(), self.publish_command().as_bytes(), key.channel.as_bytes(), notice.as_bytes()];
        let _: u8 = self.eval("unlock", &UNLOCK, &[&key.lock, &key.wait], &args).await?;
        Ok(())
    }

    /// Writes `value` through (in the public partition or the caller's) for its remaining TTL,
    /// unless an epoch moved since `value.epochs` were read or this replica learnt of a change
    /// since the fetch began, and releases the lock `token`. Returns whether it was stored;
    /// `false` means the value must not be taken as fresh anywhere.
    async fn fill(&self, key: &SharedKey, value: &SharedValue, token: &str) -> Result<bool, ClusterError> {
        let stats = &self.0.stats;
        if self.known_change(key) >= value.fetched_at_ms {
            stats.l2_fills_raced.fetch_add(1, Ordering::Relaxed);
            self.unlock(key, token).await?;
            return Ok(false);
        }
        let px = value.remaining(now_ms()).as_millis() as u64;
        if px == 0 || value.stored.len() as u64 > self.0.config.max_entry_bytes {
            self.unlock(key, token).await?;
            // Too large to share, but fresh; or its TTL ran out during the fetch.
            return Ok(px > 0);
        }
        let target = if value.public { &key.public } else { &key.private };
        let keys = [&**target, &*key.scope_epoch, &*key.stream_epoch, &*key.lock, &*key.wait];
        let (px, scope, stream) = (px.to_string(), value.epochs.0.to_string(), value.epochs.1.to_string());
        let (payload, notice) = (value.encode(), self.filled_notice(key));
        let publish = self.publish_command().as_bytes();
        let args: [&[u8]; 8] = [
            &payload,
            px.as_bytes(),
            scope.as_bytes(),
            stream.as_bytes(),
            token.as_bytes(),
            publish,
            key.channel.as_bytes(),
            notice.as_bytes(),
        ];
        let stored: u8 = self.eval("fill", &FILL, &keys, &args).await?;
        match stored {
            1 => stats.l2_fills.fetch_add(1, Ordering::Relaxed),
            _ => stats.l2_fills_raced.fetch_add(1, Ordering::Relaxed),
        };
        Ok(stored == 1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ClusterConfig;

    fn cluster(max_pending_fills: usize) -> Cluster {
        // Never connected: the writes below make no Redis call.
        let config =
            ClusterConfig { redis_url: Some("redis://127.0.0.1:1".into()), max_pending_fills, ..Default::default() };
        Cluster::new(&config, Some("a test's key"), 1).unwrap().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_the_pending_writes_and_the_bound_drops_the_rest() {
        let c = cluster(2);
        let (cancel, tracker) = (CancellationToken::new(), TaskTracker::new());
        c.drain_writes_on(&cancel, &tracker);
        let held = |c: &Cluster| {
            let (release, released) = tokio::sync::oneshot::channel::<()>();
            c.in_background(async move {
                let _ = released.await;
            });
            release
        };
        let first = held(&c);
        let (quick, mut done) = tokio::sync::oneshot::channel();
        c.in_background(async move {
            let _ = quick.send(());
        });
        (&mut done).await.unwrap();
        // The quick write gave its slot back; the second held one takes it, and a fourth
        // finds both taken.
        let second = held(&c);
        c.in_background(async {});
        assert_eq!(c.stats().fills_dropped.load(Ordering::Relaxed), 1, "past max_pending_fills");
        cancel.cancel();
        tracker.close();
        let early = tokio::time::timeout(Duration::from_secs(60), tracker.wait()).await;
        assert!(early.is_err(), "the shutdown's wait ended with writes pending");
        first.send(()).unwrap();
        second.send(()).unwrap();
        let drained = tokio::time::timeout(Duration::from_secs(60), tracker.wait()).await;
        assert!(drained.is_ok(), "the shutdown's wait ends once the writes are done");
    }
}
