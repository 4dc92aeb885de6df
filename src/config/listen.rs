//! `[listen]`: the downstream HTTP endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Where the proxy listens and what it accepts there.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// Socket address. Default `127.0.0.1:8080`; local servers should stay on loopback.
    pub addr: SocketAddr,
    /// The one MCP endpoint path. Default `/mcp`.
    pub path: String,
    /// Largest accepted request body; larger bodies get 413 before they are read. Default 1 MiB.
    pub max_body_bytes: usize,
    /// Origins allowed in an `Origin` header (exact `scheme://host[:port]`, or `*`). Empty (the
    /// default) allows loopback origins only: `http(s)://localhost|127.0.0.1|[::1]` on any port.
    pub allowed_origins: Vec<String>,
    /// Host names allowed in the `Host` header (DNS-rebinding protection). Empty (the default)
    /// allows any host when `addr` is not loopback, and only loopback names when it is.
    pub allowed_hosts: Vec<String>,
    /// Most concurrent downstream connections; further connections wait in the accept queue.
    /// Idle connections are reaped by `idle_timeout`, so they cannot hold every slot.
    /// Default 10,000.
    pub max_connections: usize,
    /// Most concurrent connections from one peer IP address; 0 = unlimited. A connection over
    /// it is answered `429` with `Retry-After` and closed, without taking one of the
    /// `max_connections` slots. IPv6 peers are counted per /64. Behind a reverse proxy every
    /// connection comes from the proxy's address: raise it, or set 0. Default 256.
    pub max_connections_per_ip: usize,
    /// A request head (request line and headers) must arrive within this long of its first
    /// byte; a slower client is disconnected. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// A request body must arrive completely within this long of its head; a slower one gets
    /// `408` and the connection is closed. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// A connection with no request in flight and no request begun for this long is closed
    /// (an open listen stream is a request in flight: it is never idle). Default 60 s.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers); a larger one gets `431` and the
    /// connection is closed. It also caps the connection's read buffer. At least 8192 (the
    /// HTTP/1 parser's minimum buffer). Default 64 KiB.
    pub max_header_bytes: usize,
    /// Also accept HTTP/2: with prior knowledge (h2c) in clear text, offered by ALPN under
    /// `tls`. Default false: MCP clients speak HTTP/1.1 in clear text, and the dual-protocol
    /// connection costs ~9 KiB more per open connection (10,000 idle listen streams: 304 MB
    /// instead of 212 MB).
    pub http2: bool,
    /// Most streams (requests in flight, open listen streams among them) one HTTP/2
    /// connection may hold at once, advertised in its `SETTINGS_MAX_CONCURRENT_STREAMS`; a
    /// client that wants more waits for one to end. Used with `http2` only. An HTTP/2 front
    /// (a gateway multiplexing many listeners onto few connections) may raise it: 100,000
    /// listen streams on 100 connections need 1,000. Between 1 and 100,000. Default 200
    /// (hyper's).
    pub http2_max_concurrent_streams: u32,
    /// Serve `subscriptions/listen` streams on clear-text HTTP/1.1 connections on the lean
    /// path: the listen request read and its stream written with buffers of the size they
    /// need, instead of hyper's 8 KiB read and 8 KiB write buffer per connection, for as long
    /// as the stream is open (every check and answer is the same; every other request, and
    /// whatever follows a listen on its connection, is hyper's). Off: hyper serves every
    /// request. Not used with `http2` or `tls`. Default true.
    pub lean_listens: bool,
    /// Serve every other small request on clear-text HTTP/1.1 connections on the lean path
    /// too: a `POST` to the endpoint with a `Content-Length` body of at most 64 KiB, read with
    /// `httparse` into the connection's small buffer and answered by the same endpoint, its
    /// response written with one vectored write of the head and the body's pieces (a cached
    /// hit is not copied). It skips hyper's per-request dispatch and its per-connection
    /// buffers on keep-alive connections. A request it does not take (another method, a
    /// chunked or larger body, `Expect`, `Upgrade`, HTTP/1.0, a malformed head) hands the
    /// connection to hyper from that request on. Not used with `http2` or `tls`. Default
    /// true: it holds a fraction of hyper's per-connection buffers on an idle keep-alive
    /// connection and costs fewer instructions per cached read (the figures, and how they
    /// were measured: docs/hit-path-profile.md).
    pub lean_requests: bool,
    /// Path serving Prometheus metrics on the MCP listener too (GET). Empty (the default)
    /// disables it: metrics belong on the admin listener (`[admin] addr`), which MCP clients
    /// cannot reach.
    pub metrics_path: String,
    /// Most legacy (2025-xx) sessions held at once. A session is minted by a legacy
    /// `initialize` and holds the client's `resources/subscribe` set and its standalone GET
    /// stream; at the bound, sessions idle past `legacy_session_idle` are evicted first, and
    /// if none is, a new `initialize` gets 429. A session that has subscribed or holds its GET
    /// stream also counts as one listen toward the `[hub]` limits. Default 10,000.
    pub max_legacy_sessions: usize,
    /// A legacy session with no open GET stream that sends nothing for this long is evicted:
    /// its subscriptions are dropped and its id gets 404, so the client initializes again.
    /// Default 30 min.
    #[serde(with = "humantime_serde")]
    pub legacy_session_idle: Duration,
    /// Most legacy sessions one authenticated principal may hold at once; 0 = no per-principal
    /// bound (only `max_legacy_sessions`). A legacy `initialize` over it gets 429 once the
    /// principal's idle sessions have been evicted. Anonymous callers are bounded by
    /// `max_legacy_sessions` alone (with auth off there is no identity to count by). Default 64.
    pub max_legacy_sessions_per_principal: usize,
    /// Sustained downstream HTTP requests per second allowed to one principal (authenticated
    /// callers by principal, anonymous callers by peer IP address, IPv6 per /64); 0 = no rate
    /// limit. Checked after authentication, on every request to the MCP endpoint (a listen or
    /// legacy GET stream counts once, when it opens). Over it: `429` with `Retry-After`.
    /// Default 1,000 (with the default burst, 2,000 at once): far above what an interactive
    /// client or agent sends, and enough for a stampede of 1,000 concurrent reads from one
    /// sidecar address, while one caller still cannot monopolise the proxy. Behind a reverse
    /// proxy with auth off, every caller shares the proxy's address: raise it, or set 0.
    pub requests_per_second: u32,
    /// Requests one principal may send in a burst above `requests_per_second` (the bucket
    /// size); 0 = twice `requests_per_second`. Default 0.
    pub request_burst: u32,
    /// Whether the per-address limits (`max_connections_per_ip`, and `requests_per_second`
    /// for anonymous callers) apply to loopback peers too. Default false: a process on the
    /// same host (a sidecar's app, a load generator) is one address however much it sends,
    /// and the host that runs it already governs it. Authenticated callers keep their
    /// per-principal rate wherever they connect from. Set true when untrusted callers reach
    /// resmux through something on the same host that does not authenticate them.
    pub limit_loopback: bool,
    /// Deepest JSON nesting (arrays and objects) accepted in a request body, on HTTP and on
    /// stdio; a deeper body gets `400`, `-32700` before it is parsed. At most 128 (the JSON
    /// parser's own recursion limit). Default 64: MCP messages nest a handful of levels, tool
    /// arguments a few more.
    pub max_json_depth: usize,
    /// Serve HTTPS instead of clear-text HTTP, with this certificate and key. ALPN offers
    /// `http/1.1`, and `h2` too when `http2` is set. Default: none (clear text).
    pub tls: Option<ListenTls>,
}

