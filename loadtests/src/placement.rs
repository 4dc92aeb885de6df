//! Where the servers under test run. By default each runs in its own process, as it would in
//! production: the proxy as `resmux serve`, the ceiling as `resmux-load serve-ceiling`. Then
//! neither shares a runtime, an allocator or a heap with the load generator, their memory and
//! CPU can be read from `/proc`, and the ceiling is placed exactly like the proxy it bounds.
//! In-process placement (tests, quick checks) runs both on this process's runtime.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// Where the proxy and the ceiling run.
#[derive(Debug, Clone)]
pub enum Placement {
    /// Child processes: the proxy is the `resmux` binary at `resmux`; the ceiling is the
    /// hidden `serve-ceiling` command of the `resmux-load` binary at `ceiling`.
    Processes { resmux: PathBuf, ceiling: PathBuf },
    /// `resmux::app::App` and the ceiling on this process's runtimes.
    InProcess,
}

impl Placement {
    /// Child processes: `resmux` is the given binary or the one beside this executable (both
    /// live in `target/<profile>/`); the ceiling is this executable.
    pub fn processes(resmux: Option<PathBuf>) -> Result<Self> {
        let ceiling = std::env::current_exe().context("locating resmux-load")?;
        let resmux = resmux.unwrap_or_else(|| ceiling.with_file_name("resmux"));
        Ok(Placement::Processes { resmux, ceiling })
    }

    /// `child` or `in-process`, for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Placement::Processes { .. } => "child processes",
            Placement::InProcess => "in-process",
        }
    }
}

/// `wrapper… exe` as a command to which the caller adds `exe`'s own arguments (`wrapper`
/// empty: `exe` alone), e.g. a server run under `valgrind --tool=callgrind`.
pub(crate) fn wrapped(wrapper: &[std::ffi::OsString], exe: &std::path::Path) -> tokio::process::Command {
    match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = tokio::process::Command::new(program);
            c.args(args).arg(exe);
            c
        }
        None => tokio::process::Command::new(exe),
    }
}
