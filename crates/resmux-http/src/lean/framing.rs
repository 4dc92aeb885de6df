//! The lean path held to hyper's framing. The same byte stream, cut into the same reads, goes
//! to a connection served by the lean path (with hyper behind it for what it hands off) and
//! to one served by plain hyper with the same settings, both in front of the same toy
//! [`Service`]; the bytes written back (`date` values aside) and whether the connection was
//! closed must be the same. [`grammar`] makes the streams: request heads with valid and
//! invalid framing, pipelined, cut at random points.
//!
//! A connection's reads come from a script: each read returns the next cut (or as much of it
//! as fits), and once the script is done a read never completes, as a client that keeps the
//! connection open and says nothing. Time is paused, so "the server did nothing more" is
//! decided at once: the runtime advances its clock to the verdict's deadline only when every
//! task is idle.

mod grammar;
mod mirror;
mod toy;

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::Uri;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use proptest::prelude::*;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::{Lean, LeanShared, Takes, http1_builder};
use crate::conn_timer::ConnTimer;
use crate::service::Service;
use toy::Toy;

/// The head bound both servers have (hyper's smallest read buffer).
const MAX_HEAD: usize = 8192;
/// How long an idle server is given before its connection counts as kept open (paused time:
/// no real wait).
const VERDICT: Duration = Duration::from_secs(10);

