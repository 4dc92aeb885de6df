//! A real Redis Cluster on loopback for the `cluster-sharded` scenario and the simulation
//! (`sim`): 6 `redis-server` processes in cluster mode (3 masters, 3 replicas, joined by
//! `redis-cli --cluster create`), no persistence, killed when dropped. The same shape as the
//! tests' cluster (`tests/scenarios/redis_cluster.rs`), so that what is measured here is what
//! the tests exercise.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Nodes of the cluster: 3 masters, each with one replica.
const NODES: usize = 6;
/// Attempts at starting the cluster: the ports are chosen free but released for redis-server
/// to take, so another process may take one in between.
const ATTEMPTS: usize = 3;
/// How long the cluster gets to answer and agree on its slots.
const UP_DEADLINE: Duration = Duration::from_secs(30);
/// Longest wait for one admin command (`CLUSTER NODES`, `INFO`).
const CMD_TIMEOUT: Duration = Duration::from_secs(2);

/// A Redis Cluster of this run's own.
pub struct RedisCluster {
    ports: Vec<u16>,
    children: Vec<Child>,
    dir: PathBuf,
}

/// Counters Redis keeps, summed over the masters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerCounts {
    /// Commands executed, by command (`INFO commandstats` `calls`), `INFO` itself left out.
    /// Commands a script runs are counted as well as the script's `EVALSHA`.
    pub commands: std::collections::BTreeMap<String, u64>,
    /// Bytes read from and written to clients (`INFO stats` `total_net_input_bytes`,
    /// `total_net_output_bytes`).
    pub net_in: u64,
    pub net_out: u64,
}

impl ServerCounts {
    /// What happened between `self` (earlier) and `later`.
    pub fn delta(&self, later: &Self) -> Self {
        let commands = later
            .commands
            .iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(self.commands.get(k).copied().unwrap_or(0))))
            .filter(|(_, v)| *v > 0)
            .collect();
        Self {
            commands,
            net_in: later.net_in.saturating_sub(self.net_in),
            net_out: later.net_out.saturating_sub(self.net_out),
        }
    }

    pub fn total(&self) -> u64 {
        self.commands.values().sum()
    }
}

async fn conn(port: u16) -> Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    Ok(tokio::time::timeout(CMD_TIMEOUT, client.get_multiplexed_async_connection()).await??)
}

async fn text(port: u16, cmd: &redis::Cmd) -> Result<String> {
    let mut c = conn(port).await?;
    Ok(tokio::time::timeout(CMD_TIMEOUT, cmd.query_async::<String>(&mut c)).await??)
}

impl RedisCluster {
    /// Starts the 6 nodes, joins them and waits until every node sees every slot served.
    pub async fn start(server: &Path) -> Result<Self> {
        let mut last = anyhow!("no attempt");
        for attempt in 1..=ATTEMPTS {
            match Self::try_start(server, attempt).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e.context(format!("redis cluster, attempt {attempt}")),
            }
        }
        Err(last)
    }

    async fn try_start(server: &Path, attempt: usize) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("resmux-load-rcluster-{}-{attempt}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Self { ports: Vec::new(), children: Vec::new(), dir };
        for _ in 0..NODES {
            let (port, bus) = {
                let a = std::net::TcpListener::bind(("127.0.0.1", 0))?;
                let b = std::net::TcpListener::bind(("127.0.0.1", 0))?;
                (a.local_addr()?.port(), b.local_addr()?.port())
            };
            let child = Command::new(server)
                .args(["--port", &port.to_string(), "--cluster-port", &bus.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .arg("--dir")
                .arg(&cluster.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {} (Debian package redis-server)", server.display()))?;
            cluster.ports.push(port);
            cluster.children.push(child);
        }
        let deadline = Instant::now() + UP_DEADLINE;
        for &port in &cluster.ports {
            while text(port, &redis::cmd("PING")).await.is_err() {
                if Instant::now() >= deadline {
                    bail!("node {port} never answered PING (its port was probably taken)");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let cli = server.with_file_name("redis-cli");
        let cli = if cli.exists() { cli } else { PathBuf::from("redis-cli") };
        let made = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output();
        let made = tokio::time::timeout(UP_DEADLINE, made)
            .await
            .context("redis-cli --cluster create hung")?
            .with_context(|| format!("running {} (Debian package redis-tools)", cli.display()))?;
        if !made.status.success() {
            bail!("redis-cli --cluster create: {}", String::from_utf8_lossy(&made.stdout));
        }
        cluster.settled(deadline).await?;
        Ok(cluster)
    }

    /// Waits until every node reports the cluster ok, every slot served, 3 masters.
    async fn settled(&self, deadline: Instant) -> Result<()> {
        'poll: loop {
            if Instant::now() >= deadline {
                bail!("the redis cluster did not settle within {UP_DEADLINE:?}");
            }
            for &port in &self.ports {
                let ok = match text(port, redis::cmd("CLUSTER").arg("INFO")).await {
                    Ok(info) => info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384"),
                    Err(_) => false,
                };
                if !ok || self.masters().await.map_or(true, |m| m.len() != 3) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'poll;
                }
            }
            return Ok(());
        }
    }

    /// Seed node URLs for `[cluster] redis_nodes` (two, as a deployment would give).
    pub fn seeds(&self) -> Vec<String> {
        self.ports.iter().take(2).map(|p| format!("redis://127.0.0.1:{p}")).collect()
    }

    /// The ports of the masters, as the first node sees them.
    pub async fn masters(&self) -> Result<Vec<u16>> {
        let nodes = text(self.ports[0], redis::cmd("CLUSTER").arg("NODES")).await?;
        Ok(nodes
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let flags = fields.get(2)?;
                let serves = fields.len() > 8;
                (flags.split(',').any(|f| f == "master") && !flags.contains("fail") && serves).then_some(())?;
                fields.get(1)?.split('@').next()?.rsplit(':').next()?.parse().ok()
            })
            .collect())
    }

    /// The masters' counters now, summed.
    pub async fn counts(&self) -> Result<ServerCounts> {
        let mut out = ServerCounts::default();
        for port in self.masters().await? {
            let stats = text(port, redis::cmd("INFO").arg("commandstats")).await?;
            for line in stats.lines() {
                // cmdstat_get:calls=3,usec=...
                let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
                    continue;
                };
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls=")).and_then(|n| n.parse::<u64>().ok());
                if let Some(calls) = calls.filter(|_| name != "info") {
                    *out.commands.entry(name.to_owned()).or_default() += calls;
                }
            }
            let stats = text(port, redis::cmd("INFO").arg("stats")).await?;
            let field = |key: &str| {
                stats
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            out.net_in += field("total_net_input_bytes");
            out.net_out += field("total_net_output_bytes");
        }
        Ok(out)
    }

    /// Kills every node and removes their files.
    pub async fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.kill().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // The children are killed on drop (kill_on_drop); their files go with them.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
