//! The admin listener (`[admin] addr`): Prometheus metrics, liveness and readiness, live JSON
//! about the upstreams, the proxy and the cache, cache purges, config reloads, and a
//! single-page dashboard served from the binary. It is a separate listener with its own Host
//! check, so MCP clients never reach it and probes never compete with MCP connections.

mod cache;
mod history;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use history::History;

use crate::config::{AdminConfig, OnError};
use crate::downstream::origin::OriginPolicy;
use crate::hub::Hub;
use crate::router::Router;
pub use crate::status::metrics_text;

/// What `POST /admin/reload` runs: the app's reloader, handed in by the app (the admin
/// listener sits below it and does not know how a config is applied).
pub trait ReloadTrigger: Send + Sync {
    /// Loads the config file again and applies it: what changed, as JSON, or every problem.
    fn reload(&self) -> futures_util::future::BoxFuture<'_, Result<Value, Vec<String>>>;
}

/// The dashboard: one static page, no build step, no CDN.
const PAGE: &str = include_str!("admin/page.html");

/// The routes that change state: POST only, with an allowed Host and no foreign `Origin`.
const POSTS: [&str; 2] = ["/admin/reload", "/admin/cache/purge"];

/// Cheap handle over what the admin listener reports.
#[derive(Clone)]
pub struct Admin(Arc<Inner>);

struct Inner {
    router: Router,
    hub: Hub,
    started: Instant,
    /// Set when shutdown begins: `/readyz` fails from then on.
    draining: AtomicBool,
    hosts: OriginPolicy,
    history: History,
    /// Applies `POST /admin/reload`; absent, the route answers 404.
    reloader: Option<Arc<dyn ReloadTrigger>>,
    /// `[admin] max_body_bytes`.
    max_body_bytes: u64,
    /// `[admin] cache_view_top`.
    cache_view_top: usize,
}

impl Admin {
    pub fn new(router: Router, hub: Hub, config: &AdminConfig, addr: SocketAddr) -> Self {
        Self(Arc::new(Inner {
            router,
            hub,
            started: Instant::now(),
            draining: AtomicBool::new(false),
            hosts: OriginPolicy::new(&[], &config.allowed_hosts, addr),
            history: History::default(),
            reloader: None,
            max_body_bytes: config.max_body_bytes,
            cache_view_top: config.cache_view_top,
        }))
    }

    /// Serves `POST /admin/reload` with `reloader`.
    pub fn with_reloader(self, reloader: Arc<dyn ReloadTrigger>) -> Self {
        let mut inner = Arc::into_inner(self.0).expect("the admin view is configured before it is shared");
        inner.reloader = Some(reloader);
        Self(Arc::new(inner))
    }

