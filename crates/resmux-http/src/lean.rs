//! The lean connection path: 100,000 listeners per box, and a cached read at the speed of a
//! bare server. hyper's HTTP/1 connection keeps an 8 KiB read buffer and an 8 KiB write
//! buffer for its whole life, which is most of what an idle stream costs, and its dispatcher
//! is a good part of what a small request costs. Here a clear-text HTTP/1.1 connection's
//! requests are read into a small buffer and their heads parsed with `httparse`. A small
//! `POST` to the service's path (a stream, told by the service's marker header, with
//! `Limits::lean_streams`; any other with `lean_requests`) is answered by the same service
//! code as on hyper's path ([`Service::serve_front`], which reads its headers where they
//! were read, through [`crate::headers::Raw`]), and its response is written here: a whole
//! body in one vectored write, a stream with a buffer the size of each frame. The connection
//! then waits for its next request the same way. Anything else (including a head over
//! `max_header_bytes`, whatever the reads that brought it) is handed to hyper with the bytes
//! read so far, exactly as if hyper had read them, and hyper serves the connection from that
//! request on: the framing rules are hyper's, and `lean/framing.rs` holds the two paths to
//! the same answers on arbitrary byte streams.

#[cfg(test)]
mod framing;
mod head;
mod rewind;
mod write;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{Method, Uri};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

pub use self::head::Takes;
use self::head::{Bounds, Parsed, Ranges};
use self::rewind::Rewind;
use self::write::{Ended, Plan, Streaming};
use crate::conn_timer::{ConnTimer, InFlight};
use crate::deadline::lazy_timeout;
use crate::headers::{Headers, Raw};
use crate::quiet::Quiet;
use crate::service::{self, Front, Service};

/// The first read's buffer; it doubles up to the head bound as a head needs.
const FIRST_READ: usize = 1024;
/// Largest request body taken on the lean path; a larger one is served by hyper.
const MAX_LEAN_BODY: usize = 64 << 10;
/// A connection's buffer past this size (a large head or body grew it) shrinks back to
/// [`FIRST_READ`] once the request is served.
const KEEP_BUFFER: usize = 8 << 10;

/// What the lean path needs of its connection: the listener's settings, shared by all its
/// connections (an idle listener's connection holds one pointer to them, not its own copy),
/// and the connection's own parts. The shared ones are read through `Deref`.
pub(crate) struct Lean<S: Service> {
    pub shared: Arc<LeanShared<S>>,
    pub peer: SocketAddr,
    pub timer: Arc<ConnTimer>,
    /// Keeps graceful shutdown waiting for this connection, and watches the hand-off.
    pub watcher: Watcher,
}

/// The lean path's settings, one per listener.
pub(crate) struct LeanShared<S: Service> {
    pub service: S,
    /// Which requests it serves.
    pub takes: Takes<S::Known>,
    /// The service's path, as every lean request's target.
    pub uri: Uri,
    /// `max_header_bytes`: a longer head is hyper's to refuse (431).
    pub max_head: usize,
    /// The listener's shutdown: a connection waiting for a request's head closes, and one
    /// whose response is written is not kept open.
    pub cancel: CancellationToken,
    /// hyper's connection settings, for the hand-off.
    pub http1: http1::Builder,
}

impl<S: Service> std::ops::Deref for Lean<S> {
    type Target = LeanShared<S>;

    fn deref(&self) -> &LeanShared<S> {
        &self.shared
    }
}

/// The service's path as a request target (`None`: not one, and the lean path is not used).
pub(crate) fn target(path: &str) -> Option<Uri> {
    Uri::from_maybe_shared(Bytes::copy_from_slice(path.as_bytes())).ok().filter(|u| u.path() == path)
}

/// The listener's shutdown as one connection sees it. `cancel` is shared by every connection
/// of the listener, and both looking at it (`is_cancelled`) and waiting on it (`cancelled`)
/// take its mutex; per request that was five or six lock operations on one lock all the
/// connections share. Here the connection registers once when it starts waiting for
/// requests (and again after a stream), and between requests it costs an atomic load or
/// swap.
struct Shutdown {
    cancel: CancellationToken,
    fired: Quiet<WaitForCancellationFutureOwned>,
}

