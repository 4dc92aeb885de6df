//! Hot reload: a changed config is validated, then its `[[upstream]]` sections are applied
//! without a restart.
//!
//! - An added upstream starts in a free slot, gets `[reload] warmup_timeout` to be discovered,
//!   then joins the lineup.
//! - A changed one (any difference in its section, or in the prefix it gets) is replaced
//!   make-before-break: the new handle starts in a new slot, its feed opens the listen its
//!   listeners need, requests are swapped over, and only then the old one drains.
//! - A removed one leaves the lineup at once; its listeners are told what they watched there
//!   changed, its upstream listen ends, in-flight requests get `[admin] drain_timeout`, then
//!   its stdio child is stopped and its cache entries dropped.
//! - An untouched one keeps its handle, slot, cache entries, feed and legacy session.
//!
//! Requests route on the lineup current when they started, to their end. Any other section
//! that differs is refused (it needs a restart), and a config with errors is refused with every
//! error; either way the running config stays.
//!
//! With `[cluster]` each replica applies its own file the same way; the hub's slots join and
//! leave the cluster as they are installed and retired, so leases, interest and the bus follow
//! (see `hub/replicas.rs` and the cluster's `members.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{self, Config, ConfigErrors};
use crate::hub::{Hub, Lineup, Moves};
use crate::router::Router;
use crate::telemetry::Metrics;
use crate::upstream::{Upstream, http};

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadReport {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
    /// New or replacing upstreams not yet discovered (or not yet listening for their
    /// listeners) when the warm-up ended; they joined anyway and keep trying.
    pub not_ready: Vec<String>,
    /// How long routing was switched over for (the swap itself), in microseconds.
    pub swap_micros: u64,
}

