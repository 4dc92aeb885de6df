//! A real Redis Cluster on loopback for the tests: 6 `redis-server` processes in cluster mode
//! (3 masters, 3 replicas, made by `redis-cli --cluster create`), with a short node timeout
//! so that a killed master's replica is promoted within a couple of seconds. With a PKI, every
//! node serves TLS only (`tls-cluster`, `tls-replication`) and requires client certificates.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::support::*;
use crate::tls::Pki;

/// Nodes of the cluster: 3 masters, each with one replica.
const NODES: usize = 6;

/// Attempts at starting the cluster: the ports are chosen free but released for redis-server
/// to take, so another process may take one in between.
const ATTEMPTS: usize = 4;

fn binary(var: &str, name: &str) -> PathBuf {
    let bin = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| name.into());
    assert!(
        std::process::Command::new(&bin).arg("--version").output().is_ok_and(|o| o.status.success()),
        "these tests need a real Redis: install Debian's redis-server and redis-tools (or set {var})"
    );
    bin
}

struct Node {
    port: u16,
    child: Option<Child>,
}

/// A Redis Cluster of this test's own.
pub(crate) struct RedisCluster {
    nodes: Vec<Node>,
    tls: Option<Arc<Pki>>,
    _dir: tempfile::TempDir,
}

/// Two loopback ports free just now (the node's and its cluster bus's).
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}

/// How the nodes are reached: plain, or TLS with `Pki`'s client certificate.
type Link<'a> = Option<&'a Pki>;

fn url(tls: Link, port: u16) -> String {
    format!("{}://127.0.0.1:{port}", if tls.is_some() { "rediss" } else { "redis" })
}

async fn conn(tls: Link<'_>, port: u16) -> Option<redis::aio::MultiplexedConnection> {
    let client = match tls {
        Some(pki) => pki.redis_client(&url(tls, port)),
        None => redis::Client::open(url(tls, port)).ok()?,
    };
    tokio::time::timeout(Duration::from_secs(1), client.get_multiplexed_async_connection()).await.ok()?.ok()
}

async fn cluster_cmd(tls: Link<'_>, port: u16, cmd: &redis::Cmd) -> Option<String> {
    let mut c = conn(tls, port).await?;
    tokio::time::timeout(Duration::from_secs(1), cmd.query_async::<String>(&mut c)).await.ok()?.ok()
}

impl RedisCluster {
    pub(crate) async fn start() -> Self {
        Self::start_with(None).await
    }

    /// A Redis Cluster over TLS only: clients, the cluster bus and replication, each side
    /// presenting a certificate of `pki`'s CA.
    pub(crate) async fn start_tls(pki: Arc<Pki>) -> Self {
        Self::start_with(Some(pki)).await
    }

    async fn start_with(tls: Option<Arc<Pki>>) -> Self {
        for attempt in 1..=ATTEMPTS {
            match Self::try_start(tls.clone()).await {
                Ok(c) => return c,
                Err(why) => eprintln!("redis cluster, attempt {attempt}: {why}"),
            }
        }
        panic!("no Redis Cluster after {ATTEMPTS} attempts");
    }

