//! Shared scenario plumbing: sample upstreams, a proxy built from a config, and a small MCP
//! client that shows every header and status.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use resmux::app::App;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{Sample, SampleHttp, SampleSpec};

/// Upper bound for any wait in these tests.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Starts a sample HTTP upstream.
pub async fn sample_http(spec: SampleSpec) -> SampleHttp {
    SampleHttp::start(Sample::new(spec), "127.0.0.1:0".parse().unwrap()).await.expect("bind sample")
}

/// A config listening on an ephemeral loopback port.
pub fn config(upstreams: Vec<UpstreamConfig>) -> Config {
    let mut c = Config::default();
    c.listen.addr = "127.0.0.1:0".parse().unwrap();
    c.upstreams = upstreams;
    c
}

/// A started proxy plus a client for it.
pub struct Proxy {
    pub app: App,
    pub client: McpClient,
}

impl Proxy {
    pub async fn start(config: Config) -> Self {
        let app = App::start(config).await.expect("proxy starts");
        let client = McpClient::new(&format!("http://{}/mcp", app.local_addr()));
        Self { app, client }
    }
}

/// One HTTP exchange as seen on the wire.
#[derive(Debug)]
pub struct Exchange {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Exchange {
    /// The body as JSON (panics with the body text when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// `result`, panicking with the whole message when there is none.
    pub fn result(&self) -> Value {
        let v = self.json();
        assert!(v.get("result").is_some(), "expected a result, got {v}");
        v["result"].clone()
    }

    /// `error.code`.
    pub fn error_code(&self) -> i64 {
        let v = self.json();
        v["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error, got {v}"))
    }

    /// The `resmux-cache` header.
    pub fn cache(&self) -> &str {
        self.header("resmux-cache").unwrap_or("")
    }

    /// `result.contents[0].text` of a read.
    pub fn text(&self) -> String {
        self.result()["contents"][0]["text"].as_str().expect("text contents").to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A deliberately plain MCP 2026-07-28 client: it builds exactly the headers and `_meta` a
/// conforming client sends, and lets tests break them.
#[derive(Clone)]
pub struct McpClient {
    url: String,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Sent as `Authorization: Bearer {principal}` and as `clientInfo.name`, when set.
    principal: Option<String>,
}

/// The `_meta` of a conforming request.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "scenario", "version": "0"}
    })
}

impl McpClient {
    pub fn new(url: &str) -> Self {
        Self::with_tls(url, resmux::tls::client_config(Default::default()).expect("default TLS configuration"))
    }

    /// A client that speaks https with `tls` (and plain http as before).
    pub fn with_tls(url: &str, tls: rustls::ClientConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let https =
            HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(connector);
        Self { url: url.to_owned(), http: Client::builder(TokioExecutor::new()).build(https), principal: None }
    }

    /// The same client, authenticating as `name` (which it also gives as its clientInfo name).
    pub fn as_principal(&self, name: &str) -> Self {
        Self { principal: Some(name.to_owned()), ..self.clone() }
    }

    /// Sends a conforming request: `params` gets `_meta`, headers mirror the body.
    pub async fn request(&self, method: &str, params: Value) -> Exchange {
        self.request_declaring(method, params, json!({})).await
    }

    /// [`McpClient::request`] from a client that declares `capabilities`.
    pub async fn request_declaring(&self, method: &str, mut params: Value, capabilities: Value) -> Exchange {
        params["_meta"] = meta();
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities;
        if let Some(p) = &self.principal {
            params["_meta"]["io.modelcontextprotocol/clientInfo"]["name"] = json!(p);
        }
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str().map(str::to_owned),
            "resources/read" => params["uri"].as_str().map(str::to_owned),
            _ => None,
        };
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut headers = vec![("mcp-protocol-version", "2026-07-28".to_owned()), ("mcp-method", method.to_owned())];
        if let Some(n) = name {
            headers.push(("mcp-name", resmux::mcp::header_value::encode(&n)));
        }
        self.raw("POST", &headers, body.to_string().into_bytes()).await
    }

    /// Sends anything: the given headers (plus Content-Type and Accept) and body bytes.
    pub async fn raw(&self, method: &str, headers: &[(&str, String)], body: Vec<u8>) -> Exchange {
        let mut req = Request::builder()
            .method(method)
            .uri(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(p) = &self.principal {
            req = req.header("authorization", format!("Bearer {p}"));
        }
        let resp = tokio::time::timeout(DEADLINE, self.http.request(req.body(Full::new(Bytes::from(body))).unwrap()))
            .await
            .expect("proxy answers in time")
            .expect("HTTP exchange");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Exchange { status, headers, body }
    }

    /// Follows `nextCursor` from the first page to the last; returns every item of `key`.
    pub async fn list_all(&self, method: &str, key: &str) -> (Vec<Value>, usize) {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let result = self.request(method, params).await.result();
            pages += 1;
            assert!(pages < 1000, "pagination does not end");
            items.extend(result[key].as_array().expect("items array").iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_owned()),
                None => return (items, pages),
            }
        }
    }
}

