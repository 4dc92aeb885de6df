//! Upstream-listen leases: per upstream, one replica holds `<tag>:lease` (value
//! `replica:token`, the token from `<tag>:fence`, which only grows) and runs the upstream
//! listen for the union of every live replica's interest.
//!
//! Which replica holds an upstream's lease is spread by rendezvous hashing over the live
//! replicas (those whose heartbeat in `<prefix>replicas` is younger than a lease): only the
//! preferred replica takes a free lease, a holder that is no longer preferred (a replica that
//! outranks it joined) releases it for the preferred one, and any replica takes a lease that
//! stayed free for two rounds (a preferred replica that beats but cannot take it). A preferred
//! replica that finds its lease held claims it on the upstream's bus channel: the holder runs
//! its round at once and hands it over, and the claimer tries again shortly, so a join moves a
//! listen in tens of milliseconds rather than a lease period.
//!
//! The key expires after two thirds of `lease_ttl` and its holder renews it every quarter, so
//! a holder that died is replaced within `lease_ttl` (its heartbeat ages out with its lease).
//! Redis unreachable: every replica goes solo (its own listen). Redis back: the leases go to
//! their preferred replicas again, the others become followers; the fence lets followers drop
//! late events of a deposed holder (`fence.rs`: also how a failover that lost writes is kept
//! from fencing off the new holder).

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Cluster;
use super::value::now_ms;

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

// KEYS: lease, fence. ARGV: replica, px. Returns {token, lease value}: the token 0 if another
// holds it.
const ACQUIRE_LUA: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if sep and string.sub(cur, 1, sep - 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(string.sub(cur, sep + 1)), cur}
  end
  return {0, cur}
end
-- The token grows past the last one, and past the server's clock in ms, the first one too:
-- a promoted Redis Cluster replica may have lost its dead master's last writes (replication
-- is asynchronous), or every one of them, the counter included, if its first sync was still
-- under way; a token below one already issued would fence off the new holder.
local t = redis.call('TIME')
local prev = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local token = math.max(prev + 1, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[2], string.format('%d', token))
local value = ARGV[1] .. ':' .. string.format('%d', token)
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {token, value}
"#;

/// Rounds a free lease waits for its preferred replica before any replica takes it.
const VACANT_ROUNDS: u8 = 2;

/// Rounds in a row a preferred replica claims a lease another holds (the holder, told on the
/// bus, hands it over at once); past them it waits for the holder's own round.
const CLAIM_ROUNDS: u8 = 4;

/// Pause before the next round after a claim, so that the handed-over lease is taken soon.
const CLAIM_RETRY: Duration = Duration::from_millis(25);

