//! Replicas' interest reaching the upstream listen of the replica that holds it, on one real
//! Redis: an added and a removed URI on a follower change the holder's upstream listen, the
//! union stays exact with overlapping interests, and what it costs Redis is measured.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::Redis;
use crate::cluster_fleet::*;
use crate::support::*;
use resmux::sample::SampleSpec;

/// Sum of a counter of `/readyz`'s cluster view over `ps`.
fn total(ps: &[Proxy], counter: &str) -> u64 {
    ps.iter().map(|p| cluster_state(p)[counter].as_u64().unwrap()).sum()
}

fn items(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("docs://item/{i}")).collect()
}

/// Waits until the upstream's one listen is for exactly `uris`.
async fn upstream_has(up: &resmux::sample::SampleHttp, uris: &[String]) {
    let mut want: Vec<&str> = uris.iter().map(String::as_str).collect();
    want.sort_unstable();
    want.dedup();
    upstream_subscribed(up, &want).await;
}

/// 3 replicas listening for `K` URIs each (overlapping by half), then one URI added and one
/// removed on a follower: the holder's upstream listen follows each step exactly. Prints the
/// Redis calls and payload bytes spent on interest while idle and for that change.
#[tokio::test]
async fn an_added_and_a_removed_uri_on_one_replica_reach_the_holders_upstream_listen() {
    const K: usize = 300;
    let redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 2 * K + 10)).await;
    let ps = fleet(&[&up], Shared::One(&redis), 3).await;
    let h = settled_holder(&ps, "docs").await;
    let f = (h + 1) % ps.len();
    let mut union = Vec::new();
    let mut listens = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        let uris = items(i * K / 2..i * K / 2 + K);
        let mut l = p.client.listen(json!("L"), json!({"resourceSubscriptions": uris})).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        listens.push(l);
        union.extend(uris);
    }
    upstream_has(&up, &union).await;

    // Idle: nothing changes for a few lease periods.
    let (calls, bytes, start) = (total(&ps, "interest_calls"), total(&ps, "interest_bytes"), Instant::now());
    let quiet = Duration::from_millis(2000);
    tokio::time::sleep(quiet).await; // a measurement window, not a wait for a condition
    let secs = start.elapsed().as_secs_f64();
    let idle_calls = (total(&ps, "interest_calls") - calls) as f64 / secs;
    let idle_bytes = (total(&ps, "interest_bytes") - bytes) as f64 / secs;

    // A URI no replica wanted is added on the follower, then one only it wanted is removed.
    let (calls, bytes) = (total(&ps, "interest_calls"), total(&ps, "interest_bytes"));
    let added = format!("docs://item/{}", 2 * K + 5);
    let mut extra = ps[f].client.listen(json!("X"), json!({"resourceSubscriptions": [added]})).await.unwrap();
    assert_eq!(extra.next().await["method"], "notifications/subscriptions/acknowledged");
    union.push(added);
    upstream_has(&up, &union).await;
    drop(extra);
    union.pop();
    upstream_has(&up, &union).await;
    let change_calls = total(&ps, "interest_calls") - calls;
    let change_bytes = total(&ps, "interest_bytes") - bytes;
    eprintln!(
        "interest, 3 replicas x {K} URIs: idle {idle_calls:.1} calls/s, {idle_bytes:.0} B/s; \
         one URI added and removed: {change_calls} calls, {change_bytes} B"
    );
    drop(listens);
}

/// The holder applies a notice that does not match the sender's set in Redis (as if the
/// removal had reached it but not the additions since, or a notice were lost): its upstream
/// listen is wrong until its next full read, every `interest_resync`, which repairs it.
#[tokio::test]
async fn a_lost_interest_change_is_repaired_by_the_resync() {
    let redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let mut ps = Vec::new();
    for _ in 0..2 {
        let mut c = fleet_config(&[&up], Shared::One(&redis));
        c.cluster.interest_resync = Duration::from_millis(1500);
        ps.push(Proxy::start(c).await);
    }
    for p in &ps {
        discovered(&p.client).await;
    }
    let h = settled_holder(&ps, "docs").await;
    let f = &ps[1 - h];
    let uris = ["docs://item/1", "docs://item/2"];
    let mut l = f.client.listen(json!("L"), json!({"resourceSubscriptions": uris})).await.unwrap();
    assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
    upstream_subscribed(&up, &uris).await;

    let applied = cluster_state(&ps[h])["interest_deltas"].as_u64().unwrap();
    let mut conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    // The upstream's names carry its generation: found by its lease.
    let leases: Vec<String> = redis::cmd("KEYS").arg("resmux:{docs}:g*:lease").query_async(&mut conn).await.unwrap();
    let tag = leases[0].strip_suffix(":lease").unwrap().to_owned();
    let generation = tag.rsplit_once(":g").unwrap().1.to_owned();
    let wrong = json!({
        "r": cluster_state(f)["replica"], "u": "docs", "g": generation, "f": 0, "k": "interest",
        "add": [], "del": [uris[1]],
    });
    let _: u64 =
        redis::cmd("PUBLISH").arg(format!("{tag}:bus")).arg(wrong.to_string()).query_async(&mut conn).await.unwrap();
    let resyncs =
        eventually("the holder applied the notice", || {
            let s = cluster_state(&ps[h]);
            async move {
                (s["interest_deltas"].as_u64().unwrap() > applied).then(|| s["interest_resyncs"].as_u64().unwrap())
            }
        })
        .await;
    eventually("the holder read every replica's interest again", || {
        let n = cluster_state(&ps[h])["interest_resyncs"].as_u64().unwrap();
        async move { (n > resyncs).then_some(()) }
    })
    .await;
    upstream_subscribed(&up, &uris).await;
    drop(l);
}
