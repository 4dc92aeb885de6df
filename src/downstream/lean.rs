//! The lean connection path for long-lived listen streams (issue #14: 100,000 listeners per
//! box). hyper's HTTP/1 connection keeps an 8 KiB read buffer and an 8 KiB write buffer for
//! its whole life, which is most of what an idle listen stream costs. Here the first request
//! of a clear-text HTTP/1.1 connection is read into a small buffer and its head parsed with
//! `httparse`. If it is a small `POST` to the endpoint whose `Mcp-Method` header is
//! `subscriptions/listen`, it is served by the same [`Endpoint::serve_from`] as every other
//! request (every transport, Origin, Host, auth, rate, version and validation check, and every
//! status and JSON-RPC error, are the endpoint's), and its response is written here with a
//! buffer the size of each frame. Anything else, and whatever follows a listen on the
//! connection, is handed to hyper with the bytes read so far, exactly as if hyper had read
//! them.

mod head;
mod rewind;
mod write;

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use self::head::Parsed;
use self::rewind::Rewind;
use self::write::Ended;
use super::Endpoint;
use super::watch::{InFlight, Watch};
use crate::mcp::method::LISTEN;

/// The first read's buffer; it doubles up to the head bound as a head needs.
const FIRST_READ: usize = 1024;
/// Largest listen body taken on the lean path; a larger one (a listen naming very many
/// URIs) is served by hyper.
const MAX_LEAN_BODY: usize = 64 << 10;

/// What the lean path needs of its connection.
pub(super) struct Lean {
    pub endpoint: Endpoint,
    pub peer: SocketAddr,
    pub watch: Arc<Watch>,
    /// `max_header_bytes`: a longer head is hyper's to refuse (431).
    pub max_head: usize,
    /// The listener's shutdown: a connection still reading its first head closes, and one
    /// whose listen has ended is not handed on.
    pub cancel: CancellationToken,
    /// hyper's connection settings, for the hand-off.
    pub http1: http1::Builder,
    /// Keeps graceful shutdown waiting for this connection, and watches the hand-off.
    pub watcher: Watcher,
}

/// Serves one connection: its first request here when it is a listen, the rest with hyper.
pub(super) async fn serve<T, S>(mut io: T, lean: Lean, service: S) -> Result<(), hyper::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    // Boxed: reading and answering the request takes a moment; only the stream below is held
    // for the connection's life, so only its state stays allocated.
    let first = Box::pin(first_request(&mut io, &lean)).await;
    let (resp, close, mut rest, in_flight) = match first {
        First::HandOff(read) => return hand_off(read, io, lean, service).await,
        First::Done => return Ok(()),
        First::Serve { resp, close, rest, in_flight } => (resp, close, rest, in_flight),
    };
    let slow = lean.endpoint.slow_write();
    let ended = write::response(&mut io, *resp, close, slow, &mut rest).await;
    drop(in_flight);
    if ended != Ended::KeepAlive || lean.cancel.is_cancelled() {
        let _ = tokio::time::timeout(slow, io.shutdown()).await;
        return Ok(());
    }
    rest.shrink_to_fit();
    hand_off(rest, io, lean, service).await
}

/// What became of a connection's first request.
enum First {
    /// Not the lean path's: hyper serves it from these bytes on.
    HandOff(Vec<u8>),
    /// Over (the client went away, or the shutdown came first).
    Done,
    /// A listen, answered: `resp` is to be written (`close`: the client asked to close after
    /// it), `rest` is what was read past it, and the request stays in flight until written.
    Serve { resp: Box<super::respond::Resp>, close: bool, rest: Vec<u8>, in_flight: InFlight },
}

/// Reads the first request; answers it when it is a listen.
async fn first_request<T: AsyncRead + AsyncWrite + Unpin>(io: &mut T, lean: &Lean) -> First {
    let path = lean.endpoint.path();
    let max_body = MAX_LEAN_BODY.min(lean.endpoint.max_body());
    let mut buf: Vec<u8> = Vec::with_capacity(FIRST_READ);
    let head = loop {
        match head::parse(&buf, path, LISTEN, max_body) {
            Parsed::Lean(head) => break head,
            Parsed::Other => return First::HandOff(buf),
            // hyper answers a head over the bound with 431.
            Parsed::Partial if buf.len() >= lean.max_head => return First::HandOff(buf),
            Parsed::Partial => {}
        }
        match read_more(io, &mut buf, Some(&lean.cancel)).await {
            Read::More => {}
            // At EOF hyper judges what was sent (an unfinished head, or nothing).
            Read::Eof if !buf.is_empty() => return First::HandOff(buf),
            Read::Eof | Read::Stop => return First::Done,
        }
    };
    // The head is in: the request is in flight (no head or idle deadline) while its body
    // arrives within `body_timeout`, as on hyper's path.
    let in_flight = lean.watch.begin();
    let need = head.head_len + head.body_len;
    let body = async {
        while buf.len() < need {
            // No shutdown check here: hyper too lets a request whose head is in finish.
            if !matches!(read_more(io, &mut buf, None).await, Read::More) {
                return false;
            }
        }
        true
    };
    match tokio::time::timeout(lean.endpoint.body_timeout(), body).await {
        Ok(true) => {}
        Ok(false) => return First::Done,
        Err(_) => {
            let resp = lean.endpoint.body_timed_out();
            write::response(io, resp, true, lean.endpoint.slow_write(), &mut Vec::new()).await;
            return First::Done;
        }
    }
    let rest = buf.split_off(need);
    let body = Bytes::copy_from_slice(&buf[head.head_len..]);
    drop(buf);
    let request = head.request.map(|()| Full::new(body));
    let resp = lean.endpoint.serve_from(request, Some(lean.peer.ip())).await;
    First::Serve { resp: Box::new(resp), close: head.close, rest, in_flight }
}

/// The outcome of one read.
enum Read {
    More,
    Eof,
    /// The read failed, or the listener is shutting down.
    Stop,
}

/// Reads more of the request into `buf`, doubling its capacity when full.
/// Stops early when `cancel` fires.
async fn read_more<T: AsyncRead + Unpin>(io: &mut T, buf: &mut Vec<u8>, cancel: Option<&CancellationToken>) -> Read {
    if buf.len() == buf.capacity() {
        buf.reserve(buf.capacity().max(FIRST_READ));
    }
    let cancelled = async {
        match cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = cancelled => Read::Stop,
        r = io.read_buf(buf) => match r {
            Ok(0) => Read::Eof,
            Ok(_) => Read::More,
            Err(_) => Read::Stop,
        },
    }
}

/// hyper serves the connection from here on, starting with the bytes already read.
async fn hand_off<T, S>(read: Vec<u8>, io: T, lean: Lean, service: S) -> Result<(), hyper::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let io = TokioIo::new(Rewind::new(Bytes::from(read), io));
    // Boxed: the lean task stays small while it holds a stream; hyper's state is allocated
    // only for a connection that uses it.
    Box::pin(lean.watcher.watch(lean.http1.serve_connection(io, service))).await
}
