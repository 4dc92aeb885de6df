//! The first read of a cold key with the shared tier, against a real `redis-server`: one
//! round trip before the upstream fetch (the probe takes the fill lock when it misses), and
//! the fill written after the answer, in the background and bounded. Where a test must hold a
//! fill back, it pauses Redis for writes (`CLIENT PAUSE … WRITE`, which holds every script
//! while reads go on), with an `op_timeout` long enough that the held calls wait instead of
//! failing, a lease long enough that no renewal falls into the pause, and a fill lock that
//! outlives the pause.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use crate::cluster::Redis;
use crate::cluster_fleet::*;
use crate::purge_cluster::shared_values;
use crate::support::*;
use resmux::config::Config;
use resmux::sample::{SampleHttp, SampleSpec};

/// `n` replicas of `up` on `redis` that wait out a paused Redis, each edited by `edit`, once
/// the replica the hash prefers holds the upstream's listen and it is open (a lease taken or
/// handed over announces a resync, which would rightly refuse a fill that raced it).
async fn patient_fleet(up: &SampleHttp, redis: &Redis, n: usize, edit: impl Fn(&mut Config)) -> Vec<Proxy> {
    let mut ps = Vec::new();
    for _ in 0..n {
        let mut c = fleet_config(&[up], Shared::One(redis));
        c.cluster.op_timeout = Duration::from_secs(5);
        c.cluster.lease_ttl = Duration::from_secs(30);
        c.cluster.lock_ttl = Duration::from_secs(10);
        edit(&mut c);
        let p = Proxy::start(c).await;
        discovered(&p.client).await;
        ps.push(p);
    }
    settled_holder(&ps, "docs").await;
    eventually("the holder listens upstream", || {
        let n = up.sample.listens_open();
        async move { (n == 1).then_some(()) }
    })
    .await;
    // A read through each replica whose fill is stored: the resync that a handover of the
    // lease announces is behind, and Redis knows the scripts (it learns each on first use, by
    // a refused EVALSHA and an EVAL, which would blur the counts of the tests).
    let mut spare = (WARM_UP..).map(|i| format!("docs://item/{i}"));
    for p in &ps {
        for attempt in 0.. {
            assert!(attempt < 5, "no fill stored in 5 reads: the fleet does not settle");
            let fills = stat(p, "l2_fills");
            let done = stat(p, "l2_fills_raced") + fills;
            let uri = spare.next().unwrap();
            assert_eq!(p.client.request("resources/read", read(&uri)).await.cache(), "miss");
            eventually("the warm-up fill is written or refused", || {
                let now = stat(p, "l2_fills") + stat(p, "l2_fills_raced");
                async move { (now > done).then_some(()) }
            })
            .await;
            if stat(p, "l2_fills") > fills {
                break;
            }
        }
    }
    ps
}

/// The shared values in Redis other than `warm` (the warm-up's).
async fn new_values(redis: &Redis, warm: &[String]) -> Vec<String> {
    shared_values(redis).await.into_iter().filter(|v| !warm.contains(v)).collect()
}

/// The first of the items the warm-up reads; the tests read items below it.
const WARM_UP: usize = 8;

async fn slow_upstream(delay: Duration) -> SampleHttp {
    let mut spec = SampleSpec::generated("docs", 24);
    spec.delay = delay;
    sample_http(spec).await
}

/// Waits until the upstream has been read `n` times in all (`what` says what that means).
async fn upstream_reads_reach(up: &SampleHttp, n: u64, what: &str) {
    eventually(what, || {
        let reads = up.sample.count("resources/read");
        async move { (reads == n).then_some(()) }
    })
    .await;
}

/// A read of `uri` through `p`, running on its own.
fn spawn_read(p: &Proxy, uri: &str) -> tokio::task::JoinHandle<Exchange> {
    let (client, uri) = (p.client.clone(), uri.to_owned());
    tokio::spawn(async move { client.request("resources/read", read(&uri)).await })
}

