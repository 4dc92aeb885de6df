//! A test upstream whose `resources/read` answers are generated as they are sent, however
//! large, in the framings real servers use: `application/json` with a length or chunked, SSE,
//! the TypeScript SDK's member order (`result` before `id`), and broken mid-way.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

/// Bytes of generated payload per body frame.
const PIECE: usize = 64 << 10;

/// How one read is answered, from its URI: `big://{mode}/{bytes}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `application/json` with `Content-Length`.
    Json,
    /// `application/json`, chunked (the length is only known by reading).
    Chunked,
    /// `text/event-stream`: a progress notification, then the response as one event.
    Sse,
    /// Chunked JSON that turns malformed after half the payload.
    Broken,
    /// JSON whose `contents` is not an array: malformed from its first bytes.
    BadStart,
}

impl Mode {
    fn of(name: &str) -> Option<Self> {
        Some(match name {
            "json" => Mode::Json,
            "chunked" => Mode::Chunked,
            "sse" => Mode::Sse,
            "broken" => Mode::Broken,
            "badstart" => Mode::BadStart,
            _ => return None,
        })
    }
}

/// The payload of `big://…/{n}`: `n` base64-alphabet bytes, deterministic.
pub fn payload(n: usize, from: usize, len: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (from..(from + len).min(n)).map(|i| ALPHABET[(i * 7 + i / 64) % 64]).collect()
}

/// The result's text before and after the payload (upstream form: the URI as the upstream
/// names it).
pub fn result_parts(uri: &str) -> (String, String) {
    let head = format!(r#"{{"contents":[{{"uri":{},"mimeType":"application/octet-stream","blob":""#, json!(uri));
    (head, r#""}],"resultType":"complete","ttlMs":60000,"cacheScope":"public"}"#.to_owned())
}

#[derive(Clone, Default)]
pub struct BigUpstream {
    reads: Arc<Mutex<HashMap<String, usize>>>,
}

impl BigUpstream {
    /// Reads of `uri` so far.
    pub fn reads(&self, uri: &str) -> usize {
        self.reads.lock().unwrap().get(uri).copied().unwrap_or(0)
    }

    /// Serves on an ephemeral loopback port until the test ends.
    pub async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let this = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let this = this.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let this = this.clone();
                        async move { Ok::<_, Infallible>(this.answer(req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        format!("http://{addr}/mcp")
    }

    async fn answer(&self, req: http::Request<hyper::body::Incoming>) -> Response<UnsyncBoxBody<Bytes, Infallible>> {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let msg: Value = serde_json::from_slice(&body).unwrap();
        let id = msg["id"].to_string();
        let whole = |v: Value| {
            let text = json!({"jsonrpc": "2.0", "id": msg["id"], "result": v}).to_string();
            respond("application/json", Some(text.len()), futures_util::stream::iter([Bytes::from(text)]).boxed())
        };
        match msg["method"].as_str() {
            Some("server/discover") => whole(json!({
                "resultType": "complete",
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"resources": {}},
            })),
            Some("resources/read") => {
                let uri = msg["params"]["uri"].as_str().unwrap_or_default().to_owned();
                *self.reads.lock().unwrap().entry(uri.clone()).or_default() += 1;
                let parsed = uri.strip_prefix("big://").and_then(|rest| {
                    let (mode, n) = rest.split_once('/')?;
                    Some((Mode::of(mode)?, n.parse::<usize>().ok()?))
                });
                match parsed {
                    Some((mode, n)) => big(mode, &uri, n, &id),
                    None => whole(
                        json!({"contents": [{"uri": uri, "text": "small"}], "resultType": "complete", "ttlMs": 60000, "cacheScope": "public"}),
                    ),
                }
            }
            _ => whole(json!({"resultType": "complete"})),
        }
    }
}

type Pieces = futures_util::stream::BoxStream<'static, Bytes>;

fn respond(content_type: &str, length: Option<usize>, pieces: Pieces) -> Response<UnsyncBoxBody<Bytes, Infallible>> {
    let body = StreamBody::new(pieces.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let mut resp = Response::builder().status(StatusCode::OK).header("content-type", content_type);
    if let Some(n) = length {
        resp = resp.header("content-length", n);
    }
    resp.body(UnsyncBoxBody::new(body)).unwrap()
}

/// A read answer of `n` payload bytes, generated piece by piece.
fn big(mode: Mode, uri: &str, n: usize, id: &str) -> Response<UnsyncBoxBody<Bytes, Infallible>> {
    let (head, tail) = result_parts(uri);
    // The TypeScript SDK's order: `result` first, `jsonrpc` and `id` after it.
    let head = format!(r#"{{"result":{head}"#);
    let tail = format!(r#"{tail},"jsonrpc":"2.0","id":{id}}}"#);
    let (pre, post) = match mode {
        Mode::Sse => (
            format!(
                "data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":1,\"progress\":1}}}}\n\n: keep-alive\n\ndata: {head}"
            ),
            format!("{tail}\n\n"),
        ),
        Mode::Broken => (head, "\"}]},oops".to_owned()),
        Mode::BadStart => {
            ("{\"result\":{\"contents\":\"".to_owned(), format!("\"}},\"jsonrpc\":\"2.0\",\"id\":{id}}}"))
        }
        _ => (head, tail),
    };
    let end = if mode == Mode::Broken { n / 2 } else { n };
    let length = (mode == Mode::Json).then(|| pre.len() + end + post.len());
    let pieces = futures_util::stream::once(async move { Bytes::from(pre) })
        .chain(
            futures_util::stream::iter((0..end).step_by(PIECE)).map(move |from| Bytes::from(payload(end, from, PIECE))),
        )
        .chain(futures_util::stream::once(async move { Bytes::from(post) }))
        .boxed();
    respond(if mode == Mode::Sse { "text/event-stream" } else { "application/json" }, length, pieces)
}
