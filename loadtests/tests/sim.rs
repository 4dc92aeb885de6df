//! The simulation, small: 3 simulated replicas for a second on a real Redis Cluster (6
//! `redis-server`s on loopback, as `.ci/run` installs them). Checks that the report carries
//! every figure, that every change reached every follower, and that the killed replica's
//! leases were taken over by survivors.

use std::time::Duration;

use resmux_load::sim::{SimOptions, markdown, run, write_outputs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_simulated_replicas_share_leases_and_changes_on_a_redis_cluster() {
    let o = SimOptions {
        replicas: vec![3],
        upstreams: 4,
        keys: 20,
        l2_reads: 20.0,
        interest_uris: 4,
        changes: 20.0,
        duration: Duration::from_secs(1),
        lease_ttl: Duration::from_secs(2),
        redis_server: "redis-server".into(),
    };
    let report = run(&o, "test".into()).await.expect("a Redis Cluster (redis-server and redis-cli installed)");
    let p = &report.points[0];
    assert_eq!(p.error, None);
    assert_eq!(p.replicas, 3);
    // Every change published from its holder arrived at each of the 2 followers.
    assert!(p.changes >= 10, "{p:?}");
    assert_eq!(p.expected, 2 * p.changes);
    assert_eq!(p.delivered, p.expected, "{p:?}");
    assert!(p.notify_ms.p99 > 0.0 && p.notify_ms.p50 <= p.notify_ms.p99);
    // Both sides counted the Redis load, and the scripts the tier runs are among it.
    assert!(p.client_calls_per_replica_s > 0.0 && p.redis_commands_per_replica_s > 0.0, "{p:?}");
    assert!(p.redis_commands.contains_key("evalsha"), "{:?}", p.redis_commands);
    assert!(p.l2_hits + p.l2_fills > 0, "{p:?}");
    // The killed replica held a lease, only its leases moved, and survivors hold them all.
    let k = &p.kill;
    assert!(k.victim_held >= 1, "{k:?}");
    assert_eq!((k.moved, k.moved_others), (k.victim_held, 0), "{k:?}");
    assert!(k.reheld_ms.is_some(), "{k:?}");
    let dir = tempfile::tempdir().unwrap();
    let files = write_outputs(&report, dir.path()).unwrap();
    assert_eq!(files.len(), 4);
    assert!(markdown(&report).contains("| 3 |"));
}
