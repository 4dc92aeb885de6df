//! Replicas sharing a real Redis Cluster (`[cluster] redis_nodes`; 3 masters, 3 replicas, see
//! `redis_cluster.rs`): the shared cache, cross-replica single-flight, private isolation,
//! invalidation over sharded pub/sub, one upstream listen per upstream for the fleet, a resmux
//! replica SIGKILLed, and the Redis master that owns an upstream's slot SIGKILLed while reads
//! and listens run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::cluster::SECRET;
use crate::redis_cluster::RedisCluster;
use crate::support::*;
use resmux::config::{Config, SecretSource, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

fn replica_config(ups: &[&SampleHttp], rc: &RedisCluster) -> Config {
    let upstreams = ups.iter().map(|u| UpstreamConfig::http(&u.sample.spec().name, &u.url())).collect();
    let mut c = config(upstreams);
    c.cluster.redis_nodes = rc.seeds();
    c.cluster.lease_ttl = Duration::from_millis(900);
    c.proxy.cursor_secret = Some(SecretSource { value: Some(SECRET.into()), ..Default::default() });
    c.hub.linger = Duration::from_millis(50);
    c
}

async fn replicas(ups: &[&SampleHttp], rc: &RedisCluster, n: usize) -> Vec<Proxy> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(Proxy::start(replica_config(ups, rc)).await);
    }
    for p in &out {
        discovered(&p.client).await;
    }
    out
}

fn read(uri: &str) -> Value {
    json!({ "uri": uri })
}

fn cluster_state(p: &Proxy) -> Value {
    p.app.admin().readiness().1["cluster"].clone()
}

/// Waits until exactly one replica holds `upstream`'s listen lease; returns its index.
async fn holder(ps: &[Proxy], upstream: &str) -> usize {
    eventually("one replica holds the lease", || {
        let roles: Vec<String> =
            (ps.iter()).map(|p| cluster_state(p)["listen_roles"][upstream].as_str().unwrap_or("").to_owned()).collect();
        async move {
            let holders: Vec<usize> = (0..roles.len()).filter(|i| roles[*i] == "holder").collect();
            (holders.len() == 1 && roles.iter().all(|r| r == "holder" || r == "follower")).then(|| holders[0])
        }
    })
    .await
}

#[tokio::test]
async fn replicas_share_entries_through_a_redis_cluster() {
    let rc = RedisCluster::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let ps = replicas(&[&up], &rc, 3).await;
    assert_eq!(cluster_state(&ps[0])["redis_mode"], "cluster");
    let first = ps[0].client.request("resources/read", read("docs://item/1")).await;
    assert_eq!(first.cache(), "miss");
    for p in &ps[1..] {
        let other = p.client.request("resources/read", read("docs://item/1")).await;
        assert_eq!(other.cache(), "hit", "another replica answers from the shared tier");
        assert_eq!(other.result()["contents"], first.result()["contents"]);
    }
    assert_eq!(up.sample.count("resources/read"), 1);
}

#[tokio::test]
async fn replicas_stampeding_on_one_key_make_one_upstream_request_on_a_redis_cluster() {
    let rc = RedisCluster::start().await;
    let mut spec = SampleSpec::generated("docs", 5);
    spec.delay = Duration::from_millis(300);
    let up = sample_http(spec).await;
    let ps = replicas(&[&up], &rc, 3).await;
    holder(&ps, "docs").await;
    eventually("the holder listens upstream", || {
        let n = up.sample.listens_open();
        async move { (n == 1).then_some(()) }
    })
    .await;
    let before = up.sample.count("resources/read");
    let calls = ps.iter().flat_map(|p| {
        (0..8).map(|_| {
            let c = p.client.clone();
            async move { c.request("resources/read", read("docs://item/3")).await }
        })
    });
    let answers = join_all(calls).await;
    assert!(answers.iter().all(|a| a.status == 200 && a.result()["contents"].is_array()));
    assert_eq!(up.sample.count("resources/read") - before, 1, "24 callers on 3 replicas, one upstream request");
    let waits: u64 = ps.iter().map(|p| cluster_state(p)["lock_waits"].as_u64().unwrap()).sum();
    assert!(waits >= 1, "the other replicas waited for the fill");
    let notices: u64 = ps.iter().map(|p| cluster_state(p)["fill_notices"].as_u64().unwrap()).sum();
    assert!(notices >= 1, "the fill's notice woke the waiting replicas");
}