impl Shutdown {
    fn new(cancel: &CancellationToken) -> Self {
        Self { cancel: cancel.clone(), fired: Quiet::new(cancel.clone().cancelled_owned()) }
    }

    /// Whether the listener is shutting down. Until the wait's waker fires it has not (a
    /// shutdown that is just starting is seen at the next look, as it would be a moment
    /// later with the lock).
    fn is_cancelled(&self) -> bool {
        self.fired.woken() && self.cancel.is_cancelled()
    }
}

/// Serves one connection: its requests here while the lean path takes them, the rest with
/// hyper (the same service, as [`service::for_hyper`] calls it).
///
/// Not an `async fn`, which would hold its arguments twice for the connection's life (as
/// arguments, and as the bindings its body moves them into): the block below uses them
/// where they are. The same holds for [`write::send_stream`].
#[expect(clippy::manual_async_fn, reason = "an async fn holds its arguments twice")]
pub(crate) fn serve<T, S>(mut io: T, lean: Lean<S>) -> impl Future<Output = Result<(), hyper::Error>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service,
{
    async move {
        let mut buf = BytesMut::new();
        // Made again after a stream, which does without it (see below).
        let mut shutdown: Option<Shutdown> = None;
        let stopping = |shutdown: &Option<Shutdown>| {
            shutdown.as_ref().map_or_else(|| lean.cancel.is_cancelled(), Shutdown::is_cancelled)
        };
        let mut ranges = Ranges::new();
        // Some(bytes read): hyper serves the connection from there; None: it closes. Nothing
        // is awaited while the next request's outcome is held: the outcome (150 bytes) would
        // be kept in this future beside an open stream's writer.
        let handed_off = loop {
            let waiting = shutdown.get_or_insert_with(|| Shutdown::new(&lean.cancel));
            // Boxed, and a whole answer is written in the same box: reading, answering and
            // writing a request takes a moment, and none of it stays in this future. Only a
            // stream's write is held for long (a listener's, for hours): this future holds
            // room for that writer and little else.
            let (streaming, done, in_flight) =
                match Box::pin(next_request(&mut io, &lean, buf, &mut ranges, waiting)).await {
                    Next::HandOff(read) => break Some(read),
                    Next::Done => return Ok(()),
                    Next::Written { ended, rest } => {
                        buf = rest;
                        if buf.capacity() > KEEP_BUFFER {
                            buf = BytesMut::from(&buf[..]);
                            ranges = Ranges::new();
                        }
                        if ended != Ended::KeepAlive || stopping(&shutdown) {
                            break None;
                        }
                        continue;
                    }
                    Next::Stream { streaming, done, rest, in_flight } => {
                        // A stream may be open for hours: it keeps only what was pipelined
                        // behind it, and not its wait on the shutdown (about 50 bytes per
                        // listener, measured): a listen stream ends at shutdown by its own
                        // hand, and the look after it takes the lock.
                        buf = BytesMut::from(&rest[..]);
                        ranges = Ranges::new();
                        shutdown = None;
                        // Nor a timer: it has no deadline until it ends.
                        in_flight.held_long();
                        (streaming, done, in_flight)
                    }
                };
            let ended = write::send_stream(&mut io, streaming, done, lean.service.slow_write(), &mut buf).await;
            drop(in_flight);
            if ended != Ended::KeepAlive || stopping(&shutdown) {
                break None;
            }
        };
        match handed_off {
            Some(read) => {
                // hyper's own graceful shutdown takes over.
                drop(shutdown);
                hand_off(read, io, lean).await
            }
            None => close(&mut io, &lean).await,
        }
    }
}

/// Closes the connection's write side, waiting at most the slow-listener time (its timer
/// made only if the close has to wait: room for one in every connection's future would be
/// held for a stream's life).
async fn close<T: AsyncWrite + Unpin, S: Service>(io: &mut T, lean: &Lean<S>) -> Result<(), hyper::Error> {
    let _ = lazy_timeout(lean.service.slow_write(), io.shutdown()).await;
    Ok(())
}

