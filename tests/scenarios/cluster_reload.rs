//! Reload with `[cluster]` (issue 31, item 4): three replicas, each applying its own config in
//! turn (a rolling reload), add, remove and change an upstream while every replica keeps
//! reading. Leases, interest, the bus and the shared tier follow the new upstream set: an
//! added upstream's listen is held by the replica the hash prefers and its changes and shared
//! values reach every replica; a removed one's lease goes at once and its listeners are told;
//! a changed one's listen moves to the new target, and no replica takes a shared value of the
//! old target for the new one. Listens on the upstreams that stay hear changes throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::Redis;
use crate::cluster_fleet::*;
use crate::redis_cluster::RedisCluster;
use crate::support::*;
use resmux::config::Config;
use resmux::sample::{SampleHttp, SampleSpec};

/// Long enough that a lease left to expire is told apart from one released (a released lease
/// is gone at once; a renewed one lives two thirds of this).
const LEASE: Duration = Duration::from_secs(3);

fn replica_config(ups: &[&SampleHttp], at: Shared) -> Config {
    let mut c = fleet_config(ups, at);
    c.cluster.lease_ttl = LEASE;
    c
}

async fn keys(at: Shared<'_>) -> Vec<String> {
    match at {
        Shared::One(r) => r.dump().await.into_iter().map(|(k, _)| k).collect(),
        Shared::Cluster(rc) => rc.keys().await,
    }
}

fn replica_id(p: &Proxy) -> String {
    cluster_state(p)["replica"].as_str().unwrap().to_owned()
}

/// Reads on one replica until `stop`, paced, of URIs of the upstreams that stay; returns how
/// many it made and the ones that failed.
async fn keep_reading(client: McpClient, stop: Arc<AtomicBool>) -> (u64, Vec<Value>) {
    let uris = ["docs+docs://item/0", "wiki+wiki://item/0", "docs+docs://item/1", "wiki+wiki://item/1"];
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    let (mut made, mut failed) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        pace.tick().await;
        let uri = uris[made as usize % uris.len()];
        let answer = client.request("resources/read", read(uri)).await;
        if answer.status != 200 || !answer.result()["contents"].is_array() {
            failed.push(json!({ "uri": uri, "status": answer.status.as_u16(), "body": answer.json() }));
        }
        made += 1;
    }
    (made, failed)
}

/// Applies `next` on each replica in turn; every reload must be applied.
async fn roll(ps: &[Proxy], next: impl Fn() -> Config) {
    for p in ps {
        p.app.reloader().apply(next()).await.expect("the reload is applied");
    }
}

/// Waits until every replica agrees that `name`'s listen is held by the replica the hash
/// prefers among `ids`, and that replica says it holds it.
async fn held_by_preferred(ps: &[Proxy], ids: &[String], name: &str) {
    let want = resmux::cluster::preferred_listen_holder(name, ids).unwrap().to_owned();
    eventually(&format!("{name}'s listen is held by the preferred replica"), || {
        let states: Vec<Value> = ps.iter().map(cluster_state).collect();
        let (ids, want) = (ids.to_vec(), want.clone());
        async move {
            (states.iter().zip(&ids))
                .all(|(s, id)| {
                    let role = if *id == want { "holder" } else { "follower" };
                    s["listen_holders"][name] == want.as_str() && s["listen_roles"][name] == role
                })
                .then_some(())
        }
    })
    .await;
}

async fn open_listens<'a>(ps: impl IntoIterator<Item = &'a Proxy>, uri: &str) -> Vec<Listening> {
    let mut out = Vec::new();
    for p in ps {
        let mut l = p.client.listen(json!("L"), json!({ "resourceSubscriptions": [uri] })).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        out.push(l);
    }
    out
}

/// Waits until each upstream has its number of upstream listens open.
async fn open_upstream_listens(want: &[(&SampleHttp, u64)], what: &str) {
    eventually(what, || {
        let open = want.iter().all(|(up, n)| up.sample.listens_open() == *n);
        async move { open.then_some(()) }
    })
    .await;
}

/// Touches `uri` on `up` (upstream form) and waits for every listen to hear it.
async fn changes_reach_everyone(up: &SampleHttp, listens: &mut [Listening], name: &str, uri: &str) {
    up.sample.touch(uri);
    each_hears(listens, "notifications/resources/updated", &format!("{name}+{uri}")).await;
}

