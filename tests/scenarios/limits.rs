//! Downstream connection limits over raw TCP (SECURITY.md, "Limits"): header and body
//! timeouts, the head size cap, the per-IP connection cap, idle keep-alive reaping, and that a
//! listen stream is never reaped as idle. Timeouts are short and real (sockets are involved);
//! every wait for a condition is bounded by `tokio::time::timeout`, never a bare sleep.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

const SHORT: Duration = Duration::from_millis(300);

async fn proxy_with(tweak: impl FnOnce(&mut Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    // The rejection counters are read over the same raw connections.
    cfg.listen.metrics_path = "/metrics".into();
    tweak(&mut cfg);
    (Proxy::start(cfg).await, up)
}

/// One raw HTTP/1.1 connection.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

/// A complete `server/discover` request.
fn discover(addr: SocketAddr) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}}).to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: server/discover\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Conn {
    async fn open(addr: SocketAddr) -> Self {
        let s = tokio::time::timeout(DEADLINE, TcpStream::connect(addr)).await.expect("connect in time").unwrap();
        s.set_nodelay(true).unwrap();
        Self { s, buf: Vec::new() }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("write");
    }

    /// Reads one response (a `content-length` body), or `None` if the connection ends first.
    async fn response(&mut self) -> Option<Raw> {
        tokio::time::timeout(DEADLINE, self.read_response()).await.expect("a response or EOF in time")
    }

    async fn read_response(&mut self) -> Option<Raw> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            if !self.fill().await {
                return None;
            }
        };
        let mut raw = Raw::from_head(std::str::from_utf8(&self.buf[..head_end]).unwrap());
        let len = raw.content_length().unwrap_or(0);
        self.buf.drain(..head_end + 4);
        while self.buf.len() < len {
            if !self.fill().await {
                return None;
            }
        }
        raw.body = self.buf.drain(..len).collect();
        Some(raw)
    }

    /// Reads more; false at EOF or on a reset.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        match self.s.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Waits (at most `bound`) for the server to close; returns how long that took. Anything
    /// the server sends first is discarded.
    async fn closed_within(&mut self, bound: Duration) -> Duration {
        let start = Instant::now();
        tokio::time::timeout(bound, async { while self.fill().await {} })
            .await
            .unwrap_or_else(|_| panic!("the server did not close the connection within {bound:?}"));
        start.elapsed()
    }

    /// Sends `discover` and expects 200.
    async fn discover_ok(&mut self, addr: SocketAddr) {
        self.send(&discover(addr)).await;
        let r = self.response().await.expect("an answer");
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.json()["result"]["supportedVersions"].is_array());
    }
}

/// `resmux_downstream_rejections_total{reason}` from the metrics endpoint.
async fn rejections(addr: SocketAddr, reason: &str) -> u64 {
    scrape(addr, &format!("resmux_downstream_rejections_total{{reason=\"{reason}\"}}")).await
}

