//! The interop tools (see [`SampleSpec::interop`]): header-mirrored arguments, an MRTR
//! `input_required` round trip, and a tool that needs a client capability.

use serde_json::{Value, json};

#[cfg(doc)]
use super::super::content::SampleSpec;
use resmux_proto::jsonrpc::{RawObject, RpcError, code};
use resmux_proto::mcp;

/// The interop tools (see [`SampleSpec::interop`]).
pub(super) fn interop_tools() -> Vec<Value> {
    vec![
        json!({"name": "lookup", "description": "Looks a query up in a region", "inputSchema": {
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "limit": {"type": "integer", "x-mcp-header": "Limit"},
                "query": {"type": "string"}
            },
            "required": ["region", "query"]}}),
        json!({"name": "approve", "description": "Asks the client to approve, then answers", "inputSchema":
               {"type": "object", "properties": {"what": {"type": "string"}}}}),
        json!({"name": "sample_me", "description": "Needs the client's sampling capability", "inputSchema":
               {"type": "object", "properties": {}}}),
    ]
}

/// The `requestState` of the `approve` tool's `input_required` answer.
pub const APPROVE_STATE: &str = "approve-state-1";

/// Calls an interop tool.
pub(super) fn interop_call(name: &str, args: &Value, params: &RawObject<'_>) -> Result<Value, RpcError> {
    match name {
        "lookup" => {
            let region = args["region"].as_str();
            let query = args["query"].as_str();
            let limit_ok = args.get("limit").is_none_or(|l| l.is_null() || l.is_i64());
            let (Some(region), Some(query), true) = (region, query, limit_ok) else {
                return Err(RpcError::new(code::INVALID_PARAMS, "Invalid arguments for lookup")
                    .with_data(json!({"arguments": args})));
            };
            let text = format!("{query} in {region}");
            Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": {"region": region}}))
        }
        "approve" => {
            let answers: Value =
                params.get("inputResponses").and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(Value::Null);
            let state_ok = params.get_str("requestState").as_deref() == Some(APPROVE_STATE);
            if state_ok && answers["approval"]["action"] == "accept" {
                let what = args["what"].as_str().unwrap_or("it");
                return Ok(json!({"content": [{"type": "text", "text": format!("approved: {what}")}]}));
            }
            Ok(json!({
                "resultType": "input_required",
                "inputRequests": {"approval": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "Approve?",
                    "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}},
                "requestState": APPROVE_STATE
            }))
        }
        "sample_me" => {
            let caps: Value = params
                .get("_meta")
                .and_then(|m| serde_json::from_str::<Value>(m.get()).ok())
                .map(|m| m[mcp::META_CLIENT_CAPABILITIES].clone())
                .unwrap_or(Value::Null);
            if caps.get("sampling").is_none_or(Value::is_null) {
                return Err(RpcError::new(code::MISSING_CLIENT_CAPABILITY, "Missing client capability: sampling")
                    .with_data(json!({"requiredCapabilities": {"sampling": {}}})));
            }
            Ok(json!({"content": [{"type": "text", "text": "sampled"}]}))
        }
        _ => Err(RpcError::new(code::INVALID_PARAMS, format!("Unknown tool: {name}"))),
    }
}
