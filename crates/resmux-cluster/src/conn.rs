//! The connection to Redis, one Redis or a Redis Cluster behind one type, so that every call
//! of the cluster tier takes the same path. Keys of one upstream share a hash tag, so that
//! every script and pipeline of the tier touches one slot and a cluster routes it whole.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use crate::config::{ClusterConfig, RedisTarget};
use crate::tls;
use crate::{ClusterError, ClusterSetupError};

/// A command connection to one Redis or to a Redis Cluster. Cheap to clone (multiplexed).
#[derive(Clone)]
pub(super) enum Conn {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How the replicas reach Redis, for the connections opened later (the subscriber's). Every
/// Redis client of the tier is made from this, so each carries the `[cluster]` TLS settings.
#[derive(Clone)]
pub(super) enum Backend {
    Standalone(Box<redis::Client>),
    Cluster(Seeds),
}

/// A client of one Redis node, with the tier's TLS settings.
fn node_client(node: redis::ConnectionInfo, tls: Option<&redis::TlsCertificates>) -> redis::RedisResult<redis::Client> {
    match tls {
        Some(certs) => redis::Client::build_with_tls(node, certs.clone()),
        None => redis::Client::open(node),
    }
}

/// A Redis Cluster's seed nodes with the TLS settings every client of it is built with (each
/// connection makes its own client: the subscriber's takes pushes).
#[derive(Clone)]
pub(super) struct Seeds {
    nodes: Vec<String>,
    tls: Option<redis::TlsCertificates>,
    connect_timeout: Duration,
    op_timeout: Duration,
}

impl Seeds {
    /// A client of the cluster, with the tier's TLS and timeouts.
    pub(super) fn builder(&self) -> redis::cluster::ClusterClientBuilder {
        let builder = redis::cluster::ClusterClientBuilder::new(self.nodes.iter().map(String::as_str))
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.op_timeout)
            // A request never waits on Redis past `op_timeout` anyway (its caller's deadline);
            // the retries follow `MOVED`/`ASK` and a failover's reconnection within it.
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(200);
        match &self.tls {
            Some(certs) => builder.certs(certs.clone()),
            None => builder,
        }
    }

    /// Why no seed node answers on its own, within `deadline` (`None`: one does, or the
    /// attempt ran out of time). The cluster client, connected to no node, says only that; a
    /// seed connected directly tells the cause (a rejected certificate, a refused connection).
    pub(super) async fn failure(&self, deadline: Duration) -> Option<redis::RedisError> {
        let attempts = async {
            let mut first = None;
            for node in &self.nodes {
                let attempt = async {
                    let client = node_client(node.as_str().into_connection_info()?, self.tls.as_ref())?;
                    let mut conn = client.get_multiplexed_async_connection().await?;
                    redis::cmd("PING").query_async::<()>(&mut conn).await
                };
                match attempt.await {
                    Ok(()) => return None,
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
            first
        };
        tokio::time::timeout(deadline, attempts).await.ok().flatten()
    }
}

impl Backend {
    /// The client for `target`, with the TLS files of `config` read now; nothing is connected
    /// yet.
    pub(super) fn new(target: &RedisTarget, config: &ClusterConfig) -> Result<Self, ClusterSetupError> {
        let tls = tls::certificates(config)?;
        tls::prepare(target, tls.as_ref())?;
        Ok(match target {
            RedisTarget::Standalone(url) => {
                let info = url.as_str().into_connection_info().map_err(ClusterSetupError::Url)?;
                Self::Standalone(Box::new(node_client(info, tls.as_ref()).map_err(ClusterSetupError::Client)?))
            }
            RedisTarget::Cluster(nodes) => {
                for node in nodes {
                    node.as_str().into_connection_info().map_err(ClusterSetupError::Url)?;
                }
                let seeds = Seeds {
                    nodes: nodes.clone(),
                    tls,
                    connect_timeout: connect_timeout(config),
                    op_timeout: config.op_timeout,
                };
                // Built once here so that a bad seed list fails at start, not in a task.
                seeds.builder().build().map_err(ClusterSetupError::Client)?;
                Self::Cluster(seeds)
            }
        })
    }

    /// The command connection. Connects lazily: a Redis that is down at start is retried by
    /// the health probe.
    pub(super) fn connect_lazily(&self, config: &ClusterConfig) -> redis::RedisResult<Conn> {
        Ok(match self {
            Self::Standalone(client) => {
                let mgr = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout(config)))
                    .set_response_timeout(Some(config.op_timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(500));
                Conn::Standalone(ConnectionManager::new_lazy_with_config((**client).clone(), mgr)?)
            }
            Self::Cluster(seeds) => Conn::Cluster(
                seeds.builder().build()?.get_pending_async_connection_with_config(redis::cluster::ClusterConfig::new()),
            ),
        })
    }

    /// Explains a Redis Cluster that the client reaches no node of (see [`Seeds::failure`]).
    pub(super) async fn explain(&self, err: ClusterError, deadline: Duration) -> ClusterError {
        match (self, &err) {
            (Self::Cluster(seeds), ClusterError::Redis { source, .. })
                if source.kind() == redis::ErrorKind::ClusterConnectionNotFound =>
            {
                seeds.failure(deadline).await.map_or(err, ClusterError::Seeds)
            }
            _ => err,
        }
    }

    /// Whether this is a Redis Cluster (sharded pub/sub) or one Redis (plain pub/sub).
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// The command that publishes to a bus channel: a Redis Cluster forwards a sharded
    /// message only within the shard that owns the channel's slot, where a plain `PUBLISH`
    /// would cross every node of the cluster.
    pub(super) fn publish_command(&self) -> &'static str {
        if self.is_cluster() { "SPUBLISH" } else { "PUBLISH" }
    }
}

fn connect_timeout(config: &ClusterConfig) -> Duration {
    config.op_timeout.max(Duration::from_millis(200))
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Standalone(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}
