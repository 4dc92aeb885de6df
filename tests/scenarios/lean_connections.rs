//! The lean path's connections held to hyper's (see `lean.rs`): keep-alive and pipelined
//! requests answered as hyper answers them, the move to hyper at the first request the lean
//! path leaves, `Connection: close`, shutdown, and odd headers judged as hyper judges them.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::lean::*;
use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

/// The headers of a response, in order, its `date` value blanked.
fn dated(raw: &Raw) -> Vec<(String, String)> {
    raw.headers.iter().map(|(k, v)| (k.clone(), if k == "date" { String::new() } else { v.clone() })).collect()
}

#[tokio::test]
async fn a_keep_alive_connection_of_requests_is_answered_as_hyper_answers_it() {
    let (lean, _a) = proxy(true, |_| {}).await;
    let (plain, _b) = proxy(false, |_| {}).await;
    let mut seen: Vec<Vec<Answer>> = Vec::new();
    for p in [&lean, &plain] {
        let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
        let mut rest = Vec::new();
        let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta()}}).to_string();
        let wrong = read_request(p, 4, "docs://item/1", "").into_iter().collect::<Vec<u8>>();
        let wrong = String::from_utf8(wrong).unwrap().replacen("mcp-name: docs://item/1", "mcp-name: docs://item/2", 1);
        // A miss, then the same read as a hit, a list, a refusal (Mcp-Name differs from the
        // body), and two reads pipelined in one write.
        let mut sends = vec![read_request(p, 1, "docs://item/0", ""), read_request(p, 2, "docs://item/0", "")];
        sends.push(request(p, "tools/list", "", &list));
        sends.push(wrong.into_bytes());
        let mut pipelined = read_request(p, 5, "docs://item/1", "");
        pipelined.extend(read_request(p, 6, "docs://item/1", ""));
        sends.push(pipelined);
        let mut answers = Vec::new();
        for bytes in sends {
            let pipelined = bytes.windows(5).filter(|w| w == b"POST ").count();
            s.write_all(&bytes).await.unwrap();
            for _ in 0..pipelined {
                let raw = read_response(&mut s, &mut rest).await;
                let mut body: Value = serde_json::from_slice(&raw.body).unwrap();
                // A hit's remaining TTL counts down between the two proxies' runs.
                if let Some(ttl) = body["result"].get_mut("ttlMs") {
                    assert!(ttl.as_u64().is_some_and(|t| t <= 60_000), "{ttl}");
                    *ttl = json!("counted down");
                }
                answers.push((raw.status, dated(&raw), body));
            }
        }
        assert!(rest.is_empty(), "nothing past the last answer");
        seen.push(answers);
    }
    let (a, b) = (&seen[0], &seen[1]);
    assert_eq!(a.len(), 6);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.0, y.0, "answer {i}: status");
        assert_eq!(x.1, y.1, "answer {i}: headers, in order");
        assert_eq!(x.2, y.2, "answer {i}: body");
    }
    let cache = |i: usize| a[i].1.iter().find(|(k, _)| k == "resmux-cache").map(|(_, v)| v.clone());
    assert_eq!((cache(0), cache(1)), (Some("miss".into()), Some("hit".into())));
    assert_eq!(a[3].0, 400, "the mismatched Mcp-Name is refused: {}", a[3].2);
    assert_eq!((a[4].2["id"].clone(), a[5].2["id"].clone()), (json!(5), json!(6)));
}

#[tokio::test]
async fn a_connection_moves_to_hyper_at_the_first_request_the_lean_path_leaves() {
    let (p, _up) = proxy(true, |_| {}).await;
    let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
    let mut rest = Vec::new();
    // A lean read, then a GET without a session (the modern endpoint's 405, hyper's to
    // serve), then a read that hyper now serves: one write, three answers in order.
    let mut bytes = read_request(&p, 1, "docs://item/0", "");
    bytes.extend(
        format!("GET /mcp HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\n\r\n", p.app.local_addr()).bytes(),
    );
    bytes.extend(read_request(&p, 2, "docs://item/0", ""));
    s.write_all(&bytes).await.unwrap();
    let first = read_response(&mut s, &mut rest).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["id"], 1);
    assert_eq!(read_response(&mut s, &mut rest).await.status, 405);
    let third = read_response(&mut s, &mut rest).await;
    assert_eq!((third.status, third.header("resmux-cache")), (200, Some("hit")));
    assert_eq!(third.json()["id"], 2);
}

#[tokio::test]
async fn connection_close_ends_a_lean_connection_after_its_answer() {
    let (lean, _a) = proxy(true, |_| {}).await;
    let (plain, _b) = proxy(false, |_| {}).await;
    let mut heads = Vec::new();
    for p in [&lean, &plain] {
        let mut s = TcpStream::connect(p.app.local_addr()).await.unwrap();
        s.write_all(&read_request(p, 1, "docs://item/0", "connection: close\r\n")).await.unwrap();
        let mut rest = Vec::new();
        let raw = read_response(&mut s, &mut rest).await;
        assert_eq!(raw.status, 200);
        let mut tail = [0u8; 16];
        let closed = tokio::time::timeout(DEADLINE, s.read(&mut tail)).await.expect("closed in time");
        assert!(matches!(closed, Ok(0) | Err(_)), "the connection closes after the answer");
        heads.push(dated(&raw));
    }
    assert_eq!(heads[0], heads[1]);
    assert!(heads[0].contains(&("connection".into(), "close".into())), "{:?}", heads[0]);
}

