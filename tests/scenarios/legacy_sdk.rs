//! A real legacy client: the official TypeScript SDK 1.x (a 2025-11-25 client) in front of the
//! proxy, which fronts modern sample upstreams. It connects, lists every page, reads,
//! subscribes and receives an update, re-reads fresh content, and sees the legacy not-found.
//!
//! Needs Node and the pinned packages: `npm ci --prefix tests/node`. Without them this test
//! fails (it never skips silently).

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Fails with the fix when Node or the pinned SDK is missing.
fn require_node() {
    let hint = "run `npm ci --prefix tests/node` (needs Node 20+) to install the pinned legacy test peers";
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(node.is_ok_and(|o| o.status.success()), "`node` is not installed or does not run: {hint}");
    let sdk = node_dir().join("node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(sdk.exists(), "{} is missing: {hint}", sdk.display());
}

#[tokio::test]
async fn the_typescript_sdk_1x_connects_lists_reads_subscribes_and_gets_updates() {
    require_node();
    let docs = sample_http(SampleSpec { tick: None, ..SampleSpec::docs() }).await;
    let notes = sample_http(SampleSpec::notes()).await;
    let p = Proxy::start(config(vec![
        UpstreamConfig::http("docs", &docs.url()),
        UpstreamConfig::http("notes", &notes.url()),
    ]))
    .await;
    let url = format!("http://{}/mcp", p.app.local_addr());
    let timeout_ms = DEADLINE.as_millis().to_string();
    let mut child = Command::new("node")
        .arg(node_dir().join("legacy-client.mjs"))
        .args([url.as_str(), "docs+docs://status", timeout_ms.as_str()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(DEADLINE, lines.next_line())
            .await
            .expect("the client reports in time")
            .expect("reading the client's stdout")
            .expect("the client ended early");
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_ne!(event["event"], "error", "the client failed: {event}");
        event
    };

    let connected = next().await;
    assert_eq!(connected["event"], "connected");
    assert_eq!(connected["protocolVersion"], "2025-11-25");
    assert!(connected["sessionId"].as_str().is_some_and(|s| !s.is_empty()), "{connected}");
    assert_eq!(connected["serverInfo"]["name"], "resmux");
    assert_eq!(connected["capabilities"]["resources"]["subscribe"], true);

    // Every page of the merged, namespaced view.
    let listed = next().await;
    assert_eq!(listed["event"], "listed");
    assert!(listed["pages"].as_u64().unwrap() > 1, "{listed}");
    let uris: Vec<&str> = listed["uris"].as_array().unwrap().iter().map(|u| u.as_str().unwrap()).collect();
    for uri in ["docs+docs://status", "docs+docs://faq", "notes+notes://ideas"] {
        assert!(uris.contains(&uri), "{uri} missing from {uris:?}");
    }

    let read = next().await;
    assert_eq!(
        (read["event"].as_str(), read["text"].as_str()),
        (Some("read"), Some("status version 1: all systems nominal"))
    );
    assert_eq!(next().await["event"], "subscribed");

    // The proxy subscribes upstream on the session's behalf; then the resource changes.
    upstream_subscribed(&docs, &["docs://status"]).await;
    docs.sample.bump();
    let updated = next().await;
    assert_eq!(updated["event"], "updated");
    assert_eq!(updated["params"], serde_json::json!({"uri": "docs+docs://status"}), "legacy shape, no subscriptionId");
    // The update also evicted the cached read.
    let reread = next().await;
    assert_eq!(reread["text"], "status version 2: all systems nominal");

    let missing = next().await;
    assert_eq!((missing["event"].as_str(), missing["code"].as_i64()), (Some("missing"), Some(-32002)));
    assert_eq!(next().await["event"], "terminated");
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.expect("the client exits").unwrap();
    assert!(status.success(), "client exit status {status}");
    // DELETE ended the session: its listener is gone. The upstream listen still carries
    // docs://status, now for the proxy's own cached read of it.
    eventually("the session's listener is gone", || {
        let n = p.app.hub().listener_count();
        async move { (n == 0).then_some(()) }
    })
    .await;
    upstream_subscribed(&docs, &["docs://status"]).await;
}
