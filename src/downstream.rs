//! The downstream side: what clients connect to. The Streamable HTTP endpoint (modern
//! requests, and legacy sessions on the same path) and the stdio endpoint (one client on
//! stdin/stdout), both in front of the same router, cache and hub.

/// `AsyncWrite` for a socket wrapper (`$wrapper<T>` with an `io: T` field) whose writes go
/// straight through to `io`: the lean path's [`lean`] `Rewind` and the [`watch`] `Watched`
/// only look at reads.
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<T> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut self.io), cx, buf)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                tokio::io::AsyncWrite::poll_write_vectored(std::pin::Pin::new(&mut self.io), cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                tokio::io::AsyncWrite::is_write_vectored(&self.io)
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut self.io), cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut self.io), cx)
            }
        }
    };
}
use write_through;

mod body;
mod coalesce;
mod deadline;
mod framing;
mod http;
mod lean;
pub mod legacy;
mod listen;
mod listener;
pub(crate) mod origin;
mod per_ip;
mod progress;
mod quiet;
pub mod rate;
mod respond;
mod spare;
pub mod stdio;
pub use crate::mcp::validate;
mod watch;

pub use http::Endpoint;
pub use listener::serve;
