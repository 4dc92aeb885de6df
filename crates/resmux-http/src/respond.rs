//! Building HTTP responses: a body with its content type, plain text, empty; and the spare
//! header maps a thread reuses for its next answers. What the answers say is the service's.

use std::cell::RefCell;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::body::{Body, full};
use crate::spare::{self, Spares};

/// A response as every service of this crate gives it.
pub type Resp = Response<Body>;

/// A JSON body, whole.
#[inline]
pub fn json(status: StatusCode, body: Bytes) -> Resp {
    with_type(status, full(body))
}

/// `body` as `application/json`, in a header map given back by an earlier answer when there
/// is one.
#[inline]
pub fn with_type(status: StatusCode, body: Body) -> Resp {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    // An empty map, with room already allocated when one was given back.
    *headers = spare::take(&SPARE);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Header maps a thread keeps for its next answers.
const SPARE_HEADER_MAPS: usize = 4;

thread_local! {
    /// Header maps the lean path has written. A map's first insert allocates two (its index
    /// and its entries) and its drop frees them, on every cached hit (callgrind's caller tree
    /// of `malloc`). hyper's path drops its maps, and then a new one is made as before.
    static SPARE: Spares<HeaderMap> = const { RefCell::new(Vec::new()) };
}

/// Gives a written response's header map back for a next answer on this thread (at most
/// [`SPARE_HEADER_MAPS`] are kept; a map that grew past a small answer's is dropped).
#[inline]
pub fn give_back(mut headers: HeaderMap) {
    if headers.capacity() <= 16 {
        headers.clear();
        spare::give(&SPARE, headers, SPARE_HEADER_MAPS);
    }
}

/// `text` as `text/plain`.
pub fn plain(status: StatusCode, text: &str) -> Resp {
    let mut resp = Response::new(full(Bytes::from(text.to_owned())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// No body.
pub fn empty(status: StatusCode) -> Resp {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    /// A map given back is the next answer's, emptied, with its room; at most
    /// `SPARE_HEADER_MAPS` are kept, and a map that grew large is not.
    #[test]
    fn header_maps_given_back_serve_the_next_answers_emptied() {
        let first = json(StatusCode::OK, Bytes::new()).into_parts().0.headers;
        let room = first.capacity();
        assert!(room > 0);
        give_back(first);
        let next = json(StatusCode::OK, Bytes::new()).into_parts().0.headers;
        assert_eq!(next.len(), 1, "only its own content-type");
        assert_eq!(next.capacity(), room, "the given-back map, not a new one");
        let mut large = HeaderMap::new();
        for n in 0..64 {
            large.insert(HeaderName::from_bytes(format!("x-{n}").as_bytes()).unwrap(), HeaderValue::from_static("1"));
        }
        give_back(large);
        assert!(SPARE.with_borrow(Vec::is_empty), "a large map is dropped");
        for _ in 0..2 * SPARE_HEADER_MAPS {
            give_back(HeaderMap::with_capacity(4));
        }
        assert_eq!(SPARE.with_borrow(Vec::len), SPARE_HEADER_MAPS);
        assert!(SPARE.with_borrow(|spare| spare.iter().all(HeaderMap::is_empty)));
        drop(next);
    }
}
