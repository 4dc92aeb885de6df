//! `resmux stdio`: the proxy as a child process serving one client on stdin/stdout, in front of
//! sample HTTP upstreams started by the test. Both eras; cancellation; clean exit at EOF;
//! stdout carries nothing but JSON-RPC.

use std::collections::VecDeque;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::support::*;
use resmux::sample::{SampleHttp, SampleSpec};

/// A `resmux stdio` child and what it wrote so far.
struct StdioProxy {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Messages read but not consumed yet (the proxy interleaves responses and notifications).
    backlog: VecDeque<Value>,
    _dir: tempfile::TempDir,
}

impl StdioProxy {
    /// Starts the proxy with `[[upstream]]` tables `upstreams`.
    async fn start(upstreams: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resmux.toml");
        std::fs::write(&path, format!("[log]\nlevel = \"warn\"\n\n[hub]\nlinger = \"50ms\"\n\n{upstreams}")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_resmux"))
            .args(["stdio", "-c"])
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("resmux stdio starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, stdin, stdout, backlog: VecDeque::new(), _dir: dir }
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Sends a modern request (`_meta` added).
    async fn request(&mut self, id: Value, method: &str, mut params: Value) {
        params["_meta"] = meta();
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
    }

    /// Reads one more line from stdout; every line must be one JSON-RPC message.
    async fn read(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(DEADLINE, self.stdout.next_line())
            .await
            .expect("the proxy writes in time")
            .expect("reading stdout")?;
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        Some(v)
    }

    /// The first message (read before or now) that `matches`.
    async fn next_where(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.backlog.iter().position(&matches) {
            return self.backlog.remove(at).unwrap();
        }
        loop {
            let m = self.read().await.unwrap_or_else(|| panic!("stdout ended while waiting for {what}"));
            if matches(&m) {
                return m;
            }
            self.backlog.push_back(m);
        }
    }

    /// The response to request `id`.
    async fn response(&mut self, id: Value) -> Value {
        let what = format!("the response to {id}");
        self.next_where(&what, |m| m["id"] == id && (m.get("result").is_some() || m.get("error").is_some())).await
    }

    async fn result(&mut self, id: Value) -> Value {
        let m = self.response(id).await;
        assert!(m.get("result").is_some(), "expected a result, got {m}");
        m["result"].clone()
    }

    /// Closes stdin; returns everything written after, and checks the exit status is 0.
    async fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let mut rest: Vec<Value> = self.backlog.drain(..).collect();
        while let Some(m) = self.read().await {
            rest.push(m);
        }
        let status = tokio::time::timeout(DEADLINE, self.child.wait()).await.expect("exits after EOF").unwrap();
        assert!(status.success(), "exit status {status}");
        rest
    }
}

fn upstream_toml(name: &str, up: &SampleHttp) -> String {
    format!("[[upstream]]\nname = \"{name}\"\nurl = \"{}\"\n", up.url())
}

#[tokio::test]
async fn a_modern_client_discovers_lists_reads_calls_and_listens_until_it_cancels() {
    let up = sample_http(SampleSpec::generated("docs", 12)).await;
    let mut p = StdioProxy::start(&upstream_toml("docs", &up)).await;

    p.request(json!(1), "server/discover", json!({})).await;
    let d = p.result(json!(1)).await;
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(d["capabilities"]["resources"]["subscribe"], true);

    // Requests are concurrent: send them all, then collect the answers by id.
    p.request(json!(2), "resources/read", json!({"uri": "docs://item/4"})).await;
    p.request(json!("echo"), "tools/call", json!({"name": "echo", "arguments": {"text": "over stdio"}})).await;
    p.request(json!(3), "resources/list", json!({})).await;
    assert_eq!(p.result(json!(2)).await["contents"][0]["uri"], "docs://item/4");
    assert_eq!(p.result(json!("echo")).await["content"][0]["text"], "over stdio");
    let first = p.result(json!(3)).await;
    let cursor = first["nextCursor"].as_str().expect("a second page").to_owned();
    p.request(json!(4), "resources/list", json!({"cursor": cursor})).await;
    let second = p.result(json!(4)).await;
    assert_eq!(first["resources"].as_array().unwrap().len() + second["resources"].as_array().unwrap().len(), 13);
    assert!(second.get("nextCursor").is_none());

    // Validation as on HTTP, minus the headers.
    p.send(json!({"jsonrpc": "2.0", "id": 5, "method": "resources/list", "params": {}})).await;
    assert_eq!(p.response(json!(5)).await["error"]["code"], -32602);
    p.request(json!(6), "initialize", json!({})).await;
    assert_eq!(p.response(json!(6)).await["error"]["code"], -32601);

    // A listen: the acknowledgment first, then changes tagged with the listen's id.
    p.request(
        json!("L1"),
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": ["docs://status"]}}),
    )
    .await;
    let tagged = |m: &Value| m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1";
    let ack = p.next_where("the ack", tagged).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!(["docs://status"]));
    // The cached read of docs://item/4 is watched by the proxy itself.
    upstream_subscribed(&up, &["docs://item/4", "docs://status"]).await;
    up.sample.bump();
    let update = p.next_where("the update", tagged).await;
    assert_eq!(
        (update["method"].as_str(), update["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some("docs://status"))
    );

    // Cancelling ends it: the upstream interest goes, and no response ever comes.
    p.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L1"}})).await;
    upstream_subscribed(&up, &["docs://item/4"]).await;
    up.sample.bump();
    // A listen still open at EOF ends with its result.
    p.request(json!("L2"), "subscriptions/listen", json!({"notifications": {"resourcesListChanged": true}})).await;
    p.next_where("the second ack", |m| m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L2").await;

    let rest = p.finish().await;
    assert!(rest.iter().all(|m| m["id"] != "L1" && !tagged(m)), "nothing more for the cancelled listen: {rest:?}");
    let end = rest.iter().find(|m| m["id"] == "L2").expect("the open listen ends with a result");
    assert_eq!(end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L2");
}

#[tokio::test]
async fn a_cancelled_request_gets_no_response_and_frees_its_id() {
    // An upstream slower than the test: its requests stay in flight until cancelled.
    let slow = sample_http(SampleSpec { delay: DEADLINE * 3, ..SampleSpec::generated("slow", 1) }).await;
    let mut p = StdioProxy::start(&format!("{}timeout = \"120s\"\n", upstream_toml("slow", &slow))).await;
    p.request(json!("c"), "tools/call", json!({"name": "echo", "arguments": {"text": "never"}})).await;
    // The id is in flight: reusing it is refused.
    p.request(json!("c"), "tools/call", json!({"name": "echo", "arguments": {"text": "again"}})).await;
    let dup = p.response(json!("c")).await;
    assert_eq!(dup["error"]["code"], -32600, "{dup}");
    p.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}})).await;
    // Once cancelled the id is free again (this request is answered at once: no such method).
    p.request(json!("c"), "ping", json!({})).await;
    assert_eq!(p.response(json!("c")).await["error"]["code"], -32601);
    let rest = p.finish().await;
    assert!(rest.iter().all(|m| m["id"] != "c"), "no response for the cancelled call: {rest:?}");
}

#[tokio::test]
async fn a_legacy_client_initializes_subscribes_and_gets_unsolicited_updates() {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut p = StdioProxy::start(&upstream_toml("docs", &up)).await;

    p.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "0"}}}))
        .await;
    let init = p.result(json!(0)).await;
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(init["capabilities"]["resources"]["subscribe"], true);
    assert_eq!(init["serverInfo"]["name"], "resmux");
    p.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;

    p.send(json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"})).await;
    assert!(p.result(json!(1)).await["resources"].as_array().unwrap().len() >= 3);
    p.send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await;
    assert_eq!(p.result(json!(2)).await, json!({}));
    p.send(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "docs://nope"}})).await;
    assert_eq!(p.response(json!(3)).await["error"]["code"], -32002);

    p.send(json!({"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe", "params": {"uri": "docs://status"}}))
        .await;
    assert_eq!(p.result(json!(4)).await, json!({}));
    upstream_subscribed(&up, &["docs://status"]).await;
    up.sample.bump();
    let update = p.next_where("the update", |m| m["method"] == "notifications/resources/updated").await;
    assert_eq!(
        update,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "docs://status"}})
    );
    up.sample.change_list();
    p.next_where("list_changed", |m| m["method"] == "notifications/resources/list_changed").await;

    // Modern requests are still served on the same connection.
    p.request(json!(5), "resources/read", json!({"uri": "docs://item/1"})).await;
    assert_eq!(p.result(json!(5)).await["contents"][0]["uri"], "docs://item/1");

    p.send(json!({"jsonrpc": "2.0", "id": 6, "method": "resources/unsubscribe", "params": {"uri": "docs://status"}}))
        .await;
    assert_eq!(p.result(json!(6)).await, json!({}));
    p.finish().await;
    // The process is gone, and with it its upstream listens.
    eventually("no upstream listen left", || {
        let left = up.sample.listens_open();
        async move { (left == 0).then_some(()) }
    })
    .await;
}
