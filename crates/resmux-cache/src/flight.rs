//! Single-flight: concurrent misses on one key make one upstream request.
//!
//! The flight key leaves out the partition, so that a thousand principals missing on one
//! public resource cost one request. The leader's outcome carries its scope and principal:
//! a waiter may take a private outcome only if it is the same principal, and otherwise fetches
//! for itself (never seeing the other principal's data).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::key::CacheKey;

/// A flight's identity: the cache key, with the partition of whoever may share the outcome
/// (`Public` for the first flight on a key).
pub type FlightKey = CacheKey;

/// In-flight fetches with outcome `T`. Bounded by the requests in flight, each of which has a
/// deadline.
pub struct Flights<T> {
    map: Mutex<HashMap<FlightKey, Arc<OnceCell<T>>>>,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Self { map: Mutex::new(HashMap::new()) }
    }
}

impl<T: Clone + Send + Sync + 'static> Flights<T> {
    /// Runs `fetch` unless a fetch for `key` is already running, in which case it waits for
    /// that one's outcome. If the running fetch is abandoned (its caller went away), a waiter
    /// takes over. The outcome is removed once set, so later callers consult the cache.
    pub async fn run<F, Fut>(&self, key: FlightKey, fetch: F) -> (T, bool)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let cell = self.map.lock().expect("flights lock").entry(key.clone()).or_default().clone();
        let mut led = false;
        let value = cell
            .get_or_init(|| {
                led = true;
                fetch()
            })
            .await
            .clone();
        if led {
            let mut map = self.map.lock().expect("flights lock");
            if map.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                map.remove(&key);
            }
        }
        (value, led)
    }

    /// Flights running now.
    pub fn len(&self) -> usize {
        self.map.lock().expect("flights lock").len()
    }

    /// Whether none is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BaseKey, CachedMethod, Partition};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn test_key() -> FlightKey {
        BaseKey { upstream: 0, method: CachedMethod::ResourcesRead, era: 0, params: "k".into() }
            .in_partition(Partition::Public)
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let flights = Arc::new(Flights::<u32>::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let key = test_key();
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let (flights, calls, gate, key) = (flights.clone(), calls.clone(), gate.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                flights
                    .run(key, || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        42u32
                    })
                    .await
            }));
        }
        // Let every task reach the flight, then release the leader.
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        let mut leaders = 0;
        for t in tasks {
            let (v, led) = t.await.unwrap();
            assert_eq!(v, 42);
            leaders += led as usize;
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(leaders, 1);
        assert!(flights.is_empty());
    }

    #[tokio::test]
    async fn an_abandoned_leader_is_replaced() {
        let flights = Arc::new(Flights::<u32>::default());
        let key = test_key();
        let f = flights.clone();
        let k = key.clone();
        let leader = tokio::spawn(async move { f.run(k, std::future::pending::<u32>).await });
        while flights.is_empty() {
            tokio::task::yield_now().await;
        }
        leader.abort();
        let (v, led) = flights.run(key, || async { 7u32 }).await;
        assert_eq!((v, led), (7, true));
    }
}
