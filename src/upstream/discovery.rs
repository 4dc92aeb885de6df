//! Learning what an upstream offers: `server/discover` at start, retried with backoff until it
//! answers, and again after every restart of a stdio process.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Upstream;
use super::backoff::Backoff;
use crate::jsonrpc::Malformed;
use crate::mcp;

/// The parts of an upstream's `DiscoverResult` the proxy uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamInfo {
    /// `ServerCapabilities` as sent.
    pub capabilities: Value,
    /// `_meta["io.modelcontextprotocol/serverInfo"]`, if sent.
    pub server_info: Option<Value>,
    /// `instructions`, if sent.
    pub instructions: Option<String>,
    /// `supportedVersions`.
    pub supported_versions: Vec<String>,
}

impl UpstreamInfo {
    /// Parses a `DiscoverResult`.
    pub fn from_result(result: &[u8]) -> Result<Self, Malformed> {
        let v: Value = serde_json::from_slice(result)?;
        let capabilities = v.get("capabilities").cloned().unwrap_or_else(|| Value::Object(Default::default()));
        if !capabilities.is_object() {
            return Err(Malformed::Capabilities);
        }
        Ok(Self {
            capabilities,
            server_info: v.pointer("/_meta").and_then(|m| m.get(mcp::META_SERVER_INFO)).cloned(),
            instructions: v.get("instructions").and_then(Value::as_str).map(str::to_owned),
            supported_versions: v
                .get("supportedVersions")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default(),
        })
    }

    /// Whether the capability object `name` (`resources`, `tools`, …) is declared.
    pub fn has(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|c| !c.is_null())
    }

    /// Whether `capabilities[name][flag]` is `true`.
    pub fn flag(&self, name: &str, flag: &str) -> bool {
        self.capabilities.get(name).and_then(|c| c.get(flag)).and_then(Value::as_bool) == Some(true)
    }
}

/// The `params` the proxy sends on its own requests (discovery, probes).
pub fn own_params() -> String {
    format!(
        r#"{{"_meta":{{"{}":"{}","{}":{{}},"{}":{{"name":"resmux","version":"{}"}}}}}}"#,
        mcp::META_PROTOCOL_VERSION,
        mcp::MODERN_VERSION,
        mcp::META_CLIENT_CAPABILITIES,
        mcp::META_CLIENT_INFO,
        env!("CARGO_PKG_VERSION"),
    )
}

/// Establishes `upstream`'s era (and what it offers) until it answers, then again after each
/// restart of a stdio process, until `cancel`.
pub(super) async fn run(upstream: Upstream, cancel: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return,
            r = upstream.establish() => r,
        };
        upstream.mark_probed();
        match outcome {
            Ok(()) => {
                // The process that answered (a restart during the probe shows as a change).
                let generation = upstream.generation();
                if let Some(info) = upstream.info() {
                    tracing::info!(upstream = %upstream.name(), capabilities = %info.capabilities, "upstream discovered");
                }
                backoff.reset();
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = upstream.restarted(generation) => upstream.reset_era(),
                }
            }
            Err(reason) => {
                tracing::warn!(upstream = %upstream.name(), %reason, "upstream discovery failed; will retry");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        }
    }
}
