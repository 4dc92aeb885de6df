//! Receiving the bus. One Redis: a pub/sub connection subscribed to every channel, opened
//! again after a loss. A Redis Cluster: a RESP3 cluster connection with a sharded subscription
//! per channel, each on the node that owns its slot; after a node is lost (a master failover
//! moves its slots to the promoted replica) every channel is subscribed again, where the
//! cluster now keeps it. Either way the hub hears of the gap once the subscriptions are back,
//! since events may have been missed meanwhile. A reload that adds or retires upstreams
//! changes the channels on the live subscription (subscribing the new ones, unsubscribing the
//! gone ones), so the others hear every event throughout.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Cluster;
use super::conn::{Backend, Seeds};

/// Wait between attempts to subscribe while the subscriptions are not all in place.
const RETRY: Duration = Duration::from_millis(250);

/// Most pushes (bus messages) waiting to be handed to the hub; past it they are dropped, and
/// the hub told of a gap.
const PUSHES: usize = 4096;

/// Subscribes to the bus and hands events to the hub until `cancel`.
pub(super) async fn subscriber(cluster: Cluster, cancel: CancellationToken) {
    match cluster.0.backend.clone() {
        Backend::Standalone(client) => standalone(cluster, *client, cancel).await,
        Backend::Cluster(seeds) => sharded(cluster, &seeds, cancel).await,
    }
}

fn subscribe_deadline(cluster: &Cluster) -> Duration {
    cluster.0.config.op_timeout.max(Duration::from_millis(500))
}

/// What a subscription must change to hear `want`: `(subscribe, unsubscribe)`.
fn delta(have: &HashSet<String>, want: &[String]) -> (Vec<String>, Vec<String>) {
    let wanted: HashSet<&String> = want.iter().collect();
    let add = want.iter().filter(|c| !have.contains(*c)).cloned().collect();
    let gone = have.iter().filter(|c| !wanted.contains(c)).cloned().collect();
    (add, gone)
}

