//! Upstream-listen leases: per upstream, one replica holds `<tag>:lease` (value
//! `replica:token`, the token from `<tag>:fence`, which only grows) and runs the upstream
//! listen for the union of every live replica's interest.
//!
//! The key expires after two thirds of `lease_ttl` and its holder renews it every quarter, so
//! a holder that died is replaced within `lease_ttl`. Redis unreachable: every replica goes
//! solo (its own listen). Redis back: the solo replicas race for the lease in one script each,
//! one wins, and the others become followers again; the fence lets followers drop late events
//! of a deposed holder.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Cluster;
use super::value::now_ms;
use resmux_proto::mcp::list::Capability;
use resmux_proto::mcp::notify::Filter;

/// This replica's part in one upstream's listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It holds the lease (with this fencing token) and runs the upstream listen.
    Holder(u64),
    /// Another replica holds it; changes arrive over the bus.
    Follower,
    /// Redis is unreachable: it runs its own upstream listen, as a single replica would.
    Solo,
}

impl Role {
    /// Whether this replica runs the upstream listen.
    pub fn listens(self) -> bool {
        !matches!(self, Role::Follower)
    }
}

// KEYS: lease, fence. ARGV: replica, px. Returns the new token, or 0 if another holds it.
const ACQUIRE_LUA: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if sep and string.sub(cur, 1, sep - 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(string.sub(cur, sep + 1))
  end
  return 0
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return token
"#;

// KEYS: lease. ARGV: value. Deletes it if it is still ours.
const RELEASE_LUA: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

// KEYS: lease. ARGV: value, px. 1 if renewed, 0 if it is no longer ours.
const RENEW_LUA: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

static ACQUIRE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ACQUIRE_LUA));
static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_LUA));
static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_LUA));

impl Cluster {
    /// The fencing token this replica holds upstream `index`'s lease with.
    pub(super) fn held_fence(&self, index: usize) -> Option<u64> {
        match *self.0.roles[index].borrow() {
            Role::Holder(token) => Some(token),
            _ => None,
        }
    }

    fn set_role(&self, index: usize, role: Role) {
        let old = self.0.roles[index].send_replace(role);
        if old != role {
            let name = &*self.0.upstreams[index];
            match role {
                Role::Holder(token) => {
                    self.0.stats.lease_acquired.fetch_add(1, Ordering::Relaxed);
                    self.0.fence[index].fetch_max(token, Ordering::AcqRel);
                    tracing::info!(upstream = name, token, "holding the upstream listen lease");
                }
                Role::Follower if matches!(old, Role::Holder(_)) => {
                    self.0.stats.lease_lost.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(upstream = name, "lost the upstream listen lease");
                }
                _ => tracing::info!(upstream = name, ?role, "upstream listen role"),
            }
        }
    }

    fn replicas_key(&self) -> String {
        format!("{}replicas", self.0.config.prefix)
    }

    /// Publishes this replica's interest in upstream `index` (what its listeners and its
    /// cache want), for the lease holder, who is told when `changed`.
    pub async fn publish_interest(
        &self,
        index: usize,
        filter: &Filter,
        changed: bool,
    ) -> Result<(), super::ClusterError> {
        let key = format!("{}:interest", self.tag(index));
        let cmd = redis::cmd("HSET").arg(&key).arg(&*self.0.replica).arg(filter.to_json().to_string()).to_owned();
        let _: u64 = self.query("HSET interest", &cmd).await?;
        if changed {
            self.announce(index, super::Event::Interest);
        }
        Ok(())
    }

