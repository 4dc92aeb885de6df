//! The protocol headers of an upstream HTTP request, in one place.
//!
//! A 2026-07-28 request mirrors its method, its target (`Mcp-Name`) and its annotated tool
//! arguments (`Mcp-Param-*`) in headers, and a conforming server rejects a request whose
//! headers are missing or differ from the body (400 / -32020). The mirrored set is therefore
//! never passed in by callers: [`Headers::modern`] derives it from the very params that are
//! sent, so no request path (plain, relayed, retried, listen) can forget a header.

use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::jsonrpc::RawObject;
use crate::mcp::{self, header_value};

/// The protocol headers of one request.
#[derive(Clone, Debug)]
pub enum Headers<'a> {
    /// 2026-07-28: the version and the mirrored method, name and tool arguments.
    Modern(Mirrored<'a>),
    /// 2025-xx: the negotiated version (sent from 2025-06-18 on) and the session, if any.
    Legacy { version: &'a str, session: Option<&'a str> },
}

/// The mirrored headers of a 2026-07-28 request. Its fields are private: the only way to
/// build one is from the request itself.
#[derive(Clone, Debug)]
pub struct Mirrored<'a> {
    method: &'a str,
    /// `Mcp-Name`, already encoded.
    name: Option<String>,
    /// `Mcp-Param-{Name}` headers, already encoded.
    params: Vec<(HeaderName, String)>,
}

impl<'a> Headers<'a> {
    /// The headers of a 2026-07-28 request for `method` with `params` (the exact bytes sent).
    /// For `tools/call`, `annotations` gives the named tool's `x-mcp-header` annotations (from
    /// its `tools/list` entry).
    pub fn modern(method: &'a str, params: &[u8], annotations: impl FnOnce(&str) -> Arc<[ParamHeader]>) -> Self {
        let parsed = std::str::from_utf8(params).ok().and_then(|t| RawObject::parse_str(t).ok());
        let target = mcp::name_param(method).and_then(|key| parsed.as_ref().and_then(|p| p.get_str(key)));
        let name = target.as_deref().map(header_value::encode);
        let param_headers = match (method, target.as_deref()) {
            (mcp::method::TOOLS_CALL, Some(tool)) => annotations(tool),
            _ => Arc::from(Vec::new()),
        };
        let mut mirrored = Vec::new();
        if !param_headers.is_empty()
            && let Some(args) = parsed.as_ref().and_then(|p| p.get("arguments"))
            && let Ok(args) = serde_json::from_str::<serde_json::Value>(args.get())
        {
            for ph in param_headers.iter() {
                if let Some(value) = ph.value_in(&args) {
                    mirrored.push((ph.header.clone(), value));
                }
            }
        }
        Headers::Modern(Mirrored { method, name, params: mirrored })
    }

    /// Adds these headers to `h`.
    pub fn apply(&self, h: &mut HeaderMap) {
        match self {
            Headers::Modern(m) => {
                h.insert(mcp::H_PROTOCOL_VERSION, HeaderValue::from_static(mcp::MODERN_VERSION));
                h.insert(mcp::H_METHOD, value(m.method));
                if let Some(name) = &m.name {
                    h.insert(mcp::H_NAME, value(name));
                }
                for (header, v) in &m.params {
                    h.insert(header.clone(), value(v));
                }
            }
            Headers::Legacy { version, session } => {
                // 2025-03-26 servers predate the header.
                if *version != "2025-03-26" {
                    h.insert(mcp::H_PROTOCOL_VERSION, value(version));
                }
                if let Some(session) = session {
                    h.insert(mcp::H_SESSION_ID, value(session));
                }
            }
        }
    }
}

/// One `x-mcp-header` annotation of a tool's input schema: which argument, which header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// The chain of `properties` keys leading to the annotated argument.
    pub path: Vec<String>,
    /// `mcp-param-{name}`, lowercased.
    pub header: HeaderName,
}

impl ParamHeader {
    /// Collects the annotations of `schema` (a tool's `inputSchema`). Annotations the spec
    /// does not allow (not on a statically reachable primitive property, or on a `number`)
    /// are left out; such a tool is the upstream's to reject.
    pub fn collect(schema: &serde_json::Value) -> Vec<ParamHeader> {
        let mut out = Vec::new();
        collect_into(schema, &mut Vec::new(), &mut out, 0);
        out
    }

    /// The encoded header value for this argument in `args`, when present and not null.
    fn value_in(&self, args: &serde_json::Value) -> Option<String> {
        let mut v = args;
        for key in &self.path {
            v = v.get(key)?;
        }
        match v {
            serde_json::Value::String(s) => Some(header_value::encode(s)),
            serde_json::Value::Bool(b) => Some(b.to_string()),
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
            _ => None,
        }
    }
}

/// Schemas nest; the walk stops at a small depth so a hostile schema costs little.
const MAX_SCHEMA_DEPTH: usize = 8;

