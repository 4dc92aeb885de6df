//! resmux-http: the HTTP layer under resmux's MCP endpoint. It accepts connections, reads
//! requests (small ones on its own lean HTTP/1.1 path, the rest with hyper), times heads,
//! bodies and idle connections, writes responses, and makes outbound HTTP and TLS
//! connections. It knows nothing of MCP or JSON-RPC: the application behind a listener is a
//! [`Service`], and the headers it reads by name are its own vocabulary
//! ([`headers::KnownNames`]).
//!
//! Modules, from the bottom up (each uses only modules above it in this list):
//!
//! - `io`: the `write_through!` macro, for socket wrappers that only look at reads.
//! - `spare`: per-thread spare buffers and header maps, so a cached answer allocates
//!   nothing of its own. Knows nothing of requests.
//! - [`quiet`]: a future polled only once woken, for a wait raced against a socket.
//! - [`deadline`]: a timeout whose timer is made only when its future was pending once.
//! - [`headers`]: one view over hyper's `HeaderMap` and the lean path's raw head, with the
//!   same answers on both; generic over the service's vocabulary, it has none of its own.
//! - [`tls`]: rustls configurations for both sides (roots, client certificates, ALPN).
//! - [`whole`]: a body read whole up to a bound.
//! - [`body`]: the response bodies: whole in pieces (not copied), a channel-fed stream, a
//!   relayed stream between a head and a tail.
//! - [`sse`]: the `text/event-stream` decoder, bounded, for bodies read from elsewhere.
//! - [`client`]: the pooled outbound hyper client, with TLS.
//! - [`origin`]: the `Origin` and `Host` policy a local server needs against DNS rebinding.
//! - [`per_ip`]: open connections per peer address.
//! - [`conn_timer`]: a connection's head and idle deadlines, and what is in flight on it.
//! - [`coalesce`]: an HTTP/2 connection's small writes gathered into one.
//! - [`respond`]: building responses (a body with its type, plain, empty) in reused maps.
//! - [`service`]: the [`Service`] trait, [`Front`] (a request's head before its body) and
//!   [`ConnEvent`]: all the connection layer asks of, and tells, the application.
//! - `lean`: the lean HTTP/1.1 path: small POSTs to the service's path read, answered and
//!   written here, everything else handed to hyper with the bytes read so far. It must not
//!   frame anything differently from hyper (the property test in `lean/framing.rs` holds it to that).
//! - [`acceptor`]: the TCP accept loop: connection bounds, per-IP refusals, TLS, HTTP/1.1 or
//!   HTTP/2, the lean path, graceful shutdown.

#![forbid(unsafe_code)]

mod io;
mod spare;

pub mod acceptor;
pub mod body;
pub mod client;
pub mod coalesce;
pub mod conn_timer;
pub mod deadline;
pub mod headers;
mod lean;
pub mod origin;
pub mod per_ip;
pub mod quiet;
pub mod respond;
pub mod service;
pub mod sse;
pub mod tls;
pub mod whole;

pub use service::{ConnEvent, Front, Service};
