//! Shared scenario plumbing, continued: `resmux serve` in a process of its own, an rmcp server
//! as a peer upstream, and responses read off raw connections.

use serde_json::Value;

use super::DEADLINE;

/// `resmux serve` in a process of its own, started from the config `text` (which must log
/// JSON at `info`, so that the listening address can be read from its log), and the address
/// it listens on. Killed when dropped.
pub struct ServeProcess {
    pub child: tokio::process::Child,
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl ServeProcess {
    pub async fn start(text: &str) -> Self {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resmux.toml");
        std::fs::write(&path, text).unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_resmux"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("resmux starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                if v["fields"]["message"] == "resmux listening" {
                    return v["fields"]["addr"].as_str().unwrap().parse().unwrap();
                }
            }
            panic!("resmux exited before listening")
        })
        .await
        .expect("resmux listens in time");
        // Keep draining its log so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, addr, _dir: dir }
    }
}

/// A response read off a raw connection: status, headers (lower-case names), and the body
/// where the reader took one.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    /// A response head (status line and header lines, without the blank line), no body yet.
    pub fn from_head(head: &str) -> Self {
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .filter(|l| !l.is_empty())
            .map(|l| l.split_once(':').unwrap())
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Self { status, headers, body: Vec::new() }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `content-length`, if the head has one.
    pub fn content_length(&self) -> Option<usize> {
        self.header("content-length").map(|v| v.parse().unwrap())
    }
}

/// Serves an rmcp server handler over Streamable HTTP (JSON answers) on 127.0.0.1:0 until
/// `cancel`; returns its address.
pub async fn serve_rmcp<H>(handler: H, cancel: tokio_util::sync::CancellationToken) -> std::net::SocketAddr
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let config =
        StreamableHttpServerConfig::default().with_json_response(true).with_cancellation_token(cancel.child_token());
    let service: StreamableHttpService<H, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(handler.clone()), Default::default(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = cancel.cancelled() => return,
                r = listener.accept() => r.unwrap(),
            };
            let service = service.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let service = service.clone();
                    async move { Ok::<_, std::convert::Infallible>(service.handle(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}
