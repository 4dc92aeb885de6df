//! `[cluster]`: replicas sharing one cache, one set of upstream listens and the legacy sessions
//! through Redis (DESIGN §9, `docs/scaling.md`). Absent: a single replica, exactly as before.

use std::time::Duration;

use serde::Deserialize;

use resmux_proto::secret::SecretSource;

/// How replicas share state.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `redis://host:port[/db]` (or `rediss://` for TLS). Absent: no cluster.
    pub redis_url: Option<String>,
    /// The Redis URL from a secret instead (it may carry a password).
    pub redis_url_secret: Option<SecretSource>,
    /// Seed nodes of a Redis Cluster (`redis://host:port`, or `rediss://` for TLS), instead
    /// of `redis_url`: the client learns the rest of the cluster from them, follows `MOVED`
    /// and `ASK`, and uses sharded pub/sub. Every node must use the same scheme.
    pub redis_nodes: Vec<String>,
    /// Key of the keyed hashes that name private partitions in Redis (never a raw identity).
    /// Every replica must share it; when absent, `proxy.cursor_secret` is used.
    pub key_secret: Option<SecretSource>,
    /// Prefix of every Redis key and channel, so that several deployments can share a Redis.
    /// Default `resmux:`.
    pub prefix: String,
    /// Longest wait for any one Redis call; past it the call counts as failed and the request
    /// goes on without Redis. Default 100 ms.
    #[serde(with = "humantime_serde")]
    pub op_timeout: Duration,
    /// Entries larger than this stay in the local cache only. Default 1 MiB.
    pub max_entry_bytes: u64,
    /// Expiry of a cross-replica fill lock; the holder extends it while its fetch runs, so a
    /// holder that died frees the key within this time. Default 2 s.
    #[serde(with = "humantime_serde")]
    pub lock_ttl: Duration,
    /// Longest a replica waits for another replica's fill before fetching for itself.
    /// Default 5 s.
    #[serde(with = "humantime_serde")]
    pub lock_wait: Duration,
    /// Most fills (and fill-lock releases) being written to Redis at once. A miss is answered
    /// before its fill is written; past this bound a fill is dropped (and counted) and its
    /// lock expires within `lock_ttl`. Default 1,024.
    pub max_pending_fills: usize,
    /// Lifetime of an upstream-listen lease; the holder renews it every third of it, and
    /// another replica takes over within it when the holder dies. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// Whether `/readyz` stays ready while Redis is unreachable (the replica serves from its
    /// own cache and upstream listens meanwhile). Default true.
    pub ready_when_degraded: bool,
    /// Most events waiting to be published to the other replicas; past it events are dropped
    /// (and counted). Default 10,000.
    pub max_outbox: usize,
    /// Longest an operator purge works in Redis (deleting the purged values takes one pass
    /// over the keys); past it the purge answers with an error, and the values it did not
    /// delete stay unusable (their epoch moved) until they expire. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub purge_timeout: Duration,
    /// How often each replica rewrites its whole interest in Redis and the listen holder reads
    /// everyone's again, repairing a change whose notice was lost; between them only the URIs
    /// added and removed travel. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub interest_resync: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            redis_url: None,
            redis_url_secret: None,
            redis_nodes: Vec::new(),
            key_secret: None,
            prefix: "resmux:".into(),
            op_timeout: Duration::from_millis(100),
            max_entry_bytes: 1 << 20,
            lock_ttl: Duration::from_secs(2),
            lock_wait: Duration::from_secs(5),
            max_pending_fills: 1024,
            lease_ttl: Duration::from_secs(5),
            ready_when_degraded: true,
            max_outbox: 10_000,
            purge_timeout: Duration::from_secs(10),
            interest_resync: Duration::from_secs(30),
        }
    }
}

impl ClusterConfig {
    /// Whether a cluster is configured.
    pub fn enabled(&self) -> bool {
        self.redis_url.is_some() || self.redis_url_secret.is_some() || !self.redis_nodes.is_empty()
    }

