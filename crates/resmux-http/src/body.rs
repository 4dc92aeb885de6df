//! Response bodies: a whole body (in up to three pieces written back to back, so that a cached
//! result is written without being copied), a stream fed through a bounded channel (listen
//! streams), or a body relayed from elsewhere as it arrives, between a head and a tail.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body_util::Either;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;

/// A relayed body's failure: the source's error, whatever it is (hyper only aborts on it).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response served through this crate.
pub type Body = Either<Pieces, Either<ChannelBody, RelayedBody>>;

/// A whole body in pieces: each is one frame, none is copied.
pub struct Pieces {
    pieces: [Bytes; 3],
    next: usize,
}

impl Pieces {
    /// The pieces not yet taken as frames, to be written without going through frames.
    pub(crate) fn into_pieces(mut self) -> [Bytes; 3] {
        self.pieces[..self.next.min(3)].fill(Bytes::new());
        self.pieces
    }
}

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        while self.next < self.pieces.len() {
            let n = self.next;
            self.next += 1;
            let piece = std::mem::take(&mut self.pieces[n]);
            if piece.has_remaining() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.pieces[self.next.min(3)..].iter().all(Bytes::is_empty)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.pieces[self.next.min(3)..].iter().map(|p| p.len() as u64).sum())
    }
}

/// A body whose chunks come from a channel; it ends when every sender is gone. When the
/// client goes away hyper drops it, which the sender sees as a closed channel.
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    pub fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        Self { rx }
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

/// The pieces of a relayed body as they arrive.
pub type Relayed = Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, BoxError>> + Send>>;

/// A relayed body: a head, the pieces as the source sends them, a tail. A failure of the
/// source mid-way is the body's error, on which hyper aborts the response (the client sees
/// it incomplete, never as a well-formed end).
pub struct RelayedBody {
    head: Option<Bytes>,
    stream: Option<Relayed>,
    tail: Bytes,
}

impl hyper::body::Body for RelayedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(head) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        let Some(stream) = self.stream.as_mut() else { return Poll::Ready(None) };
        match futures_util::ready!(stream.as_mut().poll_next(cx)) {
            Some(piece) => Poll::Ready(Some(piece.map(Frame::data))),
            None => {
                self.stream = None;
                Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut self.tail)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.stream.is_none()
    }
}

/// A whole body.
#[inline]
pub fn full(bytes: Bytes) -> Body {
    pieces([bytes, Bytes::new(), Bytes::new()])
}

/// A whole body written from pieces.
#[inline]
pub fn pieces(pieces: [Bytes; 3]) -> Body {
    Either::Left(Pieces { pieces, next: 0 })
}

/// A streamed body fed by a channel.
pub fn channel(rx: mpsc::Receiver<Bytes>) -> Body {
    Either::Right(Either::Left(ChannelBody::new(rx)))
}

/// A relayed body: `head`, the pieces of `stream` as they come, `tail`.
pub fn relayed(head: Bytes, stream: Relayed, tail: Bytes) -> Body {
    Either::Right(Either::Right(RelayedBody { head: Some(head), stream: Some(stream), tail }))
}
