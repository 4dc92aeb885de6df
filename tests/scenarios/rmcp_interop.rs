//! Interop with the official Rust SDK, rmcp 3.x: an rmcp server as upstream and an rmcp client
//! as downstream, both speaking 2026-07-28 through the proxy.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, DiscoverResult, Implementation, JsonObject, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{RequestContext, RunningService, SubscriptionContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{
    ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient, RoleServer, ServerHandler,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

/// 23 resources in pages of 10, one tool, counted reads, and listens whose updates the
/// test triggers.
#[derive(Clone)]
struct Library {
    reads: Arc<AtomicUsize>,
    updates: tokio::sync::broadcast::Sender<String>,
    /// URIs accepted by the listens currently running their handler.
    listening: Arc<std::sync::Mutex<Vec<Vec<String>>>>,
}

impl Default for Library {
    fn default() -> Self {
        Self { reads: Arc::default(), updates: tokio::sync::broadcast::channel(64).0, listening: Arc::default() }
    }
}

const COUNT: usize = 23;

impl ServerHandler for Library {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_tools()
                .build(),
        )
        .with_server_info(Implementation::new("rmcp-library", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn discover(&self, _ctx: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        let mut r = DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), self.get_info());
        r.ttl_ms = 60_000;
        r.cache_scope = CacheScope::Public;
        Ok(r)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let start: usize = match request.and_then(|p| p.cursor) {
            None => 0,
            Some(c) => c.parse().map_err(|_| ErrorData::invalid_params("bad cursor", None))?,
        };
        let end = (start + 10).min(COUNT);
        let items = (start..end).map(|i| Resource::new(format!("lib://book/{i}"), format!("book {i}"))).collect();
        let mut page =
            ListResourcesResult::with_all_items(items).with_ttl_ms(30_000).with_cache_scope(CacheScope::Public);
        page.next_cursor = (end < COUNT).then(|| end.to_string());
        Ok(page)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let uri = request.uri;
        match uri.strip_prefix("lib://book/").and_then(|n| n.parse::<usize>().ok()).filter(|n| *n < COUNT) {
            Some(n) => {
                Ok(ReadResourceResult::new(vec![ResourceContents::text(format!("the text of book {n}"), uri.clone())])
                    .with_ttl_ms(60_000)
                    .with_cache_scope(CacheScope::Public)
                    .into())
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
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "shout",
            "Upper-cases a message",
            schema.as_object().cloned().unwrap(),
        )])
        .with_ttl_ms(60_000)
        .with_cache_scope(CacheScope::Public))
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut updates = self.updates.subscribe();
        let uris = context.accepted().resource_subscriptions.clone().unwrap_or_default();
        self.listening.lock().unwrap().push(uris.clone());
        let sink = context.sink().clone();
        let outcome = loop {
            tokio::select! {
                _ = context.cancelled() => break Ok(()),
                u = updates.recv() => match u {
                    Ok(uri) if uris.contains(&uri) => {
                        if sink.notify_resource_updated(uri).await.is_err() {
                            break Ok(());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break Ok(()),
                },
            }
        };
        let mut listening = self.listening.lock().unwrap();
        if let Some(i) = listening.iter().position(|u| *u == uris) {
            listening.remove(i);
        }
        outcome
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

/// Serves `Library` with rmcp's Streamable HTTP service on 127.0.0.1:0.
async fn rmcp_upstream(library: Library, cancel: CancellationToken) -> SocketAddr {
    serve_rmcp(library, cancel).await
}

async fn rmcp_client(url: String) -> RunningService<RoleClient, ClientConfig> {
    let transport = StreamableHttpClientTransport::from_uri(url);
    let client = ClientConfig::new(ClientCapabilities::default(), Implementation::new("rmcp-scenario", "0"))
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .expect("rmcp client connects through the proxy");
    // Every call must reach the proxy: the client's own cache would hide it.
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    client
}

#[tokio::test]
async fn rmcp_client_through_the_proxy_to_an_rmcp_server_and_a_sample_server() {
    let cancel = CancellationToken::new();
    let library = Library::default();
    let lib_addr = rmcp_upstream(library.clone(), cancel.clone()).await;
    let notes = sample_http(SampleSpec { page_size: 3, ..SampleSpec::notes() }).await;
    let proxy = Proxy::start(config(vec![
        UpstreamConfig::http("lib", &format!("http://{lib_addr}/mcp")),
        UpstreamConfig::http("notes", &notes.url()),
    ]))
    .await;
    let client = rmcp_client(format!("http://{}/mcp", proxy.app.local_addr())).await;

    // Discover: the proxy's own answer, as the rmcp client parsed it.
    let info = client.peer_info().expect("discovered");
    assert_eq!(info.server_info.as_ref().map(|s| s.name.as_str()), Some("resmux"));
    assert!(info.capabilities.resources.is_some() && info.capabilities.tools.is_some());

    // Every page of both upstreams, through the rmcp client's own pagination.
    let resources = client.list_all_resources().await.expect("list all");
    assert_eq!(resources.len(), COUNT + 7);
    let lib: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).filter(|u| u.starts_with("lib+")).collect();
    assert_eq!(lib.len(), COUNT);
    assert_eq!(lib[22], "lib+lib://book/22");

    // Read through both namespaces.
    let read = client.read_resource(ReadResourceRequestParams::new("lib+lib://book/7")).await.expect("read");
    match &read.contents[0] {
        ResourceContents::TextResourceContents { uri, text, .. } => {
            assert_eq!(uri, "lib+lib://book/7");
            assert_eq!(text, "the text of book 7");
        }
        other => panic!("unexpected contents {other:?}"),
    }
    assert_eq!(library.reads.load(Ordering::SeqCst), 1);
    let read = client.read_resource(ReadResourceRequestParams::new("notes+notes://ideas")).await.expect("read");
    assert_eq!(read.contents.len(), 1);

    // Not found: the rmcp upstream's error comes back as -32602 with the proxy's URI.
    let err = client.read_resource(ReadResourceRequestParams::new("lib+lib://book/99")).await.unwrap_err();
    match err {
        rmcp::ServiceError::McpError(e) => {
            assert_eq!(e.code.0, -32602);
            assert_eq!(e.data.unwrap()["uri"], "lib+lib://book/99");
        }
        other => panic!("expected an MCP error, got {other:?}"),
    }

    // Tools of both upstreams, prefixed, callable.
    let tools = client.list_all_tools().await.expect("tools");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"lib__shout") && names.contains(&"notes__echo"), "{names:?}");
    let args = json!({"message": "quiet"}).as_object().cloned().unwrap();
    let out = client.call_tool(CallToolRequestParams::new("lib__shout").with_arguments(args)).await.expect("call");
    assert_eq!(out.content[0].as_text().unwrap().text, "QUIET");
    let args = json!({"text": "hi"}).as_object().cloned().unwrap();
    let out = client.call_tool(CallToolRequestParams::new("notes__echo").with_arguments(args)).await.expect("call");
    assert_eq!(out.content[0].as_text().unwrap().text, "hi");

    client.cancel().await.ok();
    cancel.cancel();
}

