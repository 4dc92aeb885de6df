//! One virtual client's connection: a persistent HTTP/1.1 keep-alive connection with
//! `TCP_NODELAY` (without it Nagle's algorithm adds ~40 ms per exchange on loopback), one
//! request at a time, as a real MCP client on one connection behaves. Raw hyper `http1`
//! rather than a pooled client: a pool would hide how many connections the load really uses.
//!
//! Or one stream of an HTTP/2 connection (prior knowledge, clear text) that other `Conn`s
//! share ([`Protocol::Http2`], [`Conn::stream`]): many listeners behind one gateway
//! connection, as an HTTP/2 front multiplexes them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::AbortHandle;

use crate::wire::{self, Op, Outcome};

/// A TCP connection to `addr` (from `source`, when given) within `timeout`, with
/// `TCP_NODELAY`.
async fn connect_tcp(addr: SocketAddr, source: Option<std::net::IpAddr>, timeout: Duration) -> Result<TcpStream> {
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
    Ok(stream)
}

fn host(addr: SocketAddr) -> HeaderValue {
    HeaderValue::from_str(&addr.to_string()).expect("socket addresses are ASCII")
}

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

/// A connection to one endpoint (or, over HTTP/2, one client's share of one).
pub struct Conn {
    sender: Sender,
    host: HeaderValue,
    /// `Authorization` on every request: who this client is to the proxy.
    auth: Option<HeaderValue>,
    /// Drives the connection; the last `Conn` sharing it aborts it on drop, so no socket
    /// outlives its clients.
    driver: Arc<Driver>,
    next_id: u64,
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    /// With the absolute URI each request is sent to (HTTP/2 carries it as `:scheme` and
    /// `:authority`, not as a `Host` header).
    H2(http2::SendRequest<Full<Bytes>>, http::Uri),
}

/// What a [`Conn`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// With prior knowledge, in clear text.
    Http2,
}

/// The task driving a connection, aborted when dropped.
struct Driver(AbortHandle);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Conn {
    /// Connects to `addr` within `timeout`; every request will carry `auth`.
    pub async fn open(addr: SocketAddr, timeout: Duration, auth: Option<HeaderValue>) -> Result<Self> {
        Self::open_from(addr, None, timeout, auth, Protocol::Http1).await
    }

    /// [`Conn::open`] from the local address `source` (bound before connecting, port chosen by
    /// the kernel), so that more connections than one address's ephemeral ports can be open,
    /// speaking `protocol`. Over HTTP/2 (prior knowledge), [`Conn::stream`] hands the
    /// connection's streams to further clients, as many at once as the server's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` allows (a request past it waits for a free stream).
    pub async fn open_from(
        addr: SocketAddr,
        source: Option<std::net::IpAddr>,
        timeout: Duration,
        auth: Option<HeaderValue>,
        protocol: Protocol,
    ) -> Result<Self> {
        let stream = connect_tcp(addr, source, timeout).await?;
        let uri = http::Uri::try_from(format!("http://{addr}/mcp")).context("endpoint URI")?;
        Self::handshake(TokioIo::new(stream), protocol, uri, host(addr), auth).await
    }

    /// A client on `io`, already connected (and, for https, already through TLS), speaking
    /// `protocol` to `uri` (absolute: HTTP/2 sends its scheme and authority; HTTP/1.1 requests
    /// carry `host` and their own path).
    pub async fn handshake<I>(
        io: I,
        protocol: Protocol,
        uri: http::Uri,
        host: HeaderValue,
        auth: Option<HeaderValue>,
    ) -> Result<Self>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        Ok(match protocol {
            Protocol::Http1 => {
                let (sender, conn) = http1::handshake(io).await.context("HTTP/1.1 handshake")?;
                Self::new(Sender::H1(sender), host, auth, conn)
            }
            Protocol::Http2 => {
                let (sender, conn) = http2::handshake(TokioExecutor::new(), io).await.context("HTTP/2 handshake")?;
                Self::new(Sender::H2(sender, uri), host, auth, conn)
            }
        })
    }

    /// A client of `host` on `sender`, whose connection `conn` runs in a task of its own.
    fn new(sender: Sender, host: HeaderValue, auth: Option<HeaderValue>, conn: impl Future + Send + 'static) -> Self {
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        })
        .abort_handle();
        Self { sender, host, auth, driver: Arc::new(Driver(driver)), next_id: 0 }
    }

    /// Another client on this HTTP/2 connection, sending `auth`; `None` on HTTP/1.1, whose
    /// connection carries one client.
    pub fn stream(&self, auth: Option<HeaderValue>) -> Option<Self> {
        match &self.sender {
            Sender::H1(_) => None,
            Sender::H2(sender, uri) => Some(Self {
                sender: Sender::H2(sender.clone(), uri.clone()),
                host: self.host.clone(),
                auth,
                driver: self.driver.clone(),
                next_id: 0,
            }),
        }
    }

    /// Whether the connection can still carry requests.
    pub fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s, _) => s.is_closed(),
        }
    }

    /// Sends `op` with the given raw JSON id and returns the response head and streaming body.
    pub async fn send_with_id(&mut self, op: &Op, id: &str) -> Result<Response<Incoming>> {
        let req = op.request(&self.host, self.auth.as_ref(), id);
        self.send(req).await
    }

    /// Sends a request built by the caller (path-only URI and `Host`, as HTTP/1.1 sends it)
    /// and returns the response head and streaming body.
    pub async fn send(&mut self, mut req: http::Request<Full<Bytes>>) -> Result<Response<Incoming>> {
        match &mut self.sender {
            Sender::H1(sender) => {
                sender.ready().await.context("connection closed")?;
                sender.send_request(req).await.context("exchange failed")
            }
            Sender::H2(sender, uri) => {
                *req.uri_mut() = uri.clone();
                req.headers_mut().remove(http::header::HOST);
                sender.ready().await.context("connection closed")?;
                sender.send_request(req).await.context("exchange failed")
            }
        }
    }

    /// Sends `op` and reads the whole answer body.
    pub async fn fetch(&mut self, op: &Op) -> Result<(http::response::Parts, Bytes)> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let response = self.send_with_id(op, &id).await?;
        read_whole(response).await
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

/// Reads a whole response body, up to [`MAX_BODY`].
pub async fn read_whole(response: Response<Incoming>) -> Result<(http::response::Parts, Bytes)> {
    let (parts, body) = response.into_parts();
    let body = http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("reading body: {e}"))?
        .to_bytes();
    Ok((parts, body))
}
