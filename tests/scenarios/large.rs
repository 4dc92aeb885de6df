//! Reads larger than the cache's `max_entry_bytes` are relayed from upstream to client as
//! they arrive: the exact bytes with `contents[].uri` namespaced, in bounded memory (the
//! proxy runs as its own process, whose resident memory is read from `/proc`), never cached;
//! a malformed or oversized answer cuts the relay, or gets a clean error when nothing was
//! sent yet.

mod upstream;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::support::{DEADLINE, ServeProcess, eventually, meta};
use upstream::{BigUpstream, payload, result_parts};

const MIB: usize = 1 << 20;

/// `resmux serve` in a process of its own, in front of two upstreams on one test server:
/// `big` (default bounds) and `tight` (`max_relay_bytes` = 8 MiB).
struct ProxyProcess {
    serve: ServeProcess,
    url: String,
}

impl ProxyProcess {
    async fn start(upstream: &str) -> Self {
        let text = format!(
            r#"
[listen]
addr = "127.0.0.1:0"
metrics_path = "/metrics"
[log]
format = "json"
level = "info"
[[upstream]]
name = "big"
url = "{upstream}"
[[upstream]]
name = "tight"
url = "{upstream}"
max_relay_bytes = 8388608
"#
        );
        let serve = ServeProcess::start(&text).await;
        let proxy = Self { url: format!("http://{}", serve.addr), serve };
        eventually("both upstreams discovered", || {
            let proxy = &proxy;
            async move {
                let small = |u: &'static str| async move {
                    proxy.read(u).await.body.ok().filter(|b| b.windows(5).any(|w| w == b"small"))
                };
                (small("big+big://small").await.is_some() && small("tight+big://small").await.is_some()).then_some(())
            }
        })
        .await;
        proxy
    }

    fn pid(&self) -> u32 {
        self.serve.child.id().expect("running")
    }

    /// `VmRSS` and `VmHWM`, in bytes.
    fn memory(&self) -> (usize, usize) {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib = |key: &str| -> usize {
            let line = text.lines().find_map(|l| l.strip_prefix(key)).unwrap();
            line.split_whitespace().next().unwrap().parse::<usize>().unwrap() * 1024
        };
        (kib("VmRSS:"), kib("VmHWM:"))
    }

    /// Resets the peak (`VmHWM`) to the current RSS, which it returns; without
    /// `clear_refs` (an old kernel), the current peak stands in, which only makes the
    /// growth measured from it look smaller, so the check below compares with RSS too.
    fn reset_peak(&self) -> usize {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5");
        self.memory().0
    }

    async fn read(&self, uri: &str) -> Read {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri, "_meta": meta()}});
        let req = Request::post(format!("{}/mcp", self.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "resources/read")
            .header("mcp-name", resmux::mcp::header_value::encode(uri))
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let resp = tokio::time::timeout(DEADLINE, client.request(req)).await.expect("in time").expect("HTTP exchange");
        let status = resp.status().as_u16();
        let cache = resp.headers().get("resmux-cache").map(|v| v.to_str().unwrap().to_owned());
        let body = tokio::time::timeout(DEADLINE, resp.into_body().collect())
            .await
            .expect("body in time")
            .map(|b| b.to_bytes())
            .map_err(|e| e.to_string());
        Read { status, cache, body }
    }

    async fn metrics(&self) -> String {
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let resp = client.get(format!("{}/metrics", self.url).parse().unwrap()).await.unwrap();
        String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }
}

struct Read {
    status: u16,
    cache: Option<String>,
    body: Result<Bytes, String>,
}

/// What the client must receive for `big://{mode}/{n}` through upstream `name`.
fn expected(name: &str, mode: &str, n: usize) -> Vec<u8> {
    let (head, tail) = result_parts(&format!("{name}+big://{mode}/{n}"));
    let mut out = br#"{"jsonrpc":"2.0","id":1,"result":"#.to_vec();
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(&payload(n, 0, n));
    out.extend_from_slice(tail.as_bytes());
    out.push(b'}');
    out
}

