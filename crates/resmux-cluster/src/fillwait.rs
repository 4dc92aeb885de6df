//! Waking the replicas that wait for another replica's fill, instead of having them poll.
//!
//! A flight leader registers a local waiter before it probes; a probe that finds the key's
//! fill lock taken marks the key as waited for (`<tag>:wait:…`, expiring with the lock) in the
//! same script, and the leader then waits on the local notice. The fill (or the release of a
//! lock whose fetch failed) deletes the mark and, only if there was one, publishes a `filled`
//! notice on the upstream's bus channel in the same script, so a fill nobody waits for costs
//! no message.
//! A lost notice only costs the waiter its fallback poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use super::Cluster;
use super::l2::SharedKey;

/// The replicas' local waiters, by the Redis name of the fill lock they wait on. Holds one
/// entry per waiting flight leader, removed when its [`FillWait`] drops.
#[derive(Default)]
pub(super) struct Waiters(Mutex<HashMap<String, Vec<Weak<Notify>>>>);

/// One flight leader's wait for another replica's fill.
pub struct FillWait {
    cluster: Cluster,
    lock: String,
    notify: Arc<Notify>,
}

impl FillWait {
    /// Resolves at the next notice that the fill is done (or was given up).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}

impl Drop for FillWait {
    fn drop(&mut self) {
        let mut map = self.cluster.0.fill_waiters.0.lock().expect("fill waiters");
        if let Some(list) = map.get_mut(&self.lock) {
            list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.notify)));
            if list.is_empty() {
                map.remove(&self.lock);
            }
        }
    }
}

impl Cluster {
    /// Registers a local waiter for the fill of `key`, before the probe that may mark the key
    /// as waited for: a notice that arrives between that probe's answer and the wait is kept.
    pub fn fill_waiter(&self, key: &SharedKey) -> FillWait {
        let notify = Arc::new(Notify::new());
        let lock = key.lock_name().to_owned();
        let wait = FillWait { cluster: self.clone(), lock: lock.clone(), notify: notify.clone() };
        self.0.fill_waiters.0.lock().expect("fill waiters").entry(lock).or_default().push(Arc::downgrade(&notify));
        wait
    }

    /// The bus message announcing that the fill of `key` is over.
    pub(super) fn filled_notice(&self, key: &SharedKey) -> String {
        serde_json::json!({ "r": &*self.0.replica, "k": "filled", "l": key.lock_name() }).to_string()
    }

    /// Wakes the local waiters of fill lock `lock`.
    pub(super) fn wake_fill_waiters(&self, lock: &str) {
        let map = self.0.fill_waiters.0.lock().expect("fill waiters");
        for w in map.get(lock).into_iter().flatten() {
            if let Some(n) = w.upgrade() {
                n.notify_one();
                self.0.stats.fill_notices.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}
