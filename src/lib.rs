//! resmux: a caching, multiplexing proxy for MCP resources. This crate is the proxy itself: the
//! MCP endpoint, the router, the hub, the upstream handles, authentication, operations and the
//! binary. What it stands on lives in crates below it, which cannot reach back up (Cargo
//! refuses the edge; `tests/crate_graph.rs` names the allowed ones):
//!
//! ```text
//!                         resmux-load (load generator)
//!                                   │
//!                resmux (endpoint, router, hub, upstreams, auth, admin, app)
//!            ┌──────────────┬───────┴──────┬───────────────┐
//!     resmux-sample   resmux-cluster   resmux-cache    resmux-http
//!   (built-in server)  (Redis tier)    (result cache)  (acceptor, lean path,
//!            │              │   └──────┐  │             client, TLS; no MCP)
//!            └──────────────┴──── resmux-proto ──┘
//!                  (codec, MCP vocabulary, caller identity, error kinds; no I/O)
//! ```
//!
//! A request flows down this crate's modules in this order; each uses only those after it
//! (and the crates below):
//! - [`app`] builds the running proxy from [`config`], and [`admin`] serves operations
//!   (metrics, health, readiness, reload, purge, the dashboard); [`status`] is the metrics text
//!   both listeners serve.
//! - [`downstream`]: the Streamable HTTP endpoint (behind `resmux-http`'s acceptor and lean
//!   path), transport checks, listen streams, legacy sessions, stdio.
//! - [`hub`]: downstream listens, refcounted upstream listens, fan-out and invalidation.
//! - [`router`]: per-method routing, namespacing, merged lists and cursors, the cache in the
//!   request path.
//! - [`upstream`]: one handle per upstream server, over HTTP or a supervised stdio process.
//! - [`auth`]: who a caller is and what it may reach.
//! - [`telemetry`]: logs, spans and metrics; [`headers`] is the MCP vocabulary of the header
//!   views; [`periodic`] runs the background sweeps.
//!
//! Re-exported at their old paths for callers of the library: [`jsonrpc`], [`mcp`], [`error`]
//! and [`secret`] (`resmux-proto`), [`cache`] (`resmux-cache`), [`cluster`]
//! (`resmux-cluster`), and [`tls`], [`whole`] and [`client`] (`resmux-http`; also
//! `upstream::sse`).

#![forbid(unsafe_code)]

pub use resmux_cache as cache;
pub use resmux_cluster as cluster;
pub use resmux_http::{client, tls, whole};
pub use resmux_proto::{error, jsonrpc, mcp, secret};
pub use resmux_sample as sample;

pub mod admin;
pub mod app;
pub mod auth;
pub mod config;
pub mod downstream;
pub mod headers;
pub mod hub;
pub mod periodic;
pub mod router;
pub mod status;
pub mod telemetry;
pub mod upstream;
