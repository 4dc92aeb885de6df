//! Replicas sharing a real Redis Cluster (`[cluster] redis_nodes`; 3 masters, 3 replicas, see
//! `redis_cluster.rs`): the shared cache, cross-replica single-flight, private isolation,
//! invalidation over sharded pub/sub, one upstream listen per upstream for the fleet, a resmux
//! replica SIGKILLed, and the Redis master that owns an upstream's slot SIGKILLed while reads
//! and listens run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::cluster_fleet::*;
use crate::redis_cluster::RedisCluster;
use crate::support::*;
use resmux::sample::{SampleHttp, SampleSpec};

async fn replicas(ups: &[&SampleHttp], rc: &RedisCluster, n: usize) -> Vec<Proxy> {
    fleet(ups, Shared::Cluster(rc), n).await
}

/// Waits until exactly one replica holds `upstream`'s listen lease.
async fn holder(ps: &[Proxy], upstream: &str) -> usize {
    crate::cluster_fleet::holder(&ps.iter().collect::<Vec<_>>(), upstream).await
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
    a_stampede_makes_one_upstream_request(Shared::Cluster(&rc)).await;
}

#[tokio::test]
async fn private_entries_never_reach_another_principal_through_a_redis_cluster() {
    let rc = RedisCluster::start().await;
    private_entries_stay_with_their_principal(Shared::Cluster(&rc)).await;
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
        each_hears(&mut listens[i], "notifications/resources/updated", &status).await;
        // The replicas noted the change before their listeners heard of it.
        past_this_millisecond().await;
        // No replica serves the content from before the change.
        for (r, p) in ps.iter().enumerate() {
            let after = p.client.request("resources/read", read(&status)).await;
            assert_ne!(after.result()["contents"], before[i][r], "replica {r} served the old entry");
        }
    }
}

#[tokio::test]
async fn a_killed_replicas_listens_move_to_the_survivors_within_the_lease() {
    let rc = RedisCluster::start().await;
    a_killed_replicas_listens_move_within_the_lease(Shared::Cluster(&rc)).await;
}

// The promoted replica may lack some or all of the dead master's writes (a replica of a new
// cluster has nothing until its first sync, seconds in): the lease and fence counter with
// them. `cluster_fence.rs` covers that loss deterministically.
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
    each_hears(&mut fresh_listens, "notifications/resources/updated", "docs://item/400").await;
    up.sample.bump();
    each_hears(&mut listens, "notifications/resources/updated", &status).await;
}

#[tokio::test]
async fn a_purge_reaches_every_replica_and_every_master_of_a_redis_cluster() {
    let rc = RedisCluster::start().await;
    let docs = sample_http(SampleSpec::generated("docs", 5)).await;
    let wiki = sample_http(SampleSpec::generated("wiki", 5)).await;
    let mut ps = Vec::new();
    for _ in 0..2 {
        let mut c = fleet_config(&[&docs, &wiki], Shared::Cluster(&rc));
        c.admin.addr = "127.0.0.1:0".into();
        ps.push(Proxy::start(c).await);
    }
    // Both replicas have discovered their upstreams and see Redis up for every upstream (the
    // health probe reads a key in each upstream's slot, so each master has been reached)
    // before the first read, as `fleet` waits for discovery.
    for p in &ps {
        discovered(&p.client).await;
        eventually("the replica sees Redis up", || async { (cluster_state(p)["redis"] == "up").then_some(()) }).await;
    }
    // And each upstream's listen is held and open: a listen that opens while a read is being
    // fetched moves the upstream's epoch, and the fill of that read is then not shared.
    for (up, name) in [(&docs, "docs"), (&wiki, "wiki")] {
        holder(&ps, name).await;
        eventually("the upstream listen is open", || async { (up.sample.listens_open() == 1).then_some(()) }).await;
    }
    for uri in ["docs+docs://item/1", "docs+docs://item/2", "wiki+wiki://item/1"] {
        assert_eq!(ps[0].client.request("resources/read", read(uri)).await.cache(), "miss");
        assert_eq!(ps[1].client.request("resources/read", read(uri)).await.cache(), "hit", "{uri} shared");
    }
    let values = |keys: Vec<String>, tag: &str| keys.iter().filter(|k| k.starts_with(tag) && k.contains(":v:")).count();
    assert_eq!(values(rc.keys().await, "resmux:{docs}"), 2);
    // Purging the upstream on replica A: its shared values go from the master that holds
    // them, B drops its copies, and the other upstream's stay.
    let url = format!("http://{}/admin/cache/purge", ps[0].app.admin_addr().unwrap());
    let answer = McpClient::new(&url).raw("POST", &[], json!({"upstream": "docs"}).to_string().into_bytes()).await;
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    assert_eq!(answer.json()["shared"], 2, "{}", String::from_utf8_lossy(&answer.body));
    let keys = rc.keys().await;
    assert_eq!(values(keys.clone(), "resmux:{docs}"), 0, "{keys:?}");
    assert_eq!(values(keys, "resmux:{wiki}"), 1);
    let b = ps[1].client.clone();
    eventually("replica B dropped its copy", || {
        let b = b.clone();
        async move { (b.request("resources/read", read("docs+docs://item/1")).await.cache() == "miss").then_some(()) }
    })
    .await;
}
