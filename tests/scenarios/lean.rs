//! The lean path (`[listen] lean_listens` and `lean_requests`, crates/resmux-http/src/lean.rs): a
//! listen, and every other small POST, on a clear-text HTTP/1.1 connection is read and written
//! without hyper. Every answer must be the one hyper's path gives: the same statuses, headers
//! and JSON-RPC errors for every check, the same stream, the same keep-alive and pipelining,
//! and the connection carries on with hyper from the first request the lean path leaves.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

pub(crate) async fn proxy(lean: bool, tweak: impl FnOnce(&mut Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.listen.lean_listens = lean;
    cfg.listen.lean_requests = lean;
    cfg.hub.linger = Duration::from_millis(50);
    tweak(&mut cfg);
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    (p, up)
}

pub(crate) fn listen_body(id: Value, notifications: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
           "params": {"notifications": notifications, "_meta": meta()}})
    .to_string()
}

/// A listen request with `extra` header lines; `extra` may give its own `content-type`.
pub(crate) fn listen_request(p: &Proxy, extra: &str, body: &str) -> Vec<u8> {
    request(p, "subscriptions/listen", extra, body)
}

/// A modern POST of `method` with `extra` header lines (`name: value\r\n`, which may give
/// their own `content-type`) and `body`.
pub(crate) fn request(p: &Proxy, method: &str, extra: &str, body: &str) -> Vec<u8> {
    let content_type = if extra.contains("content-type:") { "" } else { "content-type: application/json\r\n" };
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\n{content_type}\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: {method}\r\n{extra}content-length: {}\r\n\r\n{body}",
        p.app.local_addr(),
        body.len()
    )
    .into_bytes()
}

/// A `resources/read` of `uri` with JSON-RPC id `id`, with `extra` header lines.
pub(crate) fn read_request(p: &Proxy, id: u64, uri: &str, extra: &str) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
                      "params": {"uri": uri, "_meta": meta()}});
    request(p, "resources/read", &format!("mcp-name: {uri}\r\n{extra}"), &body.to_string())
}

/// Reads one response head (and its body, when it has a `content-length`) from `s`; bytes
/// read past it are kept in `rest`.
pub(crate) async fn read_response(s: &mut TcpStream, rest: &mut Vec<u8>) -> Raw {
    let read = async {
        let end = loop {
            if let Some(i) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.expect("read");
            assert!(n > 0, "connection closed before a response: {:?}", String::from_utf8_lossy(rest));
            rest.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(rest.drain(..end).collect()).expect("ASCII head");
        let mut raw = Raw::from_head(head.trim_end());
        let len = raw.content_length();
        let mut body = Vec::new();
        if let Some(len) = len {
            while rest.len() < len {
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).await.expect("read");
                assert!(n > 0, "connection closed inside a body");
                rest.extend_from_slice(&chunk[..n]);
            }
            body = rest.drain(..len).collect();
        }
        raw.body = body;
        raw
    };
    tokio::time::timeout(DEADLINE, read).await.expect("a response in time")
}