/// A connection's reads, from a script; its writes, kept.
struct Scripted {
    reads: VecDeque<Bytes>,
    written: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for Scripted {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let Some(next) = self.reads.front_mut() else { return Poll::Pending };
        let n = next.len().min(buf.remaining());
        buf.put_slice(&next[..n]);
        next.advance(n);
        if next.is_empty() {
            self.reads.pop_front();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.written.lock().expect("not poisoned").extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What a client saw of a connection.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// Everything written back, each `date` value blanked.
    written: String,
    /// The server closed the connection (its task ended) rather than wait for more.
    closed: bool,
}

/// Which server answers.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// The lean path, taking every request it can, with hyper behind it.
    Lean,
    /// hyper alone.
    Hyper,
}

/// Serves `reads` on one connection of `server`.
async fn serve(server: Server, reads: Vec<Bytes>) -> Seen {
    let (written, closed) = exchange(server, reads).await;
    Seen { written: blank_dates(&String::from_utf8_lossy(&written)), closed }
}

/// What `server` writes back to `reads`, as it wrote it.
async fn serve_raw(server: Server, reads: Vec<Bytes>) -> String {
    String::from_utf8_lossy(&exchange(server, reads).await.0).into_owned()
}

/// What `server` writes back to `reads`, and whether it closed the connection.
async fn exchange(server: Server, reads: Vec<Bytes>) -> (Vec<u8>, bool) {
    let written = Arc::new(Mutex::new(Vec::new()));
    let io = Scripted { reads: reads.into(), written: written.clone() };
    // Kept alive for the connection's life: its end is a shutdown signal to the watchers.
    let graceful = GracefulShutdown::new();
    let lean = toy_connection(&graceful);
    let run = async {
        match server {
            Server::Hyper => {
                let hyper_service = crate::service::for_hyper(Toy, lean.timer.clone(), lean.peer);
                let _ = http1_builder(MAX_HEAD).serve_connection(TokioIo::new(io), hyper_service).await;
            }
            Server::Lean => {
                let _ = super::serve(io, lean).await;
            }
        }
    };
    let closed = tokio::time::timeout(VERDICT, run).await.is_ok();
    let written = std::mem::take(&mut *written.lock().expect("not poisoned"));
    drop(graceful);
    (written, closed)
}

/// One connection's lean settings in front of the toy (hyper's path calls the same toy).
fn toy_connection(graceful: &GracefulShutdown) -> Lean<Toy> {
    let timer = ConnTimer::new(Duration::from_secs(3600), Duration::from_secs(3600));
    let (marker, marker_value) = Toy::STREAM_MARKER;
    let shared = LeanShared {
        service: Toy,
        takes: Takes { streams: true, requests: true, marker, marker_value },
        uri: Uri::from_static(toy::PATH),
        max_head: MAX_HEAD,
        cancel: CancellationToken::new(),
        http1: http1_builder(MAX_HEAD),
    };
    Lean { shared: Arc::new(shared), peer: SocketAddr::from(([127, 0, 0, 1], 9)), timer, watcher: graceful.watcher() }
}

/// What an idle listener's connection holds on the lean path is mostly its futures: the
/// connection's (with the listener's settings behind one pointer), and within it the open
/// stream's writer (with the response taken apart before it starts). Measured in this test
/// profile with the toy service (240 and 496 bytes); the bounds leave room for a compiler's
/// layout changes, and fail if an `async fn` holding its arguments twice, the listener's
/// settings copied per connection, hyper's hand-off state, a request's reading or a whole
/// answer's writing, or a frame kept while its chunk is written, comes back into them (each
/// is a hundred bytes or more).
#[test]
fn an_idle_lean_connection_holds_little() {
    let graceful = GracefulShutdown::new();
    let lean = toy_connection(&graceful);
    let mut io = Scripted { reads: VecDeque::new(), written: Arc::new(Mutex::new(Vec::new())) };
    let mut rest = bytes::BytesMut::new();
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let (plan, done) =
        super::write::plan(crate::respond::with_type(http::StatusCode::OK, crate::body::channel(rx)), false);
    let super::write::Plan::Stream(streaming) = plan else { panic!("a channel body is a stream") };
    let stream = super::write::send_stream(&mut io, streaming, done, VERDICT, &mut rest);
    let writer = std::mem::size_of_val(&stream);
    drop(stream);
    let connection = std::mem::size_of_val(&super::serve(io, lean));
    eprintln!("stream writer {writer} B, connection {connection} B");
    assert!(writer <= 280, "a stream's writer holds {writer} B");
    assert!(connection <= 560, "a lean connection holds {connection} B");
}

/// `text` with every `date: ` header's value blanked (the two servers' clocks may tick apart).
fn blank_dates(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\r\ndate: ") {
        let start = at + "\r\ndate: ".len();
        out.push_str(&rest[..start]);
        let end = rest[start..].find("\r\n").map_or(rest.len(), |n| start + n);
        out.push_str("<date>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `stream` cut at `cuts` (offsets, any order, out-of-range ones ignored).
fn cut(stream: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    let mut at: Vec<usize> = cuts.iter().copied().filter(|&c| c > 0 && c < stream.len()).collect();
    at.sort_unstable();
    at.dedup();
    let mut reads = Vec::with_capacity(at.len() + 1);
    let mut from = 0;
    for to in at.into_iter().chain([stream.len()]) {
        reads.push(Bytes::copy_from_slice(&stream[from..to]));
        from = to;
    }
    reads.retain(|r| !r.is_empty());
    reads
}

/// Both servers' answers to `reads`.
fn both(reads: &[Bytes]) -> (Seen, Seen) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("a runtime");
    rt.block_on(async { (serve(Server::Lean, reads.to_vec()).await, serve(Server::Hyper, reads.to_vec()).await) })
}

fn cases() -> u32 {
    std::env::var("FRAMING_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Arbitrary pipelined requests, valid and invalid, cut into arbitrary reads: the lean
    /// path answers byte for byte as hyper does, and closes the connection when hyper does.
    #[test]
    fn the_lean_path_frames_every_stream_as_hyper_does(
        stream in grammar::stream(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len().max(1))).collect();
        let reads = cut(&stream, &cuts);
        let (mut lean, mut hyper) = both(&reads);
        if over_the_bound(&stream) {
            lean.written = one_refusal(&lean.written);
            hyper.written = one_refusal(&hyper.written);
        }
        prop_assert_eq!(&lean, &hyper, "sent {:?} in reads of {:?}", String::from_utf8_lossy(&stream), reads.iter().map(Bytes::len).collect::<Vec<_>>());
    }
}

/// Whether `stream` has a head line about as long as the head bound.
fn over_the_bound(stream: &[u8]) -> bool {
    stream.split(|&b| b == b'\n').any(|line| line.len() >= MAX_HEAD - 400)
}

/// `written` with a 431 written as the 400 it would otherwise be. A head that is both over
/// the bound and malformed gets either from hyper itself, depending on its reads: after a
/// partial parse hyper parses again only once it sees the end of a head (`is_complete_fast`),
/// so whether it finds the malformed line before the buffer reaches the bound depends on
/// where the reads ended (`hyper_itself_answers_a_malformed_oversized_head_by_its_reads`).
/// Everything else about the answer (that there is one, that it closes) must still agree.
fn one_refusal(written: &str) -> String {
    written.replace("HTTP/1.1 431 Request Header Fields Too Large\r\n", "HTTP/1.1 400 Bad Request\r\n")
}

/// Why the two refusals are one class in the property above: hyper alone, given the same
/// malformed oversized head in other reads, answers 400 or 431.
#[test]
fn hyper_itself_answers_a_malformed_oversized_head_by_its_reads() {
    let pad = "p".repeat(MAX_HEAD - 400);
    let head = format!("POST /mcp HTTP/1.1\r\nx-pad: {pad}\r\nx-fold: a\r\n b\r\nx-pad: {pad}\r\n\r\n");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("a runtime");
    let status = |reads: Vec<Bytes>| {
        let seen = rt.block_on(serve(Server::Hyper, reads));
        seen.written.get(9..12).map(str::to_owned)
    };
    assert_eq!(status(vec![Bytes::from(head.clone())]).as_deref(), Some("400"), "the whole head at once");
    assert_eq!(status(cut(head.as_bytes(), &[1])).as_deref(), Some("431"), "one byte, then the rest");
}

/// A head over the bound that arrives whole in one read, after a first read that left it
/// short of the bound: the lean path must not serve it, whatever the reads' sizes.
#[test]
fn a_head_over_the_bound_is_refused_when_it_arrives_in_one_read() {
    let filler = format!("x-fill: {}\r\n", "f".repeat(MAX_HEAD));
    let head = format!("POST {} HTTP/1.1\r\nhost: a\r\n{filler}content-length: 2\r\n\r\n{{}}", toy::PATH);
    // The whole request in one read, and in a short first read then the rest at once.
    for reads in [vec![Bytes::from(head.clone())], cut(head.as_bytes(), &[100])] {
        let (lean, hyper) = both(&reads);
        assert!(hyper.written.starts_with("HTTP/1.1 431 "), "{}", hyper.written);
        assert_eq!(lean, hyper);
    }
}

/// The lean path serves what it takes itself (or the comparisons above would only compare
/// hyper with hyper): a request it takes is answered without hyper.
#[test]
fn the_toy_tells_the_lean_path_from_hyper() {
    let request = format!("POST {} HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{{}}", toy::PATH);
    let (lean, hyper) = both(&[Bytes::from(request)]);
    assert_eq!(lean, hyper);
    assert_eq!(toy::lean_served(), 1, "served by the lean path exactly once");
}

#[test]
fn dates_are_blanked_and_cuts_cover_the_stream() {
    assert_eq!(blank_dates("a\r\ndate: Fri, 04 Dec 2026 23:55:51 GMT\r\nb"), "a\r\ndate: <date>\r\nb");
    let reads = cut(b"abcdef", &[4, 2, 2, 0, 99]);
    assert_eq!(reads, [Bytes::from_static(b"ab"), Bytes::from_static(b"cd"), Bytes::from_static(b"ef")]);
}

/// A malformed start of a pipelined request that arrives in two reads (`a` with the request
/// before it, then `{`): hyper parses a partial head again only once its end may be in, so it
/// waits, where the same bytes in one read get a 400. The lean path must do both likewise.
#[test]
fn a_malformed_start_waits_for_its_end_as_hyper_does() {
    let stream = format!("POST {} HTTP/1.1\r\ncontent-length: 0\r\n\r\na{{", toy::PATH);
    let first = stream.len() - 1;
    let (lean, hyper) = both(&cut(stream.as_bytes(), &[first]));
    assert!(!hyper.closed && !hyper.written.contains("400"), "{hyper:?}");
    assert_eq!(lean, hyper);
    let (lean, hyper) = both(&cut(stream.as_bytes(), &[]));
    assert!(hyper.closed && hyper.written.contains("HTTP/1.1 400 "), "{hyper:?}");
    assert_eq!(lean, hyper);
    // And once the head seems to end, both parse it again and refuse it.
    let ended = format!("{stream}\r\n\r\n");
    let (lean, hyper) = both(&cut(ended.as_bytes(), &[first, first + 1]));
    assert!(hyper.closed && hyper.written.contains("HTTP/1.1 400 "), "{hyper:?}");
    assert_eq!(lean, hyper);
}
