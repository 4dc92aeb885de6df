//! The stdio downstream: one client on stdin/stdout (desktop apps launch MCP servers as
//! processes), newline-delimited JSON-RPC, in front of the same router, cache and hub as the
//! HTTP endpoint.
//!
//! Both eras, chosen per message by its shape: a request whose `_meta` names a protocol
//! version is modern (validated like HTTP minus the headers; `subscriptions/listen`
//! notifications are interleaved on stdout, each tagged with the listen's id, the ack first).
//! A legacy client sends `initialize` first: the connection then is its session, and
//! `resources/subscribe` makes `notifications/resources/updated` arrive unsolicited.
//!
//! Requests are served concurrently, at most [`MAX_IN_FLIGHT`] at once; at the bound the
//! reader stops reading until one finishes (listens do not count: the hub bounds them).
//! `notifications/cancelled {requestId}` cancels a request (no response follows) or a listen
//! (it ends without a response). At stdin EOF: in-flight requests get [`DRAIN`] to finish,
//! then listens end with their successful result, and the output is flushed.
//!
//! Stdout carries JSON-RPC only; logs go to stderr.

mod conn;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tracing::Instrument;

use crate::hub::Hub;
use crate::router::Router;
use conn::Conn;

/// Requests served at once; the next line waits for a slot.
pub const MAX_IN_FLIGHT: usize = 64;
/// Messages queued for stdout. When full, the tasks producing them wait: stdout backpressure
/// reaches the requests (and listens coalesce their changes meanwhile).
const OUT_QUEUE: usize = 256;
/// How long in-flight requests get to finish after stdin closes.
pub const DRAIN: Duration = Duration::from_secs(5);
/// How long listens get to write their final result, and stdout to flush, at the end.
const CLOSE: Duration = Duration::from_secs(2);

/// Serves one client on `input`/`output` until `input` ends: lines of at most `max_line`
/// bytes, JSON nested at most `max_depth` deep.
pub async fn serve<R, W>(router: Router, hub: Hub, max_line: usize, max_depth: usize, input: R, output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // The one connection's span; each request's span is its child.
    let span = tracing::info_span!("conn", listener = "stdio");
    serve_conn(router, hub, max_line, max_depth, input, output).instrument(span).await
}

async fn serve_conn<R, W>(router: Router, hub: Hub, max_line: usize, max_depth: usize, input: R, output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, out_rx) = mpsc::channel::<Bytes>(OUT_QUEUE);
    let writer = tokio::spawn(write_out(out_rx, output));
    let conn = Arc::new(Conn::new(router, hub, out, max_depth));
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut lines = FramedRead::new(input, LinesCodec::new_with_max_length(max_line));
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => conn.dispatch(line, &permits).await,
            // The codec skips to the next newline; the client learns its message was refused.
            Err(LinesCodecError::MaxLineLengthExceeded) => conn.too_long(max_line).await,
            Err(LinesCodecError::Io(e)) => {
                tracing::warn!(error = %e, "reading stdin failed");
                break;
            }
        }
    }
    tracing::debug!("stdin closed");
    conn.close().await;
    drop(conn);
    if tokio::time::timeout(CLOSE, writer).await.is_err() {
        tracing::warn!("stdout did not drain in time");
    }
}

/// The one writer of stdout: one message per line, flushed whenever the queue runs dry.
async fn write_out<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<Bytes>, mut output: W) {
    while let Some(line) = rx.recv().await {
        if output.write_all(&line).await.is_err() {
            return;
        }
        if rx.is_empty() && output.flush().await.is_err() {
            return;
        }
    }
    let _ = output.flush().await;
}
