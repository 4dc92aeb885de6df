//! What makes `serve` reload: SIGHUP, and (with `[reload] watch`) a change to the config file.
//!
//! The file is polled, not watched through inotify: one read and hash of a small file per
//! `poll_interval` costs nothing, sees every way a file can be replaced (an editor's rename,
//! a Kubernetes ConfigMap's symlink swap, a bind mount), and needs no extra dependency. A
//! change is applied once the contents have been stable for one more interval, so a partial
//! write is never loaded; contents that were refused are not retried until they change again.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Reloader;

/// Largest config file the watch reads (the same file `serve` loaded).
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A digest of the file's contents, `None` when it cannot be read (mid-replacement, say).
fn digest(path: &Path) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > MAX_CONFIG_BYTES {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    Some(BuildHasherDefault::<DefaultHasher>::default().hash_one(&bytes))
}

impl Reloader {
    /// Reloads from `path` on SIGHUP (Unix) and, when `watch` is set, when its contents
    /// change (checked every `poll`), until `cancel`.
    pub fn start_triggers(
        &self,
        path: &Path,
        watch: bool,
        poll: Duration,
        cancel: &CancellationToken,
        tracker: &TaskTracker,
    ) {
        self.set_path(path);
        #[cfg(unix)]
        tracker.spawn(on_sighup(self.clone(), cancel.clone()));
        if watch {
            tracker.spawn(watch_file(self.clone(), path.to_owned(), poll, cancel.clone()));
        }
    }
}

#[cfg(unix)]
async fn on_sighup(reloader: Reloader, cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot handle SIGHUP; reload through the admin listener instead");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            got = hup.recv() => if got.is_none() { return },
        }
        tracing::info!("SIGHUP: reloading the config file");
        // The outcome is logged and counted by the reload itself.
        let _ = reloader.reload_file().await;
    }
}

async fn watch_file(reloader: Reloader, path: PathBuf, poll: Duration, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The contents last applied or refused, and a change waiting to settle.
    let mut seen = digest(&path);
    let mut pending: Option<u64> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(now) = digest(&path) else { continue };
        if Some(now) == seen {
            pending = None;
            continue;
        }
        if pending != Some(now) {
            // Changed since the last look: wait one interval for it to settle.
            pending = Some(now);
            continue;
        }
        pending = None;
        seen = Some(now);
        tracing::info!(path = %path.display(), "config file changed: reloading");
        let _ = reloader.reload_file().await;
    }
}
