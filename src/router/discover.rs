//! The proxy's own `server/discover`: what it can really serve given its upstreams.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{Answer, Call, Routing};
use crate::mcp;

/// How long after start a `server/discover` waits for upstreams still being discovered;
/// afterwards it answers with what is known at once.
const STARTUP_GRACE: Duration = Duration::from_secs(5);

impl Routing {
    /// Upstreams the caller cannot reach at all are left out; when any upstream has rules the
    /// answer depends on the caller and is marked private.
    pub(super) async fn discover(&self, call: &Call<'_>) -> Answer {
        let infos = if self.0.started.elapsed() < STARTUP_GRACE {
            let deadline = tokio::time::Instant::from_std(self.0.started + STARTUP_GRACE);
            futures_util::future::join_all(self.0.upstreams.iter().map(|u| u.wait_info(deadline))).await
        } else {
            self.0.upstreams.iter().map(|u| u.info()).collect()
        };
        let mut caps = Map::new();
        let mut instructions: Vec<String> = self.0.proxy.instructions.iter().cloned().collect();
        for (index, (upstream, info)) in self.0.upstreams.iter().zip(&infos).enumerate() {
            let Some(info) = info else { continue };
            if !self.reaches(call, index) {
                continue;
            }
            for cap in ["resources", "tools", "prompts", "completions"] {
                if info.has(cap) {
                    caps.entry(cap).or_insert_with(|| json!({}));
                }
            }
            // The hub serves listens for what any upstream can announce.
            for (cap, flag) in [
                ("resources", "subscribe"),
                ("resources", "listChanged"),
                ("tools", "listChanged"),
                ("prompts", "listChanged"),
            ] {
                if info.flag(cap, flag) {
                    caps[cap][flag] = json!(true);
                }
            }
            if let Some(text) = &info.instructions {
                instructions.push(format!("[{}] {text}", upstream.name()));
            }
        }
        // Until every upstream is known the answer may change soon: do not let it be cached.
        let complete = infos.iter().all(Option::is_some);
        let ttl = if complete { self.0.proxy.discover_ttl.as_millis() as u64 } else { 0 };
        let server_info: Value = serde_json::from_str(&self.0.server_info).expect("valid JSON");
        let personal = (0..self.0.upstreams.len()).any(|i| self.restricted(i));
        let mut result = json!({
            "resultType": "complete",
            "supportedVersions": mcp::SUPPORTED_MODERN,
            "capabilities": caps,
            "_meta": { mcp::META_SERVER_INFO: server_info },
            "ttlMs": ttl,
            "cacheScope": if personal { "private" } else { "public" },
        });
        if !instructions.is_empty() {
            result["instructions"] = Value::String(instructions.join("\n\n"));
        }
        Answer::result(Bytes::from(serde_json::to_vec(&result).expect("serializable")))
    }
}
