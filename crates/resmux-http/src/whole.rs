//! A message's whole body, at most a bound: every body resmux reads whole (a request's
//! downstream, a response's upstream, a token or JWKS answer, the sample server's requests).
//! `http_body_util`'s `collect` keeps every frame in a buffer list that allocates even for one
//! frame, and a lean request's body is always one frame. Here one frame is returned as it is,
//! and only a body in several frames is copied into one buffer (as `collect` then copies it
//! too).

use std::error::Error as StdError;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum WholeError {
    /// More than the bound arrived.
    #[error("body over {limit} bytes")]
    TooLarge { limit: usize },
    /// The body failed (the client went away, or its framing was wrong).
    #[error("cannot read body: {0}")]
    Read(#[source] Box<dyn StdError + Send + Sync>),
}

/// Reads `body` whole; more than `limit` bytes is [`WholeError::TooLarge`], as soon as they
/// arrive. Trailers are ignored.
pub async fn whole<B>(body: B, limit: usize) -> Result<Bytes, WholeError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut body = std::pin::pin!(body);
    // The first frame, until a second one comes; then every frame, joined.
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| WholeError::Read(e.into()))?.into_data() else { continue };
        let len = joined.as_ref().map_or(first.len(), BytesMut::len);
        if len.saturating_add(data.len()) > limit {
            return Err(WholeError::TooLarge { limit });
        }
        if let Some(joined) = &mut joined {
            joined.extend_from_slice(&data);
        } else if first.is_empty() {
            first = data;
        } else if !data.is_empty() {
            let mut buf = BytesMut::with_capacity(len + data.len());
            buf.extend_from_slice(&first);
            buf.extend_from_slice(&data);
            joined = Some(buf);
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use hyper::body::Frame;

    /// A body of the given frames (`None`: a trailers frame), then an error when `fails`.
    struct Frames {
        frames: Vec<Option<&'static [u8]>>,
        fails: bool,
    }

    impl hyper::body::Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.frames.is_empty() {
                let fails = std::mem::take(&mut self.fails);
                return Poll::Ready(fails.then(|| Err(std::io::Error::other("reset"))));
            }
            Poll::Ready(Some(Ok(match self.frames.remove(0) {
                Some(data) => Frame::data(Bytes::from_static(data)),
                None => Frame::trailers(http::HeaderMap::new()),
            })))
        }
    }

    fn body(frames: &[Option<&'static [u8]>]) -> Frames {
        Frames { frames: frames.to_vec(), fails: false }
    }

    #[tokio::test]
    async fn one_frame_is_returned_as_it_is() {
        let data: &'static [u8] = b"{\"jsonrpc\":\"2.0\"}";
        let got = whole(body(&[Some(data)]), 100).await.unwrap();
        assert_eq!(got.as_ptr(), data.as_ptr(), "not copied");
        let full = http_body_util::Full::new(Bytes::from_static(data));
        assert_eq!(whole(full, 100).await.unwrap().as_ptr(), data.as_ptr());
        let empty = http_body_util::Empty::<Bytes>::new();
        assert!(whole(empty, 100).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn frames_are_joined_in_order_and_trailers_skipped() {
        let got = whole(body(&[Some(b"ab"), Some(b""), Some(b"cd"), None, Some(b"e")]), 100).await.unwrap();
        assert_eq!(&got[..], b"abcde");
    }

    #[tokio::test]
    async fn the_bound_counts_every_frame() {
        assert_eq!(&whole(body(&[Some(b"abc"), Some(b"de")]), 5).await.unwrap()[..], b"abcde");
        let over = whole(body(&[Some(b"abc"), Some(b"def")]), 5).await;
        assert!(matches!(over, Err(WholeError::TooLarge { limit: 5 })), "{over:?}");
        let failed = whole(Frames { frames: vec![Some(b"ab")], fails: true }, 5).await;
        assert!(matches!(failed, Err(WholeError::Read(_))), "{failed:?}");
    }
}
