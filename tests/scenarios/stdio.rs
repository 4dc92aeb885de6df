//! stdio upstreams: supervised, restarted after a crash, and served again.

use serde_json::json;

use crate::support::*;
use resmux::config::UpstreamConfig;

fn notes_command(crashable: bool) -> Vec<String> {
    let mut cmd =
        vec![env!("CARGO_BIN_EXE_resmux").to_owned(), "sample-upstream".into(), "--profile".into(), "notes".into()];
    if crashable {
        cmd.push("--crashable".into());
    }
    cmd
}

#[tokio::test]
async fn a_stdio_upstream_serves_lists_reads_and_tools() {
    let p = Proxy::start(config(vec![UpstreamConfig::stdio("notes", notes_command(false))])).await;
    let (items, _) = p.client.list_all("resources/list", "resources").await;
    assert_eq!(items.len(), 7);
    let r = p.client.request("resources/read", json!({"uri": "notes://ideas"})).await.result();
    assert!(r["contents"][0]["text"].as_str().unwrap().contains("Job templates"));
    let r = p.client.request("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}})).await.result();
    assert_eq!(r["content"][0]["text"], "hi");
}

#[tokio::test]
async fn a_crashed_stdio_upstream_is_restarted_and_serves_again() {
    let mut up = UpstreamConfig::stdio("notes", notes_command(true));
    up.timeout = std::time::Duration::from_secs(5);
    let p = Proxy::start(config(vec![up])).await;
    let r = p.client.request("tools/call", json!({"name": "echo", "arguments": {"text": "before"}})).await.result();
    assert_eq!(r["content"][0]["text"], "before");

    // The crash takes the in-flight call with it: an upstream error, marked as such.
    let ex = p.client.request("tools/call", json!({"name": "crash", "arguments": {}})).await;
    assert_eq!(ex.status, 502);
    assert_eq!(ex.json()["error"]["data"]["side"], "upstream");

    // The supervisor restarts it; requests succeed again.
    let client = p.client.clone();
    eventually("the restarted upstream answers", || {
        let client = client.clone();
        async move {
            let ex = client.request("tools/call", json!({"name": "echo", "arguments": {"text": "after"}})).await;
            (ex.status == 200 && ex.json()["result"]["content"][0]["text"] == "after").then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_stdio_upstream_listen_delivers_its_changes() {
    let mut cmd = notes_command(false);
    cmd.extend(["--tick-ms".to_owned(), "100".to_owned()]);
    let p = Proxy::start(config(vec![UpstreamConfig::stdio("notes", cmd)])).await;
    discovered(&p.client).await;
    let mut l = p.client.listen(json!(5), json!({"resourceSubscriptions": ["notes://status"]})).await.unwrap();
    let ack = l.next().await;
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!(["notes://status"]));
    let update = l.next().await;
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "notes://status");
    assert_eq!(update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 5);
}
