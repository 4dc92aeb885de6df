//! What an upstream offers by name: its tools (with their `x-mcp-header` annotations) and its
//! prompts, learned by walking its own `tools/list` / `prompts/list`.
//!
//! The router routes `tools/call` and `prompts/get` by it: among unprefixed upstreams the
//! first in config order that lists the name owns it, and the call goes there once and only
//! there (a tool must never run twice because its first upstream rejected the arguments).
//! The HTTP transport mirrors annotated arguments into `Mcp-Param-*` headers from it.
//!
//! A catalog is forgotten when the upstream says its list changed, when its stream was lost,
//! and after [`MAX_AGE`] (for upstreams that never announce changes).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::headers::ParamHeader;
use super::{Reply, Upstream};
use crate::error::{Reason, UpstreamError, UpstreamErrorKind};
use crate::mcp::method as m;

/// How long a walked catalog is trusted without a change notification.
pub const MAX_AGE: Duration = Duration::from_secs(60);
/// Most pages walked for one catalog: an upstream that pages forever cannot hold a call.
const MAX_PAGES: usize = 100;
/// Most names kept for one catalog (the rest are routed as unknown names are).
const MAX_NAMES: usize = 10_000;

/// Which named list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    Tools,
    Prompts,
}

impl Named {
    /// The list behind a call method (`tools/call`, `prompts/get`).
    pub fn of_call(method: &str) -> Option<Self> {
        match method {
            m::TOOLS_CALL => Some(Self::Tools),
            m::PROMPTS_GET => Some(Self::Prompts),
            _ => None,
        }
    }

    /// "tool" or "prompt", for messages.
    pub fn singular(self) -> &'static str {
        match self {
            Self::Tools => "tool",
            Self::Prompts => "prompt",
        }
    }

    fn list_method(self) -> &'static str {
        match self {
            Self::Tools => m::TOOLS_LIST,
            Self::Prompts => m::PROMPTS_LIST,
        }
    }

    fn items(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
        }
    }
}

/// One walked list: names with their header annotations (empty for prompts).
#[derive(Clone, Default)]
struct Walked {
    names: HashMap<Box<str>, Arc<[ParamHeader]>>,
    at: Option<Instant>,
}

impl Walked {
    fn fresh(&self) -> bool {
        self.at.is_some_and(|at| at.elapsed() < MAX_AGE)
    }
}

/// The catalogs of one upstream.
#[derive(Default)]
pub struct Catalog {
    tools: RwLock<Walked>,
    prompts: RwLock<Walked>,
    /// One walk at a time per upstream; concurrent callers wait for it and read its result.
    walking: tokio::sync::Mutex<()>,
}

impl Catalog {
    fn slot(&self, kind: Named) -> &RwLock<Walked> {
        match kind {
            Named::Tools => &self.tools,
            Named::Prompts => &self.prompts,
        }
    }

    /// Forgets what was walked for `kind` (its list changed).
    pub fn forget(&self, kind: Named) {
        *self.slot(kind).write().expect("catalog lock") = Walked::default();
    }

    /// Forgets everything (the stream was lost, or the upstream restarted).
    pub fn forget_all(&self) {
        self.forget(Named::Tools);
        self.forget(Named::Prompts);
    }

    /// The `x-mcp-header` annotations of tool `name`, as last walked.
    pub fn param_headers(&self, name: &str) -> Arc<[ParamHeader]> {
        let tools = self.tools.read().expect("catalog lock");
        tools.names.get(name).cloned().unwrap_or_else(|| Arc::from(Vec::new()))
    }
}

impl Upstream {
    /// Whether this upstream lists `name` among its tools or prompts, walking the list first
    /// when it is not known or too old. `None` when the list could not be walked.
    pub async fn offers(&self, kind: Named, name: &str) -> Option<bool> {
        self.ensure_catalog(kind).await.ok()?;
        Some(self.catalog().slot(kind).read().expect("catalog lock").names.contains_key(name))
    }

    /// Walks the list of `kind` unless a fresh walk is at hand.
    pub async fn ensure_catalog(&self, kind: Named) -> Result<(), UpstreamError> {
        let catalog = self.catalog();
        if catalog.slot(kind).read().expect("catalog lock").fresh() {
            return Ok(());
        }
        let _walking = catalog.walking.lock().await;
        if catalog.slot(kind).read().expect("catalog lock").fresh() {
            return Ok(());
        }
        let walked = self.walk(kind).await?;
        *catalog.slot(kind).write().expect("catalog lock") = walked;
        Ok(())
    }

    async fn walk(&self, kind: Named) -> Result<Walked, UpstreamError> {
        let mut walked = Walked { at: Some(Instant::now()), ..Walked::default() };
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params: Value = serde_json::from_str(&super::discovery::own_params()).expect("valid JSON");
            if let Some(c) = &cursor {
                params["cursor"] = Value::String(c.clone());
            }
            let params = serde_json::to_vec(&params).expect("serializable");
            let page = match self.request(kind.list_method(), &params).await? {
                Reply::Result(body) => body,
                // An upstream that answers with an error has nothing to list.
                Reply::Error(_) => return Ok(walked),
            };
            let page: Value = serde_json::from_slice(&page).map_err(|e| {
                UpstreamError::new(
                    self.name(),
                    UpstreamErrorKind::Protocol {
                        reason: Reason::caused_by(format!("{} page", kind.list_method()), e),
                    },
                )
            })?;
            for item in page.get(kind.items()).and_then(Value::as_array).into_iter().flatten() {
                let Some(name) = item.get("name").and_then(Value::as_str) else { continue };
                if walked.names.len() >= MAX_NAMES {
                    break;
                }
                let headers = match kind {
                    Named::Tools => item.get("inputSchema").map(ParamHeader::collect).unwrap_or_default(),
                    Named::Prompts => Vec::new(),
                };
                walked.names.entry(name.into()).or_insert_with(|| Arc::from(headers));
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(walked),
            }
        }
        tracing::warn!(upstream = %self.name(), list = kind.list_method(), "catalog walk stopped at {MAX_PAGES} pages");
        Ok(walked)
    }
}
