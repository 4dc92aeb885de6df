//! A real modern client: the official TypeScript SDK v2 (`@modelcontextprotocol/client`
//! 2.4.0, a 2026-07-28 client that declares elicitation, sampling and roots as desktop clients
//! do, with its response cache off) in front of the proxy, which fronts a TypeScript SDK v2
//! upstream (`@modelcontextprotocol/server` 2.4.0, tests/node/v2-upstream.mjs) and an rmcp
//! 3.x upstream in one config. The client (tests/node/v2-client.mjs) discovers, walks every
//! page of every list, reads, sees the 2026-07-28 not-found, calls a tool on both upstreams,
//! gets a prompt, completes, listens and receives an update, and answers an elicitation the
//! upstream asks for through MRTR `input_required`. Each step is one JSON line, asserted here.
//!
//! The same client first runs directly against the TypeScript upstream (no proxy), which
//! proves the script and the upstream right by themselves.
//!
//! Needs Node and the pinned packages: `npm ci --prefix tests/node`. Without them this test
//! fails (it never skips silently).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult, Implementation,
    JsonObject, ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

use crate::support::*;
use resmux::config::UpstreamConfig;

fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Fails with the fix when Node or the pinned SDK v2 packages are missing.
fn require_node() {
    let hint = "run `npm ci --prefix tests/node` (needs Node 20+) to install the pinned test peers";
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(node.is_ok_and(|o| o.status.success()), "`node` is not installed or does not run: {hint}");
    for package in ["client", "server"] {
        let manifest = node_dir().join(format!("node_modules/@modelcontextprotocol/{package}/package.json"));
        assert!(manifest.exists(), "{} is missing: {hint}", manifest.display());
    }
}

/// A node script's stdout, one JSON line at a time, each read bounded by [`DEADLINE`].
struct Script {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Script {
    fn spawn(script: &str, args: &[&str]) -> Self {
        let mut child = Command::new("node")
            .arg(node_dir().join(script))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    /// The next line, which must be JSON and not the script's `error` event.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(DEADLINE, self.lines.next_line())
            .await
            .expect("the script reports in time")
            .expect("reading the script's stdout")
            .expect("the script ended early");
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_ne!(event["event"], "error", "the client failed: {event}");
        event
    }

    /// The next event, which must be `name`.
    async fn event(&mut self, name: &str) -> Value {
        let event = self.next().await;
        assert_eq!(event["event"], name, "expected `{name}`, got {event}");
        event
    }

