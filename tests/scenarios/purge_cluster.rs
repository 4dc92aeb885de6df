//! Operator purges across replicas sharing a real Redis: a purge on one replica removes the
//! entry on the others and its shared values (public and private partitions) from Redis, so
//! every replica's next read reaches the upstream again.

use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::{Redis, replica_config};
use crate::support::*;
use resmux::sample::{SampleHttp, SampleSpec};

async fn replica(up: &SampleHttp, redis: &Redis) -> Proxy {
    let mut c = replica_config(up, redis);
    c.admin.addr = "127.0.0.1:0".into();
    let p = Proxy::start(c).await;
    discovered(&p.client).await;
    p
}

async fn purge(p: &Proxy, body: Value) -> Value {
    let url = format!("http://{}/admin/cache/purge", p.app.admin_addr().unwrap());
    let answer = McpClient::new(&url).raw("POST", &[], body.to_string().into_bytes()).await;
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    answer.json()
}

/// The shared values in Redis (not epochs, locks, leases).
pub(crate) async fn shared_values(redis: &Redis) -> Vec<String> {
    redis.dump().await.into_iter().map(|(k, _)| k).filter(|k| k.contains(":v:")).collect()
}

async fn read(client: &McpClient, uri: &str) -> String {
    let answer = client.request("resources/read", json!({ "uri": uri })).await;
    answer.result();
    answer.cache().to_owned()
}

#[tokio::test]
async fn a_purge_on_one_replica_empties_the_others_and_redis() {
    let redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let (a, b) = (replica(&up, &redis).await, replica(&up, &redis).await);
    let alice = |p: &Proxy| p.client.as_principal("alice");
    // A public read and a private one, each fetched once and shared through Redis.
    for uri in ["docs://item/1", "docs://me"] {
        assert_eq!(read(&alice(&a), uri).await, "miss");
        assert_eq!(read(&alice(&b), uri).await, "hit", "{uri} came from the shared tier");
    }
    assert_eq!(up.sample.count("resources/read"), 2);
    assert_eq!(shared_values(&redis).await.len(), 2, "one public and one private value");

    for uri in ["docs://item/1", "docs://me"] {
        let answer = purge(&a, json!({ "uri": uri })).await;
        assert_eq!((answer["purged"].as_u64(), answer["shared"].as_u64()), (Some(1), Some(1)), "{uri}: {answer}");
    }
    assert!(shared_values(&redis).await.is_empty(), "the shared values are gone");
    // The announcements reach B in order: once the second is applied, so is the first.
    let b_client = alice(&b);
    eventually("replica B dropped its copies", || {
        let client = b_client.clone();
        async move { (read(&client, "docs://me").await == "miss").then_some(()) }
    })
    .await;
    assert_eq!(read(&alice(&b), "docs://item/1").await, "miss");
    assert_eq!(up.sample.count("resources/read"), 4, "B fetched both from the upstream again");
    assert_eq!(read(&alice(&a), "docs://item/1").await, "hit", "A takes B's new fill");

    // By upstream, asked on B: lists too, everywhere.
    a.client.list_all("resources/list", "resources").await;
    assert!(!shared_values(&redis).await.is_empty());
    let answer = purge(&b, json!({ "upstream": "docs" })).await;
    assert_eq!(answer["purged"].as_u64(), Some(2), "B's two reads: {answer}");
    assert!(shared_values(&redis).await.is_empty(), "every shared value of the upstream is gone");
    let lists = up.sample.count("resources/list");
    eventually("replica A dropped its list", || {
        let (client, sample) = (a.client.clone(), up.sample.clone());
        async move {
            client.list_all("resources/list", "resources").await;
            (sample.count("resources/list") > lists).then_some(())
        }
    })
    .await;
    let view = McpClient::new(&format!("http://{}/metrics", a.app.admin_addr().unwrap()))
        .raw("GET", &[], Vec::new())
        .await
        .body;
    let view = String::from_utf8_lossy(&view);
    assert!(view.contains(r#"resmux_cache_purges_total{by="upstream"} 1"#), "A applied the announced purge");
}

#[tokio::test]
async fn a_fill_in_flight_on_another_replica_does_not_bring_a_purged_entry_back() {
    let redis = Redis::start().await;
    let mut spec = SampleSpec::generated("docs", 3);
    spec.delay = Duration::from_secs(1);
    let up = sample_http(spec).await;
    let (a, b) = (replica(&up, &redis).await, replica(&up, &redis).await);
    let client = b.client.clone();
    let slow = tokio::spawn(async move { read(&client, "docs://item/0").await });
    eventually("B's read reached the upstream", || {
        let sample = up.sample.clone();
        async move { (sample.count("resources/read") == 1).then_some(()) }
    })
    .await;
    assert_eq!(purge(&a, json!({ "uri": "docs://item/0" })).await["purged"], 0);
    assert_eq!(slow.await.unwrap(), "miss");
    assert!(shared_values(&redis).await.is_empty(), "B's fill was refused in Redis");
    assert_eq!(read(&b.client, "docs://item/0").await, "miss", "and not kept on B");
    assert_eq!(up.sample.count("resources/read"), 2);
}
