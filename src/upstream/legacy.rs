//! Legacy (2025-xx) upstreams: the `initialize` handshake, sessions, and translation of their
//! answers into 2026-07-28 shape (reference §7, "Modern client in front of a legacy upstream").

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::discovery::UpstreamInfo;
use crate::config::{CacheScopeDefault, UpstreamConfig};
use crate::jsonrpc::{Incoming, RawObject, RpcError, code, encode_error, encode_result, raw_str};
use crate::jsonrpc::{Malformed, Reply};
use crate::mcp::method as m;

/// Legacy revisions the proxy speaks to upstreams, newest first.
pub const VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// `initialize` params: the proxy's identity and the client capabilities it can relay.
pub fn initialize_params(version: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "protocolVersion": version,
        // Elicitation and sampling are relayed to downstream clients that declare them (MRTR)
        // and declined otherwise; roots are not offered (servers would ask unprompted).
        "capabilities": {"elicitation": {}, "sampling": {}},
        "clientInfo": {"name": "resmux", "version": env!("CARGO_PKG_VERSION")},
    }))
    .expect("serializable")
}

/// Reads an `InitializeResult`: the negotiated version and what the server offers.
pub fn parse_initialize(result: &[u8]) -> Result<(String, UpstreamInfo), Malformed> {
    let v: Value = serde_json::from_slice(result)?;
    let version = v["protocolVersion"].as_str().ok_or(Malformed::NoVersion)?.to_owned();
    if !VERSIONS.contains(&version.as_str()) {
        return Err(Malformed::Unspoken(version));
    }
    let capabilities = match v.get("capabilities") {
        Some(c) if c.is_object() => c.clone(),
        _ => json!({}),
    };
    let info = UpstreamInfo {
        capabilities,
        server_info: v.get("serverInfo").cloned(),
        instructions: v.get("instructions").and_then(Value::as_str).map(str::to_owned),
        supported_versions: vec![version.clone()],
    };
    Ok((version, info))
}

/// Request params for a legacy server: the modern `io.modelcontextprotocol/*` `_meta` keys
/// removed (legacy servers should ignore them; some validate strictly).
pub fn translate_params(params: &[u8]) -> Cow<'_, [u8]> {
    let Ok(text) = std::str::from_utf8(params) else { return Cow::Borrowed(params) };
    let Ok(mut obj) = RawObject::parse_str(text) else { return Cow::Borrowed(params) };
    let Some(meta) = obj.get("_meta").and_then(|m| RawObject::parse(m).ok()) else { return Cow::Borrowed(params) };
    let kept: Vec<(&str, crate::jsonrpc::RawJson<'_>)> =
        meta.iter().filter(|(k, _)| !k.starts_with("io.modelcontextprotocol/")).collect();
    if kept.is_empty() {
        obj.remove("_meta");
    } else {
        let mut out = Vec::new();
        out.push(b'{');
        for (i, (k, v)) in kept.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            crate::jsonrpc::write_json_string(&mut out, k);
            out.push(b':');
            out.extend_from_slice(v.get().as_bytes());
        }
        out.push(b'}');
        let raw = serde_json::value::RawValue::from_string(String::from_utf8(out).expect("utf8")).expect("json");
        obj.set("_meta", Cow::Owned(raw));
    }
    Cow::Owned(obj.to_vec())
}

fn cacheable(method: &str) -> bool {
    matches!(
        method,
        m::RESOURCES_LIST | m::RESOURCES_TEMPLATES_LIST | m::RESOURCES_READ | m::TOOLS_LIST | m::PROMPTS_LIST
    )
}

/// What a legacy result of `method` lacks in 2026-07-28 shape, with the value the proxy gives
/// it (raw JSON): `resultType`, and on cacheable results `ttlMs` and `cacheScope` from the
/// upstream's configured defaults. The one statement of the rule, for whole answers
/// ([`translate_reply`]) and relayed ones ([`crate::router::Relay`]).
pub fn result_defaults(method: &str, config: &UpstreamConfig) -> Vec<(&'static str, String)> {
    let mut defaults = vec![("resultType", "\"complete\"".to_owned())];
    if cacheable(method) {
        defaults.push(("ttlMs", (config.default_ttl.as_millis() as u64).to_string()));
        let scope = match config.default_scope {
            CacheScopeDefault::Public => "\"public\"",
            CacheScopeDefault::Private => "\"private\"",
        };
        defaults.push(("cacheScope", scope.to_owned()));
    }
    defaults
}

