//! One virtual client's connection: a persistent HTTP/1.1 keep-alive connection with
//! `TCP_NODELAY` (without it Nagle's algorithm adds ~40 ms per exchange on loopback), one
//! request at a time, as a real MCP client on one connection behaves. Raw hyper `http1`
//! rather than a pooled client: a pool would hide how many connections the load really uses.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::AbortHandle;

use crate::wire::{self, Op, Outcome};

/// Largest answer body read into memory; more is an error, not an allocation.
const MAX_BODY: usize = 16 << 20;

/// Response header in which the proxy says how its cache took part (hit, miss, stale,
/// bypass). The proxy's constant is private to its endpoint module.
pub const CACHE_HEADER: &str = "resmux-cache";

/// One answer as the report sees it.
pub struct Answer {
    pub outcome: Outcome,
    /// The `resmux-cache` header, if any.
    pub cache: Option<HeaderValue>,
}

/// A connection to one endpoint.
pub struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    host: HeaderValue,
    /// `Authorization` on every request: who this client is to the proxy.
    auth: Option<HeaderValue>,
    /// Drives the connection; aborted on drop so no socket outlives its client.
    driver: AbortHandle,
    next_id: u64,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Conn {
    /// Connects to `addr` within `timeout`; every request will carry `auth`.
    pub async fn open(addr: SocketAddr, timeout: Duration, auth: Option<HeaderValue>) -> Result<Self> {
        Self::open_from(addr, None, timeout, auth).await
    }

    /// [`Conn::open`] from the local address `source` (bound before connecting, port chosen by
    /// the kernel), so that more connections than one address's ephemeral ports can be open.
    pub async fn open_from(
        addr: SocketAddr,
        source: Option<std::net::IpAddr>,
        timeout: Duration,
        auth: Option<HeaderValue>,
    ) -> Result<Self> {
        let connect = async {
            match source {
                None => TcpStream::connect(addr).await,
                Some(ip) => {
                    let socket = if ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
                    socket.bind(SocketAddr::new(ip, 0))?;
                    socket.connect(addr).await
                }
            }
        };
        let stream = tokio::time::timeout(timeout, connect)
            .await
            .with_context(|| format!("connect to {addr} timed out"))?
            .with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.context("HTTP/1.1 handshake")?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        })
        .abort_handle();
        Ok(Self {
            sender,
            host: HeaderValue::from_str(&addr.to_string()).expect("socket addresses are ASCII"),
            auth,
            driver,
            next_id: 0,
        })
    }

    /// Whether the connection can still carry requests.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Sends `op` with the given raw JSON id and returns the response head and streaming body.
    pub async fn send_with_id(&mut self, op: &Op, id: &str) -> Result<Response<Incoming>> {
        self.sender.ready().await.context("connection closed")?;
        self.sender.send_request(op.request(&self.host, self.auth.as_ref(), id)).await.context("exchange failed")
    }

    /// Sends `op` and reads the whole answer body.
    pub async fn fetch(&mut self, op: &Op) -> Result<(http::response::Parts, Bytes)> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let (parts, body) = self.send_with_id(op, &id).await?.into_parts();
        let body = http_body_util::Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading body: {e}"))?
            .to_bytes();
        Ok((parts, body))
    }

    /// Sends `op` and classifies the answer. `Err` means the connection failed (the caller
    /// reconnects); a protocol-level failure is an `Ok` answer with a failed outcome.
    pub async fn call(&mut self, op: &Op) -> Result<Answer> {
        let (parts, body) = self.fetch(op).await?;
        let sse = wire::is_sse(parts.headers.get(http::header::CONTENT_TYPE));
        Ok(Answer {
            outcome: wire::classify(parts.status, sse, &body),
            cache: parts.headers.get(CACHE_HEADER).cloned(),
        })
    }
}
