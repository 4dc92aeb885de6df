//! A hostile upstream: SSE answers that never end an event, or that flood comments. The proxy
//! must drop such a stream at `max_message_bytes` with an upstream-side error, holding no more
//! than that bound in memory, and stay healthy for everyone else.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::stream;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::support::*;
use resmux::config::UpstreamConfig;

/// What the upstream's `tools/call` answer streams.
#[derive(Clone, Copy)]
enum Flood {
    /// `data: ` followed by this many bytes and no line end.
    OneEvent(usize),
    /// This many bytes of `: keep-alive` comments, never an event.
    Comments(usize),
}

const CHUNK: usize = 64 << 10;

/// The flood; with a `gate`, its first byte waits for one of the gate's permits.
fn flood_body(
    flood: Flood,
    gate: Option<Arc<Semaphore>>,
) -> StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>>> {
    let (total, first, chunk): (usize, &'static [u8], Bytes) = match flood {
        Flood::OneEvent(n) => (n, b"data: ", Bytes::from(vec![b'x'; CHUNK])),
        Flood::Comments(n) => (n, b"", Bytes::from(": keep-alive\n\n".repeat(CHUNK / 14))),
    };
    let head = stream::once(async move {
        if let Some(gate) = gate {
            drop(gate.acquire().await);
        }
        Ok(Frame::data(Bytes::from_static(first)))
    });
    let rest = stream::unfold(0usize, move |sent| {
        let chunk = chunk.clone();
        async move { (sent < total).then(|| (Ok(Frame::data(chunk.clone())), sent + chunk.len())) }
    });
    StreamBody::new(futures_util::StreamExt::chain(head, rest))
}

/// An MCP upstream that answers discovery and lists normally and floods every `tools/call`;
/// as a legacy (2025-11-25) server, it floods its standalone GET stream instead, counting the
/// GET streams it was asked for in `gets`, each flood waiting for a permit of `gate`.
async fn hostile_upstream(flood: Flood, legacy: Option<(Arc<AtomicUsize>, Arc<Semaphore>)>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let legacy = legacy.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let legacy = legacy.clone();
                    async move {
                        if let Some((gets, gate)) = &legacy
                            && req.method() == http::Method::GET
                        {
                            gets.fetch_add(1, Ordering::SeqCst);
                            let resp = Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(http_body_util::Either::Right(flood_body(flood, Some(gate.clone()))))
                                .unwrap();
                            return Ok::<_, Infallible>(resp);
                        }
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let id = msg["id"].clone();
                        let json_answer = |result: Value| {
                            let text = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(http_body_util::Either::Left(http_body_util::Full::new(Bytes::from(text))))
                                .unwrap()
                        };
                        let error = |code: i64| {
                            let text =
                                json!({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": code, "message": "no"}});
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(http_body_util::Either::Left(http_body_util::Full::new(Bytes::from(
                                    text.to_string(),
                                ))))
                                .unwrap()
                        };
                        let resp = match (msg["method"].as_str(), legacy.is_some()) {
                            (Some("server/discover"), true) => error(-32601),
                            (Some("initialize"), true) => {
                                let mut resp = json_answer(json!({
                                    "protocolVersion": "2025-11-25",
                                    "capabilities": {"resources": {"subscribe": true}},
                                    "serverInfo": {"name": "hostile", "version": "0"},
                                }));
                                resp.headers_mut().insert("mcp-session-id", http::HeaderValue::from_static("s1"));
                                resp
                            }
                            (Some("server/discover"), false) => json_answer(json!({
                                "resultType": "complete",
                                "supportedVersions": ["2026-07-28"],
                                "capabilities": {"tools": {}},
                                "ttlMs": 0, "cacheScope": "private",
                            })),
                            (Some("tools/list"), _) => json_answer(json!({
                                "resultType": "complete",
                                "tools": [{"name": "flood", "inputSchema": {"type": "object"}}],
                                "ttlMs": 0, "cacheScope": "private",
                            })),
                            (Some("tools/call"), _) => Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(http_body_util::Either::Right(flood_body(flood, None)))
                                .unwrap(),
                            _ => Response::builder()
                                .status(StatusCode::ACCEPTED)
                                .body(http_body_util::Either::Left(http_body_util::Full::new(Bytes::new())))
                                .unwrap(),
                        };
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(socket), service).await;
            });
        }
    });
    addr
}

/// Peak resident memory of this test process so far (nextest runs each test in its own).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

async fn flooded_call_is_cut_off(flood: Flood) {
    let addr = hostile_upstream(flood, None).await;
    let mut up = UpstreamConfig::http("hostile", &format!("http://{addr}/mcp"));
    up.max_message_bytes = 1 << 20;
    let p = Proxy::start(config(vec![up])).await;
    discovered_tools(&p.client).await;
    let before = peak_rss_bytes();
    let answer = p.client.request("tools/call", json!({"name": "flood", "arguments": {}})).await;
    let grown = peak_rss_bytes().saturating_sub(before);
    assert!(answer.status.is_server_error(), "an upstream-side failure: {answer:?}");
    assert_eq!(answer.json()["error"]["data"]["side"], "upstream", "{}", answer.text());
    // 64 MiB streamed; the proxy holds at most its 1 MiB bound (plus the allocator's slack).
    assert!(grown < 16 << 20, "peak RSS grew by {} MiB", grown >> 20);
    // The proxy still serves.
    assert!(p.client.request("server/discover", json!({})).await.status.is_success());
}

async fn discovered_tools(client: &McpClient) {
    eventually("the upstream is discovered", || {
        let client = client.clone();
        async move {
            client.request("server/discover", json!({})).await.result()["capabilities"]["tools"].as_object().map(|_| ())
        }
    })
    .await;
}

#[tokio::test]
async fn a_64_mib_sse_event_from_an_upstream_is_cut_off_at_the_message_bound() {
    flooded_call_is_cut_off(Flood::OneEvent(64 << 20)).await;
}

#[tokio::test]
async fn an_sse_flood_of_comments_without_an_event_is_cut_off_at_the_message_bound() {
    flooded_call_is_cut_off(Flood::Comments(64 << 20)).await;
}

#[tokio::test]
async fn a_64_mib_event_on_a_legacy_get_stream_is_dropped_and_the_stream_reopened() {
    let (gets, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Semaphore::new(0)));
    let addr = hostile_upstream(Flood::OneEvent(64 << 20), Some((gets.clone(), gate.clone()))).await;
    let mut up = UpstreamConfig::http("hostile", &format!("http://{addr}/mcp"));
    up.max_message_bytes = 1 << 20;
    let p = Proxy::start(config(vec![up])).await;
    let opened = |count: usize| {
        let gets = gets.clone();
        move || {
            let n = gets.load(Ordering::SeqCst);
            async move { (n >= count).then_some(()) }
        }
    };
    // The proxy is up and its GET stream open: from here, only the flood adds to the peak.
    eventually("the GET stream", opened(1)).await;
    let before = peak_rss_bytes();
    gate.add_permits(1);
    // The proxy gives up the first stream at its bound and opens another.
    eventually("a second GET stream", opened(2)).await;
    let grown = peak_rss_bytes().saturating_sub(before);
    assert!(grown < 8 << 20, "peak RSS grew by {} MiB while a 64 MiB event arrived", grown >> 20);
    assert!(p.client.request("server/discover", json!({})).await.status.is_success());
}
