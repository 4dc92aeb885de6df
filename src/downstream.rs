//! The downstream side: what clients connect to. The Streamable HTTP endpoint (modern
//! requests, and legacy sessions on the same path) and the stdio endpoint (one client on
//! stdin/stdout), both in front of the same router, cache and hub.

mod body;
mod framing;
mod http;
mod lean;
pub mod legacy;
mod listen;
mod listener;
pub(crate) mod origin;
mod per_ip;
mod progress;
pub mod rate;
mod respond;
pub mod stdio;
pub mod validate;
mod watch;

pub use http::Endpoint;
pub use listener::serve;
