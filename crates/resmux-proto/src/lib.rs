//! resmux-proto: the words every side of resmux meets on. No I/O and no runtime: nothing here
//! depends on tokio, hyper, moka or redis, so the proxy's transports, cache and cluster tier
//! can all depend on it without depending on each other.
//!
//! Modules, lowest first (each uses only those above it):
//! - [`error`]: the failure kinds of every side (downstream, upstream, internal), whether a
//!   retry may help, and [`error::chain`] for reading a cause chain in one line.
//! - [`secret`]: secrets named in the config by environment variable or file, read once.
//! - [`jsonrpc`]: the codec, the one place JSON-RPC is parsed and written: the request
//!   lexer, the streaming scanner that rewrites results as they are relayed, the writers, and
//!   the mapping from an [`error::Error`] to a JSON-RPC error and HTTP status.
//! - [`mcp`]: the MCP 2026-07-28 vocabulary (versions, `_meta` keys, methods, mirrored
//!   headers, lists, URIs, change filters), the caller's identity ([`mcp::principal`]) and
//!   the spec's request validation ([`mcp::validate`]).

#![forbid(unsafe_code)]

pub mod error;
pub mod jsonrpc;
pub mod mcp;
pub mod secret;
