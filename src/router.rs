//! The router: decides per method whether the proxy answers itself (`server/discover`), one
//! upstream answers (`resources/read`, `tools/call`, …), or every upstream does (`*/list`,
//! merged with a composite cursor).

mod access;
mod cached;
mod call;
pub mod cursor;
mod discover;
mod fetched;
mod forward;
mod held;
mod hints;
mod large;
mod merge;
pub mod namespace;
mod passthrough;
mod purge;
pub mod rewrite;
mod shared;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;

pub use call::{Answer, CacheStatus, Call, Payload, Progress};
pub use hints::Hints;
pub use large::Relay;
pub use purge::{PurgeError, PurgeRequest, Purged};

use crate::cache::{Cache, Flights};
use crate::cluster::Cluster;
use crate::config::ProxyConfig;
use crate::error::{DownstreamError, Error};
use crate::mcp::List;
use crate::mcp::method as m;
use crate::telemetry::Metrics;
use crate::upstream::Upstream;
use cursor::CursorCodec;
use namespace::Namespace;

/// Cheap handle over the routing state. The upstream set behind it can be swapped at run time
/// ([`Router::swap`], a config reload): each request routes on the set current when it
/// started, to its end.
#[derive(Clone)]
pub struct Router(Arc<ArcSwap<Inner>>);

/// The routing state of one upstream set (a generation): immutable, so that a request sees
/// one consistent set and namespace table however the set changes meanwhile.
#[derive(Clone)]
pub(crate) struct Routing(Arc<Inner>);

struct Inner {
    /// Upstreams in config order (the order of merged lists and of conflict resolution).
    upstreams: Vec<Upstream>,
    /// Position of each slot's upstream in `upstreams` (indexed by slot).
    positions: Vec<Option<usize>>,
    ns: Namespace,
    cursors: CursorCodec,
    proxy: ProxyConfig,
    /// `{"name":…,"version":…}` of the proxy, for result `_meta`.
    server_info: String,
    started: Instant,
    cache: Cache,
    /// What outlives a swap of the upstream set.
    shared: Arc<Shared>,
    metrics: Metrics,
    /// The shared tier, when replicas share state.
    cluster: Option<Cluster>,
}

/// Routing state shared by every generation: keyed by upstream slot, or by handle.
struct Shared {
    flights: Flights<cached::Shared>,
    /// Per upstream slot and list: whether its pages count as private.
    scope_memo: merge::ScopeMemo,
    /// Upstream calls held open for MRTR relay.
    held: held::HeldCalls,
}

fn positions(upstreams: &[Upstream]) -> Vec<Option<usize>> {
    let len = upstreams.iter().map(|u| u.slot() as usize + 1).max().unwrap_or(0);
    let mut out = vec![None; len];
    for (i, u) in upstreams.iter().enumerate() {
        out[u.slot() as usize] = Some(i);
    }
    out
}

