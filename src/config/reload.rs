//! `[reload]`: applying a changed config file without a restart.

use std::time::Duration;

use serde::Deserialize;

/// How the proxy reloads its configuration (on SIGHUP, `POST /admin/reload`, `resmux
/// reload`, and a change to the file when `watch` is on). Only `[[upstream]]` sections are
/// applied; a change to any other section is refused until a restart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReloadConfig {
    /// Reload when the config file's contents change. Default true.
    pub watch: bool,
    /// How often the file is checked when `watch` is on; a change is applied once the file
    /// has been stable for one more interval (an editor's partial write is not loaded).
    /// Default 2 s.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Most upstreams running at once, counting the ones being replaced or drained: the
    /// bound of the per-upstream tables (cache figures, epochs, feeds). A reload that would
    /// need more is refused. Default 64.
    pub max_upstreams: usize,
    /// How long a new or replacing upstream gets to be discovered (and, replacing one that
    /// listeners listen to, to open its upstream listen) before requests are routed to it.
    /// Past it the swap happens anyway and the report says which upstreams were not ready.
    /// Default 5 s.
    #[serde(with = "humantime_serde")]
    pub warmup_timeout: Duration,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        Self {
            watch: true,
            poll_interval: Duration::from_secs(2),
            max_upstreams: 64,
            warmup_timeout: Duration::from_secs(5),
        }
    }
}