/// Polls `check` until it returns `Some`, or panics after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An open listen stream as a client sees it: SSE messages parsed as JSON.
pub struct Listening {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: hyper::body::Incoming,
    decoder: resmux::upstream::sse::SseDecoder,
}

impl Listening {
    /// Reads an SSE response (a listen, or a legacy GET stream).
    pub fn from_response(resp: http::Response<hyper::body::Incoming>) -> Self {
        let (status, headers) = (resp.status(), resp.headers().clone());
        Self { status, headers, body: resp.into_body(), decoder: resmux::upstream::sse::SseDecoder::new(1 << 20) }
    }

    /// Whether the server ends the stream within [`DEADLINE`].
    pub async fn ends(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while let Ok(frame) = tokio::time::timeout_at(deadline, self.body.frame()).await {
            match frame {
                None | Some(Err(_)) => return true,
                Some(Ok(_)) => {}
            }
        }
        false
    }

    /// The next message, or `None` if none arrives within `wait` (or the stream ended).
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(event) = self.decoder.next_event().expect("event size") {
                return Some(serde_json::from_str(&event.data).expect("SSE data is JSON"));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame()).await.ok()??;
            if let Ok(data) = frame.expect("stream frame").into_data() {
                self.decoder.push(&data);
            }
        }
    }

    /// The next message; panics if none arrives within [`DEADLINE`].
    pub async fn next(&mut self) -> Value {
        self.next_within(DEADLINE).await.expect("a message on the listen stream")
    }

    /// The next message that is not in `skip` (by method), e.g. skipping list changes.
    pub async fn next_method(&mut self, method: &str) -> Value {
        loop {
            let m = self.next().await;
            if m["method"] == method {
                return m;
            }
        }
    }
}

impl McpClient {
    /// Opens `subscriptions/listen` with request id `id`; an answer that is not a stream
    /// comes back as the `Err` exchange.
    pub async fn listen(&self, id: Value, notifications: Value) -> Result<Listening, Exchange> {
        let mut m = meta();
        if let Some(p) = &self.principal {
            m["io.modelcontextprotocol/clientInfo"]["name"] = json!(p);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                          "params": {"notifications": notifications, "_meta": m}});
        let mut req = Request::builder()
            .method("POST")
            .uri(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen");
        if let Some(p) = &self.principal {
            req = req.header("authorization", format!("Bearer {p}"));
        }
        let resp = tokio::time::timeout(
            DEADLINE,
            self.http.request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap()),
        )
        .await
        .expect("proxy answers in time")
        .expect("HTTP exchange");
        let status = resp.status();
        let headers = resp.headers().clone();
        let sse = headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if !sse {
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            return Err(Exchange { status, headers, body });
        }
        Ok(Listening::from_response(resp))
    }
}

/// Waits until the proxy's `server/discover` shows resources: its upstreams are discovered.
pub async fn discovered(client: &McpClient) {
    eventually("upstreams discovered", || {
        let client = client.clone();
        async move {
            client.request("server/discover", json!({})).await.result()["capabilities"]["resources"]
                .as_object()
                .map(|_| ())
        }
    })
    .await;
}

/// Waits until the upstream's open listens are exactly `want` (URI lists, sorted).
pub async fn upstream_listens(up: &SampleHttp, want: Vec<Vec<&str>>) {
    let want: Vec<Vec<String>> = want.into_iter().map(|v| v.into_iter().map(str::to_owned).collect()).collect();
    eventually(&format!("upstream listens == {want:?}"), || {
        let got = up.sample.active_subscriptions();
        let want = want.clone();
        async move { (got == want).then_some(()) }
    })
    .await;
}

/// Waits until the upstream holds exactly one listen, for exactly `uris`.
pub async fn upstream_subscribed(up: &SampleHttp, uris: &[&str]) {
    upstream_listens(up, vec![uris.to_vec()]).await;
}

/// Hex SHA-256 of `key`, as `[[auth.api_key]] sha256` wants it.
pub fn sha256_hex(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Turns on API-key authentication with one key per name, the key being the name itself (so
/// `client.as_principal(name)` authenticates as `name`).
pub fn api_keys(c: &mut Config, names: &[&str]) {
    c.auth.mode = resmux::config::AuthModes::One(resmux::config::AuthMode::ApiKey);
    c.auth.api_key = names
        .iter()
        .map(|n| resmux::config::ApiKeyConfig {
            principal: n.to_string(),
            sha256: sha256_hex(n),
            groups: Vec::new(),
            scopes: Vec::new(),
        })
        .collect();
}

// A file of its own, included here so that every binary that includes this file (the
// scenarios and `tests/otel.rs`) gets it too.
#[path = "support_process.rs"]
mod process;
#[allow(unused_imports, reason = "tests/otel.rs includes this file and uses none of it")]
pub use process::*;
