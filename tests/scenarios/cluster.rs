//! Replicas sharing one real Redis (`[cluster]`): the shared cache, cross-replica
//! single-flight, invalidation and fan-out from the one upstream listen, lease failover after
//! SIGKILL, legacy sessions moving between replicas, Redis loss and return, and private
//! entries that never cross principals. Each test runs its own `redis-server` (Debian's
//! package; `.ci/run` installs it) on a loopback port.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::cluster_fleet::*;
use crate::support::*;
use crate::tls::Pki;
use resmux::config::Config;
use resmux::sample::{SampleHttp, SampleSpec};

/// A `redis-server` of this test's own, on a loopback port; with `tls`, serving TLS only and
/// requiring a client certificate of that PKI's CA.
pub(crate) struct Redis {
    port: u16,
    child: Option<Child>,
    tls: Option<Arc<Pki>>,
    _dir: tempfile::TempDir,
}

fn redis_server() -> PathBuf {
    let bin = std::env::var_os("RESMUX_REDIS_SERVER").map(PathBuf::from).unwrap_or_else(|| "redis-server".into());
    assert!(
        std::process::Command::new(&bin).arg("--version").output().is_ok_and(|o| o.status.success()),
        "these tests need a real Redis: install Debian's redis-server (or set RESMUX_REDIS_SERVER)"
    );
    bin
}

impl Redis {
    pub(crate) async fn start() -> Self {
        Self::start_with(None).await
    }

    /// A TLS-only Redis (`rediss://`) with `pki`'s server certificate, requiring a client
    /// certificate signed by its CA (`tls-auth-clients yes`).
    pub(crate) async fn start_tls(pki: Arc<Pki>) -> Self {
        Self::start_with(Some(pki)).await
    }

    async fn start_with(tls: Option<Arc<Pki>>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // The port is chosen by binding :0 and released for redis-server to take; a clash
        // with another process in between makes the start fail loudly, never silently share.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut r = Self { port, child: None, tls, _dir: dir };
        r.spawn().await;
        r
    }

    async fn spawn(&mut self) {
        let ports = match &self.tls {
            None => vec!["--port".into(), self.port.to_string().into()],
            Some(pki) => pki.redis_server_args(self.port),
        };
        let child = Command::new(redis_server())
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self._dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let client = self.client();
        eventually("redis answers PING", || {
            let client = client.clone();
            async move {
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                redis::cmd("PING").query_async::<String>(&mut conn).await.ok().map(|_| ())
            }
        })
        .await;
    }

    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The PKI of a TLS Redis.
    pub(crate) fn tls(&self) -> Option<&Pki> {
        self.tls.as_deref()
    }

    /// A client of this Redis (with the client certificate, for a TLS one).
    pub(crate) fn client(&self) -> redis::Client {
        match &self.tls {
            Some(pki) => pki.redis_client(&self.url()),
            None => redis::Client::open(self.url()).unwrap(),
        }
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().unwrap();
            child.wait().await.unwrap();
        }
    }

    /// Every key in Redis with its value's bytes (string values; other types as empty).
    pub(crate) async fn dump(&self) -> Vec<(String, Vec<u8>)> {
        let mut conn = self.client().get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await.unwrap();
        let mut out = Vec::new();
        for k in keys {
            let v: Option<Vec<u8>> = redis::cmd("GET").arg(&k).query_async(&mut conn).await.unwrap_or(None);
            out.push((k, v.unwrap_or_default()));
        }
        out
    }
}

pub(crate) fn replica_config(up: &SampleHttp, redis: &Redis) -> Config {
    fleet_config(&[up], Shared::One(redis))
}

async fn replicas(up: &SampleHttp, redis: &Redis, n: usize) -> Vec<Proxy> {
    fleet(&[up], Shared::One(redis), n).await
}