/// What became of a connection's next request.
enum Next {
    /// Not the lean path's: hyper serves it from these bytes on.
    HandOff(BytesMut),
    /// Over (the client went away, or the shutdown came first).
    Done,
    /// Answered with a whole body, written as it `ended`; `rest` is the connection's buffer
    /// with what was read past the request.
    Written { ended: Ended, rest: BytesMut },
    /// Answered with a stream, still to be written (`done`: how the exchange ends if all
    /// is); the request stays in flight until it is.
    Stream { streaming: Streaming, done: Ended, rest: BytesMut, in_flight: InFlight },
}

/// Reads the next request into `buf` (which may hold some of it already); answers it when
/// the lean path takes it.
async fn next_request<T: AsyncRead + AsyncWrite + Unpin, S: Service>(
    io: &mut T,
    lean: &Lean<S>,
    mut buf: BytesMut,
    ranges: &mut Ranges,
    shutdown: &mut Shutdown,
) -> Next {
    let bounds = Bounds { head: lean.max_head, body: MAX_LEAN_BODY.min(lean.service.max_body()) };
    // How much was read when the head was last found partial (hyper's `partial_len`).
    let mut partial = None;
    let head = loop {
        let parsed = match partial {
            Some(prev_len) if !head::may_have_ended(&buf, prev_len) => Parsed::Partial,
            _ => head::parse(&buf, &lean.uri, lean.takes, bounds, ranges),
        };
        match parsed {
            Parsed::Lean(head) => break head,
            // hyper answers a complete head over the bound with 431 (`parse` checks it).
            Parsed::Other => return Next::HandOff(buf),
            // And an unfinished one that reached it (`>=`, as hyper: at the bound the head
            // is not complete, so it would be longer).
            Parsed::Partial if buf.len() >= lean.max_head => return Next::HandOff(buf),
            Parsed::Partial => partial = (!buf.is_empty()).then_some(buf.len()),
        }
        match read_more(io, &mut buf, Some(&mut shutdown.fired)).await {
            Read::More => {}
            // At EOF hyper judges what was sent (an unfinished head, or nothing).
            Read::Eof if !buf.is_empty() => return Next::HandOff(buf),
            Read::Eof | Read::Stop => return Next::Done,
        }
    };
    // The head is in: the request is in flight (no head or idle deadline) while its body
    // arrives within `body_timeout`, as on hyper's path.
    let in_flight = lean.timer.begin();
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
    match lazy_timeout(lean.service.body_timeout(), body).await {
        Ok(true) => {}
        Ok(false) => return Next::Done,
        Err(_) => {
            let resp = lean.service.body_timed_out();
            let (plan, done) = write::plan(resp, true);
            // Boxed: rare, and inline it would grow every request's future.
            Box::pin(write::send(io, plan, done, lean.service.slow_write(), &mut BytesMut::new())).await;
            return Next::Done;
        }
    }
    let resp = {
        // The request's bytes, frozen: the service reads its headers where they are, and its
        // body is a slice of them. Let go before the answer is written.
        let bytes = buf.split_to(need).freeze();
        // The head parse checked the names' lengths and noted the known ones.
        let headers = Raw::from_httparse(&bytes[..head.head_len], ranges, head.first);
        let front =
            Front { method: &Method::POST, path: lean.uri.path(), authority: None, headers: Headers::Raw(headers) };
        let body = Full::new(bytes.slice(head.head_len..));
        lean.service.serve_front(front, body, Some(lean.peer)).await
    };
    // At shutdown the answer says the connection closes, as hyper's graceful shutdown does.
    let close = head.close || shutdown.is_cancelled();
    match write::plan(resp, close) {
        (Plan::Stream(streaming), done) => Next::Stream { streaming, done, rest: buf, in_flight },
        (Plan::Whole(whole), done) => {
            let ended = write::send_whole(io, whole, done, lean.service.slow_write()).await;
            drop(in_flight);
            Next::Written { ended, rest: buf }
        }
    }
}

/// The outcome of one read.
enum Read {
    More,
    Eof,
    /// The read failed, or the listener is shutting down.
    Stop,
}

