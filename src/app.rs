//! Builds the running proxy from a [`Config`]: upstream handles, router, endpoint, listener;
//! one cancellation tree; shutdown in order (stop accepting, drain, stop upstreams).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Authenticator;
use crate::cache::Cache;
use crate::config::Config;
use crate::downstream::{self, Endpoint};
use crate::hub::Hub;
use crate::router::Router;
use crate::router::cursor::CursorCodec;
use crate::upstream::{Upstream, http};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid configuration:\n{}", .0.join("\n"))]
    Config(Vec<String>),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// A running proxy.
pub struct App {
    addr: SocketAddr,
    router: Router,
    hub: Hub,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

/// How long background tasks get to stop after cancellation before they are abandoned.
const STOP_GRACE: Duration = Duration::from_secs(10);

impl App {
    /// Validates `config`, starts the upstreams and listens.
    pub async fn start(config: Config) -> Result<Self, StartError> {
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(StartError::Config(problems.into_iter().map(|(p, m)| format!("{p}: {m}")).collect()));
        }
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let client = http::client();
        let mut upstreams = Vec::with_capacity(config.upstreams.len());
        let mut errors = Vec::new();
        for up in &config.upstreams {
            match Upstream::start(up.clone(), &client, &cancel, &tracker) {
                Ok(u) => upstreams.push(u),
                Err(e) => errors.push(e),
            }
        }
        let cursors = match &config.proxy.cursor_secret {
            Some(secret) => match secret.resolve() {
                Ok(key) => CursorCodec::new(key.as_bytes()),
                Err(e) => {
                    errors.push(format!("proxy.cursor_secret: {e}"));
                    CursorCodec::random()
                }
            },
            None => CursorCodec::random(),
        };
        if !errors.is_empty() {
            cancel.cancel();
            return Err(StartError::Config(errors));
        }
        let cache = Cache::new(config.cache.clone(), upstreams.len());
        let router = Router::new(upstreams.clone(), config.proxy.clone(), cursors, cache.clone());
        let hub = Hub::start(config.hub.clone(), upstreams, router.namespace().clone(), cache, &cancel, &tracker);
        let endpoint = Endpoint::new(router.clone(), hub.clone(), Authenticator::new(), &config.listen);
        let listener = TcpListener::bind(config.listen.addr).await.map_err(|source| {
            cancel.cancel();
            StartError::Bind { addr: config.listen.addr, source }
        })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.listen.addr, source })?;
        tracker.spawn(downstream::serve(listener, endpoint, config.listen.max_connections, cancel.clone()));
        tracing::info!(%addr, path = %config.listen.path, upstreams = config.upstreams.len(), "resmux listening");
        Ok(Self { addr, router, hub, cancel, tracker })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The router (tests inspect upstream state through it).
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The subscription hub.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// Stops accepting, drains open requests, stops upstream processes.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(STOP_GRACE, self.tracker.wait()).await.is_err() {
            tracing::warn!("some tasks did not stop in time");
        }
    }
}