#[tokio::test]
async fn a_read_through_one_replica_makes_another_hit() {
    let redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let ps = replicas(&up, &redis, 2).await;
    let first = ps[0].client.request("resources/read", read("docs://item/1")).await;
    assert_eq!(first.cache(), "miss");
    let second = ps[1].client.request("resources/read", read("docs://item/1")).await;
    assert_eq!(second.cache(), "hit", "replica B answers from the shared tier");
    assert_eq!(second.result()["contents"], first.result()["contents"]);
    // The remaining TTL is counted from the fetch on replica A.
    let (a, b) = (first.result()["ttlMs"].as_u64().unwrap(), second.result()["ttlMs"].as_u64().unwrap());
    assert!(b <= a && b + 5_000 > a, "remaining TTL {b} after {a}");
    // And B now holds it locally: a third read is a hit without Redis being asked again.
    let hits_before = cluster_state(&ps[1])["l2_hits"].as_u64().unwrap();
    assert_eq!(ps[1].client.request("resources/read", read("docs://item/1")).await.cache(), "hit");
    assert_eq!(cluster_state(&ps[1])["l2_hits"].as_u64().unwrap(), hits_before);
    assert_eq!(up.sample.count("resources/read"), 1);
}

#[tokio::test]
async fn replicas_stampeding_on_one_key_make_one_upstream_request() {
    let redis = Redis::start().await;
    a_stampede_makes_one_upstream_request(Shared::One(&redis)).await;
}

#[tokio::test]
async fn an_update_seen_by_the_holder_evicts_and_reaches_listeners_on_every_replica() {
    let redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let ps = replicas(&up, &redis, 3).await;
    holder(&ps.iter().collect::<Vec<_>>(), "docs").await;
    let status = up.sample.status_uri().to_owned();
    let mut listens = Vec::new();
    let mut before = Vec::new();
    for p in &ps {
        let mut l = p.client.listen(json!("L"), json!({"resourceSubscriptions": [status]})).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        listens.push(l);
        // Cached on every replica.
        before.push(p.client.request("resources/read", read(&status)).await.result()["contents"].clone());
        assert_eq!(p.client.request("resources/read", read(&status)).await.cache(), "hit");
    }
    // One upstream listen for the whole cluster, carrying every replica's interest.
    upstream_subscribed(&up, &[&status]).await;
    assert_eq!(up.sample.listens_open(), 1);
    let reads = up.sample.count("resources/read");
    up.sample.bump();
    each_hears(&mut listens, "notifications/resources/updated", &status).await;
    // Every replica noted the change before its listener heard of it.
    past_this_millisecond().await;
    // No replica serves the old content: the first to read refetches, the others take that
    // fill from Redis.
    for (i, p) in ps.iter().enumerate() {
        let after = p.client.request("resources/read", read(&status)).await;
        assert_ne!(after.result()["contents"], before[i], "replica {i} served the entry from before the change");
        assert_eq!(after.cache(), if i == 0 { "miss" } else { "hit" }, "replica {i}");
    }
    assert_eq!(up.sample.count("resources/read") - reads, 1);
}

#[tokio::test]
async fn the_listen_lease_fails_over_when_its_holder_is_killed() {
    let redis = Redis::start().await;
    a_killed_replicas_listens_move_within_the_lease(Shared::One(&redis)).await;
}

/// Initializes a legacy session on `p`; returns its id.
async fn legacy_session(p: &Proxy) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cluster", "version": "0"}}});
    let ex = p.client.raw("POST", &[], body.to_string().into_bytes()).await;
    assert_eq!(ex.status, 200);
    ex.header("mcp-session-id").unwrap().to_owned()
}

async fn legacy_post(p: &Proxy, id: &str, method: &str, params: Value) -> Exchange {
    let headers = [("mcp-session-id", id.to_owned()), ("mcp-protocol-version", "2025-06-18".to_owned())];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    p.client.raw("POST", &headers, body.to_string().into_bytes()).await
}

