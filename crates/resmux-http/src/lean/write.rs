//! Writing one response on the lean path as hyper would write it: the status line, the
//! response's headers, `content-length` for a whole body or `transfer-encoding: chunked` for a
//! stream, `date`. A whole body goes out with its head in one vectored write of its pieces (a
//! cached hit's stored bytes are not copied); a stream's chunks are written as they come with
//! a buffer of their own size. Every write is bounded by the slow-listener time. While a
//! stream is open the socket is read, so that a client that goes away ends it at once (as
//! hyper's connection does).

use std::cell::RefCell;
use std::io::Write as _;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};

use crate::deadline::lazy_timeout as timeout;
use futures_util::FutureExt;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http_body_util::{BodyExt, Either};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::body::{RelayedBody, StreamBody};
use crate::respond::{Resp, give_back};
use crate::spare::{self, Spares};

/// Bytes of a next request read (and kept for hyper) while a stream is open; beyond it the
/// socket is not read until the stream ends, as hyper stops reading at its buffer bound.
const MAX_PIPELINED: usize = 4096;

/// How a response ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Written whole; the connection may carry a next request.
    KeepAlive,
    /// Written whole, and the connection closes (the client or the response asked for it).
    Close,
    /// The client went away, or stopped reading for longer than the slow-listener time.
    Gone,
}

/// Response-head buffers a thread keeps for its next responses.
const SPARE_HEADS: usize = 4;
/// A head buffer that grew past this is not kept.
const KEEP_HEAD: usize = 4096;

thread_local! {
    /// Buffers responses' heads were made in: a head of its own was an allocation per request.
    static HEADS: Spares<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Gives a head buffer back for the thread's next response.
fn give_back_head(mut head: Vec<u8>) {
    if head.capacity() <= KEEP_HEAD {
        head.clear();
        spare::give(&HEADS, head, SPARE_HEADS);
    }
}

/// What is left to write of a response once its head is made.
pub(super) enum Plan {
    Whole(Whole),
    Stream(Streaming),
}

/// A whole body, in its pieces, after its head.
pub(super) struct Whole {
    head: Vec<u8>,
    pieces: [Bytes; 3],
}

/// A stream (a listen's, or a relayed body), after its head.
pub(super) struct Streaming {
    head: Vec<u8>,
    stream: Either<StreamBody, RelayedBody>,
}

/// The first half of writing a response (then [`send_whole`] or [`send_stream`]): takes
/// `resp` apart into its head, made now, and what is left to write; and how the exchange
/// ends if all is written (`close`: the request asked for the connection to close). The
/// writer then holds only that: an open stream (a listener) keeps its chunks' source and its
/// head's buffer, not the response it came from.
pub(super) fn plan(resp: Resp, close: bool) -> (Plan, Ended) {
    let (parts, body) = resp.into_parts();
    let close = close || parts.headers.get(CONNECTION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let done = if close { Ended::Close } else { Ended::KeepAlive };
    let plan = match body {
        Either::Left(whole) => {
            let pieces = whole.into_pieces();
            let head = head(&parts, Some(pieces.iter().map(Bytes::len).sum()), close);
            Plan::Whole(Whole { head, pieces })
        }
        // The response's header map is not kept for the stream's life.
        Either::Right(stream) => Plan::Stream(Streaming { head: head(&parts, None, close), stream }),
    };
    give_back(parts.headers);
    (plan, done)
}

/// Writes `plan` to `io` (see [`send_stream`] for `rest`): for answers written rarely, where
/// a future with room for either kind does not matter.
pub(super) async fn send<T: AsyncRead + AsyncWrite + Unpin>(
    io: &mut T,
    plan: Plan,
    done: Ended,
    slow: Duration,
    rest: &mut BytesMut,
) -> Ended {
    match plan {
        Plan::Whole(whole) => send_whole(io, whole, done, slow).await,
        Plan::Stream(stream) => send_stream(io, stream, done, slow, rest).await,
    }
}

/// Writes a whole answer in one vectored write of its pieces; `done` if all is written.
///
/// Not an `async fn`, which would keep the plan twice (as its argument and as its binding of
/// it); and nothing is done before the future is made, so that the caller's `.await` builds
/// it where it is polled instead of copying it there. The same holds for [`send_stream`].
#[inline]
#[expect(clippy::manual_async_fn, reason = "an async fn holds its arguments twice")]
pub(super) fn send_whole<'a, T: AsyncWrite + Unpin>(
    io: &'a mut T,
    mut whole: Whole,
    done: Ended,
    slow: Duration,
) -> impl Future<Output = Ended> + 'a {
    async move {
        let Whole { head, pieces: [a, b, c] } = &mut whole;
        // The head as a slice: `Bytes::from` a `Vec` with spare capacity would allocate again.
        let mut out = Buf::chain(head.as_slice(), a).chain(b).chain(c);
        let written = matches!(timeout(slow, io.write_all_buf(&mut out)).await, Ok(Ok(())));
        give_back_head(std::mem::take(head));
        if written { done } else { Ended::Gone }
    }
}

