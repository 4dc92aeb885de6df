//! The downstream side: what clients connect to. The Streamable HTTP endpoint (modern
//! requests, and legacy sessions on the same path) and the stdio endpoint (one client on
//! stdin/stdout), both in front of the same router, cache and hub. The HTTP machinery under
//! the endpoint (the acceptor, the lean path, bodies, timers) is `resmux_http`'s; the
//! endpoint is its [`resmux_http::Service`].

// The HTTP layer's modules, where this module's children name them (`super::body`, ...).
pub(crate) use resmux_http::origin;
use resmux_http::{body, deadline, per_ip};

mod framing;
mod http;
pub mod legacy;
mod listen;
mod progress;
pub mod rate;
mod respond;
pub mod stdio;
pub use crate::mcp::validate;

pub use http::Endpoint;
pub use resmux_http::acceptor::{Limits, serve};
pub use resmux_http::origin::OriginPolicy;