async fn standalone(cluster: Cluster, client: redis::Client, cancel: CancellationToken) {
    let mut changes = cluster.channels_watch();
    let mut connected_before = false;
    loop {
        changes.mark_unchanged();
        let channels = cluster.channels();
        let connect = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channels).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(subscribe_deadline(&cluster), connect) => r,
        };
        match pubsub {
            Ok(Ok(pubsub)) => {
                if connected_before && !cluster.gap().await {
                    return;
                }
                connected_before = true;
                tracing::debug!("cluster bus subscribed");
                let mut have: HashSet<String> = channels.into_iter().collect();
                let (mut sink, mut messages) = pubsub.split();
                loop {
                    let msg = tokio::select! {
                        _ = cancel.cancelled() => return,
                        msg = messages.next() => msg,
                        _ = changes.changed() => {
                            let (add, gone) = delta(&have, &cluster.channels());
                            let change = async {
                                if !add.is_empty() {
                                    sink.subscribe(&add).await?;
                                }
                                if !gone.is_empty() {
                                    sink.unsubscribe(&gone).await?;
                                }
                                Ok::<_, redis::RedisError>(())
                            };
                            if !matches!(tokio::time::timeout(subscribe_deadline(&cluster), change).await, Ok(Ok(()))) {
                                tracing::warn!("cluster bus: cannot change the subscribed channels; reconnecting");
                                break;
                            }
                            have.extend(add);
                            for c in &gone {
                                have.remove(c);
                            }
                            continue;
                        }
                    };
                    let Some(msg) = msg else { break };
                    if !cluster.deliver(msg.get_payload_bytes()).await {
                        return;
                    }
                }
                tracing::warn!("cluster bus connection lost; reconnecting");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "cluster bus: cannot subscribe"),
            Err(_) => tracing::debug!("cluster bus: subscribe timed out"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

async fn sharded(cluster: Cluster, seeds: &Seeds, cancel: CancellationToken) {
    let (tx, mut pushes) = mpsc::channel::<PushInfo>(PUSHES);
    let overflowed = Arc::new(AtomicBool::new(false));
    let overflow = overflowed.clone();
    let sender = move |info: PushInfo| {
        if tx.try_send(info).is_err() {
            overflow.store(true, Ordering::Relaxed);
        }
        Ok::<(), std::convert::Infallible>(())
    };
    let client = seeds.builder().use_protocol(redis::ProtocolVersion::RESP3);
    let client = match client.push_sender(sender).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cluster bus: cannot make a Redis Cluster client; replicas will not hear each other");
            return;
        }
    };
    let mut conn = client.get_pending_async_connection_with_config(redis::cluster::ClusterConfig::new());
    let mut changes = cluster.channels_watch();
    // The channels confirmed since the last loss.
    let mut have = HashSet::new();
    // Whether every channel is subscribed since the last loss, and whether it ever was.
    let (mut subscribed, mut ever) = (false, false);
    let mut next_try = Instant::now();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = changes.changed(), if subscribed => {
                let (add, gone) = delta(&have, &cluster.channels());
                if subscribe_all(&cluster, &mut conn, &add).await {
                    have.extend(add);
                } else {
                    subscribed = false;
                    next_try = Instant::now() + RETRY;
                }
                for channel in gone {
                    // Best effort: a channel left subscribed only brings events that the
                    // decoder drops (no slot runs their upstream).
                    let _ = tokio::time::timeout(subscribe_deadline(&cluster), conn.sunsubscribe(&channel)).await;
                    have.remove(&channel);
                }
            }
            push = pushes.recv() => {
                let Some(push) = push else { return };
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(Value::BulkString(payload)) = push.data.get(1)
                            && !cluster.deliver(payload).await
                        {
                            return;
                        }
                    }
                    // The confirmation of a channel this replica let go (a reload retired
                    // its upstream): nothing was lost.
                    PushKind::SUnsubscribe if unsubscribed(&push, &have) => {}
                    // A node connection lost, or a slot moved away from the node that had
                    // the subscription: subscribe again where the cluster keeps it now.
                    PushKind::Disconnection | PushKind::SUnsubscribe => {
                        if subscribed {
                            tracing::warn!(kind = %push.kind, "cluster bus: a subscription was lost; subscribing again");
                        }
                        subscribed = false;
                        have.clear();
                        next_try = next_try.min(Instant::now());
                    }
                    _ => {}
                }
            }
            _ = tokio::time::sleep_until(next_try), if !subscribed => {
                next_try = Instant::now() + RETRY;
                changes.mark_unchanged();
                let channels = cluster.channels();
                if subscribe_all(&cluster, &mut conn, &channels).await {
                    have = channels.into_iter().collect();
                    subscribed = true;
                    tracing::debug!("cluster bus subscribed (sharded)");
                    if ever && !cluster.gap().await {
                        return;
                    }
                    ever = true;
                }
            }
        }
        if overflowed.swap(false, Ordering::Relaxed) {
            cluster.0.stats.dropped.fetch_add(1, Ordering::Relaxed);
            if !cluster.gap().await {
                return;
            }
        }
    }
}

/// Subscribes every channel (one command each: a Redis Cluster routes each by its slot);
/// whether all of them were confirmed in time.
async fn subscribe_all(
    cluster: &Cluster,
    conn: &mut redis::cluster_async::ClusterConnection,
    channels: &[String],
) -> bool {
    let all = async {
        for channel in channels {
            conn.ssubscribe(channel).await?;
        }
        Ok::<_, redis::RedisError>(())
    };
    match tokio::time::timeout(subscribe_deadline(cluster) * channels.len().max(1) as u32, all).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cluster bus: cannot subscribe");
            false
        }
        Err(_) => {
            tracing::debug!("cluster bus: subscribe timed out");
            false
        }
    }
}

/// Whether `push` confirms leaving a channel that is no longer wanted (not in `have`).
fn unsubscribed(push: &PushInfo, have: &HashSet<String>) -> bool {
    match push.data.first() {
        Some(Value::BulkString(channel)) => std::str::from_utf8(channel).is_ok_and(|c| !have.contains(c)),
        _ => false,
    }
}