async fn add_remove_and_change_under_reads(at: Shared<'_>) {
    let docs = sample_http(SampleSpec::generated("docs", 5)).await;
    let wiki = sample_http(SampleSpec::generated("wiki", 5)).await;
    let gone = sample_http(SampleSpec::generated("gone", 5)).await;
    let extra = sample_http(SampleSpec::generated("extra", 5)).await;
    // Where `docs` moves: another server under the same name, whose items read differently.
    let mut spec = SampleSpec::generated("docs", 5);
    spec.profile = resmux::sample::Profile::Generated { count: 5, size: 512 };
    let moved = sample_http(spec).await;
    let mut ps = Vec::new();
    for _ in 0..3 {
        ps.push(Proxy::start(replica_config(&[&docs, &wiki, &gone], at)).await);
    }
    for p in &ps {
        discovered(&p.client).await;
    }
    let ids: Vec<String> = ps.iter().map(replica_id).collect();
    for name in ["docs", "wiki", "gone"] {
        held_by_preferred(&ps, &ids, name).await;
    }
    let mut wiki_listens = open_listens(&ps, "wiki+wiki://item/2").await;
    let mut gone_listens = open_listens(&ps, "gone+gone://item/1").await;
    let mut docs_listens = open_listens(&ps, "docs+docs://item/3").await;
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = ps.iter().map(|p| tokio::spawn(keep_reading(p.client.clone(), stop.clone()))).collect();

    // 1. Add `extra`, the replica the hash prefers for it last: until that one reloads, the two
    // that run `extra` hold its listen between them and hear its changes.
    let preferred = resmux::cluster::preferred_listen_holder("extra", &ids).unwrap();
    let last = ids.iter().position(|id| id == preferred).unwrap();
    let early: Vec<&Proxy> = (0..3).filter(|&i| i != last).map(|i| &ps[i]).collect();
    let with_extra = || replica_config(&[&docs, &wiki, &gone, &extra], at);
    for p in &early {
        p.app.reloader().apply(with_extra()).await.expect("the addition is applied");
    }
    holder(&early, "extra").await;
    let mut early_listens = open_listens(early.iter().copied(), "extra+extra://item/4").await;
    changes_reach_everyone(&extra, &mut early_listens, "extra", "extra://item/4").await;
    assert!(cluster_state(&ps[last])["listen_roles"]["extra"].is_null(), "the last replica does not run extra yet");
    ps[last].app.reloader().apply(with_extra()).await.expect("the addition is applied");
    held_by_preferred(&ps, &ids, "extra").await;
    let mut extra_listens = open_listens(&ps, "extra+extra://item/1").await;
    open_upstream_listens(&[(&extra, 1)], "one upstream listen for extra, fleet-wide").await;
    changes_reach_everyone(&extra, &mut extra_listens, "extra", "extra://item/1").await;
    changes_reach_everyone(&wiki, &mut wiki_listens, "wiki", "wiki://item/2").await;
    let before = extra.sample.count("resources/read");
    assert_eq!(ps[0].client.request("resources/read", read("extra+extra://item/2")).await.cache(), "miss");
    assert_eq!(ps[1].client.request("resources/read", read("extra+extra://item/2")).await.cache(), "hit");
    assert_eq!(extra.sample.count("resources/read") - before, 1, "the second replica took the shared value");

    // 2. Remove `gone`, its lease holder last: the others stop following it, then the holder
    // releases its lease at once instead of letting it expire.
    let h = holder(&ps.iter().collect::<Vec<_>>(), "gone").await;
    let order: Vec<usize> = (0..3).filter(|&i| i != h).chain([h]).collect();
    for &i in &order {
        let next = replica_config(&[&docs, &wiki, &extra], at);
        let report = ps[i].app.reloader().apply(next).await.expect("the removal is applied");
        assert_eq!(report.removed, ["gone"]);
        let n = gone_listens[i].next_method("notifications/resources/updated").await;
        assert_eq!(n["params"]["uri"], "gone+gone://item/1", "replica {i}'s listener is told");
    }
    let released = tokio::time::Instant::now();
    eventually("gone's lease and interest left Redis", || async {
        let ks = keys(at).await;
        (!ks.iter().any(|k| k.contains("{gone}") && (k.ends_with(":lease") || k.ends_with(":interest")))).then_some(())
    })
    .await;
    let took = released.elapsed();
    assert!(took < LEASE / 3, "the lease was released, not left to expire ({took:?})");
    open_upstream_listens(&[(&gone, 0)], "gone's upstream listen ended").await;
    changes_reach_everyone(&wiki, &mut wiki_listens, "wiki", "wiki://item/2").await;
    changes_reach_everyone(&extra, &mut extra_listens, "extra", "extra://item/1").await;

    // 3. Change `docs` to another server, one replica at a time. Mid-roll, a value the old
    // target gave on a replica not yet reloaded is not taken by the reloaded one.
    let text = |answer: &Exchange| answer.result()["contents"][0]["text"].as_str().unwrap().to_owned();
    let next = || replica_config(&[&moved, &wiki, &extra], at);
    let report = ps[0].app.reloader().apply(next()).await.expect("the change is applied");
    assert_eq!(report.changed, ["docs"]);
    let n = docs_listens[0].next_method("notifications/resources/updated").await;
    assert_eq!(n["params"]["uri"], "docs+docs://item/3", "the moved upstream may answer differently");
    let old = ps[1].client.request("resources/read", read("docs+docs://item/4")).await;
    assert_eq!(old.cache(), "miss");
    let new = ps[0].client.request("resources/read", read("docs+docs://item/4")).await;
    assert_eq!(new.cache(), "miss", "the old server's shared value is not taken for the new one");
    assert_ne!(text(&new), text(&old));
    for i in 1..3 {
        ps[i].app.reloader().apply(next()).await.expect("the change is applied");
        let n = docs_listens[i].next_method("notifications/resources/updated").await;
        assert_eq!(n["params"]["uri"], "docs+docs://item/3");
    }
    held_by_preferred(&ps, &ids, "docs").await;
    open_upstream_listens(&[(&docs, 0), (&moved, 1)], "docs listens at the new server only, once for the fleet").await;
    changes_reach_everyone(&moved, &mut docs_listens, "docs", "docs://item/3").await;
    // Replicas that agree on the new server share its values.
    let first = ps[2].client.request("resources/read", read("docs+docs://item/2")).await;
    assert_eq!(first.cache(), "miss");
    let second = ps[1].client.request("resources/read", read("docs+docs://item/2")).await;
    assert_eq!((second.cache(), text(&second)), ("hit", text(&first)));
    changes_reach_everyone(&wiki, &mut wiki_listens, "wiki", "wiki://item/2").await;

    // 4. A change that leaves `wiki`'s content as it is (its timeout): the replaced upstream
    // keeps its lease, its one listen and its shared values.
    let wiki_holder = holder(&ps.iter().collect::<Vec<_>>(), "wiki").await;
    let before = wiki.sample.count("resources/read");
    assert_eq!(ps[0].client.request("resources/read", read("wiki+wiki://item/3")).await.cache(), "miss");
    roll(&ps, || {
        let mut c = replica_config(&[&moved, &wiki, &extra], at);
        c.upstreams[1].timeout = Duration::from_secs(20);
        c
    })
    .await;
    // Never read on that replica: a hit is the shared value, taken by the replacement.
    assert_eq!(ps[1].client.request("resources/read", read("wiki+wiki://item/3")).await.cache(), "hit");
    // The readers' values of `wiki` were shared and stayed current: no replica asked again.
    assert_eq!(
        wiki.sample.count("resources/read") - before,
        1,
        "{} reads of wiki",
        wiki.sample.count("resources/read") - before
    );
    assert_eq!(holder(&ps.iter().collect::<Vec<_>>(), "wiki").await, wiki_holder);
    open_upstream_listens(&[(&wiki, 1)], "wiki listens once for the fleet").await;
    for l in &mut wiki_listens {
        // Told once, by the swap: the replacement may answer differently.
        assert_eq!(l.next_method("notifications/resources/updated").await["params"]["uri"], "wiki+wiki://item/2");
    }
    changes_reach_everyone(&wiki, &mut wiki_listens, "wiki", "wiki://item/2").await;

    stop.store(true, Ordering::Relaxed);
    for (i, r) in readers.into_iter().enumerate() {
        let (made, failed) = r.await.unwrap();
        assert!(failed.is_empty(), "replica {i}: {} of {made} reads failed: {failed:?}", failed.len());
        assert!(made >= 20, "replica {i} kept reading throughout ({made} reads)");
    }
}

#[tokio::test]
async fn reload_adds_removes_and_changes_upstreams_across_three_replicas() {
    let redis = Redis::start().await;
    add_remove_and_change_under_reads(Shared::One(&redis)).await;
}

#[tokio::test]
async fn reload_follows_the_upstream_set_on_a_redis_cluster() {
    let rc = RedisCluster::start().await;
    add_remove_and_change_under_reads(Shared::Cluster(&rc)).await;
}