#[tokio::test]
async fn at_shutdown_an_idle_connection_closes_and_an_answer_in_the_drain_says_close() {
    for lean in [true, false] {
        let slow = sample_http(SampleSpec { delay: Duration::from_millis(400), ..SampleSpec::docs() }).await;
        let mut cfg = config(vec![UpstreamConfig::http("slow", &slow.url())]);
        cfg.listen.lean_listens = lean;
        cfg.listen.lean_requests = lean;
        // Far past the test's deadline: a connection closed in time was closed by the
        // shutdown itself, not dropped at the end of the drain.
        cfg.admin.drain_timeout = Duration::from_secs(120);
        let p = Proxy::start(cfg).await;
        discovered(&p.client).await;
        let addr = p.app.local_addr();
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {"text": "late"}, "_meta": meta()}});
        // One connection answered once and then idle, waiting for its next request.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(&request(&p, "tools/list", "", &list.to_string())).await.unwrap();
        let mut idle_rest = Vec::new();
        assert_eq!(read_response(&mut idle, &mut idle_rest).await.status, 200, "lean {lean}");
        // One with a call in flight when the shutdown starts.
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(&request(&p, "tools/call", "mcp-name: echo\r\n", &call.to_string())).await.unwrap();
        eventually("the call reached its upstream", || {
            let n = slow.sample.count("tools/call");
            async move { (n >= 1).then_some(()) }
        })
        .await;
        let stopping = tokio::spawn(async move { p.app.shutdown().await });

        let mut tail = [0u8; 16];
        let closed = tokio::time::timeout(DEADLINE, idle.read(&mut tail)).await.expect("the idle connection closes");
        assert!(matches!(closed, Ok(0) | Err(_)), "lean {lean}: no answer on the idle connection: {closed:?}");
        let mut busy_rest = Vec::new();
        let answer = read_response(&mut busy, &mut busy_rest).await;
        assert_eq!(answer.status, 200, "lean {lean}");
        assert!(String::from_utf8_lossy(&answer.body).contains("late"), "lean {lean}: {answer:?}");
        assert!(
            dated(&answer).contains(&("connection".into(), "close".into())),
            "lean {lean}: an answer in the drain says the connection closes: {:?}",
            dated(&answer)
        );
        let closed = tokio::time::timeout(DEADLINE, busy.read(&mut tail)).await.expect("closed after the answer");
        assert!(matches!(closed, Ok(0) | Err(_)), "lean {lean}: {closed:?}");
        tokio::time::timeout(DEADLINE, stopping).await.expect("shutdown in time").unwrap();
    }
}

/// The lean path reads headers where they were read (`resmux::headers::Raw`), not from a
/// `HeaderMap`: every odd header a client may send must be judged as hyper's path judges it.
#[tokio::test]
async fn odd_headers_are_judged_as_hyper_judges_them() {
    let (lean, _a) = proxy(true, |_| {}).await;
    let (plain, _b) = proxy(false, |_| {}).await;
    // Each case: what it is, the status both paths give, the read's `Mcp-Name` line (`None`:
    // the usual one), extra header lines as bytes.
    type Case = (&'static str, u16, Option<&'static [u8]>, Vec<u8>);
    let cases: Vec<Case> = vec![
        ("a DEL byte in a value", 400, None, b"x-note: a\x7fb\r\n".to_vec()),
        ("a byte that is not UTF-8 in another header", 200, None, b"x-note: caf\xe9\r\n".to_vec()),
        (
            "mirrored names in capitals",
            200,
            Some(b"MCP-NAME: docs://item/0\r\n"),
            b"MCP-PROTOCOL-VERSION: 2026-07-28\r\n".to_vec(),
        ),
        (
            "two Mcp-Name values, the first wrong",
            400,
            Some(b"mcp-name: docs://item/9\r\nmcp-name: docs://item/0\r\n"),
            vec![],
        ),
        (
            "two Mcp-Name values, the first right",
            200,
            Some(b"mcp-name: docs://item/0\r\nmcp-name: docs://item/9\r\n"),
            vec![],
        ),
        ("an Mcp-Name that is not visible ASCII", 400, Some(b"mcp-name: docs://item/\xe9\r\n"), vec![]),
        ("a tab in an Mcp-Name", 400, Some(b"mcp-name: docs://item/\t0\r\n"), vec![]),
        ("a tab in another header", 200, None, b"x-forwarded-host: a\tb\r\n".to_vec()),
    ];
    for (what, status, name_line, extra) in cases {
        let mut seen = Vec::new();
        for p in [&lean, &plain] {
            let usual = read_request(p, 7, "docs://item/0", "");
            let text = String::from_utf8(usual).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            let mut bytes = Vec::new();
            for line in head.split("\r\n") {
                match (line.starts_with("mcp-name:"), name_line) {
                    (true, Some(replacement)) => bytes.extend_from_slice(replacement),
                    _ => bytes.extend_from_slice(format!("{line}\r\n").as_bytes()),
                }
                if line.starts_with("host:") {
                    bytes.extend_from_slice(&extra);
                }
            }
            bytes.extend_from_slice(format!("\r\n{body}").as_bytes());
            let (raw, _) = answer(p, &bytes).await;
            let body: Option<Value> = serde_json::from_slice(&raw.body).ok();
            let body = body.map(|mut b| {
                if let Some(ttl) = b["result"].get_mut("ttlMs") {
                    *ttl = json!("counted down");
                }
                b
            });
            seen.push((raw.status, raw.header("content-type").map(str::to_owned), body));
        }
        assert_eq!(seen[0], seen[1], "{what}: the lean path answers as hyper's");
        assert_eq!(seen[0].0, status, "{what}: {:?}", seen[0].2);
    }
}
