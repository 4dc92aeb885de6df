//! The proxy under test: a `resmux serve -c <generated config>` child process (the default,
//! so it has its own runtime and its memory can be read from `/proc/<pid>/status`), or the
//! library's `App` started in this process (tests, and machines without the binary); see
//! [`Placement`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use resmux::app::App;
use tokio::process::{Child, Command};

use crate::conn::Conn;
use crate::placement::Placement;
use crate::procfs;
use crate::scenario::Scenario;
use crate::wire::{Op, Outcome};

/// How long a starting proxy gets to answer `server/discover`.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// A running proxy.
pub struct Proxy {
    pub addr: SocketAddr,
    kind: Kind,
}

enum Kind {
    Child {
        child: Child,
        pid: u32,
        /// Holds the generated config and the proxy's log; removed on stop.
        workdir: PathBuf,
    },

    InProcess(App),
}

/// The resmux config for `upstreams` (name, url), listening on `listen`, with the
/// scenario's `proxy_config` and `upstream_config` merged over the generated keys.
pub fn config_text(listen: SocketAddr, upstreams: &[(String, String)], s: &Scenario) -> String {
    let mut root = toml::Table::new();
    let mut listen_t = toml::Table::new();
    listen_t.insert("addr".into(), listen.to_string().into());
    // Above the proxy's default of 10,000 when a scenario needs more: at the bound the proxy
    // stops accepting, which would measure the bound rather than the proxy.
    let connections = (s.clients * s.upstreams + s.listeners + 1024).max(10_000);
    listen_t.insert("max_connections".into(), (connections as i64).into());
    // Every load connection comes from the generator's one address.
    listen_t.insert("max_connections_per_ip".into(), 0.into());
    // One load generator is one anonymous caller: measure the proxy, not its rate limit.
    listen_t.insert("requests_per_second".into(), 0.into());
    if s.listen_streams_per_connection > 1 {
        // Listeners arrive as streams of shared HTTP/2 connections (prior knowledge).
        listen_t.insert("http2".into(), true.into());
        let streams = s.listen_streams_per_connection.max(200);
        listen_t.insert("http2_max_concurrent_streams".into(), (streams as i64).into());
    }
    root.insert("listen".into(), listen_t.into());
    let mut log = toml::Table::new();
    // Per-request logging would cost the proxy CPU it shares with the load generator.
    log.insert("level".into(), "warn".into());
    root.insert("log".into(), log.into());
    let ups: Vec<toml::Value> = upstreams
        .iter()
        .map(|(name, url)| {
            let mut t = toml::Table::new();
            t.insert("name".into(), name.clone().into());
            t.insert("url".into(), url.clone().into());
            merge(&mut t, &s.upstream_config);
            t.into()
        })
        .collect();
    root.insert("upstream".into(), ups.into());
    merge(&mut root, &s.proxy_config);
    toml::to_string(&root).expect("a TOML table serializes")
}

/// Deep-merges `over` into `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

impl Proxy {
    /// Starts a proxy in front of `upstreams` and waits until it answers `server/discover`.
    pub async fn start(placement: &Placement, upstreams: &[(String, String)], s: &Scenario) -> Result<Self> {
        match placement {
            Placement::InProcess => {
                let text = config_text(([127, 0, 0, 1], 0).into(), upstreams, s);
                let config = resmux::config::parse(&text).map_err(|errors| {
                    let lines: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect();
                    anyhow::anyhow!("generated proxy config is invalid:\n{}\n{text}", lines.join("\n"))
                })?;
                let app = App::start(config).await?;
                let mut proxy = Self { addr: app.local_addr(), kind: Kind::InProcess(app) };
                proxy.wait_ready(READY_DEADLINE).await?;
                Ok(proxy)
            }
            Placement::Processes { resmux, .. } => Self::spawn(&[], resmux, upstreams, s, READY_DEADLINE).await,
        }
    }