#[tokio::test]
async fn private_entries_never_reach_another_principal_through_a_redis_cluster() {
    let rc = RedisCluster::start().await;
    let mut spec = SampleSpec::generated("docs", 5);
    spec.public = false;
    let up = sample_http(spec).await;
    let mut ps = Vec::new();
    for _ in 0..2 {
        let mut c = replica_config(&[&up], &rc);
        api_keys(&mut c, &["alice-7f3a", "bob-91c2"]);
        ps.push(Proxy::start(c).await);
    }
    let (alice_a, alice_b) = (ps[0].client.as_principal("alice-7f3a"), ps[1].client.as_principal("alice-7f3a"));
    let bob_b = ps[1].client.as_principal("bob-91c2");
    let first = alice_a.request("resources/read", read("docs://item/1")).await;
    assert_eq!(first.cache(), "miss");
    assert_eq!(first.result()["cacheScope"], "private");
    assert_eq!(bob_b.request("resources/read", read("docs://item/1")).await.cache(), "miss");
    assert_eq!(alice_b.request("resources/read", read("docs://item/1")).await.cache(), "hit");
    assert_eq!(up.sample.count("resources/read"), 2);
}

/// Opens a listen on every replica for `uri`, acknowledged.
async fn listen_everywhere(ps: &[Proxy], uri: &str) -> Vec<Listening> {
    let mut out = Vec::new();
    for p in ps {
        let mut l = p.client.listen(json!("L"), json!({"resourceSubscriptions": [uri]})).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        out.push(l);
    }
    out
}

#[tokio::test]
async fn each_upstream_has_one_listen_for_the_fleet_and_its_changes_reach_every_replica() {
    let rc = RedisCluster::start().await;
    let docs = sample_http(SampleSpec::generated("docs", 5)).await;
    let wiki = sample_http(SampleSpec::generated("wiki", 5)).await;
    let ps = replicas(&[&docs, &wiki], &rc, 3).await;
    let mut listens = Vec::new();
    let mut before = Vec::new();
    for (up, name) in [(&docs, "docs"), (&wiki, "wiki")] {
        holder(&ps, name).await;
        // Two upstreams: the URIs downstream carry their namespace.
        let status = up.sample.status_uri().to_owned();
        let uri = format!("{name}+{status}");
        listens.push(listen_everywhere(&ps, &uri).await);
        // Cached on every replica before the change.
        let mut contents = Vec::new();
        for p in &ps {
            contents.push(p.client.request("resources/read", read(&uri)).await.result()["contents"].clone());
            assert_eq!(p.client.request("resources/read", read(&uri)).await.cache(), "hit");
        }
        before.push(contents);
        upstream_subscribed(up, &[&status]).await;
    }
    for (up, name) in [(&docs, "docs"), (&wiki, "wiki")] {
        assert_eq!(up.sample.listens_open(), 1, "{name}: one upstream listen for 3 replicas");
    }
    for (i, (up, name)) in [(&docs, "docs"), (&wiki, "wiki")].into_iter().enumerate() {
        let status = format!("{name}+{}", up.sample.status_uri());
        up.sample.bump();
        for l in &mut listens[i] {
            let n = l.next_method("notifications/resources/updated").await;
            assert_eq!(n["params"]["uri"], status);
        }
        // The replicas noted the change before their listeners heard of it; a shared value
        // is taken only if fetched in a later millisecond than the change.
        let noted = resmux::cluster::now_ms();
        eventually("the clock is past the millisecond of the change", || {
            let later = resmux::cluster::now_ms() > noted;
            async move { later.then_some(()) }
        })
        .await;
        // No replica serves the content from before the change.
        for (r, p) in ps.iter().enumerate() {
            let after = p.client.request("resources/read", read(&status)).await;
            assert_ne!(after.result()["contents"], before[i][r], "replica {r} served the old entry");
        }
    }
}

/// A replica in its own process on the Redis Cluster, so that it can be SIGKILLed.
async fn process_replica(up: &SampleHttp, rc: &RedisCluster) -> ServeProcess {
    let nodes: Vec<String> = rc.seeds().iter().map(|s| format!("\"{s}\"")).collect();
    let text = format!(
        r#"
[listen]
addr = "127.0.0.1:0"
[log]
format = "json"
level = "info"
[proxy]
cursor_secret = {{ value = "{SECRET}" }}
[hub]
linger = "50ms"
[cluster]
redis_nodes = [{}]
lease_ttl = "900ms"
[[upstream]]
name = "docs"
url = "{}"
"#,
        nodes.join(", "),
        up.url()
    );
    ServeProcess::start(&text).await
}

#[tokio::test]
async fn a_killed_replicas_listen_moves_to_another_within_the_lease() {
    let rc = RedisCluster::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let mut first = process_replica(&up, &rc).await;
    discovered(&McpClient::new(&format!("http://{}/mcp", first.addr))).await;
    let ps = replicas(&[&up], &rc, 2).await;
    for p in &ps {
        eventually("the process replica holds the lease", || {
            let role = cluster_state(p)["listen_roles"]["docs"].clone();
            async move { (role == "follower").then_some(()) }
        })
        .await;
    }
    let mut listens = listen_everywhere(&ps, "docs://item/2").await;
    upstream_subscribed(&up, &["docs://item/2"]).await;

    first.child.start_kill().unwrap(); // SIGKILL: no release, the lease must expire
    first.child.wait().await.unwrap();
    let killed = tokio::time::Instant::now();
    for l in &mut listens {
        let resync = l.next_method("notifications/resources/updated").await;
        assert_eq!(resync["params"]["uri"], "docs://item/2");
    }
    let took = killed.elapsed();
    eprintln!("replica failover on a redis cluster: listeners resynced {took:?} after the SIGKILL (lease_ttl 900 ms)");
    assert!(took < Duration::from_secs(5), "failover took {took:?}");
    holder(&ps, "docs").await;
    up.sample.touch("docs://item/2");
    for l in &mut listens {
        let n = l.next_method("notifications/resources/updated").await;
        assert_eq!(n["params"]["uri"], "docs://item/2");
    }
}