/// Reads `s` until `needle` has arrived (in `rest`).
pub(crate) async fn read_until(s: &mut TcpStream, rest: &mut Vec<u8>, needle: &str) {
    let read = async {
        while !String::from_utf8_lossy(rest).contains(needle) {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed before {needle:?}: {:?}", String::from_utf8_lossy(rest));
            rest.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(DEADLINE, read).await.expect("in time");
}

/// Sends `request` on a fresh connection and reads the answer.
pub(crate) async fn answer(p: &Proxy, request: &[u8]) -> (Raw, Vec<u8>) {
    let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut rest = Vec::new();
    let raw = read_response(&mut s, &mut rest).await;
    (raw, rest)
}

#[tokio::test]
async fn every_refusal_is_the_one_hyper_gives() {
    let (lean, _a) = proxy(true, |c| c.hub.max_uris_per_listen = 1).await;
    let (plain, _b) = proxy(false, |c| c.hub.max_uris_per_listen = 1).await;
    let ok = listen_body(json!(1), json!({"resourceSubscriptions": ["docs://status"]}));
    let cases: Vec<(&str, String, String)> = vec![
        ("a foreign Origin", "origin: http://evil.example\r\n".into(), ok.clone()),
        ("a version header that differs from _meta", "".into(), ok.replace("2026-07-28", "2025-01-01")),
        ("no notifications filter", "".into(), ok.replace("\"notifications\"", "\"other\"")),
        ("too many URIs", "".into(), listen_body(json!(2), json!({"resourceSubscriptions": ["docs://a", "docs://b"]}))),
        ("a body that is not JSON", "".into(), "{\"jsonrpc\":".into()),
        ("a body whose method is another", "".into(), ok.replace("subscriptions/listen", "resources/read")),
        ("a non-JSON content type", "content-type: text/plain\r\n".into(), ok.clone()),
    ];
    for (what, extra, body) in cases {
        let (a, _) = answer(&lean, &listen_request(&lean, &extra, &body)).await;
        let (b, _) = answer(&plain, &listen_request(&plain, &extra, &body)).await;
        assert_eq!(a.status, b.status, "{what}");
        assert_eq!(a.header("content-type"), b.header("content-type"), "{what}");
        let (ja, jb): (Value, Value) =
            (serde_json::from_slice(&a.body).unwrap(), serde_json::from_slice(&b.body).unwrap());
        assert_eq!(ja, jb, "{what}");
        assert!(ja["error"]["code"].is_i64(), "{what}: a JSON-RPC error: {ja}");
        assert!(a.header("date").is_some() && a.header("content-length").is_some(), "{what}");
    }
    // A Host that is not allowed (the proxy listens on loopback: loopback names only).
    let foreign = |p: &Proxy| {
        String::from_utf8(listen_request(p, "", &ok)).unwrap().replacen(
            &p.app.local_addr().to_string(),
            "evil.example",
            1,
        )
    };
    let (a, _) = answer(&lean, foreign(&lean).as_bytes()).await;
    let (b, _) = answer(&plain, foreign(&plain).as_bytes()).await;
    assert_eq!((a.status, a.body), (b.status, b.body));
}

#[tokio::test]
async fn the_stream_is_the_one_hyper_writes() {
    let (lean, _a) = proxy(true, |_| {}).await;
    let (plain, _b) = proxy(false, |_| {}).await;
    let body = listen_body(json!("L"), json!({"resourceSubscriptions": ["docs://status"]}));
    let mut acks = Vec::new();
    for p in [&lean, &plain] {
        let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
        s.write_all(&listen_request(p, "", &body)).await.unwrap();
        let mut rest = Vec::new();
        let head = read_response(&mut s, &mut rest).await;
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-type"), Some("text/event-stream"));
        assert_eq!(head.header("cache-control"), Some("no-cache"));
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        read_until(&mut s, &mut rest, "\n\n\r\n").await;
        let text = String::from_utf8(rest).unwrap();
        let (size, chunk) = text.split_once("\r\n").unwrap();
        let data = chunk.strip_suffix("\r\n").unwrap();
        assert_eq!(usize::from_str_radix(size, 16).unwrap(), data.len(), "a well-formed chunk");
        let ack: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        acks.push(ack);
    }
    assert_eq!(acks[0], acks[1]);
    assert_eq!(acks[0]["method"], "notifications/subscriptions/acknowledged");
}

#[tokio::test]
async fn a_connection_carries_on_after_a_refused_listen() {
    let (p, _up) = proxy(true, |_| {}).await;
    let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
    let refused = listen_body(json!(1), json!({})).replace("\"notifications\"", "\"other\"");
    // The refused listen and the next request in one write: the second is pipelined.
    let discover =
        json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": meta()}}).to_string();
    let mut bytes = listen_request(&p, "", &refused);
    bytes.extend(request(&p, "server/discover", "", &discover));
    s.write_all(&bytes).await.unwrap();
    let mut rest = Vec::new();
    let first = read_response(&mut s, &mut rest).await;
    let first: Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(first["id"], 1);
    assert_eq!(first["error"]["code"], -32602);
    let second = read_response(&mut s, &mut rest).await;
    assert_eq!(second.status, 200);
    let second: Value = serde_json::from_slice(&second.body).unwrap();
    assert_eq!(second["id"], 2);
    assert!(second["result"]["capabilities"].is_object(), "{second}");
}

#[tokio::test]
async fn listens_the_lean_path_leaves_are_served_by_hyper() {
    let (p, up) = proxy(true, |_| {}).await;
    let body = listen_body(json!(7), json!({"resourceSubscriptions": ["docs://status"]}));
    // Chunked: not the lean path's to read; hyper serves it, the stream is the same.
    let head = String::from_utf8(listen_request(&p, "", ""))
        .unwrap()
        .replace("content-length: 0\r\n", "transfer-encoding: chunked\r\n");
    let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
    s.write_all(format!("{head}{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes()).await.unwrap();
    let mut rest = Vec::new();
    let resp = read_response(&mut s, &mut rest).await;
    assert_eq!((resp.status, resp.header("content-type")), (200, Some("text/event-stream")));
    read_until(&mut s, &mut rest, "acknowledged").await;
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    read_until(&mut s, &mut rest, "notifications/resources/updated").await;
}

#[tokio::test]
async fn a_lean_stream_delivers_and_its_listener_goes_with_its_client() {
    let (p, up) = proxy(true, |_| {}).await;
    let body = listen_body(json!("x"), json!({"resourceSubscriptions": ["docs://status"]}));
    let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
    s.write_all(&listen_request(&p, "", &body)).await.unwrap();
    let mut rest = Vec::new();
    assert_eq!(read_response(&mut s, &mut rest).await.status, 200);
    read_until(&mut s, &mut rest, "acknowledged").await;
    assert_eq!(p.app.hub().listener_count(), 1);
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    read_until(&mut s, &mut rest, "\"uri\":\"docs://status\"").await;
    drop(s);
    eventually("the listener is gone with its connection", || {
        let n = p.app.hub().listener_count();
        async move { (n == 0).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_lean_stream_ends_with_its_result_at_shutdown() {
    let (p, _up) = proxy(true, |_| {}).await;
    let body = listen_body(json!(5), json!({"resourceSubscriptions": ["docs://status"]}));
    let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
    s.write_all(&listen_request(&p, "", &body)).await.unwrap();
    let mut rest = Vec::new();
    read_response(&mut s, &mut rest).await;
    read_until(&mut s, &mut rest, "acknowledged").await;
    let stopping = tokio::spawn(async move { p.app.shutdown().await });
    read_until(&mut s, &mut rest, "\"resultType\":\"complete\"").await;
    read_until(&mut s, &mut rest, "\r\n0\r\n\r\n").await;
    let mut tail = [0u8; 16];
    let closed = tokio::time::timeout(DEADLINE, s.read(&mut tail)).await.expect("closed in time");
    assert!(matches!(closed, Ok(0) | Err(_)), "the connection closes after the last chunk");
    tokio::time::timeout(DEADLINE, stopping).await.expect("shutdown in time").unwrap();
}

/// A response as compared between the two paths: status, headers in order, JSON body.
pub(crate) type Answer = (u16, Vec<(String, String)>, Value);