    /// Waits for the script to exit successfully.
    async fn success(mut self) {
        let status = tokio::time::timeout(DEADLINE, self.child.wait()).await.expect("the script exits").unwrap();
        assert!(status.success(), "exit status {status}");
    }
}

/// Starts tests/node/v2-upstream.mjs; returns it and its MCP URL.
async fn ts_upstream() -> (Script, String) {
    let mut up = Script::spawn("v2-upstream.mjs", &[]);
    let listening = up.event("listening").await;
    let url = listening["url"].as_str().expect("url").to_owned();
    (up, url)
}

/// Runs tests/node/v2-client.mjs against `url`; `plan` names the upstreams' prefixes (see
/// the script's header).
fn ts_client(url: &str, mut plan: Value) -> Script {
    plan["timeoutMs"] = json!(DEADLINE.as_millis() as u64);
    Script::spawn("v2-client.mjs", &[url, &plan.to_string()])
}

/// `event[key]` as a list of strings.
fn strings(event: &Value, key: &str) -> Vec<String> {
    let list = event[key].as_array().unwrap_or_else(|| panic!("no `{key}` list in {event}"));
    list.iter().map(|v| v.as_str().expect("a string").to_owned()).collect()
}

/// The next `list` event, which must be for `method`; returns its item names and page count.
async fn listed(client: &mut Script, method: &str) -> (Vec<String>, u64) {
    let list = client.event("list").await;
    assert_eq!(list["method"], method, "{list}");
    (strings(&list, "items"), list["pages"].as_u64().expect("pages"))
}

/// Asserts every step of one client run. `ts` is the TypeScript upstream's prefix ("" when
/// the client talks to it directly); `rs`, when the rmcp upstream is there too, its prefix.
async fn assert_run(client: &mut Script, ts: &str, rs: Option<&str>) {
    let name = |n: &str| if ts.is_empty() { n.to_owned() } else { format!("{ts}__{n}") };
    let uri = |u: &str| if ts.is_empty() { u.to_owned() } else { format!("{ts}+{u}") };

    let discover = client.event("discover").await;
    assert_eq!(discover["era"], "modern", "{discover}");
    assert_eq!(discover["protocolVersion"], "2026-07-28");
    assert!(strings(&discover, "supportedVersions").contains(&"2026-07-28".to_owned()), "{discover}");
    let server = if rs.is_some() { "resmux" } else { "ts-v2-upstream" };
    assert_eq!(discover["serverInfo"]["name"], server, "{discover}");
    let caps = &discover["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], true, "{discover}");
    for cap in ["tools", "prompts", "completions"] {
        assert!(caps[cap].is_object(), "no {cap} capability: {discover}");
    }

    // Every page of every list (the TypeScript upstream pages resources 3 at a time).
    let (resources, pages) = listed(client, "resources/list").await;
    assert!(pages > 1, "one page only: {resources:?}");
    let mut want: Vec<String> = (0..7).map(|i| uri(&format!("ts://doc/{i}"))).collect();
    want.push(uri("ts://status"));
    if let Some(rs) = rs {
        want.extend((0..2).map(|i| format!("{rs}+rs://note/{i}")));
    }
    let mut got = resources.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every resource of every upstream, once");
    let (tools, _) = listed(client, "tools/list").await;
    let mut want = vec![name("echo"), name("ask"), name("touch")];
    want.extend(rs.map(|rs| format!("{rs}__shout")));
    for tool in &want {
        assert!(tools.contains(tool), "{tool} missing from {tools:?}");
    }
    assert_eq!(tools.len(), want.len(), "{tools:?}");
    let (prompts, _) = listed(client, "prompts/list").await;
    assert_eq!(prompts, vec![name("greet")]);
    let (templates, _) = listed(client, "resources/templates/list").await;
    assert_eq!(templates, vec![uri("ts://item/{id}")]);

    let read = client.event("read").await;
    assert_eq!(read["contentUri"], uri("ts://doc/1"), "{read}");
    assert_eq!(read["text"], "the text of doc 1", "{read}");

    // The 2026-07-28 not-found: -32602 with the URI the client asked for.
    let missing = client.event("missing").await;
    assert_eq!(missing["code"], -32602, "{missing}");
    assert_eq!(missing["data"]["uri"], uri("ts://doc/does-not-exist"), "{missing}");

    // A plain tool on each upstream.
    let call = client.event("call").await;
    assert_eq!((call["name"].as_str(), call["text"].as_str()), (Some(name("echo").as_str()), Some("hello")));
    if let Some(rs) = rs {
        let call = client.event("call").await;
        let shout = format!("{rs}__shout");
        assert_eq!((call["name"].as_str(), call["text"].as_str()), (Some(shout.as_str()), Some("QUIET")));
    }

    let prompt = client.event("prompt").await;
    assert_eq!(prompt["text"], "Say hello in rust.", "{prompt}");
    let complete = client.event("complete").await;
    assert_eq!(complete["ref"]["type"], "ref/prompt");
    assert_eq!(strings(&complete, "values"), ["rust", "ruby"]);
    let complete = client.event("complete").await;
    assert_eq!(complete["ref"]["type"], "ref/resource");
    assert_eq!(strings(&complete, "values"), ["alpha", "alder"]);

    // Listen, then the upstream's `touch` changes the resource: the update arrives on the
    // stream, tagged with its subscription, and a re-read sees the new text.
    let status = uri("ts://status");
    let listening = client.event("listening").await;
    assert_eq!(listening["honoredFilter"]["resourceSubscriptions"], json!([status]), "{listening}");
    let updated = client.event("updated").await;
    assert_eq!(updated["uri"], status, "{updated}");
    assert!(!updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_null(), "{updated}");
    let reread = client.event("reread").await;
    assert_eq!(reread["text"], reread["touched"], "the re-read shows the change: {reread}");
    assert!(reread["text"].as_str().is_some_and(|t| t.starts_with("status version ")), "{reread}");

    // MRTR: the upstream's tool asks (input_required), the client's handler answers, the
    // retried call finishes with the answer.
    let elicited = client.event("elicited").await;
    assert_eq!(elicited["text"], "Hello, Ada!", "{elicited}");
    assert_eq!(elicited["asked"], json!(["What is your name?"]), "{elicited}");

    client.event("done").await;
}

#[tokio::test]
async fn the_typescript_v2_client_and_upstream_directly() {
    require_node();
    let (_up, url) = ts_upstream().await;
    let mut client = ts_client(&url, json!({}));
    assert_run(&mut client, "", None).await;
    client.success().await;
}

#[tokio::test]
async fn the_typescript_v2_client_through_the_proxy_to_typescript_v2_and_rmcp_upstreams() {
    require_node();
    let cancel = CancellationToken::new();
    let (_up, ts_url) = ts_upstream().await;
    let rs_addr = rmcp_upstream(cancel.clone()).await;
    let proxy = Proxy::start(config(vec![
        UpstreamConfig::http("ts", &ts_url),
        UpstreamConfig::http("rs", &format!("http://{rs_addr}/mcp")),
    ]))
    .await;
    discovered(&proxy.client).await;
    let url = format!("http://{}/mcp", proxy.app.local_addr());
    let mut client = ts_client(&url, json!({"ts": "ts", "rs": "rs"}));
    assert_run(&mut client, "ts", Some("rs")).await;
    client.success().await;
    cancel.cancel();
}

/// The rmcp upstream: two notes and the tool `shout`.
#[derive(Clone, Default)]
struct Shelf;

impl ServerHandler for Shelf {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_resources().enable_tools().build())
            .with_server_info(Implementation::new("rmcp-shelf", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn discover(&self, _ctx: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        Ok(DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), self.get_info()))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let items = (0..2).map(|i| Resource::new(format!("rs://note/{i}"), format!("note {i}"))).collect();
        Ok(ListResourcesResult::with_all_items(items).with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        match uri.strip_prefix("rs://note/").and_then(|n| n.parse::<usize>().ok()).filter(|n| *n < 2) {
            Some(n) => {
                Ok(ReadResourceResult::new(vec![ResourceContents::text(format!("note {n}"), uri.clone())]).into())
            }
            None => Err(ErrorData::resource_not_found("Resource not found", Some(json!({"uri": uri})))),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]});
        let shout = Tool::new("shout", "Upper-cases a message", schema.as_object().cloned().unwrap());
        Ok(ListToolsResult::with_all_items(vec![shout]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args: JsonObject = request.arguments.unwrap_or_default();
        let msg = args.get("message").and_then(|v| v.as_str()).unwrap_or_default().to_uppercase();
        Ok(CallToolResult::success(vec![ContentBlock::text(msg)]).into())
    }
}

/// Serves [`Shelf`] with rmcp's Streamable HTTP service on 127.0.0.1:0.
async fn rmcp_upstream(cancel: CancellationToken) -> SocketAddr {
    serve_rmcp(Shelf, cancel).await
}
