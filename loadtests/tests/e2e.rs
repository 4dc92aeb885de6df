//! End to end, in-process and bounded: the hot-read scenario against sample upstreams, the
//! proxy (`resmux::app::App`) and the ceiling; listeners against a sample upstream directly
//! and against the proxy. Each run is capped in requests or lasts well under a second.

use std::time::Duration;

use resmux_load::placement::Placement;
use resmux_load::run::{RunOptions, run_scenario, run_side};
use resmux_load::scenario::{Dur, Scenario, Side, resolve};

fn scenario(name: &str) -> Scenario {
    Scenario::load(&resolve(name)).expect("scenario parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_read_runs_through_the_proxy_and_beside_it() {
    let mut s = scenario("hot-read");
    s.clients = 8;
    s.requests = Some(200);
    s.warmup = Dur(Duration::ZERO);
    s.duration = Dur(Duration::from_secs(5));
    let opts = RunOptions {
        placement: Placement::InProcess,
        duration: None,
        sides: Some(vec![Side::Proxy, Side::Direct, Side::Ceiling]),
    };
    let report = run_scenario(&s, &opts).await;
    assert_eq!(report.sides.len(), 3);
    for side in &report.sides {
        assert_eq!(side.requests, 200, "{side:#?}");
        assert_eq!(side.errors, 0, "{:?}", side.failures);
        assert!(side.rps > 0.0, "{side:#?}");
        assert!(side.latency_ms.p50 > 0.0 && side.latency_ms.max >= side.latency_ms.p99);
        assert!(side.notes.is_empty(), "{:?}", side.notes);
    }
    let proxy = &report.sides[0];
    // Whatever the cache does, the upstream saw between 1 and 200 reads.
    let upstream = proxy.upstream_requests.expect("proxy side has upstreams");
    assert!((1..=200).contains(&upstream), "{upstream}");
    // Every proxy answer says how its cache took part.
    assert_eq!(proxy.cache.absent, 0, "{:?}", proxy.cache);
    assert_eq!(report.sides[1].upstream_requests, Some(200));
    assert_eq!(report.sides[2].upstream_requests, None);
    for ratio in ["proxy/ceiling rps", "proxy/direct rps", "proxy/direct p99"] {
        assert!(report.ratios.contains_key(ratio), "{:?}", report.ratios);
    }
    let md = resmux_load::report::markdown(&report);
    assert!(md.contains("| proxy |") && md.contains("Ratios"), "{md}");
}

fn listeners_scenario(listeners: usize) -> Scenario {
    Scenario::parse(
        "listen-test",
        &format!("figure = \"test\"\nlisteners = {listeners}\nupdate_hz = 20\nduration = \"300ms\"\nresources = 5\n"),
    )
    .expect("valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_time_every_notification_of_a_sample_upstream() {
    let s = listeners_scenario(20);
    let report = run_side(&s, Side::Direct, &Placement::InProcess).await.expect("side runs");
    let l = report.listen.expect("listen figures");
    assert_eq!((l.acked, l.refused, l.dropped), (20, 0, 0), "{:?}", l.failures);
    assert_eq!(l.upstream_listens, 20);
    assert!(l.changes >= 3, "{} changes in 300 ms at 20 Hz", l.changes);
    assert_eq!(l.notifications, l.expected, "{:?}", l.failures);
    assert_eq!((l.wrong_subscription, l.unsolicited), (0, 0));
    assert!(l.latency_ms.max > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_through_the_proxy_share_one_upstream_listen() {
    let s = listeners_scenario(10);
    let report = run_side(&s, Side::Proxy, &Placement::InProcess).await.expect("side runs");
    let l = report.listen.expect("listen figures");
    assert_eq!((l.acked, l.refused, l.dropped), (10, 0, 0), "{:?}", l.failures);
    assert_eq!(l.connections, 10, "a connection each");
    // The hub holds far fewer upstream listens than it has listeners.
    assert!((1..10).contains(&l.upstream_listens), "{} upstream listens", l.upstream_listens);
    assert!(l.changes >= 3, "{} changes", l.changes);
    assert_eq!(l.notifications, l.expected, "{:?}", l.failures);
    assert_eq!((l.wrong_subscription, l.unsolicited), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_as_http2_streams_share_connections_and_hear_every_change() {
    let mut s = listeners_scenario(30);
    // 30 listeners, 8 to a connection: 4 HTTP/2 connections, the last one part full.
    s.listen_streams_per_connection = 8;
    assert!(resmux_load::proxy::config_text(([127, 0, 0, 1], 0).into(), &[], &s).contains("http2 = true"));
    let report = run_side(&s, Side::Proxy, &Placement::InProcess).await.expect("side runs");
    let l = report.listen.expect("listen figures");
    assert_eq!((l.acked, l.refused, l.dropped), (30, 0, 0), "{:?}", l.failures);
    assert_eq!(l.connections, 4, "30 listens on 4 connections");
    assert!((1..30).contains(&l.upstream_listens), "{} upstream listens", l.upstream_listens);
    assert!(l.changes >= 3, "{} changes", l.changes);
    assert_eq!(l.notifications, l.expected, "{:?}", l.failures);
    assert_eq!((l.wrong_subscription, l.unsolicited), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ceiling_runs_as_its_own_process() {
    let mut s = scenario("ceiling");
    s.clients = 4;
    s.requests = Some(200);
    s.warmup = Dur(Duration::ZERO);
    let placement = Placement::Processes {
        // Not started: this scenario has no proxy side.
        resmux: "resmux".into(),
        ceiling: env!("CARGO_BIN_EXE_resmux-load").into(),
    };
    let report = run_side(&s, Side::Ceiling, &placement).await.expect("side runs");
    assert_eq!((report.requests, report.errors), (200, 0), "{:?}", report.failures);
    assert!(report.rps > 0.0);
}

/// The ceiling under a wrapper (as `instructions --ceiling` runs it under callgrind): started
/// through the wrapper, it answers, and closing its stdin ends it cleanly (callgrind writes
/// its counts only at a clean exit). `env` stands in for valgrind.
#[tokio::test]
async fn a_wrapped_ceiling_answers_and_exits_cleanly_when_its_stdin_closes() {
    use resmux_load::ceiling::CeilingProcess;
    let body = br#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#;
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_resmux-load"));
    let ceiling = CeilingProcess::spawn_under(&["env".into()], exe, body, Duration::from_secs(10))
        .await
        .expect("the wrapped ceiling starts");
    let mut stream = tokio::net::TcpStream::connect(ceiling.addr).await.unwrap();
    let req = "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
    tokio::io::AsyncWriteExt::write_all(&mut stream, req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer))
        .await
        .expect("the ceiling answers in time")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(std::str::from_utf8(body).unwrap()), "{answer}");
    let status = ceiling.finish(Duration::from_secs(10)).await.expect("it exits when its stdin closes");
    assert!(status.success(), "{status}");
}

/// SIGTERM stops a child as closing its stdin does, with a clean exit (under the default
/// action it would die at once, and `targets` would leave its own children running).
#[tokio::test]
async fn sigterm_stops_the_ceiling_cleanly() {
    use resmux_load::ceiling::CeilingProcess;
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_resmux-load"));
    let ceiling = CeilingProcess::spawn(exe, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).await.expect("it starts");
    let pid = ceiling.pid().expect("running").to_string();
    let killed = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    // `finish` closes stdin too; the child has already been told to stop by the signal, and
    // its status says how it ended (a signal's default action is not a success).
    let status = ceiling.finish(Duration::from_secs(10)).await.expect("it exits");
    assert!(status.success(), "{status}");
}

/// The cluster scenario in miniature: 2 in-process replicas, a few reads, probes and
/// listeners, without and with a real `redis-server` (Debian's package; `.ci/run` installs
/// it, `RESMUX_REDIS_SERVER` names another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_runs_without_and_with_redis() {
    let mut s = scenario("cluster");
    s.clients = 4;
    s.requests = Some(300);
    s.resources = 50;
    s.listeners = 12;
    s.update_hz = 10.0;
    let c = s.cluster.as_mut().expect("cluster.toml has [cluster]");
    c.replicas = 2;
    c.probe_keys = 10;
    c.changes = 2;
    c.settle = Dur(Duration::from_millis(500));
    let report = resmux_load::cluster::run(&s, &Placement::InProcess, None).await;
    assert_eq!(report.modes.len(), 2);
    for m in &report.modes {
        assert_eq!(m.error, None, "{m:#?}");
        assert_eq!((m.cold.reads, m.cold.errors, m.warm.errors), (300, 0, 0), "{m:#?}");
        assert_eq!(m.probes.errors, 0, "{m:#?}");
        // The local hit never goes upstream.
        assert_eq!(m.probes.upstream_reads[1], 0, "{m:#?}");
        assert_eq!(m.listen.acked, 12, "{m:#?}");
        assert_eq!(m.listen.delivered, m.listen.expected, "{m:#?}");
        assert!(m.listen.expected > 0);
    }
    let (without, with) = (&report.modes[0], &report.modes[1]);
    assert!(!without.redis && with.redis);
    // Without Redis, replica B fetches every probe key itself; with Redis it reads them from
    // the L2.
    assert_eq!(without.probes.upstream_reads[2], 10, "{without:#?}");
    assert_eq!(with.probes.upstream_reads[2], 0, "{with:#?}");
    // One upstream listen for the cluster, one per replica without it.
    assert_eq!(without.listen.upstream_listens_open, 2, "{without:#?}");
    assert_eq!(with.listen.upstream_listens_open, 1, "{with:#?}");
    assert!(with.cold.upstream_reads <= without.cold.upstream_reads, "{report:#?}");
    let md = resmux_load::cluster::markdown(&report);
    assert!(md.contains("with Redis") && md.contains("without Redis"), "{md}");
}