    /// Starts `wrapper… exe serve -c <config>` as a child (for example under
    /// `valgrind --tool=callgrind`), given `ready` to answer its first `server/discover`.
    pub async fn spawn(
        wrapper: &[std::ffi::OsString],
        exe: &Path,
        upstreams: &[(String, String)],
        s: &Scenario,
        ready: Duration,
    ) -> Result<Self> {
        if !exe.is_file() {
            bail!(
                "no resmux binary at {}: build it (`cargo build --release -p resmux -p resmux-load`) or pass --resmux PATH or --in-process",
                exe.display()
            );
        }
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let workdir = std::env::temp_dir().join(format!("resmux-load-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&workdir)?;
        // The port is chosen here and handed to the proxy, so the generator knows where to
        // connect without parsing the proxy's logs; the moment between releasing and the
        // proxy binding it is the only race, and a lost race shows as a failed start.
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let config = workdir.join("resmux.toml");
        std::fs::write(&config, config_text(addr, upstreams, s))?;
        let log = std::fs::File::create(workdir.join("proxy.log"))?;
        let mut command = crate::placement::wrapped(wrapper, exe);
        let child = command
            .arg("serve")
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let pid = child.id().context("child has a pid")?;
        let mut proxy = Self { addr, kind: Kind::Child { child, pid, workdir } };
        if let Err(e) = proxy.wait_ready(ready).await {
            let log = proxy.log_tail();
            proxy.stop().await;
            bail!("{e}\nproxy log:\n{log}");
        }
        Ok(proxy)
    }

    /// Polls `server/discover` until it succeeds, the child exits, or the deadline passes.
    async fn wait_ready(&mut self, within: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        let mut last = String::from("no attempt");
        while tokio::time::Instant::now() < deadline {
            if let Kind::Child { child, .. } = &mut self.kind
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!("the proxy exited during startup ({status})");
            }
            match Conn::open(self.addr, Duration::from_secs(1), None).await {
                Ok(mut conn) => match conn.call(&Op::Discover).await {
                    Ok(answer) if answer.outcome == Outcome::Ok => return Ok(()),
                    Ok(answer) => last = format!("{:?}", answer.outcome),
                    Err(e) => last = format!("{e:#}"),
                },
                Err(e) => last = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!("the proxy did not become ready within {within:?}: {last}")
    }

    /// Whether the proxy runs as a child process.
    pub fn is_child(&self) -> bool {
        matches!(self.kind, Kind::Child { .. })
    }

    /// The child's memory, when the proxy is a child process.
    pub fn memory(&self) -> Option<procfs::Memory> {
        match &self.kind {
            Kind::Child { pid, .. } => procfs::memory(&pid.to_string()),
            Kind::InProcess(_) => None,
        }
    }

    /// The child's CPU time so far, when the proxy is a child process.
    pub fn cpu_ms(&self) -> Option<u64> {
        match &self.kind {
            Kind::Child { pid, .. } => procfs::cpu_ms(&pid.to_string()),
            Kind::InProcess(_) => None,
        }
    }

    fn log_tail(&self) -> String {
        match &self.kind {
            Kind::Child { workdir, .. } => {
                let text = std::fs::read_to_string(workdir.join("proxy.log")).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            }
            Kind::InProcess(_) => String::new(),
        }
    }

    /// Stops a child proxy the way an operator does, with SIGTERM (so that it shuts down in
    /// order and a tool it runs under, such as callgrind, writes its output), and waits up to
    /// `within` for it to exit; killed if it has not. Returns the child's exit status.
    pub async fn terminate(self, within: Duration) -> Result<std::process::ExitStatus> {
        let Kind::Child { mut child, pid, workdir } = self.kind else {
            bail!("only a child proxy can be terminated");
        };
        let sent = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await;
        let status = match sent {
            Ok(s) if s.success() => tokio::time::timeout(within, child.wait()).await.ok().transpose()?,
            _ => None,
        };
        let status = match status {
            Some(status) => status,
            None => {
                let _ = child.kill().await;
                let _ = std::fs::remove_dir_all(&workdir);
                bail!("the proxy (pid {pid}) did not exit within {within:?} of SIGTERM; killed");
            }
        };
        let _ = std::fs::remove_dir_all(workdir);
        Ok(status)
    }

    /// Stops the proxy: the child is killed (its state is of no further interest), the
    /// in-process app is shut down in order.
    pub async fn stop(self) {
        match self.kind {
            Kind::Child { mut child, workdir, .. } => {
                let _ = child.kill().await;
                let _ = std::fs::remove_dir_all(workdir);
            }
            Kind::InProcess(app) => app.shutdown().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_config_is_valid_and_takes_overrides() {
        let s = Scenario::parse(
            "t",
            r#"
figure = "f"
clients = 4
upstreams = 2
[proxy_config.cache]
enabled = false
[upstream_config]
max_in_flight = 256
"#,
        )
        .unwrap();
        let ups = vec![
            ("up0".to_owned(), "http://127.0.0.1:1/mcp".to_owned()),
            ("up1".to_owned(), "http://127.0.0.1:2/mcp".to_owned()),
        ];
        let text = config_text(([127, 0, 0, 1], 0).into(), &ups, &s);
        let config = resmux::config::parse(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        assert_eq!(config.upstreams.len(), 2);
        assert_eq!(config.upstreams[1].max_in_flight, 256);
        assert!(!config.cache.enabled);
        assert_eq!(config.listen.max_connections, 10_000);
        assert_eq!(config.listen.max_connections_per_ip, 0);
    }
}
