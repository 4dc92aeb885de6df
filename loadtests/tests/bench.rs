//! `resmux-load bench` against servers whose own counters can be read: the built-in sample
//! MCP server (`resmux::sample`, in this process, on 127.0.0.1). Every count the report gives
//! is checked against what the server says it received; the open loop's latency correction,
//! listeners with a trigger, redaction of secrets and SIGINT are checked too.

use std::process::Stdio;
use std::time::Duration;

use resmux::sample::{Sample, SampleHttp, SampleSpec};
use resmux_load::bench::{self, BenchArgs};
use tokio::io::AsyncBufReadExt;

fn args(list: &[&str]) -> BenchArgs {
    BenchArgs::from_argv(std::iter::once("bench").chain(list.iter().copied())).expect("valid flags")
}

async fn sample(spec: SampleSpec) -> SampleHttp {
    SampleHttp::start(Sample::new(spec), ([127, 0, 0, 1], 0).into()).await.expect("sample server starts")
}

async fn bench(a: &BenchArgs) -> bench::output::BenchReport {
    let headers = a.validate().expect("flags validate");
    bench::run(a, headers).await.expect("bench runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_agree_with_the_servers_own_counters() {
    let mut spec = SampleSpec::generated("cnt", 23);
    spec.page_size = 5;
    let up = sample(spec).await;
    let out = tempfile::tempdir().unwrap();
    let a = args(&[
        &up.url(),
        "--mix",
        "read=8,list=1,call=1,discover=1",
        "--tool",
        "add",
        "--args",
        r#"{"a":2,"b":3}"#,
        "--warmup",
        "300ms",
        "--duration",
        "1s",
        "-c",
        "4",
        "--quiet",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let r = bench(&a).await;
    let e = &r.endpoints[0];
    assert_eq!(e.protocol, "2026-07-28");
    // 23 items and the status resource, five to a page.
    assert_eq!((e.resources_listed, e.list_pages), (24, 5));
    assert_eq!(e.discovery.methods["resources/list"].sent, 5);
    assert!(e.warmup.totals().0 > 0 && e.measured.totals().0 > 0, "{:?}", e.summary);
    for (method, sent) in &e.sent_by_method {
        assert_eq!(up.sample.count(method), *sent, "{method}: server counted vs report");
    }
    let reported: u64 = e.sent_by_method.values().sum();
    assert_eq!(up.sample.total(), reported, "every request the server saw is in the report");
    for phase in [&e.discovery, &e.warmup, &e.measured] {
        let (sent, ok, errors) = phase.totals();
        assert_eq!((ok, errors), (sent, 0), "{:?}", phase.failures);
    }
    let m = &e.measured.methods;
    assert!(m["resources/read"].sent > m["tools/call"].sent, "the mix weighs reads 8:1");
    assert_eq!(m["resources/read"].http_status.get(&200), Some(&m["resources/read"].sent));
    assert!(e.summary.rps > 0.0 && e.summary.latency_ms.p99 >= e.summary.latency_ms.p50);
    for f in ["bench.json", "bench.md", "bench-latency.svg", "bench-throughput.svg", "bench.html"] {
        assert!(!bench::output::write(&r, out.path()).unwrap().is_empty());
        assert!(out.path().join(f).exists(), "{f}");
    }
    let html = std::fs::read_to_string(out.path().join("bench.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("<table>") && !html.contains("src=\"http"));
    up.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_counted_by_json_rpc_code_and_http_status() {
    let up = sample(SampleSpec::generated("err", 3)).await;
    // A tool it does not have: the sample answers -32602.
    let a = args(&[&up.url(), "--mix", "call=1", "--tool", "nosuch", "--duration", "400ms", "-c", "2", "--quiet"]);
    let r = bench(&a).await;
    let call = &r.endpoints[0].measured.methods["tools/call"];
    assert!(call.sent > 0);
    assert_eq!(call.errors, call.sent);
    let by_code: u64 = call.rpc_errors.values().sum();
    assert_eq!(by_code, call.sent, "{:?}", call.rpc_errors);
    assert!(call.rpc_errors.contains_key(&-32602), "{:?}", call.rpc_errors);
    assert_eq!(call.http_status.values().sum::<u64>(), call.sent);
    assert_eq!(up.sample.count("tools/call"), call.sent);
    assert!((r.error_rate - 1.0).abs() < 1e-9 && r.passed, "no --max-error-rate: passes");
    let mut strict = a.clone();
    strict.max_error_rate = Some(0.01);
    assert!(!bench(&strict).await.passed, "past --max-error-rate");
    up.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_loop_measures_from_the_intended_send_time() {
    // 20 ms per request and 2 requests in flight: at most ~100/s served, 200/s offered.
    let mut spec = SampleSpec::generated("slow", 5);
    spec.delay = Duration::from_millis(20);
    let up = sample(spec).await;
    let a = args(&[&up.url(), "--rate", "200", "-c", "2", "--duration", "1500ms", "--quiet"]);
    let r = bench(&a).await;
    let s = &r.endpoints[0].summary;
    assert_eq!((s.mode, s.offered_rate), ("open", Some(200.0)));
    // Service time stays near the server's 20 ms; latency from the schedule grows with the
    // backlog, which by the end is hundreds of requests behind.
    assert!(s.service_ms.p50 >= 19.0 && s.service_ms.p50 < 200.0, "{s:?}");
    assert!(s.latency_ms.p99 > 5.0 * s.service_ms.p99, "uncorrected tail: {s:?}");
    assert!(s.unsent_scheduled > 50, "{s:?}");
    assert_eq!(up.sample.count("resources/read"), r.endpoints[0].sent_by_method["resources/read"]);

    // Under capacity the schedule is kept: 100/s for 1.5 s is 150 requests, and latency is
    // service time.
    let fast = sample(SampleSpec::generated("fast", 5)).await;
    let a = args(&[&fast.url(), "--rate", "100", "-c", "8", "--duration", "1500ms", "--quiet"]);
    let s = bench(&a).await.endpoints[0].summary.clone();
    assert_eq!(s.requests + s.unsent_scheduled, 150, "{s:?}");
    assert!(s.unsent_scheduled <= 3, "{s:?}");
    assert!(s.latency_ms.p50 < 50.0, "{s:?}");
    up.stop();
    fast.stop();
}

/// A trigger service: every POST changes the sample's `status` resource.
async fn trigger_for(sample: Sample) -> (String, tokio::task::JoinHandle<()>) {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/change", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let sample = sample.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req| {
                    sample.bump();
                    async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Empty::<bytes::Bytes>::new(),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_are_acknowledged_and_told_of_triggered_changes() {
    // Two resources and `status`: the listeners spread over all three.
    let up = sample(SampleSpec::generated("lis", 2)).await;
    let (trigger, task) = trigger_for(up.sample.clone()).await;
    let a = args(&[
        &up.url(),
        "--listeners",
        "6",
        "--trigger-url",
        &trigger,
        "--trigger-rate",
        "10",
        "--duration",
        "1s",
        "-c",
        "1",
        "--quiet",
    ]);
    let r = bench(&a).await;
    let e = &r.endpoints[0];
    let l = e.listen.as_ref().expect("listen figures");
    assert_eq!((l.listeners, l.acked, l.refused), (6, 6, 0), "{:?}", l.failures);
    assert!(l.ack_ms.p50 > 0.0);
    let t = e.trigger.as_ref().expect("trigger figures");
    assert!(t.get(&200).is_some_and(|n| *n >= 5), "{t:?}");
    // Two of the six listen on `status`, which every trigger changes.
    assert!(l.notifications >= 2 * 5, "{l:?}");
    assert!(l.delivery_ms.p50 > 0.0 && l.delivery_ms.p99 < 1000.0, "{l:?}");
    assert_eq!(e.measured.methods["subscriptions/listen"].sent, 6);
    assert_eq!(up.sample.count("subscriptions/listen"), 6);
    task.abort();
    up.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_any_output() {
    let up = sample(SampleSpec::generated("sec", 3)).await;
    let out = tempfile::tempdir().unwrap();
    let (token, cookie) = ("tok-4f9a8b7c6d5e", "cookie-secret-42");
    let run = |url: String| {
        let out = out.path().to_owned();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_resmux-load"))
                .args(["bench", &url, "--bearer-env", "BENCH_TOKEN", "-H", &format!("Cookie: s={cookie}")])
                .args(["-H", "X-Team: visible", "--duration", "300ms", "--json", "-", "--out"])
                .arg(&out)
                .env("BENCH_TOKEN", token)
                .output()
                .await
                .expect("the binary runs")
        }
    };
    let ok = run(up.url()).await;
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8_lossy(&ok.stdout).into_owned();
    assert!(stdout.contains("x-team: visible") && stdout.contains("authorization: <redacted>"), "{stdout}");
    // A run that fails (nothing listens there) prints an error, which must not quote them either.
    let failed = run("http://127.0.0.1:9/mcp".into()).await;
    assert!(!failed.status.success());
    let mut texts = vec![stdout, String::from_utf8_lossy(&ok.stderr).into_owned()];
    texts.push(String::from_utf8_lossy(&failed.stderr).into_owned());
    for f in std::fs::read_dir(out.path()).unwrap() {
        texts.push(std::fs::read_to_string(f.unwrap().path()).unwrap());
    }
    for text in &texts {
        assert!(!text.contains(token) && !text.contains(cookie), "a secret leaked: {text}");
    }
    up.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_run_and_writes_the_partial_report() {
    let up = sample(SampleSpec::generated("int", 3)).await;
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_resmux-load"))
        .args(["bench", &up.url(), "--duration", "60s", "-c", "2", "--json"])
        .arg(&json)
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary runs");
    // The first progress line says load is flowing.
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.expect("progress in time");
    assert!(first.unwrap().unwrap_or_default().contains("req/s"));
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("exits in time").unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["interrupted"], true);
    let measured = report["endpoints"][0]["summary"]["requests"].as_u64().unwrap();
    assert!(measured > 0);
    assert!(report["endpoints"][0]["summary"]["elapsed_s"].as_f64().unwrap() < 30.0);
    assert_eq!(up.sample.count("resources/read"), report["endpoints"][0]["sent_by_method"]["resources/read"]);
    up.stop();
}
