//! The subscription hub (DESIGN §5): downstream listeners, refcounted upstream interest, and
//! the standing upstream listens ("feeds") whose notifications both invalidate the cache and
//! fan out to listeners. One piece of machinery serves the cache and the listeners.

mod changes;
mod feed;
mod listener;
mod registry;
mod reload;
mod replicas;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use listener::{Ending, Listener, Notice, Topic};
pub use registry::Registry;
use reload::Slot;
pub use reload::{Lineup, Moves};

use crate::auth::{Principal, policy};
use crate::cache::Cache;
use crate::cluster::{Cluster, Event, Role};
use crate::config::HubConfig;
use crate::error::{DownstreamError, Error};
use crate::jsonrpc::RequestId;
use crate::mcp::Capability;
use crate::mcp::notify::Filter;
use crate::router::namespace::Namespace;
use crate::upstream::Upstream;

/// Cheap handle over the hub.
#[derive(Clone)]
pub struct Hub(Arc<Inner>);

struct Inner {
    config: HubConfig,
    /// The upstreams in config order and their namespaces, swapped by a reload.
    lineup: ArcSwap<Lineup>,
    cache: Cache,
    /// Per upstream slot (its identity while it runs, see [`Upstream::slot`]): the upstream,
    /// its feed and what the feed listens for.
    slots: Vec<Slot>,
    registry: Mutex<Registry>,
    next_id: AtomicU64,
    /// Fires at shutdown: listen streams end with a result.
    shutdown: CancellationToken,
    /// Stops every feed at shutdown (each feed runs under a child of it).
    cancel: CancellationToken,
    /// The shared tier, when replicas share state: its leases decide which replica runs each
    /// upstream listen, and its bus carries what those listens see to the others.
    cluster: Option<Cluster>,
    /// Stand-in for the cluster's role and remote-interest watches on a single replica: solo,
    /// and nobody else's interest.
    solo: (watch::Sender<Role>, watch::Sender<Filter>),
    /// The proxy's task tracker: stdio listen writers and legacy streams are spawned on it, so
    /// shutdown waits for them.
    tracker: TaskTracker,
    /// `notification_delivery_seconds`.
    delivery: Histogram,
}

/// A registered listen; dropping it unregisters the listener.
pub struct Subscription {
    hub: Hub,
    pub listener: Arc<Listener>,
    /// The honoured subset, in downstream form, for the acknowledgment.
    pub honoured: Filter,
}

impl Subscription {
    /// The hub it is registered with.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unregister(self.listener.id);
    }
}

/// What the hub serves from: the upstreams (with their namespaces), the cache its
/// notifications invalidate, and the cluster tier when replicas share state. `slots` bounds
/// the upstream slots (`[reload] max_upstreams`).
pub struct Sources {
    pub upstreams: Vec<Upstream>,
    pub ns: Namespace,
    pub slots: usize,
    pub cache: Cache,
    pub cluster: Option<Cluster>,
}

