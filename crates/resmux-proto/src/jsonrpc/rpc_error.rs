//! The JSON-RPC error object and the codes this proxy emits.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Error codes used by MCP 2026-07-28 (reference §1.3).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// Legacy "resource not found"; translated to -32602 before it reaches a modern client.
    pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
}

/// A JSON-RPC error object, as received from an upstream or sent downstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The 4xx HTTP status an upstream sent this error with, if any: relayed as is, because
    /// the spec's error table gives some errors their own status (400 for -32021, …). Not
    /// part of the JSON.
    #[serde(skip)]
    pub http_status: Option<u16>,
}

impl RpcError {
    /// An error with no `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None, http_status: None }
    }

    /// The HTTP status to answer this error with downstream: the upstream's own 4xx, or for
    /// an error that came without one (stdio upstreams) the status the spec's table gives
    /// its code; 200 otherwise.
    pub fn downstream_status(&self) -> u16 {
        match (self.http_status, self.code) {
            (Some(status), _) => status,
            (None, code::HEADER_MISMATCH | code::MISSING_CLIENT_CAPABILITY | code::UNSUPPORTED_PROTOCOL_VERSION) => 400,
            _ => 200,
        }
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}