/// Writes a stream's head, then its chunks as they come, reading what the client sends
/// meanwhile into `rest`; `done` if all is written. An open listen stream is this future for
/// hours, so it holds the stream's parts only.
#[inline]
#[expect(clippy::manual_async_fn, reason = "an async fn holds its arguments twice")]
pub(super) fn send_stream<'a, T: AsyncRead + AsyncWrite + Unpin>(
    io: &'a mut T,
    mut streaming: Streaming,
    done: Ended,
    slow: Duration,
    rest: &'a mut BytesMut,
) -> impl Future<Output = Ended> + 'a {
    async move {
        let Streaming { head, stream } = &mut streaming;
        let written = write(io, head, slow).await;
        give_back_head(std::mem::take(head));
        if !written {
            return Ended::Gone;
        }
        loop {
            // The chunk is made before it is written: the frame it came in is not kept in this
            // future while the write waits (nor room for it while the stream is idle).
            let out = tokio::select! {
                frame = stream.frame() => match frame {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) if !data.is_empty() => chunk(&data),
                        _ => continue,
                    },
                    // A relayed body failed upstream: abort, as hyper does.
                    Some(Err(_)) => return Ended::Gone,
                    None => break,
                },
                r = read_pipelined(io, rest), if rest.len() < MAX_PIPELINED => match r {
                    Ok(0) | Err(_) => return Ended::Gone,
                    Ok(_) => continue,
                },
            };
            if !write(io, &out, slow).await {
                return Ended::Gone;
            }
        }
        if write(io, b"0\r\n\r\n", slow).await { done } else { Ended::Gone }
    }
}

/// `data` as one chunk of a chunked body.
fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 12);
    let _ = write!(out, "{:X}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// Reads what the client sends while a stream is open into `rest` (up to [`MAX_PIPELINED`]),
/// through a buffer on the stack: an open stream's `rest` stays unallocated until something
/// comes, where tokio's `read_buf` reserves room in it before each read (64 bytes held by
/// every idle listener, measured with DHAT).
fn read_pipelined<'a, T: AsyncRead + Unpin>(
    io: &'a mut T,
    rest: &'a mut BytesMut,
) -> impl Future<Output = std::io::Result<usize>> + 'a {
    std::future::poll_fn(move |cx| {
        let mut room = [0u8; 512];
        let want = MAX_PIPELINED.saturating_sub(rest.len()).min(room.len());
        let mut read = ReadBuf::new(&mut room[..want]);
        std::task::ready!(Pin::new(&mut *io).poll_read(cx, &mut read))?;
        rest.extend_from_slice(read.filled());
        Poll::Ready(Ok(read.filled().len()))
    })
}

/// Writes `bytes` whole within `slow`; false when the client went away or did not read.
fn write<'a, T: AsyncWrite + Unpin>(io: &'a mut T, bytes: &'a [u8], slow: Duration) -> impl Future<Output = bool> + 'a {
    timeout(slow, io.write_all(bytes)).map(|r| matches!(r, Ok(Ok(()))))
}

