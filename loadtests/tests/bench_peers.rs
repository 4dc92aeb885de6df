//! `resmux-load bench` against real MCP servers nobody here wrote: the TypeScript SDK v2
//! server (2026-07-28, tests/node/v2-upstream.mjs), the conformance suite's fixture server
//! (tests/conformance/fixture.mjs), `server-everything` (legacy 2025-11-25, with sessions),
//! and a resmux in front of the TypeScript server, compared with it directly (`--compare`).
//!
//! Needs Node and the pinned packages (`npm ci --prefix tests/node` and
//! `npm ci --prefix tests/conformance`, which scripts/test runs). Without them these tests
//! fail with the fix; they never skip silently. Everything listens on 127.0.0.1.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use resmux_load::bench::{self, BenchArgs};
use resmux_load::placement::Placement;
use resmux_load::proxy::Proxy;
use resmux_load::scenario::Scenario;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

const DEADLINE: Duration = Duration::from_secs(30);

fn args(list: &[&str]) -> BenchArgs {
    BenchArgs::from_argv(std::iter::once("bench").chain(list.iter().copied())).expect("valid flags")
}

async fn bench(a: &BenchArgs) -> bench::output::BenchReport {
    bench::run(a, a.validate().expect("flags validate")).await.expect("bench runs")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Node script that prints its URL as JSON (`url`) on its first stdout line.
async fn node_server(script: PathBuf) -> (Child, String) {
    let hint = "install the pinned peers: npm ci --prefix tests/node && npm ci --prefix tests/conformance";
    assert!(script.exists(), "{} is missing: {hint}", script.display());
    let mut child = Command::new("node")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("node does not run ({e}): {hint}"));
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("the server reports its URL in time")
        .unwrap()
        .expect("the server printed its URL");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let url = v["url"].as_str().expect("a url").to_owned();
    // Keep draining stdout so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

fn assert_clean(r: &bench::output::BenchReport) {
    for e in &r.endpoints {
        let (sent, ok, errors) = e.measured.totals();
        assert!(sent > 0, "{}: nothing measured", e.url);
        assert_eq!((ok, errors), (sent, 0), "{}: {:?}", e.url, e.measured.failures);
        let total: u64 = [&e.discovery, &e.warmup, &e.measured].iter().map(|p| p.totals().0).sum();
        assert_eq!(total, e.sent_by_method.values().sum::<u64>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_v2_server() {
    let (_server, url) = node_server(repo().join("tests/node/v2-upstream.mjs")).await;
    let a = args(&[&url, "--mix", "read=8,list=1", "--listeners", "3", "--duration", "1s", "-c", "4", "--quiet"]);
    let r = bench(&a).await;
    assert_clean(&r);
    let e = &r.endpoints[0];
    assert_eq!(e.protocol, "2026-07-28");
    assert_eq!(e.server_info.as_ref().unwrap()["name"], "ts-v2-upstream");
    // Seven documents, the status resource, and three to a page: every page walked.
    assert_eq!((e.resources_listed, e.list_pages), (8, 3));
    assert_eq!(e.discovery.methods["resources/list"].sent, 3);
    let l = e.listen.as_ref().expect("listen figures");
    assert_eq!((l.acked, l.refused), (3, 0), "{:?}", l.failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_fixture_server() {
    let (_server, url) = node_server(repo().join("tests/conformance/fixture.mjs")).await;
    let a = args(&[&url, "--mix", "read=4,list=1,call=1,discover=1", "--rate", "100", "--duration", "1s", "--quiet"]);
    let r = bench(&a).await;
    assert_clean(&r);
    let e = &r.endpoints[0];
    assert_eq!(e.protocol, "2026-07-28");
    // The first tool that needs no argument.
    assert!(e.tool.is_some());
    assert!(e.measured.methods["tools/call"].ok > 0);
    assert_eq!(e.summary.mode, "open");
    // 100 requests were due in the second: each was sent, or is counted as due but unsent.
    assert_eq!(e.summary.requests + e.summary.unsent_scheduled, 100, "{:?}", e.summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_the_legacy_protocol() {
    let entry = repo().join("tests/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(entry.exists(), "{} is missing: npm ci --prefix tests/node", entry.display());
    // server-everything takes a port number, not a bound socket: a free port can be taken by
    // another process before it binds, so a start that exits early is tried on a new port.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut attempts = 0;
    let (_child, port) = 'start: loop {
        attempts += 1;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new("node")
            .arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            if child.try_wait().unwrap().is_some() {
                assert!(attempts < 3, "server-everything exited on {attempts} ports");
                continue 'start;
            }
            assert!(tokio::time::Instant::now() < deadline, "server-everything did not listen in time");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        break (child, port);
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let a = args(&[
        &url,
        "--mix",
        "read=4,list=1,call=1",
        "--tool",
        "echo",
        "--args",
        r#"{"message":"hi"}"#,
        "--duration",
        "1s",
        "-c",
        "2",
        "--quiet",
    ]);
    let r = bench(&a).await;
    assert_clean(&r);
    let e = &r.endpoints[0];
    assert!(e.protocol.ends_with("(legacy)"), "{}", e.protocol);
    // The probe, refused as a legacy server refuses it, then the handshake.
    assert_eq!(e.discovery.methods["server/discover"].errors, 1);
    assert_eq!(e.discovery.methods["initialize"].ok, 1);
    assert_eq!(e.discovery.methods["notifications/initialized"].ok, 1);
    assert_eq!(e.resources_listed, 100, "every page of its 100 resources");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resmux_in_front_compared_with_the_server_directly() {
    let (_server, url) = node_server(repo().join("tests/node/v2-upstream.mjs")).await;
    let s = Scenario::parse("bench-front", "figure = \"resmux in front of a TypeScript server\"\nclients = 4\n")
        .expect("valid");
    let proxy = Proxy::start(&Placement::InProcess, &[("ts".to_owned(), url.clone())], &s).await.expect("proxy");
    let front = format!("http://{}/mcp", proxy.addr);
    let a = args(&[
        &url,
        "--compare",
        &front,
        "--rounds",
        "2",
        "--mix",
        "read=8,list=1",
        "--duration",
        "2s",
        "-c",
        "4",
        "--quiet",
    ]);
    let r = bench(&a).await;
    assert_clean(&r);
    assert_eq!(r.endpoints.len(), 2);
    for key in ["req/s", "latency p50", "latency p99", "resources/read p99"] {
        assert!(r.ratios.get(key).is_some_and(|v| *v > 0.0), "{key}: {:?}", r.ratios);
    }
    let direct = &r.endpoints[0].measured.methods["resources/read"];
    let via = &r.endpoints[1].measured.methods["resources/read"];
    assert_eq!(direct.cache.absent, direct.sent, "the server itself sends no resmux-cache header");
    // resmux says on every answer how its cache took part, and the bench counts each.
    let c = &via.cache;
    assert_eq!((c.absent, c.hit + c.miss + c.stale + c.bypass + c.other), (0, via.sent), "{c:?}");
    // Each endpoint measured about half its time in each of two rounds.
    for e in &r.endpoints {
        assert!((1.9..3.0).contains(&e.summary.elapsed_s), "{}", e.summary.elapsed_s);
    }
    let md = bench::output::markdown(&r);
    assert!(md.contains("Ratios") && md.contains("req/s"), "{md}");
    proxy.stop().await;
}
