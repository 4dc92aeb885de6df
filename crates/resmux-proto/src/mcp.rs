//! Protocol vocabulary of MCP 2026-07-28: versions, `_meta` keys, method names, header names,
//! the header-value encoding (`=?base64?…?=`), which list ([`list`]) and what changes are
//! announced in ([`notify`]). Nothing here does I/O, and it imports no other layer but the
//! codec: every side meets on these words.

pub mod header_value;
pub mod list;
pub mod notify;
pub mod principal;
pub mod uri;
pub mod validate;

pub use list::{Capability, List};

/// The modern revision this proxy speaks on both sides.
pub const MODERN_VERSION: &str = "2026-07-28";

/// Versions the proxy accepts on a modern-shaped request.
pub const SUPPORTED_MODERN: &[&str] = &[MODERN_VERSION];

/// Legacy (2025-xx) revisions the proxy serves to clients that open with `initialize`, newest
/// first; the first is offered when a client asks for one it does not know.
pub const SUPPORTED_LEGACY: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// `_meta` key carrying the request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key carrying the client's self-description.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key carrying a result's server self-description.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key that tags every notification on a listen stream.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// HTTP header mirroring `_meta` protocol version.
pub const H_PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// HTTP header mirroring the JSON-RPC method.
pub const H_METHOD: &str = "mcp-method";
/// HTTP header mirroring `params.name` / `params.uri`.
pub const H_NAME: &str = "mcp-name";
/// Legacy HTTP header naming the session minted at `initialize`.
pub const H_SESSION_ID: &str = "mcp-session-id";
/// The mirrored headers as header names, for lookups on every request: a `&str` name is
/// parsed and lower-cased again on each `HeaderMap::get`, a `HeaderName` is not.
pub mod header_name {
    use http::HeaderName;
    pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static(super::H_PROTOCOL_VERSION);
    pub const METHOD: HeaderName = HeaderName::from_static(super::H_METHOD);
    pub const NAME: HeaderName = HeaderName::from_static(super::H_NAME);
    pub const SESSION_ID: HeaderName = HeaderName::from_static(super::H_SESSION_ID);
}
/// Prefix of the headers mirroring annotated tool arguments.
pub const H_PARAM_PREFIX: &str = "mcp-param-";

/// Every method a modern client may send, with what the proxy does with it.
pub mod method {
    pub const DISCOVER: &str = "server/discover";
    pub const RESOURCES_LIST: &str = "resources/list";
    pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
    pub const RESOURCES_READ: &str = "resources/read";
    pub const TOOLS_LIST: &str = "tools/list";
    pub const TOOLS_CALL: &str = "tools/call";
    pub const PROMPTS_LIST: &str = "prompts/list";
    pub const PROMPTS_GET: &str = "prompts/get";
    pub const COMPLETE: &str = "completion/complete";
    pub const LISTEN: &str = "subscriptions/listen";
    pub const CANCELLED: &str = "notifications/cancelled";
    pub const PROGRESS: &str = "notifications/progress";
    pub const RESOURCES_UPDATED: &str = "notifications/resources/updated";
    pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
    pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
    pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
    pub const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
}

/// Methods of the legacy (2025-xx) revisions that 2026-07-28 removed; the proxy serves them to
/// legacy sessions only.
pub mod legacy_method {
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "notifications/initialized";
    pub const PING: &str = "ping";
    pub const SET_LEVEL: &str = "logging/setLevel";
    pub const SUBSCRIBE: &str = "resources/subscribe";
    pub const UNSUBSCRIBE: &str = "resources/unsubscribe";
}

/// Which request parameter the `Mcp-Name` header mirrors for `method`, if any.
pub fn name_param(method: &str) -> Option<&'static str> {
    match method {
        method::TOOLS_CALL | method::PROMPTS_GET => Some("name"),
        method::RESOURCES_READ => Some("uri"),
        _ => None,
    }
}

/// Methods that modern clients may send and the proxy serves.
pub fn is_known_request(method: &str) -> bool {
    matches!(
        method,
        method::DISCOVER
            | method::RESOURCES_LIST
            | method::RESOURCES_TEMPLATES_LIST
            | method::RESOURCES_READ
            | method::TOOLS_LIST
            | method::TOOLS_CALL
            | method::PROMPTS_LIST
            | method::PROMPTS_GET
            | method::COMPLETE
            | method::LISTEN
    )
}