fn stat(p: &Proxy, name: &str) -> u64 {
    cluster_state(p)[name].as_u64().unwrap_or_else(|| panic!("no counter {name}"))
}

async fn redis_command(redis: &Redis, cmd: &redis::Cmd) -> redis::Value {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
}

/// Holds every write on `redis` (scripts included) for `hold`.
async fn pause_writes(redis: &Redis, hold: Duration) {
    let ms = hold.as_millis().to_string();
    redis_command(redis, redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("WRITE")).await;
}

/// The commands clients send to `redis` from now on, as `MONITOR` shows them (the commands
/// scripts make inside Redis left out), while the returned log lives.
async fn monitor(redis: &Redis) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = redis.url().trim_start_matches("redis://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));
    let sink = Arc::downgrade(&log);
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let Some(log) = sink.upgrade() else { return };
            if !line.contains(" lua] ") {
                log.lock().unwrap().push(line);
            }
        }
    });
    log
}

/// Two replicas missing one key at once: the first probe takes the fill lock in its one round
/// trip, the other replica's probe finds it taken and waits for the fill; one upstream read
/// answers both, and the leader's miss costs Redis two calls (probe, fill).
#[tokio::test]
async fn two_replicas_missing_one_key_at_once_make_one_upstream_read_through_the_probes_lock() {
    let redis = Redis::start().await;
    let up = slow_upstream(Duration::from_millis(300)).await;
    let ps = patient_fleet(&up, &redis, 2, |_| {}).await;
    let counters = |p: &Proxy| ["l2_misses", "lock_waits", "l2_fills"].map(|c| stat(p, c));
    let before: Vec<[u64; 3]> = ps.iter().map(counters).collect();
    let log = monitor(&redis).await;
    let reads = up.sample.count("resources/read");
    let answers = join_all(ps.iter().map(|p| p.client.request("resources/read", read("docs://item/3")))).await;
    assert_eq!(up.sample.count("resources/read") - reads, 1, "one upstream read for both replicas");
    assert_eq!(answers[0].result()["contents"], answers[1].result()["contents"]);
    let mut caches: Vec<&str> = answers.iter().map(|a| a.cache()).collect();
    caches.sort_unstable();
    assert_eq!(caches, ["hit", "miss"]);
    let leader = answers.iter().position(|a| a.cache() == "miss").unwrap();
    let (lead, other) = (leader, 1 - leader);
    eventually("the fill is written", || {
        let fills = stat(&ps[lead], "l2_fills");
        let want = before[lead][2] + 1;
        async move { (fills == want).then_some(()) }
    })
    .await;
    let (l, o) = (counters(&ps[lead]), counters(&ps[other]));
    assert_eq!([l[0] - before[lead][0], l[1] - before[lead][1]], [1, 0], "the leader probed once, never waited");
    assert_eq!(o[1] - before[other][1], 1, "the other replica found the lock taken and waited");
    // Every client call on the key names its lock key; the fill's also carries its notice.
    let client = |line: &str| line.split(['[', ']']).nth(1).map(str::to_owned);
    let leader_calls = || {
        let log = log.lock().unwrap();
        let on_key: Vec<String> = log.iter().filter(|l| l.contains(":lock:")).cloned().collect();
        let lead_client = on_key.first().and_then(|l| client(l));
        on_key.into_iter().filter(|l| lead_client.is_some() && client(l) == lead_client).collect::<Vec<_>>()
    };
    let calls = eventually("the leader's fill is in the monitor's log", || {
        let calls = leader_calls();
        async move { calls.iter().any(|l| l.contains("filled")).then_some(calls) }
    })
    .await;
    assert_eq!(calls.len(), 2, "the leader's miss: one probe before the fetch, one fill after: {calls:?}");
}