/// A legacy answer in 2026-07-28 shape: the [`result_defaults`] it lacks added; "resource not
/// found" (-32002, or the -32603 "Unknown resource" that TypeScript SDK servers send) as
/// -32602 with `data.uri`.
pub fn translate_reply(method: &str, params: &[u8], reply: Reply, config: &UpstreamConfig) -> Reply {
    match reply {
        Reply::Result(body) => {
            let Ok(text) = std::str::from_utf8(&body) else { return Reply::Result(body) };
            let Ok(mut obj) = RawObject::parse_str(text) else { return Reply::Result(body) };
            for (key, value) in result_defaults(method, config) {
                if !obj.contains(key) {
                    let raw = serde_json::value::RawValue::from_string(value).expect("defaults are JSON");
                    obj.set(key, Cow::Owned(raw));
                }
            }
            Reply::Result(Bytes::from(obj.to_vec()))
        }
        Reply::Error(e) if method == m::RESOURCES_READ && is_legacy_not_found(&e) => {
            let uri = std::str::from_utf8(params)
                .ok()
                .and_then(|t| RawObject::parse_str(t).ok())
                .and_then(|p| p.get("uri").and_then(raw_str).map(|u| u.into_owned()))
                .unwrap_or_default();
            Reply::Error(RpcError::new(code::INVALID_PARAMS, "Resource not found").with_data(json!({"uri": uri})))
        }
        other => other,
    }
}

fn is_legacy_not_found(e: &RpcError) -> bool {
    let msg = e.message.to_ascii_lowercase();
    e.code == code::LEGACY_RESOURCE_NOT_FOUND
        || (e.code == code::INTERNAL_ERROR && (msg.contains("unknown resource") || msg.contains("not found")))
}

/// The proxy's answer to a request a legacy server sends it: `ping` is answered; sampling,
/// elicitation and roots are declined with an error that says why.
pub fn answer_server_request(msg: &Incoming<'_>) -> Option<Bytes> {
    let id = msg.id.as_ref()?;
    Some(match msg.method() {
        "ping" => encode_result(id, b"{}"),
        other => encode_error(
            Some(id),
            &RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("resmux does not relay `{other}` from upstreams: no downstream client asked for it"),
            ),
        ),
    })
}

/// Whether an answer to the `server/discover` probe shows a modern server (reference §7):
/// a result, or one of the modern errors.
pub fn probe_says_modern(reply: &Reply) -> bool {
    match reply {
        Reply::Result(_) => true,
        Reply::Error(e) => matches!(
            e.code,
            code::HEADER_MISMATCH | code::MISSING_CLIENT_CAPABILITY | code::UNSUPPORTED_PROTOCOL_VERSION
        ),
    }
}

/// The `notifications/initialized` message.
pub fn initialized() -> Bytes {
    crate::jsonrpc::encode_notification("notifications/initialized", b"{}")
}

/// How long a legacy GET stream waits before reconnecting when the server sent no `retry`.
pub const DEFAULT_RETRY: Duration = Duration::from_millis(500);

/// Index of a version in the era number used by cache keys (0 is modern).
pub fn era_number(version: &str) -> u8 {
    VERSIONS.iter().position(|v| *v == version).map_or(9, |i| i as u8 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_lose_modern_meta_only() {
        let p = br#"{"uri":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"x","traceparent":"t"}}"#;
        assert_eq!(&*translate_params(p), br#"{"uri":"a","_meta":{"traceparent":"t"}}"#);
        let p = br#"{"uri":"a","_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#;
        assert_eq!(&*translate_params(p), br#"{"uri":"a"}"#);
    }

    #[test]
    fn results_get_modern_fields_and_not_found_is_32602() {
        let mut cfg = UpstreamConfig::http("a", "http://x/mcp");
        cfg.default_ttl = Duration::from_secs(5);
        let r =
            translate_reply(m::RESOURCES_READ, b"{}", Reply::Result(Bytes::from_static(br#"{"contents":[]}"#)), &cfg);
        let Reply::Result(b) = r else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v, json!({"contents": [], "resultType": "complete", "ttlMs": 5000, "cacheScope": "private"}));
        let r = translate_reply(m::TOOLS_CALL, b"{}", Reply::Result(Bytes::from_static(br#"{"content":[]}"#)), &cfg);
        let Reply::Result(b) = r else { panic!() };
        assert!(!String::from_utf8_lossy(&b).contains("ttlMs"));
        for e in [RpcError::new(-32002, "nf"), RpcError::new(-32603, "Unknown resource: test://x")] {
            let r = translate_reply(m::RESOURCES_READ, br#"{"uri":"test://x"}"#, Reply::Error(e), &cfg);
            let Reply::Error(e) = r else { panic!() };
            assert_eq!((e.code, e.data.unwrap()["uri"].as_str().unwrap()), (-32602, "test://x"));
        }
    }

    #[test]
    fn initialize_results_are_read() {
        let (v, info) = parse_initialize(
            br#"{"protocolVersion":"2025-11-25","capabilities":{"resources":{"subscribe":true}},"serverInfo":{"name":"e","version":"1"}}"#,
        )
        .unwrap();
        assert_eq!(v, "2025-11-25");
        assert!(info.flag("resources", "subscribe"));
        assert!(parse_initialize(br#"{"protocolVersion":"2024-01-01"}"#).is_err());
    }
}