#[tokio::test]
async fn a_legacy_session_continues_on_another_replica_with_its_subscriptions() {
    let redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let ps = replicas(&up, &redis, 2).await;
    let id = legacy_session(&ps[0]).await;
    let sub = legacy_post(&ps[0], &id, "resources/subscribe", json!({"uri": "docs://item/4"})).await;
    assert_eq!(sub.result(), json!({}));
    // The client's next connection lands on replica B: its GET stream carries the session's
    // subscription, which B learned from Redis.
    let url = format!("http://{}/mcp", ps[1].app.local_addr());
    let mut stream = get_legacy_stream(&url, &id).await;
    upstream_subscribed(&up, &["docs://item/4"]).await;
    eventually("replica B holds the session's subscription", || {
        let n = ps[1].app.hub().listener_count();
        async move { (n >= 1).then_some(()) }
    })
    .await;
    up.sample.touch("docs://item/4");
    let n = stream.next_method("notifications/resources/updated").await;
    assert_eq!(n["params"]["uri"], "docs://item/4");
    // DELETE on B ends it everywhere: A no longer adopts it.
    let del = ps[1].client.raw("DELETE", &[("mcp-session-id", id.clone())], Vec::new()).await;
    assert_eq!(del.status, 200);
    let after = legacy_post(&ps[0], &id, "ping", json!({})).await;
    assert_eq!(after.status, 404);
}

async fn get_legacy_stream(url: &str, id: &str) -> Listening {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let http: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::get(url)
        .header("mcp-session-id", id)
        .header("accept", "text/event-stream")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(DEADLINE, http.request(req)).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    Listening::from_response(resp)
}

#[tokio::test]
async fn replicas_keep_serving_without_redis_and_share_again_when_it_is_back() {
    let mut redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 8)).await;
    let ps = replicas(&up, &redis, 2).await;
    ps[0].client.request("resources/read", read("docs://item/1")).await.result();

    redis.kill().await;
    // Reads keep working: local hits, and misses straight from the upstream.
    assert_eq!(ps[0].client.request("resources/read", read("docs://item/1")).await.cache(), "hit");
    let miss = ps[1].client.request("resources/read", read("docs://item/2")).await;
    assert_eq!(miss.status, 200);
    assert!(miss.result()["contents"].is_array());
    for p in &ps {
        eventually("the replica reports itself degraded, yet ready", || {
            let (ready, body) = p.app.admin().readiness();
            async move { (ready && body["cluster"]["redis"] == "degraded").then_some(()) }
        })
        .await;
    }
    // Each runs its own upstream listen meanwhile.
    eventually("both replicas go solo", || {
        let roles: Vec<Value> = ps.iter().map(|p| cluster_state(p)["listen_roles"]["docs"].clone()).collect();
        async move { roles.iter().all(|r| r == "solo").then_some(()) }
    })
    .await;

    redis.spawn().await;
    for p in &ps {
        eventually("the replica sees Redis again", || {
            let state = cluster_state(p);
            async move { (state["redis"] == "up").then_some(()) }
        })
        .await;
    }
    // One lease holder again, no split brain.
    holder(&ps.iter().collect::<Vec<_>>(), "docs").await;
    // Sharing resumes.
    let before = up.sample.count("resources/read");
    assert_eq!(ps[0].client.request("resources/read", read("docs://item/5")).await.cache(), "miss");
    assert_eq!(ps[1].client.request("resources/read", read("docs://item/5")).await.cache(), "hit");
    assert_eq!(up.sample.count("resources/read") - before, 1);
}

#[tokio::test]
async fn readiness_can_fail_while_redis_is_down() {
    let mut redis = Redis::start().await;
    let up = sample_http(SampleSpec::generated("docs", 2)).await;
    let mut cfg = replica_config(&up, &redis);
    cfg.cluster.ready_when_degraded = false;
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    assert!(p.app.admin().readiness().0);
    redis.kill().await;
    eventually("not ready while Redis is down", || {
        let ready = p.app.admin().readiness().0;
        async move { (!ready).then_some(()) }
    })
    .await;
    redis.spawn().await;
    eventually("ready again", || {
        let ready = p.app.admin().readiness().0;
        async move { ready.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn private_entries_never_reach_another_principal_through_redis() {
    let redis = Redis::start().await;
    private_entries_stay_with_their_principal(Shared::One(&redis)).await;
    // No Redis key names a principal: private partitions are keyed hashes.
    let dump = redis.dump().await;
    assert!(dump.iter().any(|(k, _)| k.contains(":v:")), "the entries are in Redis: {dump:?}");
    for (key, _) in dump {
        for who in ["alice-7f3a", "bob-91c2"] {
            assert!(!key.contains(who), "key {key} names {who}");
        }
    }
}
