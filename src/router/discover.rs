//! The proxy's own `server/discover`: what it can really serve given its upstreams.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{Answer, Router};
use crate::mcp;

/// How long after start a `server/discover` waits for upstreams still being discovered;
/// afterwards it answers with what is known at once.
const STARTUP_GRACE: Duration = Duration::from_secs(5);

impl Router {
    pub(super) async fn discover(&self) -> Answer {
        let infos = if self.0.started.elapsed() < STARTUP_GRACE {
            let deadline = tokio::time::Instant::from_std(self.0.started + STARTUP_GRACE);
            futures_util::future::join_all(self.0.upstreams.iter().map(|u| u.wait_info(deadline))).await
        } else {
            self.0.upstreams.iter().map(|u| u.info()).collect()
        };
        let mut caps = Map::new();
        let mut instructions: Vec<String> = self.0.proxy.instructions.iter().cloned().collect();
        for (upstream, info) in self.0.upstreams.iter().zip(&infos) {
            let Some(info) = info else { continue };
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
        let mut result = json!({
            "resultType": "complete",
            "supportedVersions": mcp::SUPPORTED_MODERN,
            "capabilities": caps,
            "_meta": { mcp::META_SERVER_INFO: server_info },
            "ttlMs": ttl,
            "cacheScope": "public",
        });
        if !instructions.is_empty() {
            result["instructions"] = Value::String(instructions.join("\n\n"));
        }
        Answer::result(Bytes::from(serde_json::to_vec(&result).expect("serializable")))
    }
}