fn collect_into(schema: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>, depth: usize) {
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else { return };
    if depth >= MAX_SCHEMA_DEPTH {
        return;
    }
    for (key, prop) in props {
        path.push(key.clone());
        if let Some(name) = prop.get("x-mcp-header").and_then(|n| n.as_str()) {
            let primitive = matches!(prop.get("type").and_then(|t| t.as_str()), Some("string" | "integer" | "boolean"));
            let header = HeaderName::from_bytes(format!("{}{}", mcp::H_PARAM_PREFIX, name).as_bytes());
            if primitive && let Ok(header) = header {
                out.push(ParamHeader { path: path.clone(), header });
            }
        } else {
            collect_into(prop, path, out, depth + 1);
        }
        path.pop();
    }
}

fn value(v: &str) -> HeaderValue {
    // Values are either encoded (visible ASCII) or protocol constants; a session id or version
    // from an upstream that is not a valid header value is sent as a marker the upstream
    // rejects, rather than dropped silently.
    HeaderValue::from_str(v).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// Why a configured header cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum StaticHeaderError {
    #[error("`{name}` is not a valid header name")]
    Name {
        name: String,
        #[source]
        source: http::header::InvalidHeaderName,
    },
    #[error("`{name}`")]
    Secret {
        name: String,
        #[source]
        source: crate::config::SecretError,
    },
    #[error("`{name}` is not a valid header value")]
    Value {
        name: String,
        #[source]
        source: http::header::InvalidHeaderValue,
    },
}

/// Resolves configured header secrets into a header map. Hop-by-hop and framing headers,
/// which validation refuses, are left out here too; values are marked sensitive (kept out of
/// HTTP/2 header compression tables and debug output).
pub fn static_headers(
    headers: &std::collections::BTreeMap<String, crate::config::SecretSource>,
) -> Result<http::HeaderMap, StaticHeaderError> {
    let mut map = http::HeaderMap::new();
    for (name, source) in headers {
        if crate::config::forbidden_header(name) {
            continue;
        }
        let header = http::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|source| StaticHeaderError::Name { name: name.clone(), source })?;
        let value = source.resolve().map_err(|source| StaticHeaderError::Secret { name: name.clone(), source })?;
        let mut value = http::HeaderValue::from_str(&value)
            .map_err(|source| StaticHeaderError::Value { name: name.clone(), source })?;
        value.set_sensitive(true);
        map.insert(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Arc<[ParamHeader]> {
        Arc::from(Vec::new())
    }

    fn map(h: &Headers<'_>) -> HeaderMap {
        let mut m = HeaderMap::new();
        h.apply(&mut m);
        m
    }

    #[test]
    fn modern_headers_mirror_the_sent_params() {
        let h = map(&Headers::modern("tools/call", br#"{"name":"docs__search","arguments":{}}"#, none));
        assert_eq!(h[mcp::H_METHOD], "tools/call");
        assert_eq!(h[mcp::H_NAME], "docs__search");
        assert_eq!(h[mcp::H_PROTOCOL_VERSION], mcp::MODERN_VERSION);
        let h = map(&Headers::modern("resources/read", r#"{"uri":"file:///é"}"#.as_bytes(), none));
        assert_eq!(h[mcp::H_NAME], header_value::encode("file:///é").as_str());
        assert!(h[mcp::H_NAME].to_str().unwrap().starts_with("=?base64?"));
        let h = map(&Headers::modern("prompts/get", br#"{"name":"greet"}"#, none));
        assert_eq!(h[mcp::H_NAME], "greet");
        let h = map(&Headers::modern("resources/list", br#"{"name":"x"}"#, none));
        assert!(!h.contains_key(mcp::H_NAME));
    }

    #[test]
    fn annotated_arguments_become_param_headers() {
        let schema = serde_json::json!({"type":"object","properties":{
            "region": {"type":"string","x-mcp-header":"Region"},
            "n": {"type":"integer","x-mcp-header":"Count"},
            "ratio": {"type":"number","x-mcp-header":"Ratio"},
            "nested": {"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}},
            "plain": {"type":"string"}
        }});
        let annotations: Arc<[ParamHeader]> = ParamHeader::collect(&schema).into();
        assert_eq!(annotations.len(), 3, "the number-typed annotation is not mirrored");
        let of = |tool: &str| {
            assert_eq!(tool, "t");
            annotations.clone()
        };
        let params = br#"{"name":"t","arguments":{"region":"eu west","n":7,"ratio":0.5,"nested":{"flag":true}}}"#;
        let h = map(&Headers::modern("tools/call", params, of));
        assert_eq!(h["mcp-param-region"], "eu west");
        assert_eq!(h["mcp-param-count"], "7");
        assert_eq!(h["mcp-param-flag"], "true");
        assert!(!h.contains_key("mcp-param-ratio"));
        let h = map(&Headers::modern("tools/call", br#"{"name":"t","arguments":{"region":null}}"#, of));
        assert!(!h.contains_key("mcp-param-region"), "null arguments are not mirrored");
    }
}