    /// The rule violations of this section, as `(key path, message)`.
    pub fn problems(&self, has_cursor_secret: bool) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut err = |key: &str, msg: &str| out.push((format!("cluster.{key}"), msg.to_owned()));
        if !self.enabled() {
            return out;
        }
        if self.redis_url.is_some() && self.redis_url_secret.is_some() {
            err("redis_url", "set `redis_url` or `redis_url_secret`, not both");
        }
        let standalone = self.redis_url.is_some() || self.redis_url_secret.is_some();
        if standalone && !self.redis_nodes.is_empty() {
            err(
                "redis_nodes",
                "set exactly one of `redis_url` (one Redis) and `redis_nodes` (the seed nodes of a Redis Cluster)",
            );
        }
        for node in &self.redis_nodes {
            if !(node.starts_with("redis://") || node.starts_with("rediss://")) {
                err("redis_nodes", &format!("`{node}` must start with redis:// or rediss://"));
            } else if redis::IntoConnectionInfo::into_connection_info(node.as_str()).is_err() {
                err("redis_nodes", &format!("`{node}` is not a valid Redis URL"));
            }
        }
        if let Some(first) = self.redis_nodes.first()
            && self.redis_nodes.iter().any(|n| n.starts_with("rediss://") != first.starts_with("rediss://"))
        {
            err("redis_nodes", "every node must use the same scheme (all redis:// or all rediss://)");
        }
        if let Some(url) = &self.redis_url
            && !(url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://"))
        {
            err("redis_url", "must start with redis://, rediss:// or unix://");
        }
        if self.key_secret.is_none() && !has_cursor_secret {
            err(
                "key_secret",
                "replicas must share a key for private partitions: set `cluster.key_secret` or `proxy.cursor_secret`",
            );
        }
        for (key, d) in [
            ("op_timeout", self.op_timeout),
            ("lock_ttl", self.lock_ttl),
            ("lock_wait", self.lock_wait),
            ("lease_ttl", self.lease_ttl),
            ("purge_timeout", self.purge_timeout),
            ("interest_resync", self.interest_resync),
        ] {
            if d.is_zero() {
                err(key, "must be positive");
            }
        }
        if self.lease_ttl < Duration::from_millis(300) {
            err("lease_ttl", "must be at least 300 ms (it is renewed every third of it)");
        }
        if self.max_outbox == 0 {
            err("max_outbox", "must be at least 1");
        }
        if self.max_pending_fills == 0 {
            err("max_pending_fills", "must be at least 1");
        }
        if self.prefix.contains(['{', '}']) {
            err("prefix", "must not contain `{` or `}` (resmux uses hash tags itself)");
        }
        out
    }

    /// Where Redis is: the URL (read from its secret when given that way) or the cluster's
    /// seed nodes.
    pub fn target(&self) -> Result<Option<RedisTarget>, resmux_proto::secret::SecretError> {
        match (&self.redis_url, &self.redis_url_secret) {
            (Some(url), _) => Ok(Some(RedisTarget::Standalone(url.clone()))),
            (None, Some(secret)) => secret.resolve().map(|url| Some(RedisTarget::Standalone(url))),
            (None, None) if self.redis_nodes.is_empty() => Ok(None),
            (None, None) => Ok(Some(RedisTarget::Cluster(self.redis_nodes.clone()))),
        }
    }
}

/// The Redis a cluster of replicas shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis (`redis_url`).
    Standalone(String),
    /// A Redis Cluster, by its seed nodes (`redis_nodes`).
    Cluster(Vec<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(edit: impl FnOnce(&mut ClusterConfig)) -> Vec<(String, String)> {
        let mut c = ClusterConfig::default();
        edit(&mut c);
        c.problems(true)
    }

    #[test]
    fn exactly_one_of_redis_url_and_redis_nodes() {
        let nodes = || vec!["redis://10.0.0.1:7000".to_owned(), "redis://10.0.0.2:7000".to_owned()];
        assert!(problems(|c| c.redis_url = Some("redis://127.0.0.1:6379".into())).is_empty());
        assert!(problems(|c| c.redis_nodes = nodes()).is_empty());
        let both = problems(|c| {
            c.redis_url = Some("redis://127.0.0.1:6379".into());
            c.redis_nodes = nodes();
        });
        assert_eq!(both.len(), 1, "{both:?}");
        assert_eq!(both[0].0, "cluster.redis_nodes");
        assert!(both[0].1.contains("exactly one of `redis_url`"), "{both:?}");
    }

    #[test]
    fn cluster_nodes_are_redis_urls_of_one_scheme() {
        let tls = problems(|c| c.redis_nodes = vec!["rediss://a:7000".into(), "rediss://b:7000".into()]);
        assert!(tls.is_empty(), "{tls:?}");
        let mixed = problems(|c| c.redis_nodes = vec!["rediss://a:7000".into(), "redis://b:7000".into()]);
        assert!(mixed.iter().any(|(_, m)| m.contains("same scheme")), "{mixed:?}");
        let unix = problems(|c| c.redis_nodes = vec!["unix:///run/redis.sock".into()]);
        assert!(unix.iter().any(|(_, m)| m.contains("must start with redis://")), "{unix:?}");
        let bad = problems(|c| c.redis_nodes = vec!["redis://a:notaport".into()]);
        assert!(bad.iter().any(|(_, m)| m.contains("not a valid Redis URL")), "{bad:?}");
        let target = ClusterConfig { redis_nodes: vec!["redis://a:7000".into()], ..Default::default() };
        assert_eq!(target.target().unwrap(), Some(RedisTarget::Cluster(vec!["redis://a:7000".into()])));
    }
}
