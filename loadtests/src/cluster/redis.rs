//! The Redis a cluster run shares: a `redis-server` on a free loopback port, for as long as
//! the run holds it.

use super::*;

/// A `redis-server` of this run's own, on a free loopback port, with no persistence.
pub struct Redis {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Redis {
    /// Starts `redis-server` and waits until it answers `PING`.
    pub async fn start(bin: &Path) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("resmux-load-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        // The port is chosen by binding :0 and released for redis-server to take; a clash in
        // between shows as a failed start, never as a shared Redis.
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} (Debian package redis-server)", bin.display()))?;
        let mut redis = Self { port, child, dir };
        let deadline = Instant::now() + UP_DEADLINE;
        loop {
            if redis.ping().await {
                return Ok(redis);
            }
            if let Ok(Some(status)) = redis.child.try_wait() {
                bail!("redis-server exited during startup ({status})");
            }
            if Instant::now() >= deadline {
                redis.stop().await;
                bail!("redis-server did not answer PING on port {port} within {UP_DEADLINE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// An inline `PING` over RESP.
    async fn ping(&self) -> bool {
        let attempt = async {
            let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
            s.write_all(b"PING\r\n").await.ok()?;
            let mut buf = [0u8; 16];
            let n = s.read(&mut buf).await.ok()?;
            buf[..n].starts_with(b"+PONG").then_some(())
        };
        tokio::time::timeout(Duration::from_millis(500), attempt).await.ok().flatten().is_some()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the replicas of a run share: one Redis, or a Redis Cluster (`redis_cluster = true`).
pub enum SharedRedis {
    One(Redis),
    Cluster(crate::rcluster::RedisCluster),
}

impl SharedRedis {
    pub async fn start(spec: &ClusterSpec) -> Result<Self> {
        Ok(if spec.redis_cluster {
            Self::Cluster(crate::rcluster::RedisCluster::start(&spec.redis_binary()).await?)
        } else {
            Self::One(Redis::start(&spec.redis_binary()).await?)
        })
    }

    /// The `[cluster]` key that points a replica at it.
    pub fn target(&self) -> String {
        match self {
            Self::One(r) => format!("redis_url = \"{}\"", r.url()),
            Self::Cluster(c) => {
                let seeds: Vec<String> = c.seeds().iter().map(|s| format!("\"{s}\"")).collect();
                format!("redis_nodes = [{}]", seeds.join(", "))
            }
        }
    }

    pub async fn stop(self) {
        match self {
            Self::One(r) => r.stop().await,
            Self::Cluster(c) => c.stop().await,
        }
    }
}