impl ReloadReport {
    /// Whether the reload changed nothing.
    pub fn is_noop(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// Why a reload was refused; the running config stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Invalid(#[source] ConfigErrors),
    #[error("reload refused:\n  {}", .0.join("\n  "))]
    Refused(Vec<String>),
    #[error("no config file to reload from (the proxy was started from a config value)")]
    NoFile,
}

impl ReloadError {
    /// Every problem, one line each.
    pub fn problems(&self) -> Vec<String> {
        match self {
            Self::Invalid(e) => e
                .errors
                .iter()
                .map(|c| match c.line {
                    Some(line) => format!("{}:{line}: {}: {}", e.file, c.path, c.message),
                    None => format!("{}: {}: {}", e.file, c.path, c.message),
                })
                .collect(),
            Self::Refused(p) => p.clone(),
            Self::NoFile => vec![self.to_string()],
        }
    }
}

/// The running parts a reload changes.
pub(super) struct Parts {
    pub router: Router,
    pub hub: Hub,
    pub client: http::HttpClient,
    pub metrics: Metrics,
    pub cancel: CancellationToken,
    pub tracker: TaskTracker,
}

/// Cheap handle that applies changed configs, one at a time.
#[derive(Clone)]
pub struct Reloader(Arc<Inner>);

struct Inner {
    parts: Parts,
    /// The config running now; held across a reload, so reloads are applied one at a time.
    running: tokio::sync::Mutex<Config>,
    /// The file reloads read, once `serve` names it.
    path: Mutex<Option<PathBuf>>,
    /// Free upstream slots; a retired upstream's slot returns once it has drained.
    free: Arc<Mutex<Vec<u32>>>,
}

/// Every section but `[[upstream]]`, as `(name, rendering)`: what a reload may not change.
fn fixed_sections(c: &Config) -> [(&'static str, String); 10] {
    [
        ("listen", format!("{:?}", c.listen)),
        ("auth", format!("{:?}", c.auth)),
        ("proxy", format!("{:?}", c.proxy)),
        ("cache", format!("{:?}", c.cache)),
        ("hub", format!("{:?}", c.hub)),
        ("log", format!("{:?}", c.log)),
        ("admin", format!("{:?}", c.admin)),
        ("cluster", format!("{:?}", c.cluster)),
        ("telemetry", format!("{:?}", c.telemetry)),
        ("reload", format!("{:?}", c.reload)),
    ]
}

/// An upstream section's identity for change detection: every field, as written.
fn section(up: &config::UpstreamConfig) -> String {
    format!("{up:?}")
}

impl Reloader {
    pub(super) fn new(config: Config, parts: Parts) -> Self {
        let used = config.upstreams.len() as u32;
        let slots = parts.hub.slot_count() as u32;
        // Popped from the end: the lowest free slot is reused first.
        let free = (used..slots).rev().collect();
        Self(Arc::new(Inner {
            parts,
            running: tokio::sync::Mutex::new(config),
            path: Mutex::new(None),
            free: Arc::new(Mutex::new(free)),
        }))
    }

    /// Reloads read `path` from now on.
    pub fn set_path(&self, path: &Path) {
        *self.0.path.lock().expect("path lock") = Some(path.to_owned());
    }

    /// The file reloads read, if any.
    pub fn path(&self) -> Option<PathBuf> {
        self.0.path.lock().expect("path lock").clone()
    }

    /// Loads the config file again and applies it.
    pub async fn reload_file(&self) -> Result<ReloadReport, ReloadError> {
        let Some(path) = self.path() else {
            return Err(self.refused(ReloadError::NoFile));
        };
        match config::load(&path) {
            Ok(config) => self.apply(config).await,
            Err(errors) => Err(self.refused(ReloadError::Invalid(errors))),
        }
    }

    fn refused(&self, e: ReloadError) -> ReloadError {
        self.0.parts.metrics.reloaded("rejected");
        tracing::warn!(problems = ?e.problems(), "config reload refused; the running config stays");
        e
    }

    /// Applies `next` (already parsed and validated, see [`config::load`]).
    pub async fn apply(&self, next: Config) -> Result<ReloadReport, ReloadError> {
        let mut running = self.0.running.lock().await;
        let mut problems = Vec::new();
        for ((name, now), (_, then)) in fixed_sections(&running).into_iter().zip(fixed_sections(&next)) {
            if now != then {
                problems.push(format!(
                    "[{name}] changed: only [[upstream]] sections are applied by a reload; restart to apply [{name}]"
                ));
            }
        }
        problems.extend(next.validate().into_iter().map(|(p, m)| format!("{p}: {m}")));
        let plan = Plan::new(&self.0.parts.router.upstreams(), &next);
        let need = plan.starts.len();
        let free = self.0.free.lock().expect("free lock").len();
        if need > free {
            problems.push(format!(
                "reload.max_upstreams: {need} upstreams to start but {free} slots free (running and draining \
                 upstreams hold the others); raise max_upstreams and restart, or reload again once drained"
            ));
        }
        if !problems.is_empty() {
            return Err(self.refused(ReloadError::Refused(problems)));
        }
        if plan.report.is_noop() {
            *running = next;
            self.0.parts.metrics.reloaded("unchanged");
            tracing::info!("config reloaded: no upstream changed");
            return Ok(plan.report);
        }
        let report = self.switch(plan).await.map_err(|p| self.refused(ReloadError::Refused(p)))?;
        *running = next;
        self.0.parts.metrics.reloaded("applied");
        tracing::info!(
            added = ?report.added, removed = ?report.removed, changed = ?report.changed,
            unchanged = report.unchanged.len(), not_ready = ?report.not_ready, swap_us = report.swap_micros,
            "config reloaded"
        );
        Ok(report)
    }

    /// Starts what `plan` adds, swaps, and drains what it retires.
    async fn switch(&self, mut plan: Plan) -> Result<ReloadReport, Vec<String>> {
        let p = &self.0.parts;
        let cache = p.router.cache();
        let slots: Vec<u32> = {
            let mut free = self.0.free.lock().expect("free lock");
            (0..plan.starts.len()).map(|_| free.pop().expect("counted above")).collect()
        };
        let mut started = Vec::new();
        let mut errors = Vec::new();
        for (config, slot) in plan.starts.iter().zip(&slots) {
            match super::start_upstream(config, *slot, &p.client, &p.metrics, &p.cancel, &p.tracker) {
                Ok(u) => started.push(u),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !errors.is_empty() {
            started.iter().for_each(Upstream::stop);
            self.0.free.lock().expect("free lock").extend(slots);
            return Err(errors);
        }
        let by_name: HashMap<String, Upstream> = started.iter().map(|u| (u.name().to_owned(), u.clone())).collect();
        let mut moves = Moves::default();
        let mut primed = Vec::new();
        for u in &started {
            // A reused slot: nothing of its previous upstream may remain.
            cache.drop_upstream(u.slot());
            p.hub.install(u);
            let new = u.slot() as usize;
            match plan.old.get(u.name()) {
                Some(old) => {
                    moves.replaced.push((old.slot() as usize, new));
                    primed.push((u.clone(), p.hub.prime(old.slot() as usize, new)));
                }
                None => moves.added.push(new),
            }
        }
        let deadline = Instant::now() + plan.warmup;
        let ready = join_all(primed.iter().map(|(u, want)| p.hub.covers(u.slot() as usize, want, deadline))).await;
        for ((u, _), ok) in primed.iter().zip(ready) {
            if !ok {
                plan.report.not_ready.push(u.name().to_owned());
            }
        }
        for u in started.iter().filter(|u| !plan.old.contains_key(u.name())) {
            if u.wait_info(deadline).await.is_none() {
                plan.report.not_ready.push(u.name().to_owned());
            }
        }
        let lineup: Vec<Upstream> = (plan.order.iter())
            .map(|name| by_name.get(name).or_else(|| plan.kept.get(name)).expect("planned").clone())
            .collect();
        let retired: Vec<Upstream> = plan.old.values().cloned().collect();
        moves.removed = retired.iter().filter(|u| !by_name.contains_key(u.name())).map(|u| u.slot() as usize).collect();
        let t0 = std::time::Instant::now();
        p.router.swap(lineup.clone());
        p.hub.swap_lineup(Lineup::new(lineup, p.router.namespace()), &moves);
        plan.report.swap_micros = t0.elapsed().as_micros() as u64;
        for u in retired {
            p.hub.retire(u.slot() as usize);
            p.tracker.spawn(drain(u, cache.clone(), self.0.free.clone(), plan.drain));
        }
        Ok(plan.report)
    }
}

/// A retired upstream: in-flight requests get `wait` to finish, then it stops (its stdio
/// child too), its cache entries go, and its slot is free again.
async fn drain(upstream: Upstream, cache: crate::cache::Cache, free: Arc<Mutex<Vec<u32>>>, wait: Duration) {
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    while upstream.in_flight().0 > 0 && Instant::now() < deadline {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    let left = upstream.in_flight().0;
    if left > 0 {
        tracing::warn!(upstream = %upstream.name(), left, "retired upstream still had requests in flight; stopping it");
    }
    upstream.stop();
    cache.drop_upstream(upstream.slot());
    free.lock().expect("free lock").push(upstream.slot());
    tracing::info!(upstream = %upstream.name(), slot = upstream.slot(), "retired upstream drained and stopped");
}

/// What a reload does, worked out from the running upstreams and the next config.
struct Plan {
    /// Sections to start: added and changed upstreams.
    starts: Vec<config::UpstreamConfig>,
    /// Running upstreams to retire, by name: changed and removed.
    old: HashMap<String, Upstream>,
    /// Running upstreams that stay.
    kept: HashMap<String, Upstream>,
    /// The next config's upstream names, in order.
    order: Vec<String>,
    report: ReloadReport,
    warmup: Duration,
    drain: Duration,
}

impl Plan {
    fn new(running: &[Upstream], next: &Config) -> Self {
        let prefix = |names: &[(String, bool)], name: &str| {
            let several = names.len() > 1;
            names.iter().find(|(n, _)| n == name).is_some_and(|(_, p)| several && *p)
        };
        let before: Vec<(String, bool)> = running.iter().map(|u| (u.name().to_owned(), u.config().prefix)).collect();
        let after: Vec<(String, bool)> = next.upstreams.iter().map(|u| (u.name.clone(), u.prefix)).collect();
        let mut plan = Plan {
            starts: Vec::new(),
            old: HashMap::new(),
            kept: HashMap::new(),
            order: after.iter().map(|(n, _)| n.clone()).collect(),
            report: ReloadReport::default(),
            warmup: next.reload.warmup_timeout,
            drain: next.admin.drain_timeout,
        };
        for up in &next.upstreams {
            match running.iter().find(|u| u.name() == up.name) {
                None => {
                    plan.report.added.push(up.name.clone());
                    plan.starts.push(up.clone());
                }
                // Its namespace prefix moving (one upstream becoming several) rewrites every
                // cached entry and listened URI: that is a change too.
                Some(u)
                    if section(u.config()) == section(up) && prefix(&before, &up.name) == prefix(&after, &up.name) =>
                {
                    plan.report.unchanged.push(up.name.clone());
                    plan.kept.insert(up.name.clone(), u.clone());
                }
                Some(u) => {
                    plan.report.changed.push(up.name.clone());
                    plan.starts.push(up.clone());
                    plan.old.insert(up.name.clone(), u.clone());
                }
            }
        }
        for u in running.iter().filter(|u| !next.upstreams.iter().any(|c| c.name == u.name())) {
            plan.report.removed.push(u.name().to_owned());
            plan.old.insert(u.name().to_owned(), u.clone());
        }
        plan
    }
}

impl crate::admin::ReloadTrigger for Reloader {
    fn reload(&self) -> futures_util::future::BoxFuture<'_, Result<serde_json::Value, Vec<String>>> {
        Box::pin(async move {
            match self.reload_file().await {
                Ok(report) => Ok(serde_json::to_value(report).unwrap_or(serde_json::Value::Null)),
                Err(e) => Err(e.problems()),
            }
        })
    }
}
