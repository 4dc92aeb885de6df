//! An operator purge across replicas: the epoch the purged values depend on is bumped in Redis
//! first (so no replica takes a value fetched before the purge, and a fill in flight anywhere
//! fails its epoch check), the purge is announced on the bus in the same pipeline (every
//! replica purges its own cache), then the values themselves are deleted from Redis.
//!
//! Value names in Redis are keyed digests, so a URI prefix cannot be matched by name: a prefix
//! purge (like an upstream purge) bumps the upstream's stream epoch and deletes all of that
//! upstream's shared values. Replicas' own caches keep what lies outside the prefix.

#[cfg(test)]
use serde_json::json;
use std::collections::HashSet;
use std::sync::LazyLock;
use tokio::time::Instant;

use super::bus::{Event, Outgoing, URI_EPOCH_TTL};
#[cfg(test)]
use super::bus::{purge_fields, purge_target};
use super::l2::scope_suffix;
use super::{Cluster, ClusterError};
use resmux_cache::{CachedMethod, Target, canonical_params_with};
use resmux_proto::jsonrpc::RawObject;

/// Keys asked for per SCAN call (a hint to Redis, which may return more or fewer).
const SCAN_BATCH: u64 = 500;

// KEYS: a key of the upstream's hash tag, so that a Redis Cluster runs the scan on the node
// that holds the upstream's keys (a bare SCAN would go to any node). ARGV: cursor, pattern,
// count.
const SCAN_LUA: &str = "return redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])";

static SCAN: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SCAN_LUA));

/// `text` with Redis glob characters escaped, for a SCAN MATCH pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Cluster {
    /// Purges `target` of upstream `index` from the shared tier and announces it to the other
    /// replicas (this replica purges its own cache itself). Returns how many shared values were
    /// deleted. Within `[cluster] purge_timeout`; an error leaves the epoch guard in place if
    /// it was set, so what was not deleted is never taken as fresh.
    pub async fn purge(&self, index: usize, target: &Target) -> Result<u64, ClusterError> {
        let tag = self.tag(index);
        let mut p = redis::pipe();
        // For a URI: the names of its plain reads (`{"uri":…}`) in every protocol era. Reads
        // with other params are left to expire, never taken again: their epoch moved.
        let bases = match target {
            Target::Uri(uri) => {
                let key = format!("{tag}:{}", scope_suffix(self, CachedMethod::ResourcesRead, Some(uri)));
                p.cmd("INCR").arg(&key).ignore();
                p.cmd("PEXPIRE").arg(&key).arg(URI_EPOCH_TTL.as_millis() as u64).ignore();
                let empty = RawObject::parse_str("{}").expect("an empty object parses");
                let params = canonical_params_with(&empty, "uri", Some(uri));
                Some(
                    (0..=u8::MAX)
                        .map(|era| self.value_base(CachedMethod::ResourcesRead, era, &params))
                        .collect::<HashSet<_>>(),
                )
            }
            Target::UriPrefix(_) | Target::Everything => {
                p.cmd("INCR").arg(format!("{tag}:e:s")).ignore();
                None
            }
        };
        let announce = Outgoing { upstream: index, fence: 0, event: Event::Purge(target.clone()) };
        p.cmd(self.publish_command()).arg(self.channel(index)).arg(self.encode(&announce)).ignore();
        self.run_pipeline::<()>("purge", &p).await?;
        self.delete_values(&tag, bases.as_ref()).await
    }

    /// Deletes the upstream's shared values (of `bases` only, when given), both partitions.
    async fn delete_values(&self, tag: &str, bases: Option<&HashSet<String>>) -> Result<u64, ClusterError> {
        let values = format!("{tag}:v:");
        let pattern = format!("{}*", glob_escape(&values));
        let deadline = Instant::now() + self.0.config.purge_timeout;
        let mut cursor = 0u64;
        let mut deleted = 0;
        loop {
            if Instant::now() >= deadline {
                return Err(ClusterError::Timeout { op: "purge SCAN" });
            }
            let (at, batch) = (cursor.to_string(), SCAN_BATCH.to_string());
            let args: [&[u8]; 3] = [at.as_bytes(), pattern.as_bytes(), batch.as_bytes()];
            let (next, keys): (u64, Vec<String>) = self.eval("SCAN", &SCAN, &[&values], &args).await?;
            let doomed: Vec<&String> = (keys.iter())
                .filter(|k| {
                    let base = k.strip_prefix(&values).and_then(|rest| rest.split(':').next());
                    bases.is_none_or(|bases| base.is_some_and(|b| bases.contains(b)))
                })
                .collect();
            if !doomed.is_empty() {
                deleted += self.query::<u64>("UNLINK", redis::cmd("UNLINK").arg(&doomed)).await?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purges_round_trip_on_the_bus_and_globs_are_escaped() {
        for t in [Target::Uri("file:///a*.md".into()), Target::UriPrefix("".into()), Target::Everything] {
            assert_eq!(purge_target(&purge_fields(&t)), Some(t));
        }
        assert_eq!(purge_target(&json!({"k": "purge", "t": "uri"})), None);
        assert_eq!(purge_target(&json!({"k": "purge", "t": "all"})), None);
        assert_eq!(glob_escape("resmux:{do*cs}:v:"), r"resmux:{do\*cs}:v:");
        assert_eq!(glob_escape(r"a?[b]\"), r"a\?\[b\]\\");
    }
}