    async fn try_start(tls: Option<Arc<Pki>>) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let server = binary("RESMUX_REDIS_SERVER", "redis-server");
        let mut nodes = Vec::new();
        for _ in 0..NODES {
            let (port, bus) = free_ports();
            let ports = match &tls {
                None => vec!["--port".into(), port.to_string().into()],
                Some(pki) => pki.redis_server_args(port),
            };
            let child = Command::new(&server)
                .args(ports)
                .args(["--tls-cluster", "yes", "--tls-replication", "yes"].iter().filter(|_| tls.is_some()))
                .args(["--cluster-port", &bus.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                .args(["--cluster-replica-validity-factor", "0", "--save", "", "--appendonly", "no"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("redis-server does not start: {e}"))?;
            nodes.push(Node { port, child: Some(child) });
        }
        let cluster = Self { nodes, tls, _dir: dir };
        let link = cluster.tls.as_deref();
        for n in &cluster.nodes {
            let ping = async {
                let start = tokio::time::Instant::now();
                while start.elapsed() < Duration::from_secs(5) {
                    if cluster_cmd(link, n.port, &redis::cmd("PING")).await.is_some() {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                false
            };
            if !ping.await {
                return Err(format!("node {} never answered (its port was probably taken)", n.port));
            }
        }
        let addrs: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let made = Command::new(binary("RESMUX_REDIS_CLI", "redis-cli"))
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .args(link.map(Pki::redis_cli_args).unwrap_or_default())
            .stdin(Stdio::null())
            .output();
        let made = tokio::time::timeout(DEADLINE, made).await.map_err(|_| "redis-cli --cluster create hung")?;
        let made = made.map_err(|e| format!("redis-cli does not run: {e}"))?;
        if !made.status.success() {
            return Err(format!("redis-cli --cluster create: {}", String::from_utf8_lossy(&made.stdout)));
        }
        cluster.settled().await;
        Ok(cluster)
    }

    /// Waits until every live node sees the whole cluster in order: state ok, every slot
    /// served, and a master for each slot that is alive.
    pub(crate) async fn settled(&self) {
        let live: Vec<u16> = self.nodes.iter().filter(|n| n.child.is_some()).map(|n| n.port).collect();
        let link = self.tls.as_deref();
        eventually("the redis cluster is ok on every live node", || {
            let live = live.clone();
            async move {
                for port in &live {
                    let info = cluster_cmd(link, *port, redis::cmd("CLUSTER").arg("INFO")).await?;
                    let ok = info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384");
                    let masters = masters(link, *port).await?;
                    if !ok || masters.iter().any(|(p, _)| !live.contains(p)) || masters.len() != 3 {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await;
    }

    /// Seed node URLs for `[cluster] redis_nodes` (two, so that one lost seed is survived).
    pub(crate) fn seeds(&self) -> Vec<String> {
        self.nodes.iter().take(2).map(|n| url(self.tls(), n.port)).collect()
    }

    /// The PKI of a TLS cluster.
    pub(crate) fn tls(&self) -> Option<&Pki> {
        self.tls.as_deref()
    }

    /// The port of the master that serves `key`.
    pub(crate) async fn master_of(&self, key: &str) -> u16 {
        let port = self.nodes.iter().find(|n| n.child.is_some()).unwrap().port;
        let slot: u16 = {
            let mut c = conn(self.tls(), port).await.unwrap();
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query_async(&mut c).await.unwrap()
        };
        let masters = masters(self.tls(), port).await.unwrap();
        masters.iter().find(|(_, ranges)| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot))).unwrap().0
    }

    /// Every key held by the live masters.
    pub(crate) async fn keys(&self) -> Vec<String> {
        let port = self.nodes.iter().find(|n| n.child.is_some()).unwrap().port;
        let mut out = Vec::new();
        for (master, _) in masters(self.tls(), port).await.unwrap() {
            let mut c = conn(self.tls(), master).await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut c).await.unwrap();
            out.extend(keys);
        }
        out
    }

    /// SIGKILLs the node on `port`.
    pub(crate) async fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).unwrap();
        let mut child = node.child.take().unwrap();
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
}

/// The masters a node knows of, by port, with their slot ranges; `None` if it does not answer.
async fn masters(tls: Link<'_>, port: u16) -> Option<Vec<(u16, Vec<(u16, u16)>)>> {
    let text = cluster_cmd(tls, port, redis::cmd("CLUSTER").arg("NODES")).await?;
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else { continue };
        if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
            continue;
        }
        let node_port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
        let ranges: Vec<(u16, u16)> = fields
            .iter()
            .skip(8)
            .filter(|r| !r.starts_with('['))
            .filter_map(|r| match r.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => r.parse().ok().map(|s| (s, s)),
            })
            .collect();
        if !ranges.is_empty() {
            out.push((node_port, ranges));
        }
    }
    Some(out)
}
