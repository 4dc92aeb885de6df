//! The shared cache tier: one probe (one round trip: both partitions' values, the epochs and
//! the fill lock), a fill lock taken with set-if-absent and an expiry, and a fill that stores
//! only when no epoch moved since the fetch began (one script, atomic).

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use super::value::{SharedValue, now_ms};
use super::{Cluster, ClusterError};
use resmux_cache::{BaseKey, CachedMethod, Owner};

/// The Redis names of one cache key.
#[derive(Debug, Clone)]
pub struct SharedKey {
    public: String,
    private: String,
    /// The epoch of the URI (reads) or of the list kind.
    scope_epoch: String,
    stream_epoch: String,
    lock: String,
    /// Marks that another replica waits for the fill (see `fillwait.rs`).
    wait: String,
    /// The upstream's bus channel, on which the fill's notice goes.
    channel: String,
}

impl SharedKey {
    pub(super) fn lock_name(&self) -> &str {
        &self.lock
    }

    pub(super) fn wait_name(&self) -> &str {
        &self.wait
    }
}

/// What a probe found.
#[derive(Debug)]
pub struct Probe {
    /// A value still fresh by its TTL and current by the epochs.
    pub fresh: Option<SharedValue>,
    /// The epochs now, which a fill started now depends on.
    pub epochs: (u64, u64),
    /// Whether another replica holds the fill lock.
    pub locked: bool,
}

/// Which epoch a read or a list depends on, by name.
pub(super) fn scope_suffix(cluster: &Cluster, method: CachedMethod, uri: Option<&str>) -> String {
    match method {
        CachedMethod::ResourcesRead => format!("e:u:{}", cluster.digest(&[uri.unwrap_or("").as_bytes()])),
        m => format!("e:l:{}", list_epoch_index(m)),
    }
}

/// The list epochs, by cached method.
pub(super) fn list_epoch_index(method: CachedMethod) -> u8 {
    match method {
        CachedMethod::ResourcesList => 0,
        CachedMethod::TemplatesList => 1,
        CachedMethod::ToolsList => 2,
        CachedMethod::PromptsList => 3,
        CachedMethod::ResourcesRead => 4,
    }
}

fn owner_bytes(owner: &Owner) -> Vec<u8> {
    match owner {
        Owner::Principal(p) => [b"p:".as_slice(), p.id().as_bytes()].concat(),
        Owner::Anonymous(d) => [b"a:".as_slice(), d.as_slice()].concat(),
    }
}

// KEYS: public value, private value, scope epoch, stream epoch, lock.
const PROBE_LUA: &str = r#"
local v = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return {v[1] or false, v[2] or false, v[3] or '0', v[4] or '0', redis.call('EXISTS', KEYS[5])}
"#;

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

static PROBE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PROBE_LUA));
static FILL: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FILL_LUA));
static EXTEND: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(EXTEND_LUA));
static UNLOCK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(UNLOCK_LUA));

impl Cluster {
    /// The Redis names for `key` (both partitions are probed), for a caller `owner`, reading
    /// `uri` when it is a read.
    pub fn shared_key(&self, key: &BaseKey, uri: Option<&str>, owner: &Owner) -> SharedKey {
        let tag = self.tag(key.upstream as usize);
        let base = self.value_base(key.method, key.era, &key.params);
        let who = self.digest(&[&owner_bytes(owner)]);
        SharedKey {
            public: format!("{tag}:v:{base}:pub"),
            private: format!("{tag}:v:{base}:{who}"),
            scope_epoch: format!("{tag}:{}", scope_suffix(self, key.method, uri)),
            stream_epoch: format!("{tag}:e:s"),
            lock: format!("{tag}:lock:{base}"),
            wait: format!("{tag}:wait:{base}"),
            channel: self.channel(key.upstream as usize),
        }
    }

    /// The part of a value's Redis name that stands for what was asked (method, protocol era,
    /// canonical params); the partition follows it.
    pub(super) fn value_base(&self, method: CachedMethod, era: u8, params: &str) -> String {
        self.digest(&[&[list_epoch_index(method)], &[era], params.as_bytes()])
    }

