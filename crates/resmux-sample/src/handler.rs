//! The sample server's method handlers, independent of transport.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

mod inspect;
mod interop;
mod listen;
mod prompts;
mod web;

pub use interop::APPROVE_STATE;
use interop::{interop_call, interop_tools};
pub use listen::{Listen, ListenStep, SampleEvent, ack_notification};

use super::content::{Doc, SampleSpec};
use resmux_proto::jsonrpc::{RawObject, RpcError, code};
use resmux_proto::mcp::{self, method as m};

/// A sample server's state. Cheap to clone.
#[derive(Clone)]
pub struct Sample(Arc<Inner>);

struct Inner {
    spec: SampleSpec,
    docs: Vec<Doc>,
    by_uri: HashMap<String, usize>,
    status_uri: String,
    /// Version of the changing `status` resource.
    status: AtomicU64,
    /// Requests received, per method.
    counts: Mutex<HashMap<String, u64>>,
    /// Events for listen streams. Bounded: a listen stream that lags loses the oldest
    /// (tests and the demo stay far below the capacity).
    updates: broadcast::Sender<SampleEvent>,
    /// The URIs of each open listen stream, by stream number.
    active: Mutex<HashMap<u64, Vec<String>>>,
    /// Fetches of the private resources (`me`, `secret`), numbering their contents.
    private_reads: AtomicU64,
    /// Legacy-mode sessions.
    sessions: super::sessions::SampleSessions,
    /// Listen streams open now, and opened in total.
    listens_open: AtomicU64,
    listens_total: AtomicU64,
    /// Requests recorded over HTTP, and injected failures.
    recorder: super::record::Recorder,
    /// When the last delayed request was answered (see [`Sample::delay_ended_ns`]).
    delay_ended_ns: AtomicU64,
}

/// A handler's answer.
pub enum Handled {
    Result(Value),
    Error(RpcError),
    /// Start a listen stream: send `ack`, then updates for `uris`.
    Listen(Listen),
}