/// The leader answers while Redis holds its fill; the fill lands when Redis lets it, and its
/// notice wakes the replica waiting for it, which serves the fill.
#[tokio::test]
async fn the_answer_comes_before_the_fill_and_the_fill_wakes_a_waiter_on_another_replica() {
    let redis = Redis::start().await;
    let up = slow_upstream(Duration::from_secs(1)).await;
    let ps = patient_fleet(&up, &redis, 2, |_| {}).await;
    let base = up.sample.count("resources/read");
    let warm = shared_values(&redis).await;
    let first = spawn_read(&ps[0], "docs://item/5");
    upstream_reads_reach(&up, base + 1, "A's fetch reached the upstream").await;
    let second = spawn_read(&ps[1], "docs://item/5");
    eventually("B waits for A's fill", || {
        let waits = stat(&ps[1], "lock_waits");
        async move { (waits == 1).then_some(()) }
    })
    .await;
    let hold = Duration::from_secs(3);
    let paused = Instant::now();
    pause_writes(&redis, hold).await;
    let first = first.await.unwrap();
    assert!(paused.elapsed() < hold, "A answered while Redis held its fill ({:?})", paused.elapsed());
    assert_eq!(first.cache(), "miss");
    assert!(new_values(&redis, &warm).await.is_empty(), "the fill is not written yet");
    assert!(!second.is_finished(), "B is still waiting");
    let second = second.await.unwrap();
    assert!(paused.elapsed() >= hold, "B was answered by the fill, after the pause");
    assert_eq!(second.cache(), "hit");
    assert_eq!(second.result()["contents"], first.result()["contents"]);
    assert_eq!(new_values(&redis, &warm).await.len(), 1);
    assert!(stat(&ps[1], "fill_notices") >= 1, "the fill's notice woke B");
    assert_eq!(up.sample.count("resources/read") - base, 1);
}

/// The upstream's name prefix in Redis (`resmux:{docs}:g<generation>`), from its listen lease.
async fn docs_tag(redis: &Redis) -> String {
    let keys: Vec<String> = redis.dump().await.into_iter().map(|(k, _)| k).collect();
    let key = keys.iter().find(|k| k.starts_with("resmux:{docs}:g")).expect("the upstream's keys");
    let end = key["resmux:{docs}:g".len()..].find(':').map_or(key.len(), |i| i + "resmux:{docs}:g".len());
    key[..end].to_owned()
}

/// A change this replica never heard of (its announcement lost) moves the upstream's epoch in
/// Redis while a fetch runs: the fill is refused, and the copy the replica kept goes too.
#[tokio::test]
async fn a_fill_that_raced_a_change_is_not_stored_in_redis_nor_kept_locally() {
    let redis = Redis::start().await;
    let up = slow_upstream(Duration::from_millis(400)).await;
    let ps = patient_fleet(&up, &redis, 2, |_| {}).await;
    let base = up.sample.count("resources/read");
    let warm = shared_values(&redis).await;
    let (fills0, raced0) = (stat(&ps[0], "l2_fills"), stat(&ps[0], "l2_fills_raced"));
    let first = spawn_read(&ps[0], "docs://item/2");
    upstream_reads_reach(&up, base + 1, "A's fetch reached the upstream").await;
    let stream_epoch = format!("{}:e:s", docs_tag(&redis).await);
    redis_command(&redis, redis::cmd("INCR").arg(&stream_epoch)).await;
    assert_eq!(first.await.unwrap().cache(), "miss", "the answer is served");
    eventually("A's fill was refused", || {
        let raced = stat(&ps[0], "l2_fills_raced") - raced0;
        async move { (raced == 1).then_some(()) }
    })
    .await;
    assert!(new_values(&redis, &warm).await.is_empty(), "nothing stored in Redis");
    assert_eq!(ps[0].client.request("resources/read", read("docs://item/2")).await.cache(), "miss", "nor kept on A");
    assert_eq!(up.sample.count("resources/read") - base, 2);
    eventually("A's second fill, current, is stored", || {
        let fills = stat(&ps[0], "l2_fills") - fills0;
        async move { (fills == 1).then_some(()) }
    })
    .await;
    assert_eq!(ps[1].client.request("resources/read", read("docs://item/2")).await.cache(), "hit");
    assert_eq!(up.sample.count("resources/read") - base, 2);
}

