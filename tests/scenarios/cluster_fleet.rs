//! What the cluster scenarios share, whichever Redis the replicas use (one `redis-server`, or
//! a Redis Cluster): the replicas' config, the fleet, the `/readyz` view, waiting for a lease
//! holder, a replica in its own process, and the checks both kinds of Redis must pass.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::cluster::Redis;
use crate::redis_cluster::RedisCluster;
use crate::support::*;
use crate::tls::Pki;
use resmux::config::{Config, SecretSource, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

pub(crate) const SECRET: &str = "cluster-test-shared-secret-0123456789";

/// The Redis a fleet shares.
#[derive(Clone, Copy)]
pub(crate) enum Shared<'a> {
    One(&'a Redis),
    Cluster(&'a RedisCluster),
}

impl<'a> Shared<'a> {
    /// The `[cluster]` lines that name this Redis (and its TLS files).
    fn toml(self) -> String {
        let at = match self {
            Shared::One(r) => format!("redis_url = \"{}\"", r.url()),
            Shared::Cluster(c) => {
                let nodes: Vec<String> = c.seeds().iter().map(|s| format!("\"{s}\"")).collect();
                format!("redis_nodes = [{}]", nodes.join(", "))
            }
        };
        let Some(pki) = self.tls() else { return at };
        let (ca, cert, key) = (pki.ca.display(), pki.client_cert.display(), pki.client_key.display());
        format!("{at}\ntls_ca_file = \"{ca}\"\ntls_cert_file = \"{cert}\"\ntls_key_file = \"{key}\"")
    }

    /// The PKI of a TLS Redis: its CA, and the client certificate it requires.
    pub(crate) fn tls(self) -> Option<&'a Pki> {
        match self {
            Shared::One(r) => r.tls(),
            Shared::Cluster(c) => c.tls(),
        }
    }
}

/// A replica's config: `ups` (by their sample names), sharing `at`, with a short lease.
pub(crate) fn fleet_config(ups: &[&SampleHttp], at: Shared) -> Config {
    let upstreams = ups.iter().map(|u| UpstreamConfig::http(&u.sample.spec().name, &u.url())).collect();
    let mut c = config(upstreams);
    match at {
        Shared::One(r) => c.cluster.redis_url = Some(r.url()),
        Shared::Cluster(rc) => c.cluster.redis_nodes = rc.seeds(),
    }
    if let Some(pki) = at.tls() {
        c.cluster.tls_ca_file = Some(pki.ca.clone());
        c.cluster.tls_cert_file = Some(pki.client_cert.clone());
        c.cluster.tls_key_file = Some(pki.client_key.clone());
    }
    c.cluster.lease_ttl = Duration::from_millis(900);
    c.proxy.cursor_secret = Some(SecretSource { value: Some(SECRET.into()), ..Default::default() });
    c.hub.linger = Duration::from_millis(50);
    c
}

/// `n` replicas of `ups` sharing `at`, each having discovered its upstreams.
pub(crate) async fn fleet(ups: &[&SampleHttp], at: Shared<'_>, n: usize) -> Vec<Proxy> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(Proxy::start(fleet_config(ups, at)).await);
    }
    for p in &out {
        discovered(&p.client).await;
    }
    out
}

pub(crate) fn read(uri: &str) -> Value {
    json!({ "uri": uri })
}

/// The replica's `/readyz` view of the cluster.
pub(crate) fn cluster_state(p: &Proxy) -> Value {
    p.app.admin().readiness().1["cluster"].clone()
}

