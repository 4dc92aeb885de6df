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
    // The hub holds far fewer upstream listens than it has listeners.
    assert!((1..10).contains(&l.upstream_listens), "{} upstream listens", l.upstream_listens);
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
