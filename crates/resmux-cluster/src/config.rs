//! `[cluster]`: replicas sharing one cache, one set of upstream listens and the legacy sessions
//! through Redis (DESIGN §9, `docs/scaling.md`). Absent: a single replica, exactly as before.

use std::path::PathBuf;
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
    /// PEM file of the CA certificates trusted for the Redis server(s) of a `rediss://` URL,
    /// in place of the Mozilla roots compiled in (which are used when absent). Read at start.
    pub tls_ca_file: Option<PathBuf>,
    /// PEM certificate chain that resmux presents to Redis (`tls-auth-clients yes`), with
    /// `tls_key_file`; both or neither. Read at start.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
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
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
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
        self.tls_problems(&mut err);
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

    /// The `tls_*` keys: the certificate and key together, and only with `rediss://` (a URL
    /// from `redis_url_secret` is checked at start, once read). The files themselves are
    /// checked by the proxy, which parses PEM.
    fn tls_problems(&self, err: &mut impl FnMut(&str, &str)) {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(_), None) => err("tls_key_file", "required with `tls_cert_file`"),
            (None, Some(_)) => err("tls_cert_file", "required with `tls_key_file`"),
            _ => {}
        }
        let plain = match (&self.redis_url, self.redis_nodes.first()) {
            (Some(url), _) if !url.starts_with("rediss://") => Some("redis_url"),
            (None, Some(node)) if !node.starts_with("rediss://") => Some("redis_nodes"),
            _ => None,
        };
        if let Some(url_key) = plain {
            for (key, set) in [
                ("tls_ca_file", self.tls_ca_file.is_some()),
                ("tls_cert_file", self.tls_cert_file.is_some()),
                ("tls_key_file", self.tls_key_file.is_some()),
            ] {
                if set {
                    err(key, &format!("applies only to a rediss:// (TLS) Redis, and `{url_key}` is not rediss://"));
                }
            }
        }
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

impl RedisTarget {
    /// Whether every connection to it is TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        match self {
            Self::Standalone(url) => url.starts_with("rediss://"),
            Self::Cluster(nodes) => nodes.iter().all(|n| n.starts_with("rediss://")),
        }
    }
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

    #[test]
    fn tls_files_come_in_pairs_and_only_with_rediss() {
        let tls = |c: &mut ClusterConfig| {
            c.redis_url = Some("rediss://redis.internal:6380".into());
            c.tls_ca_file = Some("/etc/resmux/redis-ca.pem".into());
            c.tls_cert_file = Some("/etc/resmux/redis-client.pem".into());
            c.tls_key_file = Some("/etc/resmux/redis-client.key".into());
        };
        assert!(problems(tls).is_empty());
        let lone = problems(|c| {
            tls(c);
            c.tls_key_file = None;
        });
        assert_eq!(lone, [("cluster.tls_key_file".to_owned(), "required with `tls_cert_file`".to_owned())]);
        let plain = problems(|c| {
            tls(c);
            c.redis_url = Some("redis://redis.internal:6379".into());
        });
        let keys: Vec<&str> = plain.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["cluster.tls_ca_file", "cluster.tls_cert_file", "cluster.tls_key_file"], "{plain:?}");
        assert!(plain[0].1.contains("`redis_url` is not rediss://"), "{plain:?}");
        let nodes = problems(|c| {
            tls(c);
            c.redis_url = None;
            c.redis_nodes = vec!["redis://a:7000".into()];
            c.tls_cert_file = None;
            c.tls_key_file = None;
        });
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        assert!(nodes[0].1.contains("`redis_nodes` is not rediss://"), "{nodes:?}");
        // A URL from a secret is only known at start (see `tls::prepare`).
        assert!(
            problems(|c| {
                tls(c);
                c.redis_url = None;
                c.redis_url_secret = Some(SecretSource { env: Some("REDIS_URL".into()), ..Default::default() });
            })
            .is_empty()
        );
        assert!(RedisTarget::Cluster(vec!["rediss://a:1".into(), "rediss://b:1".into()]).is_tls());
        assert!(!RedisTarget::Standalone("unix:///run/redis.sock".into()).is_tls());
    }
}