/// Waits until exactly one replica holds `upstream`'s listen lease; returns its index.
pub(crate) async fn holder(ps: &[&Proxy], upstream: &str) -> usize {
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

/// Waits until every replica of `ps` sees all of them live, and the one holding `upstream`'s
/// lease is the one the hash prefers among them (so that it keeps it); returns its index.
pub(crate) async fn settled_holder(ps: &[Proxy], upstream: &str) -> usize {
    let ids: Vec<String> = ps.iter().map(|p| cluster_state(p)["replica"].as_str().unwrap().to_owned()).collect();
    eventually("every replica live, and the preferred one holding the lease", || {
        let states: Vec<Value> = ps.iter().map(cluster_state).collect();
        let ids = ids.clone();
        async move {
            let mut live: Vec<String> = serde_json::from_value(states[0]["live_replicas"].clone()).ok()?;
            live.sort_unstable();
            let agreed = states.iter().all(|s| s["live_replicas"] == states[0]["live_replicas"]);
            if !agreed || live.len() != ids.len() || !ids.iter().all(|id| live.contains(id)) {
                return None;
            }
            let preferred = resmux::cluster::preferred_listen_holder(upstream, &live)?;
            let h = ids.iter().position(|id| id == preferred)?;
            let roles = states.iter().map(|s| s["listen_roles"][upstream].as_str().unwrap_or(""));
            roles.enumerate().all(|(i, r)| r == if i == h { "holder" } else { "follower" }).then_some(h)
        }
    })
    .await
}

/// [`settled_holder`] for `up`, and then quiet enough for a fill to be shared: every replica
/// sees Redis up, the holder opened its upstream listen (the only one open), and every
/// follower has taken the holder's live filter from the bus.
///
/// A replica that saw Redis down (a call past `op_timeout`, such as one opening a first TLS
/// connection to a node) skips the shared tier until its health probe sees Redis again. A
/// holder that took the lease over from another replica (a handover at start) announces a
/// resync once its listen is open, which moves the stream epoch and rightly refuses a fill
/// that raced it; it announces it before that filter, so the resync is behind every replica
/// then. Returns the holder's index.
pub(crate) async fn settled_listen(ps: &[Proxy], up: &SampleHttp) -> usize {
    let name = &up.sample.spec().name;
    let h = settled_holder(ps, name).await;
    let slot = |p: &Proxy| p.app.router().upstreams().iter().find(|u| u.name() == name).unwrap().slot() as usize;
    eventually("Redis up everywhere, the holder's listen open, and its filter on every follower", || {
        let up_everywhere = ps.iter().all(|p| cluster_state(p)["redis"] == "up");
        let opened = ps[h].app.hub().upstream_listens_opened(slot(&ps[h])) > 0 && up.sample.listens_open() == 1;
        let followed = (ps.iter().enumerate()).all(|(i, p)| i == h || p.app.hub().upstream_listening(slot(p)));
        async move { (up_everywhere && opened && followed).then_some(()) }
    })
    .await;
    h
}

/// A replica of `ups` in its own process sharing `at`, so that it can be SIGKILLed.
pub(crate) async fn process_replica(ups: &[&SampleHttp], at: Shared<'_>) -> ServeProcess {
    let upstreams: String = (ups.iter())
        .map(|u| format!("[[upstream]]\nname = \"{}\"\nurl = \"{}\"\n", u.sample.spec().name, u.url()))
        .collect();
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
{}
lease_ttl = "900ms"
{upstreams}"#,
        at.toml(),
    );
    ServeProcess::start(&text).await
}

