//! Building downstream HTTP responses: JSON-RPC answers and errors with the statuses the
//! spec's table prescribes, plain and empty responses.

use std::cell::RefCell;
use std::sync::LazyLock;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::body::{Body, full, pieces, relayed};
use super::spare::{self, Spares};
use super::validate::Rejected;
use crate::error::Error;
use crate::jsonrpc::{RequestId, Spliced, encode_error, encode_result_pieces};
use crate::router::{Answer, Payload};

/// Response header naming how the cache took part (a `HeaderName` constant: a `&str` name
/// would be parsed again on every answer).
pub const H_CACHE: HeaderName = HeaderName::from_static("resmux-cache");

pub type Resp = Response<Body>;

/// A routed answer: 200 with the result or the relayed error, and the cache headers. A
/// cached result's stored text goes out as it is kept (no copy); a relayed one as it arrives.
pub fn answer(id: &RequestId, answer: Answer) -> Resp {
    let mut resp = match answer.outcome {
        Ok(Payload::Json(result)) => with_type(StatusCode::OK, pieces(encode_result_pieces(id, &result))),
        Ok(Payload::Relayed(relay)) => {
            let [head, ..] = encode_result_pieces(id, &Spliced::default());
            with_type(StatusCode::OK, relayed(head, Box::pin(relay.into_stream())))
        }
        Err(err) => {
            let status = StatusCode::from_u16(err.downstream_status()).unwrap_or(StatusCode::OK);
            json(status, encode_error(Some(id), &err))
        }
    };
    let h = resp.headers_mut();
    h.insert(H_CACHE, HeaderValue::from_static(answer.cache.as_str()));
    if let Some(age) = answer.age {
        h.insert(http::header::AGE, age_value(age));
    }
    resp
}

/// Ages below this many seconds come from a table made once.
const AGES_KEPT: usize = 1024;

/// The `Age` header's value for `secs`. `HeaderValue::from(u64)` allocates its text twice;
/// a value below [`AGES_KEPT`] is a slice of one static text instead.
fn age_value(secs: u64) -> HeaderValue {
    static TEXT: LazyLock<(String, Vec<usize>)> = LazyLock::new(|| {
        let mut text = String::new();
        let mut ends = vec![0];
        for n in 0..AGES_KEPT {
            text.push_str(itoa::Buffer::new().format(n));
            ends.push(text.len());
        }
        (text, ends)
    });
    match usize::try_from(secs) {
        Ok(n) if n < AGES_KEPT => {
            let (text, ends) = &*TEXT;
            HeaderValue::from_static(&text[ends[n]..ends[n + 1]])
        }
        _ => HeaderValue::from(secs),
    }
}

/// A validation failure.
pub fn rejected(r: Rejected) -> Resp {
    error(r.id.as_ref(), r.error.into())
}

/// A failure, with the status and JSON-RPC error of the spec's table.
pub fn error(id: Option<&RequestId>, e: Error) -> Resp {
    let (status, err) = e.to_jsonrpc();
    json(status, encode_error(id, &err))
}

pub fn json(status: StatusCode, body: Bytes) -> Resp {
    with_type(status, full(body))
}

fn with_type(status: StatusCode, body: Body) -> Resp {
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
pub fn give_back(mut headers: HeaderMap) {
    if headers.capacity() <= 16 {
        headers.clear();
        spare::give(&SPARE, headers, SPARE_HEADER_MAPS);
    }
}

pub fn plain(status: StatusCode, text: &str) -> Resp {
    let mut resp = Response::new(full(Bytes::from(text.to_owned())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

pub fn empty(status: StatusCode) -> Resp {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Stored, splice_ttl};
    use crate::router::CacheStatus;
    use http_body_util::BodyExt;

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

    #[test]
    fn ages_from_the_table_read_as_the_number() {
        for secs in [0, 1, 9, 10, 99, 100, 999, 1000, 1023, 1024, 86_400, u64::MAX] {
            assert_eq!(age_value(secs), HeaderValue::from(secs), "{secs}");
        }
    }

    #[tokio::test]
    async fn a_cached_result_goes_out_as_stored_not_copied() {
        let text = "x".repeat(1 << 20);
        let result = format!(r#"{{"contents":[{{"uri":"a:b","text":"{text}"}}],"ttlMs":5}}"#);
        let Some(Stored::Result { tail }) = Stored::result(result.as_bytes()) else { panic!("a result") };
        let hit = Answer { outcome: Ok(Payload::Json(splice_ttl(&tail, 4))), cache: CacheStatus::Hit, age: Some(1) };
        let resp = answer(&RequestId::number(7), hit);
        assert_eq!(resp.headers()[H_CACHE], "hit");
        let mut body = resp.into_body();
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        // The stored bytes themselves are a frame: the body is never copied.
        assert!(frames.iter().any(|f| f.as_ptr() == tail.as_ptr() && f.len() == tail.len()));
        let written: usize = frames.iter().map(Bytes::len).sum();
        assert!(written - tail.len() < 64, "only the envelope and the TTL are made per hit");
        let v: serde_json::Value = serde_json::from_slice(&frames.concat()).unwrap();
        assert_eq!((v["id"].as_u64(), v["result"]["ttlMs"].as_u64()), (Some(7), Some(4)));
        assert_eq!(v["result"]["contents"][0]["text"].as_str().map(str::len), Some(1 << 20));
    }
}
