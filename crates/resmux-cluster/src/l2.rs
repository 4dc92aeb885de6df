//! The shared cache tier: one probe (one round trip: the caller's value if one is current,
//! else the fill lock, taken or found taken), the fetch under the lock, and a fill written
//! after the answer (`fill.rs`) that stores only when no epoch moved since the probe.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use super::fill::FillLock;
use super::value::{SharedValue, now_ms};
use super::{Cluster, ClusterError};
use resmux_cache::{BaseKey, CachedMethod, Owner};

/// The Redis names of one cache key.
#[derive(Debug, Clone)]
pub struct SharedKey {
    pub(super) public: String,
    pub(super) private: String,
    /// The epoch of the URI (reads) or of the list kind.
    pub(super) scope_epoch: String,
    pub(super) stream_epoch: String,
    pub(super) lock: String,
    /// Marks that another replica waits for the fill (see `fillwait.rs`).
    pub(super) wait: String,
    /// The upstream's bus channel, on which the fill's notice goes.
    pub(super) channel: String,
}

impl SharedKey {
    pub(super) fn lock_name(&self) -> &str {
        &self.lock
    }
}

/// What a probe found.
#[derive(Debug)]
pub enum Probe {
    /// A value still fresh by its TTL and current by the epochs.
    Fresh(SharedValue),
    /// Nothing current: the caller now holds the fill lock, and fetches.
    Lead(FillLock),
    /// Nothing current, and another replica holds the fill lock: the key is marked as waited
    /// for, so that the fill's notice wakes this replica (see `fillwait.rs`).
    Wait,
    /// A value the script took as current that this replica cannot use: malformed, or older
    /// than a change learnt while the probe ran. The caller fetches alone (no lock, no fill).
    Unusable,
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

// KEYS: public value, private value, scope epoch, stream epoch, lock, wait mark. ARGV: now (ms
// since the Unix epoch), the latest change the caller knows of (ms), lock token, lock px.
// A value is current when its epochs are Redis's now, its fetch began after the known change
// and its TTL has not run out (the checks `Cluster::probe` makes again on the decoded value;
// the header layout is `value.rs`'s; numbers stay below 2^53, exact in Lua). Without one, the
// lock is taken (1) or, held by another replica, the key is marked as waited for (2), in the
// same script, so a miss costs one round trip and a fill cannot slip between check and lock.
const PROBE_LUA: &str = r#"
local scope = redis.call('GET', KEYS[3]) or '0'
local stream = redis.call('GET', KEYS[4]) or '0'
local s, t = tonumber(scope), tonumber(stream)
local now, changed = tonumber(ARGV[1]), tonumber(ARGV[2])
local function u64(v, at)
  local n = 0
  for i = at, at + 7 do n = n * 256 + string.byte(v, i) end
  return n
end
for i = 1, 2 do
  local v = redis.call('GET', KEYS[i])
  if v and #v >= 38 and string.sub(v, 1, 4) == 'RMX1' then
    local fetched, ttl = u64(v, 7), u64(v, 15)
    if u64(v, 23) == s and u64(v, 31) == t and fetched > changed and ttl > 0 and fetched + ttl > now then
      return {v, scope, stream, 0}
    end
  end
end
if redis.call('SET', KEYS[5], ARGV[3], 'NX', 'PX', ARGV[4]) then
  return {false, scope, stream, 1}
end
redis.call('SET', KEYS[6], '1', 'PX', ARGV[4])
return {false, scope, stream, 2}
"#;

static PROBE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PROBE_LUA));

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

    /// Looks `key` up in Redis (the public value, then the caller's) and, on a miss, takes its
    /// fill lock or marks it as waited for: one round trip.
    pub async fn probe(&self, key: &SharedKey) -> Result<Probe, ClusterError> {
        let keys = [&*key.public, &*key.private, &*key.scope_epoch, &*key.stream_epoch, &*key.lock, &*key.wait];
        let now = now_ms();
        let token = format!("{}:{:x}", self.replica(), rand::random::<u64>());
        let (at, changed, px) = (now.to_string(), self.known_change(key).to_string(), self.lock_px().to_string());
        let args: [&[u8]; 4] = [at.as_bytes(), changed.as_bytes(), token.as_bytes(), px.as_bytes()];
        type Raw = (Option<Vec<u8>>, u64, u64, u8);
        let (value, scope, stream, state): Raw = self.eval("probe", &PROBE, &keys, &args).await?;
        let epochs = (scope, stream);
        let stats = &self.0.stats;
        let probe = match (state, value) {
            (0, Some(raw)) => {
                // Checked again here: the script cannot decode the body, and a change may
                // have been learnt while it ran.
                let changed = self.known_change(key);
                match SharedValue::decode(&raw) {
                    Some(v) if v.epochs == epochs && v.fetched_at_ms > changed && !v.remaining(now).is_zero() => {
                        Probe::Fresh(v)
                    }
                    _ => Probe::Unusable,
                }
            }
            (1, _) => Probe::Lead(FillLock::new(self, key.clone(), token, epochs, now)),
            _ => Probe::Wait,
        };
        match probe {
            Probe::Fresh(_) => stats.l2_hits.fetch_add(1, Ordering::Relaxed),
            _ => stats.l2_misses.fetch_add(1, Ordering::Relaxed),
        };
        Ok(probe)
    }

    /// When this replica last learnt of a change to what `key` depends on (ms since the Unix
    /// epoch, 0 for never), whether or not Redis has its epoch yet.
    pub(super) fn known_change(&self, key: &SharedKey) -> u64 {
        let known = |name: &String| self.0.changed_at.get(name).unwrap_or(0);
        known(&key.scope_epoch).max(known(&key.stream_epoch))
    }

    /// The fill lock's expiry, in ms.
    pub(super) fn lock_px(&self) -> u64 {
        self.0.config.lock_ttl.as_millis().max(1) as u64
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