async fn scrape(addr: SocketAddr, series: &str) -> u64 {
    let mut c = Conn::open(addr).await;
    c.send(format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes()).await;
    let r = c.response().await.expect("metrics");
    let text = String::from_utf8(r.body).unwrap();
    let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_slowloris_head_is_cut_off_at_header_timeout() {
    let (p, _up) = proxy_with(|c| {
        c.listen.header_timeout = Duration::from_secs(1);
        c.listen.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let addr = p.app.local_addr();
    let c = Conn::open(addr).await;
    let (mut rd, mut wr) = c.s.into_split();
    // One header byte per 100 ms, forever (until the server hangs up).
    let dribble = tokio::spawn(async move {
        let head = b"POST /mcp HTTP/1.1\r\nx-slow: ".iter().chain(std::iter::repeat(&b'a'));
        for b in head {
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let start = Instant::now();
    let mut sink = [0u8; 256];
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    assert!(ended.is_ok(), "a slowloris client was never cut off");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "closed after {took:?}");
    dribble.abort();
    assert_eq!(rejections(addr, "header_timeout").await, 1);
}

#[tokio::test]
async fn header_timeout_runs_from_the_first_byte_not_between_requests() {
    let (p, _up) = proxy_with(|c| {
        c.listen.header_timeout = SHORT;
        c.listen.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let addr = p.app.local_addr();
    let mut keep = Conn::open(addr).await;
    keep.discover_ok(addr).await;
    // A head begun and never finished is cut off after header_timeout...
    let mut partial = Conn::open(addr).await;
    partial.send(b"POST /mcp HTTP/1.1\r\nhost: x\r\n").await;
    let took = partial.closed_within(DEADLINE).await;
    assert!(took >= SHORT - Duration::from_millis(50), "closed after {took:?}");
    // ...while the kept-alive connection, silent all that time, still serves its next request.
    keep.discover_ok(addr).await;
}

#[tokio::test]
async fn an_oversized_head_gets_431_and_is_closed() {
    let (p, _up) = proxy_with(|c| c.listen.max_header_bytes = 8192).await;
    let addr = p.app.local_addr();
    let mut c = Conn::open(addr).await;
    // Exactly the limit of an unfinished head: the server reads all of it (so closing cannot
    // reset the answer away) and the head is still not complete.
    let mut head = format!("POST /mcp HTTP/1.1\r\nhost: {addr}\r\nx-big: ").into_bytes();
    head.resize(8192, b'a');
    c.send(&head).await;
    let r = c.response().await.expect("an answer before the close");
    assert_eq!(r.status, 431, "{r:?}");
    c.closed_within(DEADLINE).await;
    // A head under the limit on a fresh connection is fine.
    Conn::open(addr).await.discover_ok(addr).await;
    assert_eq!(rejections(addr, "header_too_large").await, 1);
}

#[tokio::test]
async fn a_slow_body_gets_408_and_the_connection_is_closed() {
    let (p, _up) = proxy_with(|c| c.listen.body_timeout = SHORT).await;
    let addr = p.app.local_addr();
    let mut c = Conn::open(addr).await;
    let start = Instant::now();
    c.send(
        format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             mcp-protocol-version: 2026-07-28\r\nmcp-method: server/discover\r\ncontent-length: 200\r\n\r\n{{\"jsonrpc\""
        )
        .as_bytes(),
    )
    .await;
    let r = c.response().await.expect("an answer");
    assert!(start.elapsed() >= SHORT - Duration::from_millis(50));
    assert_eq!(r.status, 408, "{r:?}");
    assert_eq!(r.header("connection"), Some("close"));
    let v = r.json();
    assert!(v["id"].is_null(), "{v}");
    assert_eq!(v["error"]["code"], -32600);
    c.closed_within(DEADLINE).await;
    assert_eq!(rejections(addr, "body_timeout").await, 1);
}

#[tokio::test]
async fn connections_over_the_per_ip_cap_get_429_and_a_freed_place_is_reused() {
    let (p, _up) = proxy_with(|c| {
        c.listen.max_connections_per_ip = 2;
        c.listen.limit_loopback = true;
    })
    .await;
    let addr = p.app.local_addr();
    let (mut a, mut b) = (Conn::open(addr).await, Conn::open(addr).await);
    a.discover_ok(addr).await;
    b.discover_ok(addr).await;
    let mut over = Conn::open(addr).await;
    let r = over.response().await.expect("a 429 before the close");
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["code"], -32600);
    over.closed_within(DEADLINE).await;
    // The connections within the cap keep working.
    a.discover_ok(addr).await;
    // Closing one frees its place (once the server has seen the close).
    drop(b);
    eventually("a freed per-IP place", || async move {
        let mut c = Conn::open(addr).await;
        c.send(&discover(addr)).await;
        c.response().await.is_some_and(|r| r.status == 200).then_some(())
    })
    .await;
    drop(a);
    eventually("the per_ip rejection counted", || async move {
        let mut c = Conn::open(addr).await;
        c.send(format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes()).await;
        let r = c.response().await?;
        (r.status == 200).then(|| String::from_utf8(r.body).unwrap())
    })
    .await
    .lines()
    .find(|l| l.starts_with("resmux_downstream_rejections_total{reason=\"per_ip\"}"))
    .filter(|l| !l.ends_with(" 0"))
    .expect("per_ip counted");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_idle_timeout() {
    let (p, _up) = proxy_with(|c| {
        c.listen.idle_timeout = SHORT;
        c.listen.header_timeout = Duration::from_secs(10);
    })
    .await;
    let addr = p.app.local_addr();
    let mut c = Conn::open(addr).await;
    c.discover_ok(addr).await;
    let took = c.closed_within(DEADLINE).await;
    assert!(took >= SHORT - Duration::from_millis(50) && took < Duration::from_secs(5), "closed after {took:?}");
    assert!(scrape(addr, "resmux_downstream_idle_closed_total").await >= 1);
}

#[tokio::test]
async fn silent_sockets_at_max_connections_are_reaped_so_others_get_served() {
    let (p, _up) = proxy_with(|c| {
        c.listen.max_connections = 3;
        c.listen.idle_timeout = SHORT;
    })
    .await;
    let addr = p.app.local_addr();
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(Conn::open(addr).await);
    }
    // This one waits in the accept queue until an idle slot is reaped.
    let mut late = Conn::open(addr).await;
    late.discover_ok(addr).await;
    for s in &mut silent {
        s.closed_within(DEADLINE).await;
    }
}

#[tokio::test]
async fn an_open_listen_stream_outlives_idle_timeout() {
    let (p, up) = proxy_with(|c| {
        c.listen.idle_timeout = SHORT;
        c.hub.linger = Duration::from_millis(50);
    })
    .await;
    discovered(&p.client).await;
    let addr = p.app.local_addr();
    let mut l =
        p.client.listen(json!("L"), json!({"resourceSubscriptions": ["docs://status"]})).await.expect("a stream");
    assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
    // An idle connection opened after the listen is closed: idle_timeout has passed for the
    // listen's connection too...
    Conn::open(addr).await.closed_within(DEADLINE).await;
    // ...and its stream still delivers.
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    let m = l.next_method("notifications/resources/updated").await;
    assert_eq!(m["params"]["uri"], "docs://status");
}
