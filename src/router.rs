//! The router: decides per method whether the proxy answers itself (`server/discover`), one
//! upstream answers (`resources/read`, `tools/call`, …), or every upstream does (`*/list`,
//! merged with a composite cursor).

mod access;
mod cached;
mod call;
pub mod cursor;
mod discover;
mod forward;
mod held;
mod hints;
mod large;
mod merge;
pub mod namespace;
pub mod rewrite;
mod shared;

use std::sync::Arc;
use std::time::Instant;

pub use call::{Answer, CacheStatus, Call, Payload, Progress};
pub use hints::Hints;
pub use large::Relay;

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

/// Cheap handle over the routing state.
#[derive(Clone)]
pub struct Router(Arc<Inner>);

struct Inner {
    /// Upstreams in config order (the order of merged lists and of conflict resolution).
    upstreams: Vec<Upstream>,
    ns: Namespace,
    cursors: CursorCodec,
    proxy: ProxyConfig,
    /// `{"name":…,"version":…}` of the proxy, for result `_meta`.
    server_info: String,
    started: Instant,
    cache: Cache,
    flights: Flights<cached::Shared>,
    /// Per upstream and list: whether its pages count as private.
    scope_memo: merge::ScopeMemo,
    /// Upstream calls held open for MRTR relay.
    held: held::HeldCalls,
    metrics: Metrics,
    /// The shared tier, when replicas share state.
    cluster: Option<Cluster>,
}

impl Router {
    pub fn new(
        upstreams: Vec<Upstream>,
        proxy: ProxyConfig,
        cursors: CursorCodec,
        cache: Cache,
        metrics: Metrics,
        cluster: Option<Cluster>,
    ) -> Self {
        let names: Vec<(String, bool)> = upstreams.iter().map(|u| (u.name().to_owned(), u.config().prefix)).collect();
        let server_info = serde_json::json!({"name": proxy.name, "version": env!("CARGO_PKG_VERSION")}).to_string();
        Self(Arc::new(Inner {
            cluster,
            cache,
            flights: Flights::default(),
            scope_memo: merge::ScopeMemo::new(upstreams.len()),
            held: held::HeldCalls::default(),
            metrics,
            ns: Namespace::new(&names),
            upstreams,
            cursors,
            proxy,
            server_info,
            started: Instant::now(),
        }))
    }

    /// The upstreams, in config order.
    pub fn upstreams(&self) -> &[Upstream] {
        &self.0.upstreams
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The cluster tier, when replicas share state.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.0.cluster.as_ref()
    }

    /// The cache.
    pub fn cache(&self) -> &Cache {
        &self.0.cache
    }

    /// The namespace table.
    pub fn namespace(&self) -> &Namespace {
        &self.0.ns
    }

    /// Serves one downstream request.
    pub async fn handle(&self, call: &Call<'_>) -> Result<Answer, Error> {
        match call.method {
            m::DISCOVER => Ok(self.discover(call).await),
            m::RESOURCES_LIST => self.list(call, List::Resources).await,
            m::RESOURCES_TEMPLATES_LIST => self.list(call, List::Templates).await,
            m::TOOLS_LIST => self.list(call, List::Tools).await,
            m::PROMPTS_LIST => self.list(call, List::Prompts).await,
            m::RESOURCES_READ => self.read(call).await,
            m::TOOLS_CALL | m::PROMPTS_GET => self.call_named(call).await,
            m::COMPLETE => self.complete(call).await,
            other => Err(DownstreamError::MethodNotFound(other.to_owned()).into()),
        }
    }
}
