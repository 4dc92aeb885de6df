//! Fencing across a Redis failover that lost writes, made deterministic on one real Redis:
//! the test deletes the lease and the fence counter, as a promoted replica that lacked its
//! dead master's writes has neither. The new holder's changes must reach every replica, and a
//! late event of the deposed holder (its old token, sent on the bus) must be dropped.

use serde_json::json;

use crate::cluster::Redis;
use crate::cluster_fleet::*;
use crate::support::*;
use resmux::sample::SampleSpec;

async fn redis_conn(redis: &Redis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// The lease's value, `replica:token`, split.
async fn lease(redis: &Redis, key: &str) -> Option<(String, u64)> {
    let v: Option<String> = redis::cmd("GET").arg(key).query_async(&mut redis_conn(redis).await).await.unwrap();
    let (replica, token) = v?.rsplit_once(':').map(|(r, t)| (r.to_owned(), t.parse().unwrap()))?;
    Some((replica, token))
}

/// Two replicas lose the lease and the fence counter as a failover to a replica without
/// them would. The counter had issued tokens before (`issued`); `clock_ahead`: they came from a
/// dead master whose clock ran an hour ahead, so that the new holder's token is below them.
async fn lost_writes(clock_ahead: bool) {
    let redis = Redis::start().await;
    let mut conn = redis_conn(&redis).await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let ps = fleet(&[&up], Shared::One(&redis), 2).await;
    settled_holder(&ps, "docs").await;
    // The upstream's names in Redis: `resmux:{docs}:g<generation>`.
    let leases: Vec<String> = redis::cmd("KEYS").arg("resmux:{docs}:g*:lease").query_async(&mut conn).await.unwrap();
    let tag = leases[0].strip_suffix(":lease").unwrap().to_owned();
    let generation = tag.rsplit_once(":g").unwrap().1.to_owned();
    let (lease_key, fence_key) = (format!("{tag}:lease"), format!("{tag}:fence"));

    // Tokens issued before: `issued` and up (the holder is made to take the lease again).
    let issued = if clock_ahead { resmux::cluster::now_ms() + 3_600_000 } else { 41 };
    let _: () = redis::cmd("SET").arg(&fence_key).arg(issued).query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&lease_key).query_async(&mut conn).await.unwrap();
    let old = eventually("the holder takes the lease with a token past those issued", || {
        let (redis, key) = (&redis, &lease_key);
        async move { lease(redis, key).await.map(|(_, t)| t).filter(|t| *t > issued) }
    })
    .await;
    let h = settled_holder(&ps, "docs").await;
    // The follower has seen that token: its listen is acknowledged once the holder's live
    // filter (an event with the token) covers it.
    let mut seen =
        ps[1 - h].client.listen(json!("S"), json!({"resourceSubscriptions": ["docs://item/2"]})).await.unwrap();
    assert_eq!(seen.next().await["method"], "notifications/subscriptions/acknowledged");
    drop(seen);
    let status = up.sample.status_uri().to_owned();

    // The loss.
    let _: () = redis::cmd("DEL").arg(&lease_key).arg(&fence_key).query_async(&mut conn).await.unwrap();
    let new = eventually("a holder takes the lease again", || {
        let (redis, key) = (&redis, &lease_key);
        async move { lease(redis, key).await.map(|(_, t)| t) }
    })
    .await;
    assert_eq!(new < old, clock_ahead, "the new token {new} against {old}");
    let h = settled_holder(&ps, "docs").await;
    let f = &ps[1 - h];
    // The holder as it was before the loss, with its old token.
    let deposed = cluster_state(&ps[h])["replica"].clone();
    if clock_ahead {
        // Tokens went back: the follower sees so in the lease it reads, not on the bus.
        eventually("the follower re-baselines its fence", || {
            let n = cluster_state(f)["fence_rebaselines"].as_u64().unwrap();
            async move { (n == 1).then_some(()) }
        })
        .await;
    }
    // Acknowledged once the new holder's live filter covers it: the follower admitted an
    // event of the new holder.
    let mut listen = f.client.listen(json!("L"), json!({"resourceSubscriptions": [status]})).await.unwrap();
    assert_eq!(listen.next().await["method"], "notifications/subscriptions/acknowledged");
    // Cached on the follower.
    let before = f.client.request("resources/read", read(&status)).await.result()["contents"].clone();
    assert_eq!(f.client.request("resources/read", read("docs://item/1")).await.cache(), "miss");
    assert_eq!(f.client.request("resources/read", read(&status)).await.cache(), "hit");
    // The new holder listens upstream for what the follower watches and caches.
    let mut watched = vec!["docs://item/1", status.as_str()];
    watched.sort_unstable();
    upstream_subscribed(&up, &watched).await;

    // A late event of the deposed holder is dropped: the entry it names stays cached (and so
    // nothing has dropped the follower's cache since it was filled).
    let fenced = cluster_state(f)["events_fenced"].as_u64().unwrap();
    let late = json!({ "r": deposed, "u": "docs", "g": generation, "f": old, "k": "updated", "uri": "docs://item/1" });
    let _: u64 =
        redis::cmd("PUBLISH").arg(format!("{tag}:bus")).arg(late.to_string()).query_async(&mut conn).await.unwrap();
    eventually("the deposed holder's event is fenced off", || {
        let n = cluster_state(f)["events_fenced"].as_u64().unwrap();
        async move { (n == fenced + 1).then_some(()) }
    })
    .await;
    assert_eq!(f.client.request("resources/read", read("docs://item/1")).await.cache(), "hit");

    // The new holder's change reaches the follower: its entry is evicted, its listener told.
    up.sample.bump();
    listen.next_method("notifications/resources/updated").await;
    past_this_millisecond().await;
    let after = f.client.request("resources/read", read(&status)).await;
    assert_ne!(after.result()["contents"], before, "the follower served the entry from before the change");
    assert_eq!(cluster_state(f)["events_fenced"].as_u64().unwrap(), fenced + 1, "a new holder's event was fenced");
    let rebaselines = if clock_ahead { 1 } else { 0 };
    assert_eq!(cluster_state(f)["fence_rebaselines"].as_u64().unwrap(), rebaselines);
}

/// The observed case: the promoted replica had none of its master's writes. Tokens follow
/// the server's clock, so the new one is still above every earlier one.
#[tokio::test]
async fn a_failover_that_lost_the_fence_counter_keeps_the_new_holder_heard_and_the_deposed_fenced() {
    lost_writes(false).await;
}

/// Tokens were issued by a master whose clock ran an hour ahead: the new holder's token is
/// below them, and the follower follows it on the evidence of the lease it reads.
#[tokio::test]
async fn a_failover_that_set_tokens_back_keeps_the_new_holder_heard_and_the_deposed_fenced() {
    lost_writes(true).await;
}