impl Sample {
    pub fn new(spec: SampleSpec) -> Self {
        let docs = spec.docs_list();
        let by_uri = docs.iter().enumerate().map(|(i, d)| (spec.uri(&d.path), i)).collect();
        let status_uri = spec.uri("status");
        Self(Arc::new(Inner {
            docs,
            by_uri,
            status_uri,
            spec,
            status: AtomicU64::new(1),
            counts: Mutex::new(HashMap::new()),
            updates: broadcast::channel(16 * 1024).0,
            active: Mutex::new(HashMap::new()),
            private_reads: AtomicU64::new(0),
            sessions: Default::default(),
            listens_open: AtomicU64::new(0),
            listens_total: AtomicU64::new(0),
            recorder: Default::default(),
            delay_ended_ns: AtomicU64::new(0),
        }))
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &SampleSpec {
        &self.0.spec
    }

    pub(super) fn sessions(&self) -> &super::sessions::SampleSessions {
        &self.0.sessions
    }

    pub(super) fn recorder(&self) -> &super::record::Recorder {
        &self.0.recorder
    }

    /// Requests received for `method`.
    pub fn count(&self, method: &str) -> u64 {
        self.0.counts.lock().expect("counts").get(method).copied().unwrap_or(0)
    }

    /// When (ns since the Unix epoch) the last delayed request finished its delay and was
    /// answered; 0 before any. Lets a test order its own observations after an answer that
    /// the upstream gave, without racing the client's scheduling.
    pub fn delay_ended_ns(&self) -> u64 {
        self.0.delay_ended_ns.load(Ordering::SeqCst)
    }

    /// Requests received, all methods.
    pub fn total(&self) -> u64 {
        self.0.counts.lock().expect("counts").values().sum()
    }

    /// The URI of the resource that changes.
    pub fn status_uri(&self) -> &str {
        &self.0.status_uri
    }

    /// Changes `status` periodically when the spec asks for it, until `cancel`.
    pub fn start_ticking(&self, cancel: CancellationToken) {
        let Some(period) = self.0.spec.tick else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => me.bump(),
                }
            }
        });
    }

    /// Counts a request received for `method`.
    pub(super) fn note(&self, method: &str) {
        *self.0.counts.lock().expect("counts").entry(method.to_owned()).or_default() += 1;
    }

    /// Serves one request.
    pub async fn handle(&self, method: &str, params: &RawObject<'_>) -> Handled {
        self.note(method);
        if !self.0.spec.delay.is_zero() {
            tokio::time::sleep(self.0.spec.delay).await;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            self.0.delay_ended_ns.store(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX), Ordering::SeqCst);
        }
        match method {
            m::DISCOVER => Handled::Result(self.discover()),
            m::RESOURCES_LIST => self.page(params, "resources", self.resources()),
            m::RESOURCES_TEMPLATES_LIST => self.page(params, "resourceTemplates", self.templates()),
            m::RESOURCES_READ => self.read(params),
            m::TOOLS_LIST => self.page(params, "tools", self.tools()),
            m::TOOLS_CALL => self.call(params),
            m::PROMPTS_LIST => self.page(params, "prompts", self.prompts()),
            m::PROMPTS_GET => self.prompt(params),
            m::COMPLETE => self.complete(params),
            m::LISTEN => self.listen(params),
            other => Handled::Error(RpcError::new(code::METHOD_NOT_FOUND, format!("Method not found: {other}"))),
        }
    }

    fn finish(&self, result: Value, cacheable: bool) -> Value {
        self.finish_scoped(result, cacheable, self.0.spec.public)
    }

    fn finish_scoped(&self, mut result: Value, cacheable: bool, public: bool) -> Value {
        let obj = result.as_object_mut().expect("results are objects");
        obj.insert("resultType".into(), json!("complete"));
        obj.insert("_meta".into(), json!({ mcp::META_SERVER_INFO: { "name": self.0.spec.name, "version": "1.0.0" } }));
        if cacheable {
            obj.insert("ttlMs".into(), json!(self.0.spec.ttl_ms));
            obj.insert("cacheScope".into(), json!(if public { "public" } else { "private" }));
        }
        result
    }

    fn discover(&self) -> Value {
        self.finish(
            json!({
                "supportedVersions": [mcp::MODERN_VERSION],
                "capabilities": {
                    "resources": {"subscribe": true, "listChanged": true},
                    "tools": {}, "prompts": {}, "completions": {}
                },
                "instructions": format!("Sample server `{}`: read its resources, call `echo` or `add`.", self.0.spec.name),
            }),
            true,
        )
    }

    fn resources(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .0
            .docs
            .iter()
            .map(|d| {
                json!({"uri": self.0.spec.uri(&d.path), "name": d.path, "title": d.title,
                       "mimeType": d.mime, "size": d.text.len()})
            })
            .collect();
        out.push(json!({"uri": self.0.status_uri, "name": "status", "title": "Live status",
                        "description": "Changes periodically", "mimeType": "text/plain"}));
        out.extend(web::resources(&self.0.spec));
        out
    }

    fn templates(&self) -> Vec<Value> {
        let own = json!({"uriTemplate": format!("{}://{{path}}", self.0.spec.scheme), "name": "by-path",
                    "title": "Any document by path", "mimeType": "text/plain"});
        std::iter::once(own).chain(web::template(&self.0.spec)).collect()
    }

    fn tools(&self) -> Vec<Value> {
        let mut tools = vec![
            json!({"name": "echo", "description": "Returns its text", "inputSchema":
                   {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}),
            json!({"name": "add", "description": "Adds two integers", "inputSchema":
                   {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}),
            json!({"name": "link", "description": "Links and embeds the first document", "inputSchema":
                   {"type": "object", "properties": {}}}),
        ];
        if self.0.spec.interop {
            tools.extend(interop_tools());
        }
        if self.0.spec.crashable {
            tools.push(
                json!({"name": "crash", "description": "Ends the server process", "inputSchema": {"type": "object"}}),
            );
        }
        tools
    }

    fn page(&self, params: &RawObject<'_>, key: &str, items: Vec<Value>) -> Handled {
        let start = match params.get_str("cursor") {
            None => 0,
            Some(c) => match c.parse::<usize>() {
                Ok(n) if n <= items.len() => n,
                _ => return Handled::Error(RpcError::new(code::INVALID_PARAMS, "Invalid cursor")),
            },
        };
        let end = (start + self.0.spec.page_size.max(1)).min(items.len());
        let mut result = json!({ key: items[start..end] });
        if end < items.len() {
            result["nextCursor"] = json!(end.to_string());
        }
        Handled::Result(self.finish(result, true))
    }

    fn text_of(&self, uri: &str) -> Option<(String, &'static str)> {
        if uri == self.0.status_uri {
            let v = self.0.status.load(Ordering::Relaxed);
            return Some((format!("status version {v}: all systems nominal"), "text/plain"));
        }
        let doc = self.0.by_uri.get(uri).map(|&i| (self.0.docs[i].text.clone(), self.0.docs[i].mime));
        doc.or_else(|| web::text(&self.0.spec, uri))
    }

    fn read(&self, params: &RawObject<'_>) -> Handled {
        let Some(uri) = params.get_str("uri") else {
            return Handled::Error(RpcError::new(code::INVALID_PARAMS, "missing uri"));
        };
        if uri == self.0.spec.uri("me") {
            // Different on every fetch: who asked (as the client named itself) and a fetch
            // number, so tests can tell whose content a response carries. Private unless the
            // spec has it (wrongly) called public.
            let n = self.0.private_reads.fetch_add(1, Ordering::Relaxed) + 1;
            let text = format!("read {n} for {}", client_name(params));
            return Handled::Result(self.finish_scoped(
                json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}),
                true,
                self.0.spec.me_public,
            ));
        }
        if uri == self.0.spec.uri("secret") {
            return self.read_secret(&uri, params);
        }
        match self.text_of(&uri) {
            Some((text, mime)) => {
                Handled::Result(self.finish(json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]}), true))
            }
            None => Handled::Error(not_found(&uri)),
        }
    }

    /// A resource behind a confirmation (MRTR): `input_required` until the retry carries an
    /// accepted `confirm` answer and the echoed `requestState`.
    fn read_secret(&self, uri: &str, params: &RawObject<'_>) -> Handled {
        let answers: Value =
            params.get("inputResponses").and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(Value::Null);
        let state_ok = params.get_str("requestState").as_deref() == Some("confirm-1");
        if state_ok && answers["confirm"]["action"] == "accept" {
            let text = format!("the secret, fetch {}", self.0.private_reads.fetch_add(1, Ordering::Relaxed) + 1);
            return Handled::Result(self.finish_scoped(
                json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}),
                true,
                false,
            ));
        }
        Handled::Result(json!({
            "resultType": "input_required",
            "inputRequests": {"confirm": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "Reveal the secret?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}},
            "requestState": "confirm-1"
        }))
    }

    fn call(&self, params: &RawObject<'_>) -> Handled {
        let args: Value = params.get("arguments").and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(json!({}));
        let result = match params.get_str("name").as_deref() {
            Some("echo") => {
                json!({"content": [{"type": "text", "text": args["text"].as_str().unwrap_or("")}]})
            }
            Some("add") => {
                let (a, b) = (args["a"].as_i64().unwrap_or(0), args["b"].as_i64().unwrap_or(0));
                json!({"content": [{"type": "text", "text": (a + b).to_string()}], "structuredContent": {"sum": a + b}})
            }
            Some("link") => {
                let Some(first) = self.0.docs.first() else {
                    return Handled::Result(self.finish(json!({"content": [], "isError": true}), false));
                };
                web::link_result(&self.0.spec, first)
            }
            Some("crash") if self.0.spec.crashable => std::process::exit(3),
            Some(name @ ("lookup" | "approve" | "sample_me")) if self.0.spec.interop => {
                return match interop_call(name, &args, params) {
                    // `input_required` carries no hints and stays as it is.
                    Ok(result) if result.get("resultType").is_some() => Handled::Result(result),
                    Ok(result) => Handled::Result(self.finish(result, false)),
                    Err(e) => Handled::Error(e),
                };
            }
            other => {
                return Handled::Error(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("Unknown tool: {}", other.unwrap_or("")),
                ));
            }
        };
        Handled::Result(self.finish(result, false))
    }
}

/// `_meta.clientInfo.name` of a request, or `anonymous`.
fn client_name(params: &RawObject<'_>) -> String {
    params
        .get("_meta")
        .and_then(|m| serde_json::from_str::<Value>(m.get()).ok())
        .and_then(|m| m[mcp::META_CLIENT_INFO]["name"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "anonymous".into())
}

fn not_found(uri: &str) -> RpcError {
    RpcError::new(code::INVALID_PARAMS, "Resource not found").with_data(json!({"uri": uri}))
}