/// The response head, with the framing headers hyper would add, in a spare buffer.
fn head(parts: &http::response::Parts, length: Option<usize>, close: bool) -> Vec<u8> {
    let mut out = spare::take(&HEADS);
    out.reserve(256);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // hyper adds `connection: close` to the response's own headers, and writes the framing
    // header after them.
    if close && !parts.headers.contains_key(CONNECTION) {
        out.extend_from_slice(b"connection: close\r\n");
    }
    match length {
        // No length on a status that cannot have a body, as hyper.
        Some(_) if matches!(parts.status, http::StatusCode::NO_CONTENT | http::StatusCode::NOT_MODIFIED) => {}
        Some(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        None => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    if !parts.headers.contains_key(DATE) {
        out.extend_from_slice(b"date: ");
        date(&mut out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

thread_local! {
    /// The `date` value of the current second, formatted once per second per thread (as
    /// hyper caches its own).
    static NOW: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Appends the HTTP date of now to `out`.
fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    NOW.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{channel, full};
    use bytes::Bytes;
    use http::{Response, StatusCode};
    use tokio::io::AsyncReadExt;

    async fn written(resp: Resp, close: bool) -> (Ended, String) {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let (plan, done) = plan(resp, close);
        let ended = send(&mut a, plan, done, Duration::from_secs(5), &mut BytesMut::new()).await;
        drop(a);
        let mut out = String::new();
        b.read_to_string(&mut out).await.unwrap();
        (ended, out)
    }

    #[tokio::test]
    async fn a_whole_body_has_its_length_and_a_date() {
        let mut resp = Response::new(full(Bytes::from_static(b"{\"ok\":1}")));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        resp.headers_mut().insert("retry-after", "1".parse().unwrap());
        let (ended, out) = written(resp, false).await;
        assert_eq!(ended, Ended::KeepAlive);
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"), "{head}");
        assert!(head.contains("\r\nretry-after: 1\r\ncontent-length: 8\r\ndate: "), "{head}");
        assert_eq!(body, "{\"ok\":1}");
    }

    #[tokio::test]
    async fn a_body_in_pieces_goes_out_whole_after_its_head() {
        let resp = Response::new(crate::body::pieces([
            Bytes::from_static(b"{\"a\":"),
            Bytes::new(),
            Bytes::from_static(b"[1,2]}"),
        ]));
        let (ended, out) = written(resp, true).await;
        assert_eq!(ended, Ended::Close);
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 11\r\ndate: "), "{head}");
        assert_eq!(body, "{\"a\":[1,2]}");
        let date = head.split("date: ").nth(1).unwrap();
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    }

    #[tokio::test]
    async fn a_status_without_a_body_has_no_length() {
        let mut resp = Response::new(full(Bytes::new()));
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let (_, out) = written(resp, false).await;
        assert!(out.starts_with("HTTP/1.1 204 No Content\r\ndate: "), "{out}");
    }

    #[tokio::test]
    async fn a_stream_is_chunked_and_ends_with_the_last_chunk() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(Bytes::from_static(b"data: a\n\n")).await.unwrap();
        tx.send(Bytes::from_static(b":\n\n")).await.unwrap();
        drop(tx);
        let resp = Response::new(channel(rx));
        let (ended, out) = written(resp, true).await;
        assert_eq!(ended, Ended::Close);
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("\r\nconnection: close\r\ntransfer-encoding: chunked\r\n"), "{head}");
        assert_eq!(body, "9\r\ndata: a\n\n\r\n3\r\n:\n\n\r\n0\r\n\r\n");
    }

    #[tokio::test]
    async fn a_client_that_goes_away_ends_the_stream() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let (_tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        drop(b);
        let resp = Response::new(channel(rx));
        let (plan, done) = plan(resp, false);
        let ended = send(&mut a, plan, done, Duration::from_secs(5), &mut BytesMut::new()).await;
        assert_eq!(ended, Ended::Gone);
    }
}