/// Reads more of the request into `buf`, with room for at least [`FIRST_READ`] (doubling its
/// capacity as a large head fills it).
/// Stops early when the shutdown fires (the caller does not wait on it again after that).
async fn read_more<T: AsyncRead + Unpin>(
    io: &mut T,
    buf: &mut BytesMut,
    shutdown: Option<&mut Quiet<WaitForCancellationFutureOwned>>,
) -> Read {
    // At least `FIRST_READ` of room. tokio takes a read that leaves room in the buffer as
    // proof the socket is drained and waits for readiness before the next one; a read that
    // fills it costs another `recvfrom` for the rest. After a request is split off, the rest
    // of the buffer has only what that request left of the capacity (424 bytes of 1,024
    // after a 600-byte read), so a request that did not fit took two reads: about one
    // request in four under wrk. An empty buffer whose allocation is its own gets that
    // allocation back here without allocating; a fuller one doubles.
    if buf.capacity() - buf.len() < FIRST_READ {
        buf.reserve(buf.len().max(FIRST_READ));
    }
    let cancelled = async {
        match shutdown {
            Some(fired) => fired.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = cancelled => Read::Stop,
        r = io.read_buf(buf) => match r {
            Ok(0) => Read::Eof,
            Ok(_) => Read::More,
            Err(_) => Read::Stop,
        },
    }
}

/// hyper serves the connection from here on, starting with the bytes already read. Boxed:
/// the lean connection stays small while it holds a stream; hyper's state (and its service
/// for this connection) is made only for a connection that uses it.
fn hand_off<T, S>(read: BytesMut, io: T, lean: Lean<S>) -> Pin<Box<impl Future<Output = Result<(), hyper::Error>>>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service,
{
    let io = TokioIo::new(Rewind::new(read.freeze(), io));
    let hyper_service = service::for_hyper(lean.service.clone(), lean.timer.clone(), lean.peer);
    let conn = lean.http1.serve_connection(io, hyper_service);
    Box::pin(lean.watcher.watch(conn))
}

/// hyper's HTTP/1 settings for a head bound of `max_header_bytes`: `max_header_size`, and the
/// read buffer (at least hyper's smallest). No hyper timer (so no `header_read_timeout`): the
/// connection timer times heads and idle connections.
pub(crate) fn http1_builder(max_header_bytes: usize) -> hyper::server::conn::http1::Builder {
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.max_header_size(max_header_bytes).max_buf_size(max_header_bytes.max(8192));
    http1
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// The next request on a kept-alive connection lands in what the last one left of the
    /// buffer. It must be read whole in one read (a read that fills the buffer costs tokio
    /// another `recvfrom`), into the same allocation.
    #[tokio::test]
    async fn a_request_after_one_served_is_read_whole_in_one_read_without_allocating() {
        let mut buf = BytesMut::with_capacity(FIRST_READ);
        let start = buf.as_ptr();
        buf.extend_from_slice(&[b'a'; 600]);
        drop(buf.split_to(600)); // the request served
        let (mut client, mut server) = tokio::io::duplex(4 * FIRST_READ);
        client.write_all(&[b'b'; 600]).await.unwrap();
        assert!(matches!(read_more(&mut server, &mut buf, None).await, Read::More));
        assert_eq!(buf.len(), 600, "the request took more than one read");
        assert_eq!(buf.as_ptr(), start, "the buffer's own allocation was not reused");
    }

    /// A head larger than the buffer still grows it, by doubling.
    #[tokio::test]
    async fn a_full_buffer_doubles() {
        let mut buf = BytesMut::with_capacity(FIRST_READ);
        buf.extend_from_slice(&[b'a'; FIRST_READ]);
        let (mut client, mut server) = tokio::io::duplex(8 * FIRST_READ);
        client.write_all(&[b'b'; 3 * FIRST_READ]).await.unwrap();
        assert!(matches!(read_more(&mut server, &mut buf, None).await, Read::More));
        assert!(buf.capacity() >= 2 * FIRST_READ);
        assert!(buf.len() > FIRST_READ);
    }
}
