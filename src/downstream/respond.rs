//! Building the MCP endpoint's HTTP responses: JSON-RPC answers and errors with the statuses
//! the spec's table prescribes (plain and empty responses, and the header maps they reuse,
//! are `resmux_http`'s).

use std::sync::LazyLock;

use futures_util::TryStreamExt;
use http::{HeaderName, HeaderValue, StatusCode};

pub use resmux_http::respond::{Resp, empty, json, plain, with_type};

use super::body::{pieces, relayed};
use super::validate::Rejected;
use crate::error::Error;
use crate::jsonrpc::{RequestId, Spliced, encode_error, encode_result_pieces};
use crate::router::{Answer, Payload};

/// Response header naming how the cache took part (a `HeaderName` constant: a `&str` name
/// would be parsed again on every answer).
pub const H_CACHE: HeaderName = HeaderName::from_static("resmux-cache");

/// A routed answer: 200 with the result or the relayed error, and the cache headers. A
/// cached result's stored text goes out as it is kept (no copy); a relayed one as it arrives.
pub fn answer(id: &RequestId, answer: Answer) -> Resp {
    let mut resp = match answer.outcome {
        Ok(Payload::Json(result)) => with_type(StatusCode::OK, pieces(encode_result_pieces(id, &result))),
        Ok(Payload::Relayed(relay)) => {
            let [head, ..] = encode_result_pieces(id, &Spliced::default());
            with_type(StatusCode::OK, relayed(head, Box::pin(relay.into_stream().map_err(Into::into)), CLOSE))
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

/// What a relayed result's envelope ends with, after the result's pieces.
const CLOSE: bytes::Bytes = bytes::Bytes::from_static(b"}");

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Stored, splice_ttl};
    use crate::router::CacheStatus;
    use bytes::Bytes;
    use http_body_util::BodyExt;

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