    /// Re-reads the union of the other live replicas' interest in upstream `index` (holders
    /// only), dropping the interest of replicas that stopped beating.
    pub async fn refresh_interest(&self, index: usize) -> Result<(), super::ClusterError> {
        if self.held_fence(index).is_none() {
            return Ok(());
        }
        let key = format!("{}:interest", self.tag(index));
        let all: HashMap<String, String> = self.query("HGETALL interest", redis::cmd("HGETALL").arg(&key)).await?;
        let since = now_ms().saturating_sub(3 * self.0.config.lease_ttl.as_millis() as u64);
        let alive: Vec<String> = self
            .query("ZRANGEBYSCORE", redis::cmd("ZRANGEBYSCORE").arg(self.replicas_key()).arg(since).arg("+inf"))
            .await?;
        let mut union = Filter::default();
        for (replica, text) in &all {
            if !alive.contains(replica) {
                let _: Result<u64, _> = self.query("HDEL interest", redis::cmd("HDEL").arg(&key).arg(replica)).await;
                continue;
            }
            if **replica == *self.0.replica {
                continue;
            }
            let Ok(f) = serde_json::from_str(text).map_err(|_| ()).and_then(|v| Filter::from_json(&v).map_err(|_| ()))
            else {
                continue;
            };
            for kind in Capability::ALL {
                if f.list(kind) {
                    union.set_list(kind, true);
                }
            }
            union.uris.extend(f.uris);
        }
        self.0.remote[index].send_if_modified(|old| {
            let changed = *old != union;
            *old = union;
            changed
        });
        Ok(())
    }

    /// One round of the keeper: heartbeat, then each lease acquired or renewed.
    ///
    /// A failed call does not by itself make this replica solo: one slow reply under load
    /// would otherwise open a second upstream listen. It goes solo only once Redis has been
    /// unreachable for as long as a lease lives (`down_since`), when no holder can still be
    /// renewing one; until then it keeps its role.
    async fn keep(&self, px: u64, down_since: &mut Option<tokio::time::Instant>) {
        let expiry = Duration::from_millis(px);
        let px = px.to_string();
        let beat = redis::cmd("ZADD").arg(self.replicas_key()).arg(now_ms()).arg(&*self.0.replica).to_owned();
        if self.query::<u64>("ZADD replicas", &beat).await.is_err() {
            let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= expiry {
                for i in 0..self.0.roles.len() {
                    self.set_role(i, Role::Solo);
                }
            }
            return;
        }
        *down_since = None;
        for i in 0..self.0.roles.len() {
            let tag = self.tag(i);
            let lease = format!("{tag}:lease");
            let role = *self.0.roles[i].borrow();
            let next = match role {
                Role::Holder(token) => {
                    let value = format!("{}:{token}", self.0.replica);
                    let renew = &RENEW;
                    match self.eval::<u8>("renew lease", renew, &[&lease], &[value.as_bytes(), px.as_bytes()]).await {
                        Ok(1) => role,
                        Ok(_) => Role::Follower,
                        // Tried again next round; the lease outlives one missed renewal.
                        Err(_) => role,
                    }
                }
                Role::Follower | Role::Solo => {
                    let fence = format!("{tag}:fence");
                    let acquire = &ACQUIRE;
                    let args: [&[u8]; 2] = [self.0.replica.as_bytes(), px.as_bytes()];
                    match self.eval::<u64>("acquire lease", acquire, &[&lease, &fence], &args).await {
                        Ok(0) => Role::Follower,
                        Ok(token) => Role::Holder(token),
                        Err(_) => role,
                    }
                }
            };
            self.set_role(i, next);
            if let Role::Holder(_) = next
                && let Err(e) = self.refresh_interest(i).await
            {
                tracing::debug!(error = %e, "cannot read the other replicas' interest");
            }
        }
    }
}

/// Keeps the leases until `cancel`; on the way out, releases the ones held so that another
/// replica takes over at once instead of after the expiry.
pub(super) async fn keeper(cluster: Cluster, cancel: CancellationToken) {
    let ttl = cluster.0.config.lease_ttl;
    let px = (ttl.as_millis() as u64 * 2 / 3).max(1);
    let period = (ttl / 4).max(Duration::from_millis(50));
    let mut down_since = None;
    loop {
        cluster.keep(px, &mut down_since).await;
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(period) => {}
        }
    }
    for i in 0..cluster.0.roles.len() {
        if let Some(token) = cluster.held_fence(i) {
            let lease = format!("{}:lease", cluster.tag(i));
            let value = format!("{}:{token}", cluster.0.replica);
            let _ = cluster.eval::<u8>("release lease", &RELEASE, &[&lease], &[value.as_bytes()]).await;
        }
    }
}