/// The keeper's memory of one upstream's lease between rounds.
#[derive(Default, Clone)]
pub(super) struct Track {
    /// Rounds the lease was seen free while another replica is preferred.
    vacant: u8,
    /// Claims in a row while another replica holds it.
    claims: u8,
    /// While holding it: the live replicas running the upstream, by the tag they were read for.
    runners: (String, Vec<String>),
}

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
            let name = &*self.member(index).name;
            match role {
                Role::Holder(token) => {
                    self.0.stats.lease_acquired.fetch_add(1, Ordering::Relaxed);
                    self.0.fence[index].held(token);
                    self.interest_taken(index);
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

    pub(super) fn replicas_key(&self) -> String {
        format!("{}replicas", self.0.config.prefix)
    }

    /// The live replicas (heartbeat younger than `px`), after beating for this one and
    /// forgetting replicas gone for long, in one round trip.
    async fn beat(&self, px: u64) -> Result<Vec<String>, super::ClusterError> {
        let (key, now) = (self.replicas_key(), now_ms());
        let forget = now.saturating_sub(20 * self.0.config.lease_ttl.as_millis() as u64);
        let mut p = redis::pipe();
        p.cmd("ZADD").arg(&key).arg(now).arg(&*self.0.replica).ignore();
        p.cmd("ZREMRANGEBYSCORE").arg(&key).arg("-inf").arg(format!("({forget}")).ignore();
        p.cmd("ZRANGEBYSCORE").arg(&key).arg(now.saturating_sub(px)).arg("+inf");
        let (mut live,): (Vec<String>,) = self.run_pipeline("heartbeat", &p).await?;
        live.sort_unstable();
        self.0.live.send_if_modified(|old| {
            let changed = **old != *live;
            if changed {
                *old = Arc::from(live.as_slice());
            }
            changed
        });
        Ok(live)
    }

    /// One round of the keeper: heartbeat, then each lease renewed, handed over, acquired or
    /// watched.
    ///
    /// A failed call does not by itself make this replica solo: one slow reply under load
    /// would otherwise open a second upstream listen. It goes solo only once Redis has been
    /// unreachable for as long as a lease lives (`down_since`), when no holder can still be
    /// renewing one; until then it keeps its role.
    ///
    /// Returns whether it claimed a lease (and so wants its next round soon).
    async fn keep(&self, px: u64, down_since: &mut Option<tokio::time::Instant>, tracks: &mut [Track]) -> bool {
        let expiry = Duration::from_millis(px);
        let live = match self.beat(px).await {
            Ok(live) => live,
            Err(_) => {
                let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= expiry {
                    for i in self.active_slots() {
                        self.set_role(i, Role::Solo);
                    }
                }
                return false;
            }
        };
        let mut claimed = false;
        *down_since = None;
        let px = px.to_string();
        let me = &*self.0.replica;
        for (i, track) in tracks.iter_mut().enumerate() {
            let member = self.member(i);
            if !member.active {
                *track = Track::default();
                continue;
            }
            let tag = &member.tag;
            let lease = format!("{tag}:lease");
            let choice = super::spread::preferred(&member.name, &live);
            let preferred = choice.is_none_or(|p| p == me);
            // The preferred replica may not run this generation (a rolling reload): kept then.
            let (known, runners) = (&track.runners.0 == tag, &track.runners.1);
            let runs = |r: &str| !known || runners.is_empty() || runners.iter().any(|k| k == r);
            let role = *self.0.roles[i].borrow();
            // The runners are read in full only every `interest_resync`: one that is not among
            // them yet (it started since) is asked for, before the lease is kept from it.
            let hand_over = match choice {
                Some(c) if !preferred && matches!(role, Role::Holder(_)) => runs(c) || self.runs(tag, c).await,
                _ => false,
            };
            let next = match role {
                Role::Holder(token) if hand_over => {
                    let value = format!("{me}:{token}");
                    match self.eval::<u8>("release lease", &RELEASE, &[&lease], &[value.as_bytes()]).await {
                        Ok(_) => {
                            tracing::info!(
                                upstream = &*member.name,
                                "handing the upstream listen to the replica preferred for it"
                            );
                            Role::Follower
                        }
                        Err(_) => role,
                    }
                }
                Role::Holder(token) => {
                    let value = format!("{me}:{token}");
                    match self.eval::<u8>("renew lease", &RENEW, &[&lease], &[value.as_bytes(), px.as_bytes()]).await {
                        Ok(1) => role,
                        Ok(_) => Role::Follower,
                        // Tried again next round; the lease outlives one missed renewal.
                        Err(_) => role,
                    }
                }
                Role::Follower | Role::Solo if preferred || track.vacant >= VACANT_ROUNDS => {
                    let fence = format!("{tag}:fence");
                    let args: [&[u8]; 2] = [me.as_bytes(), px.as_bytes()];
                    let floor = self.0.fence[i].floor();
                    match self.eval::<(u64, String)>("acquire lease", &ACQUIRE, &[&lease, &fence], &args).await {
                        Ok((0, holder)) => {
                            self.lease_read(i, Some(&holder), floor);
                            if preferred && track.claims < CLAIM_ROUNDS {
                                track.claims += 1;
                                claimed |= self.claim(i).await;
                            }
                            Role::Follower
                        }
                        Ok((token, _)) => Role::Holder(token),
                        Err(_) => role,
                    }
                }
                Role::Follower | Role::Solo => {
                    let floor = self.0.fence[i].floor();
                    match self.query::<Option<String>>("GET lease", redis::cmd("GET").arg(&lease)).await {
                        Ok(holder) => {
                            track.vacant = if holder.is_some() { 0 } else { track.vacant.saturating_add(1) };
                            // Free while the preferred replica does not run it: taken at once.
                            if holder.is_none()
                                && let Some(choice) = choice
                                && !self.runs(&member.tag, choice).await
                            {
                                track.vacant = VACANT_ROUNDS;
                                claimed = true;
                            }
                            self.lease_read(i, holder.as_deref(), floor);
                            // A solo replica keeps its own listen until a holder is there.
                            if holder.is_some() { Role::Follower } else { role }
                        }
                        Err(_) => role,
                    }
                }
            };
            if !preferred {
                track.claims = 0;
            }
            if let Role::Holder(_) = next {
                (track.vacant, track.claims) = (0, 0);
                self.note_holder(i, Some(me));
            }
            self.set_role(i, next);
            if let Role::Holder(_) = next {
                match self.refresh_interest(i).await {
                    Ok(runners) => track.runners = (member.tag.clone(), runners),
                    Err(e) => tracing::debug!(error = %e, "cannot read the other replicas' interest"),
                }
            }
        }
        claimed
    }

    /// Tells the holder of upstream `index`'s lease that this replica is now preferred for
    /// it, so that it hands the lease over in its next round, run at once, instead of at its
    /// next period. Whether the claim was sent.
    async fn claim(&self, index: usize) -> bool {
        let member = self.member(index);
        let msg =
            serde_json::json!({ "r": &*self.0.replica, "u": &*member.name, "g": &member.generation, "k": "claim" });
        let cmd = redis::cmd(self.publish_command()).arg(self.channel(index)).arg(msg.to_string()).to_owned();
        self.query::<u64>("claim lease", &cmd).await.is_ok()
    }

    /// A replica claimed upstream `index`'s lease: if this one holds it, its keeper runs a
    /// round now (and hands it over if the claimer is preferred by its own view too).
    pub(super) fn claimed(&self, index: usize) {
        if self.held_fence(index).is_some() {
            self.0.keeper_now.notify_one();
        }
    }

    /// Releases the lease under `tag` if this replica still holds it with `token`.
    pub(super) async fn release(&self, tag: &str, token: u64) {
        let lease = format!("{tag}:lease");
        let value = format!("{}:{token}", self.0.replica);
        let _ = self.eval::<u8>("release lease", &RELEASE, &[&lease], &[value.as_bytes()]).await;
    }
}

/// Keeps the leases until `cancel`; on the way out, releases the ones held so that another
/// replica takes over at once instead of after the expiry.
pub(super) async fn keeper(cluster: Cluster, cancel: CancellationToken) {
    let ttl = cluster.0.config.lease_ttl;
    let px = (ttl.as_millis() as u64 * 2 / 3).max(1);
    let period = (ttl / 4).max(Duration::from_millis(50));
    let mut down_since = None;
    let mut tracks = vec![Track::default(); cluster.0.roles.len()];
    loop {
        let claimed = cluster.keep(px, &mut down_since, &mut tracks).await;
        let wait = if claimed { CLAIM_RETRY } else { period };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
            _ = cluster.0.keeper_now.notified() => {}
        }
    }
    for i in cluster.active_slots() {
        if let Some(token) = cluster.held_fence(i) {
            cluster.release(&cluster.tag(i), token).await;
        }
    }
}
