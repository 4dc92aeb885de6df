//! `rediss://` for both Redis forms, with a private CA (`[cluster] tls_ca_file`) and a client
//! certificate (`tls_cert_file`/`tls_key_file`): replicas share reads and hear each other
//! through a TLS-only `redis-server` and a TLS-only Redis Cluster, both requiring client
//! certificates (`tls-auth-clients yes`), and a replica trusting the wrong CA serves without
//! either and says why. The PKI is the one `tls.rs` makes with rcgen.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use crate::cluster::Redis;
use crate::cluster_fleet::*;
use crate::redis_cluster::RedisCluster;
use crate::support::*;
use crate::tls::Pki;
use resmux::sample::SampleSpec;

impl Pki {
    /// `redis-server` arguments for TLS only on `port`, with the server certificate, requiring
    /// clients (and, in a cluster, the other nodes) to present a certificate of the CA.
    pub(crate) fn redis_server_args(&self, port: u16) -> Vec<OsString> {
        let mut args: Vec<OsString> = ["--port", "0", "--tls-auth-clients", "yes", "--tls-port"].map(Into::into).into();
        args.push(port.to_string().into());
        for (flag, path) in [
            ("--tls-cert-file", &self.server_cert),
            ("--tls-key-file", &self.server_key),
            ("--tls-ca-cert-file", &self.ca),
            // What a node presents when it connects to another (cluster bus, replication).
            ("--tls-client-cert-file", &self.client_cert),
            ("--tls-client-key-file", &self.client_key),
        ] {
            args.extend([flag.into(), path.into()]);
        }
        args
    }

    /// `redis-cli` arguments to reach such a Redis.
    pub(crate) fn redis_cli_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from("--tls")];
        for (flag, path) in [("--cacert", &self.ca), ("--cert", &self.client_cert), ("--key", &self.client_key)] {
            args.extend([flag.into(), path.into()]);
        }
        args
    }

    /// A client of the Redis at `url` (`rediss://`) trusting the CA, with the client
    /// certificate.
    pub(crate) fn redis_client(&self, url: &str) -> redis::Client {
        let certs = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: pem(&self.client_cert),
                client_key: pem(&self.client_key),
            }),
            root_cert: Some(pem(&self.ca)),
        };
        redis::Client::build_with_tls(url, certs).unwrap()
    }
}

