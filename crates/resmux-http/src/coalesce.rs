//! Small writes of an HTTP/2 connection gathered into one `write`.
//!
//! hyper's HTTP/2 connection task writes out what its streams queued each time it runs, and
//! each stream that sends a frame wakes it. With many listen streams each sending one
//! notification, it ran (and wrote) about once per frame: 100,000 listeners on 100
//! connections made 0.65 `writev` calls per notification, a third of the proxy's CPU
//! (loadtests/README.md, "round nine"). Gathering pays only if a connection's streams run
//! together: the hub wakes a topic's listeners grouped by connection for this (in a random
//! order, a connection gathered one or two frames per `send` whatever its yield;
//! `loadtests/results/listeners-issue32.md`, "Gathered writes").
//!
//! [`Coalesced`] sits under hyper on connections that may speak HTTP/2. Once the first bytes
//! read show the HTTP/2 preface, writes of at most [`SMALL`] bytes are copied into its buffer
//! and answered at once; the first `poll_flush` with bytes buffered yields instead (the task
//! wakes itself and goes to the back of the run queue), so the other streams woken by the
//! same change run and queue their frames first; the next `poll_flush` writes them all. A
//! flush with at least [`LIMIT`]`/2` bytes buffered, a write that would pass [`LIMIT`], and
//! every larger write go out at once, so a bulk body is neither copied nor delayed. An
//! HTTP/1 connection passes straight through: hyper already writes a response in one go.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The HTTP/2 connection preface (RFC 9113 §3.4) a client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Largest write gathered; a larger one goes straight to the socket.
pub const SMALL: usize = 4 << 10;
/// Most bytes gathered before they are written.
pub const LIMIT: usize = 64 << 10;
/// Buffer capacity kept between bursts; a larger one is freed once written.
const KEEP: usize = 4 << 10;

/// A connection's socket, gathering the small writes of HTTP/2 between flushes.
pub struct Coalesced<T> {
    io: T,
    /// Whether the connection speaks HTTP/2: unknown until its first bytes are read.
    h2: Option<bool>,
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    written: usize,
    /// A flush has yielded once since `buf` last went out.
    yielded: bool,
}

impl<T> Coalesced<T> {
    pub fn new(io: T) -> Self {
        Self { io, h2: None, buf: Vec::new(), written: 0, yielded: false }
    }

    fn gathering(&self) -> bool {
        self.h2 == Some(true)
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes out everything gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        self.yielded = false;
        if self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        Poll::Ready(Ok(()))
    }

    /// Gathers `len` bytes (given by `copy`) when they are small and fit, first writing out
    /// what is gathered when they would not fit; `None` when they go straight to the socket.
    fn poll_gather(
        &mut self,
        cx: &mut Context<'_>,
        len: usize,
        copy: impl FnOnce(&mut Vec<u8>),
    ) -> Poll<io::Result<Option<usize>>> {
        if len > SMALL || self.buf.len() + len > LIMIT {
            ready!(self.poll_drain(cx))?;
            if len > SMALL {
                return Poll::Ready(Ok(None));
            }
        }
        copy(&mut self.buf);
        Poll::Ready(Ok(Some(len)))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.h2.is_none() && buf.filled().len() > before {
            let first = &buf.filled()[before..];
            let n = first.len().min(PREFACE.len());
            self.h2 = Some(first[..n] == PREFACE[..n]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.gathering()
            && let Some(n) = ready!(this.poll_gather(cx, data.len(), |b| b.extend_from_slice(data)))?
        {
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.gathering() {
            let len = bufs.iter().map(|b| b.len()).sum();
            let copy = |b: &mut Vec<u8>| bufs.iter().for_each(|s| b.extend_from_slice(s));
            if let Some(n) = ready!(this.poll_gather(cx, len, copy))? {
                return Poll::Ready(Ok(n));
            }
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.written < this.buf.len() {
            if !this.yielded && this.buf.len() < LIMIT / 2 {
                // Let the streams woken with this one queue their frames first.
                this.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    /// A connection whose peer sent `first`, and the peer's end.
    async fn connection(first: &[u8]) -> (Coalesced<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
        let (ours, mut theirs) = duplex(1 << 20);
        theirs.write_all(first).await.unwrap();
        let mut c = Coalesced::new(ours);
        let mut got = vec![0; first.len()];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(got, first);
        (c, theirs)
    }

    /// Flushes `c`; how many polls that took.
    async fn flushes(c: &mut Coalesced<tokio::io::DuplexStream>) -> usize {
        let mut polls = 0;
        poll_fn(|cx| {
            polls += 1;
            Pin::new(&mut *c).poll_flush(cx)
        })
        .await
        .unwrap();
        polls
    }

    /// What the peer can read now, without waiting.
    fn readable(peer: &mut tokio::io::DuplexStream) -> Vec<u8> {
        let mut out = Vec::new();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        loop {
            let mut chunk = [0u8; 4096];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut *peer).poll_read(&mut cx, &mut rb) {
                Poll::Ready(Ok(())) if !rb.filled().is_empty() => out.extend_from_slice(rb.filled()),
                _ => return out,
            }
        }
    }

    #[tokio::test]
    async fn http2_small_writes_wait_for_the_second_flush_and_go_out_together() {
        let (mut c, mut peer) = connection(PREFACE).await;
        c.write_all(b"one").await.unwrap();
        c.write_all(b"two").await.unwrap();
        assert!(readable(&mut peer).is_empty(), "gathered, not written");
        // The first flush yields (and wakes its task); the next one writes.
        let polls = flushes(&mut c).await;
        assert_eq!(polls, 2);
        assert_eq!(readable(&mut peer), b"onetwo");
        // Nothing gathered: a flush is the socket's own.
        let polls = flushes(&mut c).await;
        assert_eq!(polls, 1);
    }

    #[tokio::test]
    async fn large_writes_and_full_buffers_go_out_at_once_in_order() {
        let (mut c, mut peer) = connection(PREFACE).await;
        c.write_all(b"head").await.unwrap();
        let big = vec![7u8; SMALL + 1];
        c.write_all(&big).await.unwrap();
        let mut want = b"head".to_vec();
        want.extend_from_slice(&big);
        assert_eq!(readable(&mut peer), want, "what was gathered goes first");
        // Small writes up to the limit: the one that would pass it writes the others first.
        let small = vec![1u8; SMALL];
        for _ in 0..LIMIT / SMALL {
            c.write_all(&small).await.unwrap();
        }
        assert!(readable(&mut peer).is_empty());
        c.write_all(b"x").await.unwrap();
        assert_eq!(readable(&mut peer).len(), LIMIT);
        // Half the limit gathered: the first flush writes it.
        let polls = flushes(&mut c).await;
        assert_eq!((polls, readable(&mut peer)), (2, b"x".to_vec()), "one byte waits one yield");
        for _ in 0..LIMIT / 2 / SMALL {
            c.write_all(&small).await.unwrap();
        }
        let polls = flushes(&mut c).await;
        assert_eq!((polls, readable(&mut peer).len()), (1, LIMIT / 2));
    }

    #[tokio::test]
    async fn http1_passes_straight_through() {
        let (mut c, mut peer) = connection(b"POST /mcp HTTP/1.1\r\n").await;
        c.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        assert_eq!(readable(&mut peer), b"HTTP/1.1 200 OK\r\n");
    }

    #[tokio::test]
    async fn shutdown_writes_what_is_gathered_first() {
        let (mut c, mut peer) = connection(PREFACE).await;
        c.write_all(b"last frame").await.unwrap();
        c.shutdown().await.unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"last frame");
    }
}