#[tokio::test]
async fn a_killed_redis_master_is_survived_while_reads_and_listens_run() {
    let mut rc = RedisCluster::start().await;
    let up = sample_http(SampleSpec::generated("docs", 400)).await;
    // Items past 360 are never read before the promotion.
    let mut fresh = 361..=400;
    let ps = Arc::new(replicas(&[&up], &rc, 3).await);
    holder(&ps, "docs").await;
    let status = up.sample.status_uri().to_owned();
    let mut listens = listen_everywhere(&ps, &status).await;
    upstream_subscribed(&up, &[&status]).await;

    // Reads run on every replica throughout: cold keys (which ask Redis) and warm ones.
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..ps.len())
        .map(|i| {
            let (ps, stop) = (ps.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut n, mut failed) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) && n < 1000 {
                    let uri = format!("docs://item/{}", 1 + (n * 3 + i as u64) % 360);
                    let answer = ps[i].client.request("resources/read", read(&uri)).await;
                    if answer.status != 200 || !answer.result()["contents"].is_array() {
                        failed.push(uri);
                    }
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (n, failed)
            })
        })
        .collect();
    // The loss is seen: some replica reports Redis degraded while the master is gone, in
    // /readyz and in its metrics.
    let (saw_degraded, saw_metric) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let watcher = {
        let (ps, stop, saw, metric) = (ps.clone(), stop.clone(), saw_degraded.clone(), saw_metric.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if ps.iter().any(|p| cluster_state(p)["redis"] == "degraded") {
                    saw.store(true, Ordering::Relaxed);
                }
                if ps.iter().any(|p| p.app.admin().metrics_text().contains("resmux_cluster_redis_up 0\n")) {
                    metric.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let errors_before: u64 = ps.iter().map(|p| cluster_state(p)["errors"].as_u64().unwrap()).sum();
    let master = rc.master_of("resmux:{docs}:fence").await;
    rc.kill(master).await;
    let killed = tokio::time::Instant::now();
    rc.settled().await;
    eprintln!("redis failover: a replica was promoted {:?} after the master's SIGKILL", killed.elapsed());
    for p in ps.iter() {
        eventually("every replica sees Redis again", || {
            let state = cluster_state(p);
            async move { (state["redis"] == "up").then_some(()) }
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    for r in readers {
        let (n, failed) = r.await.unwrap();
        assert!(failed.is_empty(), "{} of {n} reads failed during the failover: {failed:?}", failed.len());
    }
    assert!(saw_degraded.load(Ordering::Relaxed), "no replica reported the lost master in /readyz");
    assert!(saw_metric.load(Ordering::Relaxed), "no replica reported the lost master in its metrics");
    assert!(ps[0].app.admin().metrics_text().contains("resmux_cluster_redis_up 1\n"));
    let errors_after: u64 = ps.iter().map(|p| cluster_state(p)["errors"].as_u64().unwrap()).sum();
    assert!(errors_after > errors_before, "the metrics count the failed Redis calls");

    // Sharing resumes on the promoted replica: one replica fills, the others hit.
    holder(&ps, "docs").await;
    eventually("sharing resumes after the promotion", || {
        let ps = ps.clone();
        let uri = format!("docs://item/{}", fresh.next().unwrap());
        async move {
            let first = ps[0].client.request("resources/read", read(&uri)).await;
            let second = ps[1].client.request("resources/read", read(&uri)).await;
            (first.cache() == "miss" && second.cache() == "hit").then_some(())
        }
    })
    .await;
    // Notifications flow again, for listens opened before the loss and after it (these
    // reach the holder's upstream listen through the interest kept in Redis).
    let mut fresh_listens = listen_everywhere(&ps, "docs://item/400").await;
    // (The upstream listen also carries every cached URI, for invalidation.)
    eventually("one upstream listen again, with both URIs", || {
        let got = up.sample.active_subscriptions();
        let want = [status.clone(), "docs://item/400".to_owned()];
        async move { (got.len() == 1 && want.iter().all(|u| got[0].contains(u))).then_some(()) }
    })
    .await;
    up.sample.touch("docs://item/400");
    for l in &mut fresh_listens {
        let n = l.next_method("notifications/resources/updated").await;
        assert_eq!(n["params"]["uri"], "docs://item/400");
    }
    up.sample.bump();
    for l in &mut listens {
        let n = l.next_method("notifications/resources/updated").await;
        assert_eq!(n["params"]["uri"], status);
    }
}