    /// Looks `key` up in Redis: the public value, then the caller's.
    pub async fn probe(&self, key: &SharedKey) -> Result<Probe, ClusterError> {
        type Raw = (Option<Vec<u8>>, Option<Vec<u8>>, u64, u64, u8);
        let keys = [&*key.public, &*key.private, &*key.scope_epoch, &*key.stream_epoch, &*key.lock];
        let (public, private, scope, stream, locked): Raw = self.eval("probe", &PROBE, &keys, &[]).await?;
        let now = now_ms();
        // A change this replica knows of, whether or not Redis has its epoch yet.
        let known = |name: &String| self.0.changed_at.get(name).unwrap_or(0);
        let changed = known(&key.scope_epoch).max(known(&key.stream_epoch));
        let fresh = [public, private].into_iter().flatten().find_map(|raw| {
            let v = SharedValue::decode(&raw)?;
            let current = v.epochs == (scope, stream) && v.fetched_at_ms > changed;
            (current && !v.remaining(now).is_zero()).then_some(v)
        });
        let stats = &self.0.stats;
        match fresh {
            Some(_) => stats.l2_hits.fetch_add(1, Ordering::Relaxed),
            None => stats.l2_misses.fetch_add(1, Ordering::Relaxed),
        };
        Ok(Probe { fresh, epochs: (scope, stream), locked: locked == 1 })
    }

    /// Takes the fill lock of `key`; returns its token when taken.
    pub async fn lock(&self, key: &SharedKey) -> Result<Option<String>, ClusterError> {
        let token = format!("{}:{:x}", self.replica(), rand::random::<u64>());
        let px = self.0.config.lock_ttl.as_millis().max(1) as u64;
        let cmd = redis::cmd("SET").arg(&key.lock).arg(&token).arg("NX").arg("PX").arg(px).to_owned();
        let set: Option<String> = self.query("SET NX", &cmd).await?;
        Ok(set.map(|_| token))
    }

    /// Extends the fill lock while the fetch runs (a dead holder's lock expires instead).
    pub async fn extend(&self, key: &SharedKey, token: &str) -> Result<bool, ClusterError> {
        let px = self.0.config.lock_ttl.as_millis().max(1).to_string();
        let n: u8 = self.eval("extend lock", &EXTEND, &[&key.lock], &[token.as_bytes(), px.as_bytes()]).await?;
        Ok(n == 1)
    }

    /// Releases the fill lock without filling (the fetch failed or was not cacheable).
    pub async fn unlock(&self, key: &SharedKey, token: &str) -> Result<(), ClusterError> {
        let notice = self.filled_notice(key);
        let args: [&[u8]; 4] =
            [token.as_bytes(), self.publish_command().as_bytes(), key.channel.as_bytes(), notice.as_bytes()];
        let _: u8 = self.eval("unlock", &UNLOCK, &[&key.lock, &key.wait], &args).await?;
        Ok(())
    }

    /// Writes `value` through (in the public partition or the caller's) for its remaining TTL,
    /// unless an epoch moved since `value.epochs` were read, and releases the lock `token`.
    /// Returns whether it was stored; `false` means another replica saw a change meanwhile,
    /// and the value must not be taken as fresh anywhere.
    pub async fn fill(&self, key: &SharedKey, value: &SharedValue, token: &str) -> Result<bool, ClusterError> {
        let px = value.remaining(now_ms()).as_millis() as u64;
        if px == 0 || value.stored.len() as u64 > self.0.config.max_entry_bytes {
            self.unlock(key, token).await?;
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
        let stats = &self.0.stats;
        match stored {
            1 => stats.l2_fills.fetch_add(1, Ordering::Relaxed),
            _ => stats.l2_fills_raced.fetch_add(1, Ordering::Relaxed),
        };
        Ok(stored == 1)
    }

    /// Records that upstream `index` announced `change` (or, for `None`, lost its stream)
    /// now, wherever this replica learnt it.
    pub fn note_change(&self, index: usize, change: Option<&resmux_proto::mcp::notify::Change>) {
        use resmux_proto::mcp::notify::Change;
        let tag = self.tag(index);
        let now = now_ms();
        let note = |suffix: String| self.0.changed_at.insert(format!("{tag}:{suffix}"), now);
        match change {
            None => note("e:s".into()),
            Some(Change::Updated(uri)) => note(scope_suffix(self, CachedMethod::ResourcesRead, Some(uri))),
            Some(Change::ListChanged(kind)) => {
                for m in CachedMethod::invalidated_by(*kind) {
                    note(scope_suffix(self, m, None));
                }
            }
        }
    }

    /// Counts a miss that waits for another replica's fill.
    pub fn note_lock_wait(&self) {
        self.0.stats.lock_waits.fetch_add(1, Ordering::Relaxed);
    }
}