    /// `POST /admin/reload`: loads the config file again and applies it. `200` with what was
    /// added, removed, changed and kept; `422` with every problem when it was refused (the
    /// running config stays).
    pub async fn reload(&self) -> Response<Full<Bytes>> {
        let Some(reloader) = &self.0.reloader else {
            return text(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n".into());
        };
        match reloader.reload().await {
            Ok(report) => text(StatusCode::OK, "application/json", json!({"ok": true, "report": report}).to_string()),
            Err(problems) => text(
                StatusCode::UNPROCESSABLE_ENTITY,
                "application/json",
                json!({"ok": false, "errors": problems}).to_string(),
            ),
        }
    }

    /// Whether `req` is a state change the admin listener accepts: a POST to one of
    /// [`POSTS`] with an allowed Host, and no foreign `Origin` (a web page elsewhere cannot make
    /// the proxy reload or purge).
    fn is_post<B>(&self, req: &Request<B>) -> bool {
        let host = req.headers().get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        let origin_ok = match req.headers().get(http::header::ORIGIN) {
            None => true,
            Some(o) => o.to_str().is_ok_and(|o| self.0.hosts.origin_allowed(o)),
        };
        req.method() == Method::POST
            && POSTS.contains(&req.uri().path())
            && self.0.hosts.host_allowed(host)
            && origin_ok
    }

    /// Shutdown has begun: fail readiness so load balancers stop sending traffic.
    pub fn begin_drain(&self) {
        self.0.draining.store(true, Ordering::SeqCst);
    }

    /// The Prometheus text exposition, gauges read now.
    pub fn metrics_text(&self) -> String {
        metrics_text(&self.0.router, &self.0.hub)
    }

    /// Readiness: not draining, and every `fail_closed` upstream has answered discovery.
    pub fn readiness(&self) -> (bool, Value) {
        let draining = self.0.draining.load(Ordering::SeqCst);
        let upstreams = self.0.router.upstreams();
        let waiting: Vec<&str> = (upstreams.iter())
            .filter(|u| u.config().on_error == OnError::FailClosed && u.info().is_none())
            .map(|u| u.name())
            .collect();
        let mut ready = !draining && waiting.is_empty();
        let mut body = json!({"draining": draining, "unreachable_fail_closed": waiting});
        if let Some(cluster) = self.0.router.cluster() {
            let redis_up = cluster.healthy();
            ready &= redis_up || cluster.config().ready_when_degraded;
            body["cluster"] = self.cluster(&cluster, redis_up);
        }
        body["ready"] = json!(ready);
        (ready, body)
    }

    /// The cluster tier's state: whether Redis answers (`degraded` when not), this
    /// replica's id, which upstream listens it holds, and its counters.
    fn cluster(&self, cluster: &crate::cluster::Cluster, redis_up: bool) -> Value {
        use crate::cluster::Role;
        let roles: serde_json::Map<String, Value> = (self.0.router.upstreams().iter())
            .map(|u| {
                let role = match *cluster.role(u.slot() as usize).borrow() {
                    Role::Holder(_) => "holder",
                    Role::Follower => "follower",
                    Role::Solo => "solo",
                };
                (u.name().to_owned(), json!(role))
            })
            .collect();
        let holders: serde_json::Map<String, Value> = (self.0.router.upstreams().iter())
            .map(|u| (u.name().to_owned(), json!(cluster.listen_holder(u.slot() as usize).as_deref())))
            .collect();
        let mut out = json!({
            "redis": if redis_up { "up" } else { "degraded" },
            "redis_mode": if cluster.is_redis_cluster() { "cluster" } else { "standalone" },
            "replica": cluster.replica(),
            "live_replicas": &*cluster.live_replicas(),
            "listen_roles": roles,
            "listen_holders": holders,
        });
        if let Some(cause) = cluster.down_because() {
            out["redis_error"] = json!(*cause);
        }
        for (name, _, value) in cluster.stats().counters() {
            out[name] = json!(value);
        }
        out
    }

    /// Per-upstream figures.
    pub fn upstreams(&self) -> Value {
        let cache = self.0.router.cache();
        let cluster = self.0.router.cluster();
        let list: Vec<Value> = (self.0.router.upstreams().iter())
            .map(|u| {
                let i = u.slot() as usize;
                let (in_flight, max_in_flight) = u.in_flight();
                let stats = u.stats();
                json!({
                    "name": u.name(),
                    "transport": if u.is_http() { "http" } else { "stdio" },
                    "era": u.era_label(),
                    "healthy": u.info().is_some(),
                    "on_error": if u.config().on_error == OnError::FailClosed { "fail_closed" } else { "fail_open" },
                    "in_flight": in_flight,
                    "max_in_flight": max_in_flight,
                    "requests": stats.requests,
                    "failures": stats.failures,
                    "p50_ms": stats.p50_ms,
                    "p99_ms": stats.p99_ms,
                    "listens_opened": self.0.hub.upstream_listens_opened(i),
                    "listening": self.0.hub.upstream_listening(i),
                    "watched_uris": cache.watched_uris().len(i),
                    "trust_public": u.config().trust_public.as_str(),
                    "public_shared": u.config().public_policy().shares(),
                    "cache_policy": u.config().public_policy().describe(),
                    "max_ttl_ms": u.config().max_ttl.map(|t| t.as_millis() as u64),
                    // With [cluster]: the replica that runs this upstream's listen for the fleet.
                    "listen_holder": cluster.as_ref().and_then(|c| c.listen_holder(i)).as_deref(),
                })
            })
            .collect();
        json!({ "upstreams": list })
    }

    /// Proxy-wide figures, with the recent history the page charts.
    pub fn stats(&self) -> Value {
        let cache = self.0.router.cache();
        let totals = self.0.router.metrics().downstream_totals();
        let listeners = self.0.hub.listener_count();
        let listening =
            self.0.router.upstreams().iter().filter(|u| self.0.hub.upstream_listening(u.slot() as usize)).count();
        json!({
            "uptime_s": self.0.started.elapsed().as_secs(),
            "cache_bytes": cache.weighted_size(),
            "cache_entries": cache.entry_count(),
            "watch_fallbacks": cache.watched_uris().fallbacks(),
            "requests": totals,
            "listeners": listeners,
            "upstream_listens": listening,
            "fan_out": if listening == 0 { 0.0 } else { listeners as f64 / listening as f64 },
            "history": self.0.history.points(),
        })
    }

    /// Samples the request counters for the chart every `every`, until `cancel`.
    pub fn start_sampler(&self, every: Duration, cancel: CancellationToken, tracker: &TaskTracker) {
        let admin = self.clone();
        crate::periodic::every(every, &cancel, tracker, move || {
            admin.0.history.sample(&admin.0.router.metrics().downstream_totals())
        });
    }

    /// Serves one admin request.
    pub fn serve<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let host = req.headers().get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !self.0.hosts.host_allowed(host) {
            return text(StatusCode::FORBIDDEN, "text/plain; charset=utf-8", "host not allowed".into());
        }
        if req.method() != Method::GET {
            let why =
                if POSTS.contains(&req.uri().path()) { "POST only, without a foreign Origin" } else { "GET only" };
            return text(StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", why.into());
        }
        match req.uri().path() {
            "/" => text(StatusCode::OK, "text/html; charset=utf-8", PAGE.into()),
            "/metrics" => {
                text(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", self.metrics_text())
            }
            "/healthz" => text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            "/readyz" => {
                let (ready, body) = self.readiness();
                let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                text(status, "application/json", body.to_string())
            }
            "/admin/upstreams" => text(StatusCode::OK, "application/json", self.upstreams().to_string()),
            "/admin/stats" => text(StatusCode::OK, "application/json", self.stats().to_string()),
            "/admin/cache" => text(StatusCode::OK, "application/json", self.cache_view().to_string()),
            path if POSTS.contains(&path) => {
                text(StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", "POST only".into())
            }
            _ => text(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n".into()),
        }
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Serves the admin listener until `cancel`. Few, short requests: HTTP/1.1, one task per
/// connection, no connection bound beyond the kernel backlog.
pub async fn serve(listener: TcpListener, admin: Admin, cancel: CancellationToken, tracker: TaskTracker) {
    loop {
        let (stream, _) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let admin = admin.clone();
        let cancel = cancel.clone();
        tracker.spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let admin = admin.clone();
                async move {
                    let resp = match req.uri().path() {
                        "/admin/reload" if admin.is_post(&req) => admin.reload().await,
                        "/admin/cache/purge" if admin.is_post(&req) => admin.purge(req).await,
                        _ => admin.serve(&req),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
}