/// With `max_pending_fills = 1` and Redis holding writes, three misses are answered at once;
/// one fill waits for Redis, the other two are dropped and counted, and their locks expire so
/// another replica fetches those keys itself.
#[tokio::test]
async fn fills_past_max_pending_fills_are_dropped_and_counted_and_their_locks_expire() {
    let redis = Redis::start().await;
    let up = slow_upstream(Duration::from_millis(500)).await;
    let ps = patient_fleet(&up, &redis, 2, |c| {
        c.cluster.max_pending_fills = 1;
        c.cluster.lock_ttl = Duration::from_secs(2);
    })
    .await;
    let base = up.sample.count("resources/read");
    let warm = shared_values(&redis).await;
    let fills0 = stat(&ps[0], "l2_fills");
    let uris = ["docs://item/0", "docs://item/1", "docs://item/6"];
    let reads: Vec<_> = uris.iter().map(|u| spawn_read(&ps[0], u)).collect();
    upstream_reads_reach(&up, base + 3, "the three fetches reached the upstream (each probe took its lock)").await;
    let hold = Duration::from_secs(3);
    let paused = Instant::now();
    pause_writes(&redis, hold).await;
    for r in reads {
        assert_eq!(r.await.unwrap().cache(), "miss");
    }
    assert!(paused.elapsed() < hold, "answered while Redis held the fills ({:?})", paused.elapsed());
    assert_eq!(stat(&ps[0], "fills_dropped"), 2, "one fill pending, two dropped");
    eventually("the one pending fill is written once Redis lets it", || {
        let fills = stat(&ps[0], "l2_fills") - fills0;
        async move { (fills == 1).then_some(()) }
    })
    .await;
    assert_eq!(new_values(&redis, &warm).await.len(), 1);
    let mut caches = Vec::new();
    for u in uris {
        let answer = ps[1].client.request("resources/read", read(u)).await;
        caches.push(answer.cache().to_owned());
    }
    caches.sort_unstable();
    assert_eq!(caches, ["hit", "miss", "miss"], "the dropped fills' locks expired: B fetched those");
    assert_eq!(up.sample.count("resources/read") - base, 5);
    assert_eq!(stat(&ps[0], "fill_errors"), 0);
}

/// A fill still held by Redis when a replica shuts down is written before shutdown ends, end
/// to end. The replica is the one not holding the listen, whose shutdown releases no lease;
/// its health probe may still queue behind the fill on the shared connection, so the drain
/// itself is checked alone in the cluster crate (`fill.rs`).
#[tokio::test]
async fn shutdown_waits_for_the_fills_in_flight() {
    let redis = Redis::start().await;
    let up = slow_upstream(Duration::from_millis(300)).await;
    let mut ps = patient_fleet(&up, &redis, 2, |_| {}).await;
    let base = up.sample.count("resources/read");
    let warm = shared_values(&redis).await;
    let follower = 1 - settled_holder(&ps, "docs").await;
    let p = ps.swap_remove(follower);
    let first = spawn_read(&p, "docs://item/4");
    upstream_reads_reach(&up, base + 1, "the fetch reached the upstream").await;
    let hold = Duration::from_secs(2);
    let paused = Instant::now();
    pause_writes(&redis, hold).await;
    let answer: Value = first.await.unwrap().result();
    assert!(answer["contents"].is_array());
    assert!(new_values(&redis, &warm).await.is_empty(), "the fill is held by Redis");
    let cluster = p.app.router().cluster().unwrap();
    p.app.shutdown().await;
    assert!(paused.elapsed() >= hold);
    let counters = cluster.stats().counters();
    assert_eq!(new_values(&redis, &warm).await.len(), 1, "shutdown waited for the fill: {counters:?}");
}