fn pem(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Two replicas sharing `at`: a read through one is an L2 hit on the other (the upstream read
/// once), and a change the listen holder sees reaches a listener on the other replica over
/// the bus (plain pub/sub on one Redis, sharded on a Redis Cluster).
async fn replicas_share_through(at: Shared<'_>) {
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let ps = fleet(&[&up], at, 2).await;
    // Both connected and Redis up on both: the first TLS connections to every node of a
    // cluster can take longer than one `op_timeout` on a loaded machine, and a call that times
    // out has the replica skip the shared tier until its health probe sees Redis again. And the
    // holder's listen open and announced: the resync of a lease handed over at start, landing
    // between the read through A and its fill, would rightly refuse that fill, and B would
    // then fetch for itself.
    let h = settled_listen(&ps, &up).await;
    // The status resource, so that what the upstream listen watches is that one URI.
    let status = up.sample.status_uri().to_owned();
    let first = ps[0].client.request("resources/read", read(&status)).await;
    assert_eq!(first.cache(), "miss");
    let second = ps[1].client.request("resources/read", read(&status)).await;
    assert_eq!(second.cache(), "hit", "replica B answers from the shared tier: {}", cluster_state(&ps[1]));
    assert_eq!(second.result()["contents"], first.result()["contents"]);
    assert_eq!(up.sample.count("resources/read"), 1);
    assert_eq!(cluster_state(&ps[1])["l2_hits"], 1);
    for p in &ps {
        assert_eq!(cluster_state(p)["redis"], "up");
    }

    let mut listens =
        vec![ps[1 - h].client.listen(json!("L"), json!({"resourceSubscriptions": [status]})).await.unwrap()];
    assert_eq!(listens[0].next().await["method"], "notifications/subscriptions/acknowledged");
    upstream_subscribed(&up, &[&status]).await;
    up.sample.bump();
    each_hears(&mut listens, "notifications/resources/updated", &status).await;
    assert!(cluster_state(&ps[1 - h])["events_received"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn replicas_share_a_read_through_a_tls_redis_with_client_certificates() {
    let pki = Arc::new(Pki::new());
    let redis = Redis::start_tls(pki.clone()).await;
    assert!(redis.url().starts_with("rediss://"));
    // The server really requires the client certificate: without one it refuses.
    let anonymous = redis::TlsCertificates { client_tls: None, root_cert: Some(pem(&pki.ca)) };
    let anonymous = redis::Client::build_with_tls(redis.url(), anonymous).unwrap();
    let refused = async {
        redis::cmd("PING").query_async::<String>(&mut anonymous.get_multiplexed_async_connection().await?).await
    };
    assert!(refused.await.is_err(), "a TLS client without a certificate was let in");
    replicas_share_through(Shared::One(&redis)).await;
    assert!(redis.dump().await.iter().any(|(k, _)| k.starts_with("resmux:")), "the values are in the TLS Redis");
}

#[tokio::test]
async fn replicas_share_a_read_through_a_tls_redis_cluster() {
    let rc = RedisCluster::start_tls(Arc::new(Pki::new())).await;
    assert!(rc.seeds().iter().all(|s| s.starts_with("rediss://")), "{:?}", rc.seeds());
    replicas_share_through(Shared::Cluster(&rc)).await;
    assert!(rc.keys().await.iter().any(|k| k.starts_with("resmux:")), "the values are in the TLS Redis Cluster");
}

/// A replica whose `tls_ca_file` did not sign `at`'s certificates: it reports Redis degraded
/// in `/readyz`, naming the rejected certificate, stays ready (`ready_when_degraded`), and
/// reads answer from the upstream.
async fn a_wrong_ca_degrades_to_the_upstream_and_says_why(at: Shared<'_>) {
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let mut config = fleet_config(&[&up], at);
    config.cluster.tls_ca_file = Some(at.tls().unwrap().stranger_ca.clone());
    let p = Proxy::start(config).await;
    discovered(&p.client).await;
    // The first failure may be a call that timed out while the connection was refused; the
    // health probe then names the cause.
    let cause = eventually("the replica reports Redis degraded, for its certificate", || {
        let state = cluster_state(&p);
        async move {
            let cause = state["redis_error"].as_str().filter(|c| c.to_ascii_lowercase().contains("certificate"));
            (state["redis"] == "degraded").then(|| cause.map(str::to_owned)).flatten()
        }
    })
    .await;
    assert!(cause.contains("UnknownIssuer"), "the cause says the issuer is not trusted: {cause}");
    let (ready, body) = p.app.admin().readiness();
    assert!(ready, "ready_when_degraded keeps the replica in service: {body}");
    for uri in ["docs://item/1", "docs://item/2"] {
        let ex = p.client.request("resources/read", read(uri)).await;
        assert_eq!(ex.status, 200);
        assert_eq!(ex.cache(), "miss");
        assert!(ex.result()["contents"][0]["text"].is_string(), "{}", ex.text());
    }
    assert_eq!(up.sample.count("resources/read"), 2);
}

#[tokio::test]
async fn a_redis_certificate_not_signed_by_tls_ca_file_degrades_to_the_upstream_and_says_why() {
    let redis = Redis::start_tls(Arc::new(Pki::new())).await;
    a_wrong_ca_degrades_to_the_upstream_and_says_why(Shared::One(&redis)).await;
    assert!(redis.dump().await.is_empty(), "nothing reached the Redis it cannot trust");
}

/// The cluster client, connected to no node, says only that: the cause comes from a seed.
#[tokio::test]
async fn a_redis_cluster_certificate_not_signed_by_tls_ca_file_degrades_and_says_why() {
    let rc = RedisCluster::start_tls(Arc::new(Pki::new())).await;
    a_wrong_ca_degrades_to_the_upstream_and_says_why(Shared::Cluster(&rc)).await;
    assert!(rc.keys().await.is_empty(), "nothing reached the Redis Cluster it cannot trust");
}