fn series(metrics: &str, name: &str) -> f64 {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_read_is_relayed_exactly_in_bounded_memory_and_not_cached() {
    let up = BigUpstream::default();
    let proxy = ProxyProcess::start(&up.start().await).await;
    let n = 64 * MIB;
    let uri = format!("big+big://json/{n}");
    let before = proxy.reset_peak();
    let started = std::time::Instant::now();
    let read = proxy.read(&uri).await;
    let took = started.elapsed();
    let (_, peak) = proxy.memory();
    let growth = peak.saturating_sub(before);
    // A figure for the report, not an assertion (timing depends on the build and the machine).
    eprintln!(
        "64 MiB relay: {:.0} MiB/s; RSS before {} KiB, peak {} KiB, growth {} KiB",
        64.0 / took.as_secs_f64(),
        before / 1024,
        peak / 1024,
        growth / 1024
    );
    assert_eq!((read.status, read.cache.as_deref()), (200, Some("bypass")));
    let body = read.body.expect("the whole body");
    assert!(body == expected("big", "json", n), "the relayed bytes differ ({} bytes)", body.len());
    assert!(growth <= 8 * MIB, "peak RSS grew {} KiB while 64 MiB passed through", growth / 1024);

    // Not cached: the next read reaches the upstream again, and both are counted.
    let again = proxy.read(&uri).await;
    assert_eq!(again.body.map(|b| b.len()).ok(), Some(expected("big", "json", n).len()));
    assert_eq!(up.reads(&format!("big://json/{n}")), 2);
    let metrics = proxy.metrics().await;
    assert_eq!(series(&metrics, r#"resmux_upstream_relayed_total{upstream="big",outcome="complete"}"#), 2.0);
    assert!(series(&metrics, r#"resmux_upstream_relayed_bytes_total{upstream="big"}"#) >= (2 * n) as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_and_sse_answers_are_relayed_and_small_ones_still_cached() {
    let up = BigUpstream::default();
    let proxy = ProxyProcess::start(&up.start().await).await;
    // No length: read past max_entry_bytes (4 MiB), then relayed from what was read.
    for mode in ["chunked", "sse"] {
        let n = 12 * MIB + 5;
        let read = proxy.read(&format!("big+big://{mode}/{n}")).await;
        assert_eq!((read.status, read.cache.as_deref()), (200, Some("bypass")), "{mode}");
        assert!(read.body.expect("whole") == expected("big", mode, n), "{mode}: the relayed bytes differ");
    }
    // Under the bound, the buffered path as before: cached.
    let small = format!("big+big://chunked/{}", MIB);
    assert_eq!(proxy.read(&small).await.cache.as_deref(), Some("miss"));
    assert_eq!(proxy.read(&small).await.cache.as_deref(), Some("hit"));
    assert_eq!(up.reads(&format!("big://chunked/{}", MIB)), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_oversized_answers_cut_the_relay_or_fail_cleanly() {
    let up = BigUpstream::default();
    let proxy = ProxyProcess::start(&up.start().await).await;
    // Broken before any result byte could go out: a JSON-RPC error, not a cut.
    let read = proxy.read(&format!("big+big://badstart/{}", 8 * MIB)).await;
    let body: Value = serde_json::from_slice(&read.body.expect("a whole error")).unwrap();
    assert_eq!(read.status, 502, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("contents"), "{body}");

    // Broken half-way: the response head went out, so the body is cut (never a clean end).
    let read = proxy.read(&format!("big+big://broken/{}", 16 * MIB)).await;
    assert_eq!(read.status, 200);
    assert!(read.body.is_err(), "a cut relay must not end like a complete body");

    // Past max_relay_bytes (8 MiB on `tight`): cut too.
    let read = proxy.read(&format!("tight+big://json/{}", 16 * MIB)).await;
    assert_eq!(read.status, 200);
    assert!(read.body.is_err(), "a relay past max_relay_bytes must be cut");

    let metrics = proxy.metrics().await;
    assert_eq!(series(&metrics, r#"resmux_upstream_relayed_total{upstream="big",outcome="cut"}"#), 1.0);
    assert_eq!(series(&metrics, r#"resmux_upstream_relayed_total{upstream="tight",outcome="cut"}"#), 1.0);
    // The proxy is fine afterwards.
    let read = proxy.read(&format!("big+big://json/{}", 5 * MIB)).await;
    assert!(read.body.expect("whole") == expected("big", "json", 5 * MIB));
}