#[tokio::test]
async fn rmcp_listen_through_the_proxy_to_an_rmcp_upstream() {
    let cancel = CancellationToken::new();
    let library = Library::default();
    let lib_addr = rmcp_upstream(library.clone(), cancel.clone()).await;
    let notes = sample_http(SampleSpec::notes()).await;
    let mut cfg = config(vec![
        UpstreamConfig::http("lib", &format!("http://{lib_addr}/mcp")),
        UpstreamConfig::http("notes", &notes.url()),
    ]);
    cfg.hub.linger = std::time::Duration::from_millis(50);
    let proxy = Proxy::start(cfg).await;
    let client = rmcp_client(format!("http://{}/mcp", proxy.app.local_addr())).await;
    assert!(client.peer_info().unwrap().capabilities.resources.as_ref().unwrap().subscribe == Some(true));

    let filter = SubscriptionFilter::builder()
        .resource_subscription("lib+lib://book/3")
        .resource_subscription("notes+notes://status")
        .build();
    let mut sub = client.listen(filter).await.expect("listen through the proxy");
    let acked = sub.acknowledged().resource_subscriptions.clone().unwrap_or_default();
    assert_eq!(acked.len(), 2, "{acked:?}");

    // The proxy's feed subscribed the rmcp upstream to the upstream-form URI.
    let listening = library.listening.clone();
    eventually("the rmcp upstream listens for lib://book/3", || {
        let found = listening.lock().unwrap().iter().any(|u| u.contains(&"lib://book/3".to_owned()));
        async move { found.then_some(()) }
    })
    .await;
    library.updates.send("lib://book/3".into()).unwrap();
    let n =
        tokio::time::timeout(DEADLINE, sub.next()).await.expect("in time").expect("no error").expect("a notification");
    match n {
        ServerNotification::ResourceUpdatedNotification(u) => assert_eq!(u.params.uri, "lib+lib://book/3"),
        other => panic!("unexpected {other:?}"),
    }
    // And from the sample upstream, through the same listen.
    let sample = notes.sample.clone();
    eventually("the sample upstream listens for notes://status", || {
        let found = sample.active_subscriptions().iter().any(|u| u.contains(&"notes://status".to_owned()));
        async move { found.then_some(()) }
    })
    .await;
    notes.sample.bump();
    let n =
        tokio::time::timeout(DEADLINE, sub.next()).await.expect("in time").expect("no error").expect("a notification");
    match n {
        ServerNotification::ResourceUpdatedNotification(u) => assert_eq!(u.params.uri, "notes+notes://status"),
        other => panic!("unexpected {other:?}"),
    }
    sub.cancel().await.ok();
    client.cancel().await.ok();
    cancel.cancel();
}
