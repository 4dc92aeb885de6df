//! A built-in MCP 2026-07-28 server with realistic content, used by `resmux demo`, by the
//! scenario tests and by the load generator as an upstream. It serves Streamable HTTP (with
//! the spec's header validation) and stdio, paginates its lists, sets `ttlMs`/`cacheScope`,
//! answers `subscriptions/listen`, changes one resource periodically, and counts the requests
//! it receives per method so tests can assert on upstream traffic.
//!
//! Modules, lowest first: `content` (the documents and the spec of a sample), `record` and
//! `sessions` (what it received, the legacy session store: plain data), `handler` (the MCP
//! methods, and what tests ask of a running sample), `respond` (answers as HTTP), then the
//! transports: `legacy` (2025-xx sessions), `stdio`, and `http` (Streamable HTTP, optionally
//! over TLS). It stands on `resmux-proto` for the protocol and `resmux-http` for bodies and TLS,
//! never on the proxy.

mod content;
mod handler;
mod http;
mod legacy;
mod record;
mod respond;
mod sessions;
mod stdio;

pub use content::{NON_ASCII_PATH, Profile, SampleSpec};
pub use handler::{APPROVE_STATE, Sample, SampleEvent};
pub use http::SampleHttp;
pub use record::{Failure, Recorded};
pub use stdio::serve_stdio;