impl Inner {
    /// This state with another upstream set (in config order).
    fn with_upstreams(&self, upstreams: Vec<Upstream>) -> Self {
        let names: Vec<(String, bool)> = upstreams.iter().map(|u| (u.name().to_owned(), u.config().prefix)).collect();
        Self {
            positions: positions(&upstreams),
            ns: self.ns.successor(&names),
            upstreams,
            cursors: self.cursors.clone(),
            proxy: self.proxy.clone(),
            server_info: self.server_info.clone(),
            started: self.started,
            cache: self.cache.clone(),
            shared: self.shared.clone(),
            metrics: self.metrics.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

impl Router {
    /// `slots` bounds the upstream slots (`[reload] max_upstreams`).
    pub fn new(
        upstreams: Vec<Upstream>,
        slots: usize,
        proxy: ProxyConfig,
        cursors: CursorCodec,
        cache: Cache,
        metrics: Metrics,
        cluster: Option<Cluster>,
    ) -> Self {
        let names: Vec<(String, bool)> = upstreams.iter().map(|u| (u.name().to_owned(), u.config().prefix)).collect();
        let server_info = serde_json::json!({"name": proxy.name, "version": env!("CARGO_PKG_VERSION")}).to_string();
        let shared = Arc::new(Shared {
            flights: Flights::default(),
            scope_memo: merge::ScopeMemo::new(slots),
            held: held::HeldCalls::default(),
        });
        Self(Arc::new(ArcSwap::from_pointee(Inner {
            cluster,
            cache,
            shared,
            metrics,
            ns: Namespace::with_rules(&names, Arc::new(namespace::UriRules::new(&proxy))),
            positions: positions(&upstreams),
            upstreams,
            cursors,
            proxy,
            server_info,
            started: Instant::now(),
        })))
    }

    /// The routing state current now.
    pub(crate) fn current(&self) -> Routing {
        Routing(self.0.load_full())
    }

    /// Routes new requests to `upstreams` (in config order); requests in flight finish on the
    /// set they started with. Returns the set it replaced.
    pub fn swap(&self, upstreams: Vec<Upstream>) -> Vec<Upstream> {
        let next = Arc::new(self.0.load().with_upstreams(upstreams));
        let old = self.0.swap(next);
        old.upstreams.clone()
    }

    /// The upstreams, in config order, now.
    pub fn upstreams(&self) -> Vec<Upstream> {
        self.0.load().upstreams.clone()
    }

    /// The metrics.
    pub fn metrics(&self) -> Metrics {
        self.0.load().metrics.clone()
    }

    /// The cluster tier, when replicas share state.
    pub fn cluster(&self) -> Option<Cluster> {
        self.0.load().cluster.clone()
    }

    /// The cache.
    pub fn cache(&self) -> Cache {
        self.0.load().cache.clone()
    }

    /// The namespace table now.
    pub fn namespace(&self) -> Namespace {
        self.0.load().ns.clone()
    }

    /// Reaps expired held calls until `cancel` (see [`Routing::start_reaper`]).
    pub fn start_reaper(&self, cancel: &tokio_util::sync::CancellationToken, tracker: &tokio_util::task::TaskTracker) {
        self.current().start_reaper(cancel, tracker);
    }

    /// Calls held now, awaiting their clients' answers.
    pub fn held_calls(&self) -> usize {
        self.current().held_calls()
    }

    /// Serves one downstream request, on the upstream set current when it arrives.
    pub async fn handle(&self, call: &Call<'_>) -> Result<Answer, Error> {
        self.current().handle(call).await
    }
}

impl Routing {
    /// Position of upstream `slot` in this set, if it is in it.
    fn position(&self, slot: u32) -> Option<usize> {
        self.0.positions.get(slot as usize).copied().flatten()
    }

    /// The upstream in `slot`: a key's upstream, which is in this set by construction.
    fn by_slot(&self, slot: u32) -> &Upstream {
        &self.0.upstreams[self.position(slot).expect("a key's upstream is in its routing set")]
    }

    /// Serves one downstream request.
    pub async fn handle(&self, call: &Call<'_>) -> Result<Answer, Error> {
        match call.method {
            // Boxed: what reaches an upstream has a large future, which inline would be moved
            // with every request's (a cached read's too).
            m::DISCOVER => Ok(Box::pin(self.discover(call)).await),
            m::RESOURCES_LIST => self.list(call, List::Resources).await,
            m::RESOURCES_TEMPLATES_LIST => self.list(call, List::Templates).await,
            m::TOOLS_LIST => self.list(call, List::Tools).await,
            m::PROMPTS_LIST => self.list(call, List::Prompts).await,
            m::RESOURCES_READ => self.read(call).await,
            m::TOOLS_CALL | m::PROMPTS_GET => Box::pin(self.call_named(call)).await,
            m::COMPLETE => Box::pin(self.complete(call)).await,
            other => Err(DownstreamError::MethodNotFound(other.to_owned()).into()),
        }
    }
}
