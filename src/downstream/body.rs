//! Response bodies: a whole body, or a stream fed through a bounded channel (listen streams).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Frame;
use tokio::sync::mpsc;

/// The body of every downstream response.
pub type Body = Either<Full<Bytes>, ChannelBody>;

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

/// A whole body.
pub fn full(bytes: Bytes) -> Body {
    Either::Left(Full::new(bytes))
}
