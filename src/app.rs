//! Builds the running proxy from a [`Config`]: upstream handles, cache, router and hub (shared
//! by both downstream modes), then either the HTTP endpoint and its listener (`serve`) or the
//! stdio endpoint (`stdio`); one cancellation tree; shutdown in order (stop accepting, drain,
//! stop upstreams).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod reload;
mod triggers;

pub use reload::{ReloadError, ReloadReport, Reloader};

use crate::admin::{self, Admin};
use crate::auth::Authenticator;
use crate::cache::Cache;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::downstream::legacy::{SessionKey, SessionTable};
use crate::downstream::{self, Endpoint};
use crate::hub::Hub;
use crate::router::Router;
use crate::router::cursor::CursorCodec;
use crate::telemetry::Metrics;
use crate::upstream::{SetupError, Upstream, http};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid configuration:\n{}", .0.join("\n"))]
    Config(Vec<String>),
    #[error("cannot set up authentication")]
    Auth(#[source] crate::auth::AuthSetupError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("listen.tls: cannot load the certificate and key")]
    Tls(#[source] crate::tls::TlsError),
}

/// A running proxy serving HTTP.
pub struct App {
    addr: SocketAddr,
    /// Where the admin listener is bound, when enabled.
    admin_addr: Option<SocketAddr>,
    // Boxed: the running parts are large, and an `App` is moved around by its owners.
    core: Box<Core>,
}

/// What every downstream mode serves from: the upstreams behind the router, the cache and the
/// hub, under one cancellation tree.
struct Core {
    router: Router,
    hub: Hub,
    /// The shared HTTP client (upstreams, JWKS).
    client: http::HttpClient,
    /// Signs legacy session ids; derived from `proxy.cursor_secret` when set.
    session_key: SessionKey,
    metrics: Metrics,
    /// Stops the upstream side: feeds (upstream listens), discovery, stdio children. Fired
    /// last.
    cancel: CancellationToken,
    tracker: TaskTracker,
    /// Stops the downstream side: accepting, then listens end with their result. Fired first.
    downstream: CancellationToken,
    /// The downstream listener's task, waited for (its drain) before `cancel` fires.
    downstream_tracker: TaskTracker,
    /// The operations listener's view; its readiness fails from the start of shutdown.
    admin: Admin,
    /// Applies a changed config's upstreams at run time.
    reloader: Reloader,
    drain_timeout: Duration,
}

/// How long background tasks get to stop after cancellation before they are abandoned.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Starts the handle of upstream `up` in `slot`; an upstream with TLS settings of its own
/// gets its own HTTP client (and pool). The error names the upstream.
fn start_upstream(
    up: &crate::config::UpstreamConfig,
    slot: u32,
    client: &http::HttpClient,
    metrics: &Metrics,
    cancel: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<Upstream, SetupError> {
    let own;
    let client = match up.tls().map(http::tls_client) {
        None => client,
        Some(Ok(c)) => {
            own = c;
            &own
        }
        Some(Err(source)) => return Err(SetupError::Tls { upstream: up.name.clone(), source }),
    };
    Upstream::start(up.clone(), slot, client, metrics, cancel, tracker)
}

impl Core {
    /// Validates `config` and starts the upstreams, cache, router and hub.
    fn build(config: &Config) -> Result<Self, StartError> {
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(StartError::Config(problems.into_iter().map(|(p, m)| format!("{p}: {m}")).collect()));
        }
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let client = http::client();
        let metrics = Metrics::new();
        let slots = config.reload.max_upstreams.max(config.upstreams.len());
        let mut upstreams = Vec::with_capacity(config.upstreams.len());
        let mut errors = Vec::new();
        for (slot, up) in (0u32..).zip(&config.upstreams) {
            match start_upstream(up, slot, &client, &metrics, &cancel, &tracker) {
                Ok(u) => upstreams.push(u),
                Err(e) => errors.push(e.to_string()),
            }
        }
        let mut cursor_secret = None;
        let (cursors, session_key) = match &config.proxy.cursor_secret {
            Some(secret) => match secret.resolve() {
                Ok(key) => {
                    let codecs = (CursorCodec::new(key.as_bytes()), SessionKey::derive(key.as_bytes()));
                    cursor_secret = Some(key);
                    codecs
                }
                Err(e) => {
                    errors.push(format!("proxy.cursor_secret: {e}"));
                    (CursorCodec::random(), SessionKey::random())
                }
            },
            None => (CursorCodec::random(), SessionKey::random()),
        };
        let cursors = cursors.with_ttl(config.proxy.cursor_ttl);
        if !errors.is_empty() {
            cancel.cancel();
            return Err(StartError::Config(errors));
        }
        let cluster = match Cluster::new(&config.cluster, cursor_secret.as_deref(), slots) {
            Ok(c) => c,
            Err(e) => {
                cancel.cancel();
                return Err(StartError::Config(vec![crate::error::chain(&e)]));
            }
        };
        let cache = Cache::new(config.cache.clone(), slots);
        let router = Router::new(
            upstreams.clone(),
            slots,
            config.proxy.clone(),
            cursors,
            cache.clone(),
            metrics.clone(),
            cluster.clone(),
        );
        router.start_reaper(&cancel, &tracker);
        let downstream = CancellationToken::new();
        let ns = router.namespace();
        let delivery = metrics.delivery();
        let sources = crate::hub::Sources { upstreams, ns, slots, cache, cluster };
        let hub = Hub::start(config.hub.clone(), sources, &cancel, downstream.clone(), &tracker, delivery);
        let admin_addr = config.admin.socket_addr().ok().flatten().unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        let reloader = Reloader::new(
            config.clone(),
            reload::Parts {
                router: router.clone(),
                hub: hub.clone(),
                client: client.clone(),
                metrics: metrics.clone(),
                cancel: cancel.clone(),
                tracker: tracker.clone(),
            },
        );
        let admin = Admin::new(router.clone(), hub.clone(), &config.admin, admin_addr)
            .with_reloader(Arc::new(reloader.clone()));
        admin.start_sampler(Duration::from_secs(2), cancel.clone(), &tracker);
        Ok(Self {
            router,
            hub,
            client,
            session_key,
            metrics,
            cancel,
            tracker,
            downstream,
            downstream_tracker: TaskTracker::new(),
            admin,
            reloader,
            drain_timeout: config.admin.drain_timeout,
        })
    }

    /// Shutdown in order: readiness fails and accepting stops; listens end with their result
    /// and in-flight requests get `drain_timeout`; only then upstream listens are closed and
    /// stdio children stopped (stdin closed, killed after their grace).
    async fn shutdown(self) {
        self.admin.begin_drain();
        self.downstream.cancel();
        self.downstream_tracker.close();
        if tokio::time::timeout(self.drain_timeout + STOP_GRACE, self.downstream_tracker.wait()).await.is_err() {
            tracing::warn!("the downstream listener did not drain in time");
        }
        tracing::info!("downstream drained; stopping upstreams");
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(STOP_GRACE, self.tracker.wait()).await.is_err() {
            tracing::warn!("some tasks did not stop in time");
        }
    }
}

impl App {
    /// Validates `config`, starts the upstreams and listens on HTTP.
    pub async fn start(config: Config) -> Result<Self, StartError> {
        let core = Core::build(&config)?;
        let auth = match Authenticator::from_config(&config.auth, &core.client) {
            Ok(a) => Arc::new(a),
            Err(e) => {
                core.shutdown().await;
                return Err(StartError::Auth(e));
            }
        };
        let listen = &config.listen;
        let sessions = SessionTable::with_per_principal(
            core.session_key.clone(),
            listen.max_legacy_sessions,
            listen.max_legacy_sessions_per_principal,
            listen.legacy_session_idle,
        )
        .with_cluster(core.router.cluster());
        sessions.start_sweeper(&core.cancel, &core.tracker);
        let endpoint =
            Endpoint::new(core.router.clone(), core.hub.clone(), auth, listen, sessions, core.metrics.clone());
        endpoint.start_pruner(&core.cancel, &core.tracker);
        let tls = match &listen.tls {
            None => None,
            Some(t) => {
                let alpn: &[&[u8]] = if listen.http2 {
                    &[crate::tls::ALPN_H2, crate::tls::ALPN_HTTP1]
                } else {
                    &[crate::tls::ALPN_HTTP1]
                };
                match crate::tls::server_config(&t.cert, &t.key, None, alpn) {
                    Ok(c) => Some(std::sync::Arc::new(c)),
                    Err(e) => {
                        core.shutdown().await;
                        return Err(StartError::Tls(e));
                    }
                }
            }
        };
        let bound = match TcpListener::bind(listen.addr).await {
            Ok(listener) => listener.local_addr().map(|addr| (listener, addr)),
            Err(e) => Err(e),
        };
        let (listener, addr) = match bound {
            Ok(bound) => bound,
            Err(source) => {
                core.shutdown().await;
                return Err(StartError::Bind { addr: listen.addr, source });
            }
        };
        let admin_addr = match config.admin.socket_addr().ok().flatten() {
            None => None,
            Some(want) => match TcpListener::bind(want).await {
                Ok(admin_listener) => {
                    let bound = admin_listener.local_addr().unwrap_or(want);
                    let (admin, cancel, tracker) = (core.admin.clone(), core.cancel.clone(), core.tracker.clone());
                    core.tracker.spawn(admin::serve(admin_listener, admin, cancel, tracker));
                    tracing::info!(addr = %bound, "admin listening");
                    Some(bound)
                }
                Err(source) => {
                    core.shutdown().await;
                    return Err(StartError::Bind { addr: want, source });
                }
            },
        };
        let drain = config.admin.drain_timeout;
        core.downstream_tracker.spawn(downstream::serve(
            listener,
            endpoint,
            listen.into(),
            tls,
            drain,
            core.downstream.clone(),
        ));
        let scheme = if listen.tls.is_some() { "https" } else { "http" };
        tracing::info!(%addr, %scheme, path = %listen.path, upstreams = config.upstreams.len(), "resmux listening");
        Ok(Self { addr, admin_addr, core: Box::new(core) })
    }

    /// Validates `config`, starts the upstreams and serves one client on `input`/`output`
    /// (stdin/stdout) until `input` ends; then shuts down.
    pub async fn stdio<R, W>(config: Config, input: R, output: W) -> Result<(), StartError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let core = Core::build(&config)?;
        tracing::info!(upstreams = config.upstreams.len(), "resmux serving stdio");
        let (router, hub) = (core.router.clone(), core.hub.clone());
        downstream::stdio::serve(
            router,
            hub,
            config.listen.max_body_bytes,
            config.listen.max_json_depth,
            input,
            output,
        )
        .await;
        core.shutdown().await;
        Ok(())
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener's bound address, when `[admin] addr` is set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The operations view (readiness, figures).
    pub fn admin(&self) -> &Admin {
        &self.core.admin
    }

    /// The router (tests inspect upstream state through it).
    pub fn router(&self) -> &Router {
        &self.core.router
    }

    /// The subscription hub.
    pub fn hub(&self) -> &Hub {
        &self.core.hub
    }

    /// Applies changed configs (`resmux serve` wires SIGHUP and the file watch to it).
    pub fn reloader(&self) -> &Reloader {
        &self.core.reloader
    }

    /// Reloads from `path` (the file `config` was loaded from) on SIGHUP, on `POST
    /// /admin/reload` and, with `[reload] watch`, when the file changes; until shutdown begins.
    pub fn reload_from(&self, path: &std::path::Path, config: &crate::config::ReloadConfig) {
        let core = &self.core;
        core.reloader.start_triggers(path, config.watch, config.poll_interval, &core.downstream, &core.tracker);
    }

    /// Stops accepting, drains open requests, stops upstream processes.
    pub async fn shutdown(self) {
        self.core.shutdown().await;
    }
}