/// 24 callers on 3 replicas missing one key at once make one upstream request: the other
/// replicas wait for the fill and are woken by its notice.
pub(crate) async fn a_stampede_makes_one_upstream_request(at: Shared<'_>) {
    let mut spec = SampleSpec::generated("docs", 5);
    spec.delay = Duration::from_millis(300);
    let up = sample_http(spec).await;
    let ps = fleet(&[&up], at, 3).await;
    // Settled: the lease holder has opened its listen (taking the lease announces a resync,
    // which would rightly refuse a fill that raced it).
    holder(&ps.iter().collect::<Vec<_>>(), "docs").await;
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

/// A private entry read by Alice on one replica is a hit for Alice on another, and a miss for
/// Bob there; returns the upstream, whose reads it counted.
pub(crate) async fn private_entries_stay_with_their_principal(at: Shared<'_>) -> SampleHttp {
    let mut spec = SampleSpec::generated("docs", 5);
    spec.public = false;
    let up = sample_http(spec).await;
    let mut ps = Vec::new();
    for _ in 0..2 {
        let mut c = fleet_config(&[&up], at);
        api_keys(&mut c, &["alice-7f3a", "bob-91c2"]);
        ps.push(Proxy::start(c).await);
    }
    // Quiet enough to share a fill (see `settled_listen`): a fill that races the resync of a
    // lease handed over at start is refused, and Alice on B would then fetch for herself.
    settled_listen(&ps, &up).await;
    let (alice_a, alice_b) = (ps[0].client.as_principal("alice-7f3a"), ps[1].client.as_principal("alice-7f3a"));
    let bob_b = ps[1].client.as_principal("bob-91c2");
    let first = alice_a.request("resources/read", read("docs://item/1")).await;
    assert_eq!(first.cache(), "miss");
    assert_eq!(first.result()["cacheScope"], "private");
    // Bob, on the replica that never saw the read, does not get Alice's entry.
    assert_eq!(bob_b.request("resources/read", read("docs://item/1")).await.cache(), "miss");
    // Alice, on that replica, does.
    assert_eq!(alice_b.request("resources/read", read("docs://item/1")).await.cache(), "hit");
    assert_eq!(up.sample.count("resources/read"), 2);
    up
}

/// Waits until the wall clock is past the current millisecond. A replica takes a shared value
/// only if its fetch began in a later millisecond than the change it knows of (one that began
/// in the same millisecond may have begun before the change), so a refetch after a change
/// must start in a later millisecond; on a fast machine a whole change fits in one.
pub(crate) async fn past_this_millisecond() {
    let noted = resmux::cluster::now_ms();
    eventually("the clock is past the millisecond of the change", || {
        let later = resmux::cluster::now_ms() > noted;
        async move { later.then_some(()) }
    })
    .await;
}

/// Waits for `method` on every one of `listens`, about `uri`.
pub(crate) async fn each_hears(listens: &mut [Listening], method: &str, uri: &str) {
    for l in listens {
        let n = l.next_method(method).await;
        assert_eq!(n["params"]["uri"], uri);
    }
}

/// Upstreams in the failover check: enough that the killed replica holds some of them (it is
/// started again with a new id, and so a new share, in the rare case it holds none).
const FAILOVER_UPSTREAMS: usize = 8;

/// A replica SIGKILLed while holding some upstreams' listens: within about a lease those
/// listens are held again, each by the replica the hash now prefers, the upstreams it did not
/// hold keep their holder, and the listeners on the survivors are resynced and hear changes.
pub(crate) async fn a_killed_replicas_listens_move_within_the_lease(at: Shared<'_>) {
    let mut ups = Vec::new();
    for u in 0..FAILOVER_UPSTREAMS {
        ups.push(sample_http(SampleSpec::generated(&format!("u{u}"), 3)).await);
    }
    let ups: Vec<&SampleHttp> = ups.iter().collect();
    let ps = fleet(&ups, at, 2).await;
    let ids: Vec<String> = ps.iter().map(|p| cluster_state(p)["replica"].as_str().unwrap().to_owned()).collect();
    let names: Vec<String> = (0..FAILOVER_UPSTREAMS).map(|u| format!("u{u}")).collect();
    let mut victim = None;
    // The ids of process replicas started before: one that held nothing stays live until its
    // lease on liveness expires, and must not be taken for the one just started.
    let mut tried: Vec<String> = Vec::new();
    for _ in 0..4 {
        let process = process_replica(&ups, at).await;
        // Settled: both survivors see exactly the three live replicas (the one just started,
        // not a victim started before), agree on every holder, each holder is the one the hash
        // prefers among the three, and each upstream listens once.
        let (holders, third) = eventually("every upstream has the preferred holder, agreed by all", || {
            let states: Vec<Value> = ps.iter().map(cluster_state).collect();
            let open: Vec<u64> = ups.iter().map(|u| u.sample.listens_open()).collect();
            let (names, ids, tried) = (names.clone(), ids.clone(), tried.clone());
            async move {
                let live: Vec<String> = serde_json::from_value(states[0]["live_replicas"].clone()).ok()?;
                let agreed_live = states.iter().all(|s| s["live_replicas"] == states[0]["live_replicas"]);
                if live.len() != 3 || !agreed_live || !ids.iter().all(|id| live.contains(id)) {
                    return None;
                }
                let third = live.iter().find(|id| !ids.contains(id))?.clone();
                if tried.contains(&third) {
                    return None;
                }
                let holders: Vec<String> = names
                    .iter()
                    .map(|n| states[0]["listen_holders"][n].as_str().map(str::to_owned))
                    .collect::<Option<_>>()?;
                let agreed = names.iter().zip(&holders).all(|(n, h)| states[1]["listen_holders"][n] == h.as_str());
                let preferred = (names.iter().zip(&holders))
                    .all(|(n, h)| resmux::cluster::preferred_listen_holder(n, &live) == Some(h.as_str()));
                (agreed && preferred && open.iter().all(|n| *n == 1)).then_some((holders, third))
            }
        })
        .await;
        let held: Vec<usize> = (0..FAILOVER_UPSTREAMS).filter(|&u| holders[u] == third).collect();
        if !held.is_empty() {
            victim = Some((process, holders, held));
            break;
        }
        tried.push(third);
    }
    let (mut process, holders, held) = victim.expect("the process replica holds some upstream within 4 starts");
    // A listener on each survivor, for every upstream the victim holds.
    let uris: Vec<String> = held.iter().map(|&u| format!("u{u}+{}", ups[u].sample.status_uri())).collect();
    let mut listens = Vec::new();
    for p in &ps {
        let mut l = p.client.listen(json!("L"), json!({"resourceSubscriptions": uris})).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        listens.push(l);
    }
    let opened: Vec<u64> = ups.iter().map(|u| u.sample.listens_total()).collect();

    process.child.start_kill().unwrap(); // SIGKILL: no release, the leases must expire
    process.child.wait().await.unwrap();
    let killed = tokio::time::Instant::now();
    eventually("the victim's upstreams listen again from their new holders", || {
        let totals: Vec<u64> = ups.iter().map(|u| u.sample.listens_total()).collect();
        let held = held.clone();
        let opened = opened.clone();
        async move { held.iter().all(|&u| totals[u] > opened[u]).then_some(()) }
    })
    .await;
    let took = killed.elapsed();
    eprintln!(
        "replica failover: {} upstream listens re-established {took:?} after the SIGKILL (lease_ttl 900 ms)",
        held.len()
    );
    assert!(took < Duration::from_secs(3), "failover took {took:?}");
    for l in &mut listens {
        let mut heard = Vec::new();
        for _ in 0..uris.len() {
            heard.push(
                l.next_method("notifications/resources/updated").await["params"]["uri"].as_str().unwrap().to_owned(),
            );
        }
        heard.sort();
        let mut want = uris.clone();
        want.sort();
        assert_eq!(heard, want, "each listener is resynced for every moved upstream");
    }
    for (u, name) in names.iter().enumerate() {
        let want = if held.contains(&u) {
            resmux::cluster::preferred_listen_holder(name, &ids).unwrap().to_owned()
        } else {
            holders[u].clone()
        };
        eventually("the holder is the one the hash prefers among the survivors", || {
            let got = cluster_state(&ps[0])["listen_holders"][name].clone();
            let want = want.clone();
            async move { (got == want.as_str()).then_some(()) }
        })
        .await;
    }
    // Changes flow through the new holders, to listens opened before and after.
    let moved = format!("u{}+u{}://item/1", held[0], held[0]);
    let mut fresh = Vec::new();
    for p in &ps {
        let mut l = p.client.listen(json!("F"), json!({"resourceSubscriptions": [moved]})).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        fresh.push(l);
    }
    ups[held[0]].sample.touch(&format!("u{}://item/1", held[0]));
    each_hears(&mut fresh, "notifications/resources/updated", &moved).await;
}