/// `[listen.tls]`: the listener's certificate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenTls {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            path: "/mcp".into(),
            max_body_bytes: 1 << 20,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_connections: 10_000,
            max_connections_per_ip: 256,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 64 << 10,
            metrics_path: String::new(),
            http2: false,
            http2_max_concurrent_streams: 200,
            lean_listens: true,
            lean_requests: true,
            max_legacy_sessions: 10_000,
            legacy_session_idle: Duration::from_secs(30 * 60),
            max_legacy_sessions_per_principal: 64,
            requests_per_second: 1000,
            limit_loopback: false,
            request_burst: 0,
            max_json_depth: crate::jsonrpc::DEFAULT_MAX_DEPTH,
            tls: None,
        }
    }
}

impl From<&ListenConfig> for resmux_http::acceptor::Limits {
    fn from(c: &ListenConfig) -> Self {
        Self {
            max_connections: c.max_connections,
            max_connections_per_ip: c.max_connections_per_ip,
            limit_loopback: c.limit_loopback,
            header_timeout: c.header_timeout,
            idle_timeout: c.idle_timeout,
            max_header_bytes: c.max_header_bytes,
            http2: c.http2,
            http2_max_concurrent_streams: c.http2_max_concurrent_streams,
            lean_streams: c.lean_listens,
            lean_requests: c.lean_requests,
        }
    }
}
