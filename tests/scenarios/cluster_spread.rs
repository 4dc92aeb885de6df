//! Upstream listens spread over the replicas by rendezvous hashing, on a real Redis Cluster:
//! each upstream's listen is held by the replica the hash prefers among the live ones, a
//! replica that joins takes only the upstreams it now wins, and one that leaves hands over
//! only those it held. The admin views name each upstream's holder.

use std::collections::BTreeMap;

use crate::cluster_fleet::{Shared, fleet_config};
use crate::redis_cluster::RedisCluster;
use crate::support::*;
use resmux::config::Config;
use resmux::sample::{SampleHttp, SampleSpec};

const UPSTREAMS: usize = 8;

fn replica_config(ups: &[SampleHttp], rc: &RedisCluster) -> Config {
    let mut c = fleet_config(&ups.iter().collect::<Vec<_>>(), Shared::Cluster(rc));
    c.admin.addr = "127.0.0.1:0".into();
    c
}

fn replica_id(p: &Proxy) -> String {
    p.app.admin().readiness().1["cluster"]["replica"].as_str().unwrap().to_owned()
}

/// Waits until every upstream's listen is held by the replica the hash prefers among `ps`,
/// every replica agrees on who that is, and each upstream listens once; returns the holders.
async fn spread_settled(ps: &[&Proxy], ups: &[SampleHttp]) -> BTreeMap<String, String> {
    let ids: Vec<String> = ps.iter().map(|p| replica_id(p)).collect();
    eventually("each upstream's listen is held by its preferred replica", || {
        let states: Vec<serde_json::Value> =
            ps.iter().map(|p| p.app.admin().readiness().1["cluster"].clone()).collect();
        let opened: Vec<u64> = ups.iter().map(|u| u.sample.listens_open()).collect();
        let ids = ids.clone();
        async move {
            let mut holders = BTreeMap::new();
            for (u, open) in opened.iter().enumerate() {
                let name = format!("u{u}");
                let want = resmux::cluster::preferred_listen_holder(&name, &ids)?;
                for (r, state) in states.iter().enumerate() {
                    let role = if ids[r] == want { "holder" } else { "follower" };
                    if state["listen_roles"][&name] != role || state["listen_holders"][&name] != want {
                        return None;
                    }
                }
                if *open != 1 {
                    return None;
                }
                holders.insert(name, want.to_owned());
            }
            Some(holders)
        }
    })
    .await
}

#[tokio::test]
async fn listens_spread_by_rendezvous_and_a_join_or_a_leave_moves_only_its_share() {
    let rc = RedisCluster::start().await;
    let mut ups = Vec::new();
    for u in 0..UPSTREAMS {
        ups.push(sample_http(SampleSpec::generated(&format!("u{u}"), 3)).await);
    }
    let mut ps = Vec::new();
    for _ in 0..3 {
        ps.push(Proxy::start(replica_config(&ups, &rc)).await);
    }
    let before = spread_settled(&ps.iter().collect::<Vec<_>>(), &ups).await;
    // The admin's upstream view names the holder too.
    let url = format!("http://{}/admin/upstreams", ps[0].app.admin_addr().unwrap());
    let view = McpClient::new(&url).raw("GET", &[], Vec::new()).await.json();
    for u in view["upstreams"].as_array().unwrap() {
        assert_eq!(u["listen_holder"], before[u["name"].as_str().unwrap()]);
    }

    // A fourth replica joins: the upstreams that move, move to it.
    ps.push(Proxy::start(replica_config(&ups, &rc)).await);
    let joined = replica_id(&ps[3]);
    let after_join = spread_settled(&ps.iter().collect::<Vec<_>>(), &ups).await;
    for (name, holder) in &after_join {
        assert!(holder == &before[name] || holder == &joined, "{name} moved from {} to {holder}", before[name]);
    }

    // One leaves: only the upstreams it held move.
    let leaving = ps.remove(0);
    let left = replica_id(&leaving);
    leaving.app.shutdown().await;
    let after_leave = spread_settled(&ps.iter().collect::<Vec<_>>(), &ups).await;
    for (name, holder) in &after_leave {
        if after_join[name] != left {
            assert_eq!(holder, &after_join[name], "{name} moved though its holder stayed");
        }
    }
}
