//! resmux: a caching, multiplexing proxy for MCP resources.
//!
//! ```text
//! downstream                                                      upstream
//!  HTTP /mcp ─► codec ─► auth ─► router ─┬─► pool ─► Streamable HTTP | stdio child process
//!              (envelope,  (principal)   │
//!               headers)                 └─► merge (fan-out to N upstreams, composite cursor)
//! ```
//!
//! Modules, in the order a request flows through them:
//! - [`downstream`]: the Streamable HTTP endpoint, transport checks and spec validation.
//! - [`jsonrpc`]: the codec, the one place JSON-RPC is parsed and written.
//! - [`mcp`]: protocol vocabulary (versions, `_meta` keys, headers, methods, lists, the listen
//!   filter, changes and notices), a leaf that both sides share and that imports neither.
//! - [`auth`]: the principal behind a request.
//! - [`router`]: per-method routing, namespacing, merged lists and cursors.
//! - [`cache`]: results by the upstream's `ttlMs`/`cacheScope`, single-flight, invalidation.
//! - [`upstream`]: one handle per upstream server, over HTTP or a supervised stdio process;
//!   its request path, era and legacy sessions, listens and MRTR relay each in a file of its own.
//! - [`hub`]: downstream listens, refcounted upstream listens, fan-out and invalidation.
//! - [`error`]: errors of every layer and their JSON-RPC / HTTP mapping.
//! - [`config`]: the configuration file; [`app`] builds the running proxy from it.
//! - [`admin`]: the operations listener: metrics, health, readiness, the dashboard.
//! - [`sample`]: a built-in MCP server for the demo, tests and load tests.
//! - [`telemetry`] sets up logging; [`tls`] builds the rustls configurations of both sides;
//!   [`client`] is the outbound HTTP client every layer that talks HTTP outward shares.

#![forbid(unsafe_code)]

pub use resmux_cache as cache;
pub use resmux_cluster as cluster;
pub use resmux_proto::{error, jsonrpc, mcp, secret};

pub mod admin;
pub mod app;
pub mod auth;
pub mod client;
pub mod config;
pub mod downstream;
pub mod headers;
pub mod hub;
pub mod periodic;
pub mod router;
pub mod sample;
pub mod status;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod whole;
