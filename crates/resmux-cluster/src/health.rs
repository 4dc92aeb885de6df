//! Whether Redis answers: the probe that marks it up or degraded (every request skips Redis
//! while it is degraded), and the cause of the last failure, which `/readyz` shows so that an
//! operator sees, say, a rejected certificate rather than only "degraded".

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{Cluster, ClusterError};

impl Cluster {
    /// Why Redis is degraded (the last failed call or probe, with its causes), while it is.
    pub fn down_because(&self) -> Option<Arc<String>> {
        if self.healthy() { None } else { self.0.down_because.load_full() }
    }

    pub(crate) fn set_healthy(&self, up: bool, why: Option<&ClusterError>) {
        if !up {
            self.0.probe_now.notify_one();
        }
        let cause = why.map(|e| resmux_proto::error::chain(e));
        let changed = match &cause {
            Some(cause) => {
                let before = self.0.down_because.swap(Some(Arc::new(cause.clone())));
                before.is_none_or(|b| *b != *cause)
            }
            None => false,
        };
        if self.0.healthy.swap(up, Ordering::Relaxed) != up {
            match &cause {
                Some(cause) => tracing::warn!(error = %cause, "redis unreachable: serving without the cluster tier"),
                None => tracing::info!("redis reachable again: sharing resumes"),
            }
            self.0.health.send_replace(up);
        } else if let Some(cause) = cause.filter(|_| changed && !up) {
            // The first failure is often a call that timed out; the probe then says why.
            tracing::warn!(error = %cause, "redis still unreachable");
        }
    }

    /// Whether Redis answers for every upstream: one keyed read per upstream, so that on a
    /// Redis Cluster each lands on the node that owns that upstream's slot (a master lost
    /// and not yet replaced shows here), and a moved slot is learnt of. The error is the
    /// first probe's that failed.
    async fn answers(&self, deadline: Duration) -> Result<(), ClusterError> {
        let slots = self.active_slots();
        let probes = (0..slots.len().max(1)).map(|i| {
            let mut conn = self.0.conn.clone();
            let cmd = match slots.get(i) {
                Some(&slot) => redis::cmd("EXISTS").arg(format!("{}:fence", self.tag(slot))).to_owned(),
                None => redis::cmd("PING"),
            };
            self.0.stats.calls.fetch_add(1, Ordering::Relaxed);
            async move {
                match tokio::time::timeout(deadline, cmd.query_async::<redis::Value>(&mut conn)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(source)) => Err(ClusterError::Redis { op: "probe", source }),
                    Err(_) => Err(ClusterError::Timeout { op: "probe" }),
                }
            }
        });
        futures_util::future::join_all(probes).await.into_iter().collect()
    }

    /// Probes Redis: every 250 ms while it is down, every second while it is up.
    pub(crate) async fn health_probe(self, cancel: CancellationToken) {
        let deadline = self.0.config.op_timeout.max(Duration::from_millis(200));
        loop {
            let answered = match self.answers(deadline).await {
                Err(e) => Err(self.0.backend.explain(e, deadline).await),
                ok => ok,
            };
            let ok = answered.is_ok();
            match answered {
                Ok(()) => self.set_healthy(true, None),
                // Noted while down too: the cause may change (a certificate fixed, the
                // server now refusing the connection).
                Err(e) => self.set_healthy(false, Some(&e)),
            }
            let wait = if ok { Duration::from_secs(1) } else { Duration::from_millis(250) };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.0.probe_now.notified(), if ok => {}
            }
        }
    }
}