impl Hub {
    /// Builds the hub and starts one feed per upstream on `tracker`, stopping on `cancel`.
    /// Downstream listens end (with their result) when `listens_end` fires, which shutdown
    /// does before it cancels the feeds. Delivery latency goes to `delivery`.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        config: HubConfig,
        sources: Sources,
        cancel: &CancellationToken,
        listens_end: CancellationToken,
        tracker: &TaskTracker,
        delivery: Histogram,
    ) -> Self {
        let Sources { upstreams, ns, slots, cache, cluster } = sources;
        let slots = (0..slots.max(upstreams.len())).map(|_| Slot::new()).collect();
        let hub = Self(Arc::new(Inner {
            config,
            lineup: ArcSwap::from_pointee(Lineup::new(upstreams.clone(), ns)),
            cache,
            slots,
            registry: Mutex::default(),
            next_id: AtomicU64::new(1),
            shutdown: listens_end,
            cancel: cancel.clone(),
            cluster,
            solo: (watch::channel(Role::Solo).0, watch::channel(Filter::default()).0),
            tracker: tracker.clone(),
            delivery,
        }));
        for upstream in &upstreams {
            hub.install(upstream);
        }
        hub.finish_at_shutdown(cancel);
        if let Some(cluster) = &hub.0.cluster {
            replicas::start(&hub, cluster, cancel, tracker);
        }
        hub
    }

    /// When `listens_end` fires, tells every listener to end its stream with its result: the
    /// streams wait on their listeners alone, not each on the shared token. (Holds the hub
    /// weakly: a hub dropped without a shutdown is not kept alive by it.)
    fn finish_at_shutdown(&self, cancel: &CancellationToken) {
        let (end, cancel, hub) = (self.0.shutdown.clone(), cancel.clone(), Arc::downgrade(&self.0));
        self.0.tracker.spawn(async move {
            tokio::select! {
                _ = end.cancelled() => {}
                _ = cancel.cancelled() => {}
            }
            if let Some(inner) = hub.upgrade() {
                let all = inner.registry.lock().expect("registry").all();
                all.iter().for_each(|l| l.finish());
            }
        });
    }

    /// Whether the proxy is shutting down (listens end with their result).
    fn finishing(&self) -> bool {
        self.0.shutdown.is_cancelled() || self.0.cancel.is_cancelled()
    }

    /// The hub's settings.
    pub fn config(&self) -> &HubConfig {
        &self.0.config
    }

    /// Observes a notification written to its listener `after` its change arrived.
    pub fn delivered(&self, after: Duration) {
        self.0.delivery.observe(after.as_secs_f64());
    }

    /// The task tracker that downstream streams (listens, legacy GET streams, progress
    /// streams) are spawned on.
    pub fn tracker(&self) -> &TaskTracker {
        &self.0.tracker
    }

    /// Fires when the proxy shuts down.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.0.shutdown
    }

    /// Listeners registered now.
    pub fn listener_count(&self) -> usize {
        self.0.registry.lock().expect("registry").listeners.len()
    }

    /// How many connections the registered listeners arrived on (those that told none count
    /// as one): what the fan-out groups them by ([`Listener::conn`]).
    pub fn listener_connections(&self) -> usize {
        let reg = self.0.registry.lock().expect("registry");
        reg.listeners.values().map(|l| l.conn).collect::<std::collections::HashSet<_>>().len()
    }

    /// Upstream listens opened so far for upstream slot `slot` (since its upstream was
    /// installed there).
    pub fn upstream_listens_opened(&self, slot: usize) -> u64 {
        self.0.slots.get(slot).map_or(0, |s| s.opened.load(Ordering::Relaxed))
    }

    /// Whether upstream slot `slot` holds a standing listen (or legacy subscriptions) now.
    pub fn upstream_listening(&self, slot: usize) -> bool {
        self.0.slots.get(slot).is_some_and(|s| !s.active.borrow().is_empty())
    }

    /// Waits (at most `wait`) until the upstreams are subscribed to everything `listener`
    /// listens for, so that a change after its acknowledgment reaches it. Returns whether they
    /// are; an upstream that is down makes this time out, and its changes arrive (as a resync)
    /// once it is back.
    pub async fn ready(&self, listener: &Listener, wait: Duration) -> bool {
        let covered = async {
            for (up, topic) in &listener.topics() {
                let mut rx = self.0.slots[*up].active.subscribe();
                let _ = rx
                    .wait_for(|f| match topic {
                        Topic::Uri(uri) => f.uris.contains(uri),
                        Topic::List(kind) => f.list(*kind),
                    })
                    .await;
            }
        };
        tokio::time::timeout(wait, covered).await.is_ok()
    }

    /// Records a legacy upstream's live subscriptions (its lists arrive unsolicited whenever it
    /// declared them).
    fn set_active(&self, index: usize, upstream: &Upstream, uris: &std::collections::BTreeSet<String>) {
        let mut f = Filter { uris: uris.clone(), ..Filter::default() };
        if let Some(info) = upstream.info() {
            for kind in Capability::ALL {
                f.set_list(kind, info.flag(kind.name(), "listChanged"));
            }
        }
        self.set_live(index, f);
    }

    /// Records what upstream `index` is subscribed to now (by this replica's feed), and tells
    /// the other replicas when it holds the listen for them.
    fn set_live(&self, index: usize, filter: Filter) {
        if let Some(cluster) = &self.0.cluster
            && matches!(*cluster.role(index).borrow(), Role::Holder(_))
        {
            cluster.announce(index, Event::Active(filter.clone()));
        }
        self.0.slots[index].active.send_replace(filter);
    }

    /// Whether this replica runs upstream `index`'s listen (always, on a single replica).
    fn role(&self, index: usize) -> watch::Receiver<Role> {
        match &self.0.cluster {
            Some(c) => c.role(index),
            None => self.0.solo.0.subscribe(),
        }
    }

    /// What the other replicas want from upstream `index` while this one holds its listen.
    fn remote_interest(&self, index: usize) -> watch::Receiver<Filter> {
        match &self.0.cluster {
            Some(c) => c.remote_interest(index),
            None => self.0.solo.1.subscribe(),
        }
    }

    /// Registers a listen of `principal` asking for `filter` (downstream URIs). Only what the
    /// owning upstreams declared they honour is registered and acknowledged.
    pub fn subscribe(
        &self,
        principal: &Principal,
        subscription: RequestId,
        filter: &Filter,
    ) -> Result<Subscription, Error> {
        self.subscribe_on(principal, subscription, filter, 0)
    }

    /// [`Hub::subscribe`] for a listen that arrived on connection `conn` (a key that tells
    /// the connection apart; see [`Listener::conn`]).
    pub fn subscribe_on(
        &self,
        principal: &Principal,
        subscription: RequestId,
        filter: &Filter,
        conn: u64,
    ) -> Result<Subscription, Error> {
        let cfg = &self.0.config;
        if filter.uris.len() > cfg.max_uris_per_listen {
            return Err(DownstreamError::InvalidParams(format!(
                "at most {} URIs per listen (asked for {})",
                cfg.max_uris_per_listen,
                filter.uris.len()
            ))
            .into());
        }
        let (topics, honoured, lineup) = self.honoured(filter, principal);
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let listener = Arc::new(Listener::new(id, principal.clone(), subscription, topics).on_conn(conn));
        let mut reg = self.0.registry.lock().expect("registry");
        if !Arc::ptr_eq(&lineup, &self.0.lineup.load()) {
            // A reload swapped the upstreams meanwhile (under this lock): route again.
            drop(reg);
            return self.subscribe_on(principal, listener.subscription.clone(), filter, conn);
        }
        if reg.listeners.len() >= cfg.max_listeners {
            return Err(DownstreamError::LimitReached(format!(
                "the proxy holds its maximum of {} listens",
                cfg.max_listeners
            ))
            .into());
        }
        // Anonymous callers cannot be told apart: only the total bound applies to them.
        let mine = reg.per_principal.entry(principal.clone()).or_default();
        if *mine >= cfg.max_listens_per_principal && *principal != Principal::Anonymous {
            return Err(DownstreamError::LimitReached(format!(
                "at most {} listens per principal",
                cfg.max_listens_per_principal
            ))
            .into());
        }
        *mine += 1;
        let added = reg.join(&listener);
        // Checked under the lock the shutdown's walk over the listeners takes: a listener
        // registered after that walk is told here.
        if self.finishing() {
            listener.finish();
        }
        let added: Vec<(usize, &Topic)> = added.iter().map(|(up, t)| (*up, t)).collect();
        self.recompute_interest(&added, true);
        drop(reg);
        Ok(Subscription { hub: self.clone(), listener, honoured })
    }

    /// The topics to register and the acknowledgment's filter for a requested `filter`: what
    /// the owning upstreams honour and `principal` may reach (a forbidden URI is left out of
    /// the acknowledgment exactly like one no upstream can watch), with the lineup they were
    /// routed on.
    fn honoured(&self, filter: &Filter, principal: &Principal) -> (Vec<(usize, Topic)>, Filter, Arc<Lineup>) {
        let mut topics = Vec::new();
        let mut ack = Filter::default();
        let lineup = self.0.lineup.load_full();
        for uri in &filter.uris {
            // A passthrough URI no upstream listed, or several did, is left out like one no
            // upstream can watch.
            let Ok(route) = lineup.ns.route_uri(uri) else { continue };
            let (candidates, upstream_uri) = route.candidates();
            let mut any = false;
            for &i in candidates {
                let up = &lineup.upstreams[i];
                if up.info().is_some_and(|info| info.flag("resources", "subscribe"))
                    && policy::allows(&up.config().allow, principal, policy::Kind::Uri, upstream_uri)
                {
                    topics.push((up.slot() as usize, Topic::Uri(upstream_uri.to_owned())));
                    any = true;
                }
            }
            if any {
                ack.uris.insert(uri.clone());
            }
        }
        for kind in Capability::ALL {
            if !filter.list(kind) {
                continue;
            }
            for up in &lineup.upstreams {
                if up.info().is_some_and(|info| info.flag(kind.name(), "listChanged"))
                    && policy::reaches_upstream(&up.config().allow, principal)
                {
                    topics.push((up.slot() as usize, Topic::List(kind)));
                    ack.set_list(kind, true);
                }
            }
        }
        (topics, ack, lineup)
    }

    fn unregister(&self, id: u64) {
        let mut reg = self.0.registry.lock().expect("registry");
        let Some((listener, removed)) = reg.leave(id) else { return };
        if let Some(n) = reg.per_principal.get_mut(&listener.principal) {
            *n -= 1;
            if *n == 0 {
                reg.per_principal.remove(&listener.principal);
            }
        }
        let removed: Vec<(usize, &Topic)> = removed.iter().map(|(up, t)| (*up, t)).collect();
        self.recompute_interest(&removed, false);
    }

    /// Applies the topics that gained their first listener (`joined`) or lost their last one
    /// to the upstreams' desired filters: a join or a leave costs O(its own topics), whatever
    /// else is registered. Each topic is counted once however many listeners share it (the
    /// registry's sets are the refcounts). The caller holds the registry lock, so the desired
    /// filters change in the same order as the registry.
    fn recompute_interest(&self, topics: &[(usize, &Topic)], joined: bool) {
        let mut by_upstream: Vec<(usize, Vec<&Topic>)> = Vec::new();
        for (up, topic) in topics {
            match by_upstream.iter_mut().find(|(u, _)| u == up) {
                Some((_, list)) => list.push(topic),
                None => by_upstream.push((*up, vec![topic])),
            }
        }
        for (up, topics) in by_upstream {
            self.0.slots[up].desired.send_if_modified(|filter| {
                let mut changed = false;
                for topic in &topics {
                    changed |= match topic {
                        Topic::Uri(uri) if joined => filter.uris.insert(uri.clone()),
                        Topic::Uri(uri) => filter.uris.remove(uri),
                        Topic::List(kind) => {
                            let was = filter.list(*kind);
                            filter.set_list(*kind, joined);
                            was != joined
                        }
                    };
                }
                changed
            });
        }
    }
}
