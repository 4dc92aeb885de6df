//! Legacy (2025-xx) clients in front of the proxy (reference §7, "Legacy client in front of a
//! modern upstream"): the proxy acts as a dual-era server. It answers `initialize` itself,
//! serves the legacy-only methods (`ping`, `logging/setLevel`, `resources/subscribe` /
//! `unsubscribe`), and routes everything else through the same router, cache and hub as
//! modern requests, so legacy clients see the same merged view. Shared by the HTTP endpoint
//! (sessions named by `Mcp-Session-Id`) and stdio (the connection is the session).

pub mod http;
pub mod session;
pub mod stream;
pub mod table;
pub mod token;

use bytes::Bytes;
use serde_json::{Value, json};

pub use session::DownstreamSession;
pub use table::SessionTable;
pub use token::SessionKey;

use crate::auth::Principal;
use crate::error::{DownstreamError, Error, Reason};
use crate::hub::Hub;
use crate::jsonrpc::{RawJson, RawObject, RpcError, code};
use crate::mcp::{self, legacy_method as lm, method as m};
use crate::router::{Answer, Call, Router};

/// What legacy clients are served by; a cheap handle.
#[derive(Clone)]
pub struct Legacy {
    router: Router,
    hub: Hub,
}

impl Legacy {
    pub fn new(router: Router, hub: Hub) -> Self {
        Self { router, hub }
    }

    /// The hub sessions register their subscriptions in.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// Answers `initialize`: the negotiated version, and the `InitializeResult` describing what
    /// the proxy really serves, taken from its own `server/discover`.
    pub async fn initialize(
        &self,
        params: Option<RawJson<'_>>,
        principal: &Principal,
    ) -> Result<(&'static str, Bytes), Error> {
        let params = parse_params(params)?;
        let version = negotiate(params.get_str("protocolVersion").as_deref());
        let none = RawObject::default();
        let call = Call::new(m::DISCOVER, &none, &none, principal);
        let discovered = self.router.handle(&call).await?;
        let body = discovered.outcome.map_err(|e| Error::Internal(format!("server/discover failed: {e}").into()))?;
        let body = body.into_bytes().await?;
        let discover: Value = serde_json::from_slice(&body)
            .map_err(|e| Error::Internal(Reason::caused_by("server/discover result", e)))?;
        let mut result = json!({
            "protocolVersion": version,
            // The same flags mean the same thing to a legacy client: `resources.subscribe` is
            // `resources/subscribe`, and `listChanged` is unsolicited `list_changed` on the
            // session's stream, both served by the hub.
            "capabilities": discover["capabilities"],
            "serverInfo": discover["_meta"][mcp::META_SERVER_INFO],
        });
        if let Some(instructions) = discover.get("instructions") {
            result["instructions"] = instructions.clone();
        }
        Ok((version, Bytes::from(serde_json::to_vec(&result).expect("serializable"))))
    }

    /// Serves one request of a legacy session. Errors come back in their legacy form (see
    /// [`rpc_error`]) from the caller.
    pub async fn request(
        &self,
        session: &DownstreamSession,
        method: &str,
        params: Option<RawJson<'_>>,
        principal: &Principal,
    ) -> Result<Answer, Error> {
        let params = parse_params(params)?;
        match method {
            // Session-wide log level: the proxy relays no log messages, so there is nothing
            // to filter.
            lm::PING | lm::SET_LEVEL => Ok(empty_result()),
            lm::SUBSCRIBE | lm::UNSUBSCRIBE => {
                let uri =
                    params.get_str("uri").ok_or_else(|| DownstreamError::InvalidParams("missing `uri`".into()))?;
                self.hub.lineup().ns.check_uri(&uri)?;
                if method == lm::SUBSCRIBE {
                    session.subscribe(&self.hub, principal, &uri)?;
                } else {
                    session.unsubscribe(&self.hub, principal, &uri)?;
                }
                session.save().await;
                Ok(empty_result())
            }
            m::RESOURCES_LIST
            | m::RESOURCES_TEMPLATES_LIST
            | m::RESOURCES_READ
            | m::TOOLS_LIST
            | m::TOOLS_CALL
            | m::PROMPTS_LIST
            | m::PROMPTS_GET
            | m::COMPLETE => {
                // A legacy `_meta` (e.g. a progress token) is kept for the router to adjust;
                // the router adds the upstream's version and empty client capabilities.
                let meta = params.get_borrowed("_meta").and_then(|m| RawObject::parse(m).ok()).unwrap_or_default();
                let call = Call::new(method, &params, &meta, principal);
                Ok(legacy_answer(method, self.router.handle(&call).await?))
            }
            other => Err(DownstreamError::MethodNotFound(other.to_owned()).into()),
        }
    }
}

/// The version to answer `initialize` with: the client's when the proxy speaks it, else the
/// newest legacy version (the client then decides whether it can go on).
pub fn negotiate(requested: Option<&str>) -> &'static str {
    mcp::SUPPORTED_LEGACY.iter().find(|v| Some(**v) == requested).copied().unwrap_or(mcp::SUPPORTED_LEGACY[0])
}

/// A failure as a legacy client expects it: "resource not found" is the legacy -32002.
pub fn rpc_error(e: &Error) -> RpcError {
    match e {
        Error::Downstream(DownstreamError::ResourceNotFound { uri }) => {
            RpcError::new(code::LEGACY_RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({"uri": uri}))
        }
        other => other.to_jsonrpc().1,
    }
}

/// A relayed upstream "resource not found" (modern -32602 with `data.uri`) becomes -32002.
fn legacy_answer(method: &str, mut answer: Answer) -> Answer {
    if method == m::RESOURCES_READ
        && let Err(e) = &mut answer.outcome
        && e.code == code::INVALID_PARAMS
        && e.data.as_ref().is_some_and(|d| d.get("uri").is_some())
    {
        e.code = code::LEGACY_RESOURCE_NOT_FOUND;
    }
    answer
}

fn empty_result() -> Answer {
    Answer::result(Bytes::from_static(b"{}"))
}

fn parse_params(params: Option<RawJson<'_>>) -> Result<RawObject<'_>, Error> {
    match params {
        Some(p) => RawObject::parse(p).map_err(|e| DownstreamError::InvalidParams(e.to_string()).into()),
        None => Ok(RawObject::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_versions_and_offers_the_newest_otherwise() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiate(Some("2024-11-05")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
    }

    #[test]
    fn not_found_is_the_legacy_code() {
        let e = rpc_error(&DownstreamError::ResourceNotFound { uri: "x://y".into() }.into());
        assert_eq!((e.code, e.data.unwrap()["uri"].as_str()), (-32002, Some("x://y")));
        let relayed = || Answer::error(RpcError::new(-32602, "Resource not found").with_data(json!({"uri": "a://b"})));
        assert_eq!(legacy_answer(m::RESOURCES_READ, relayed()).outcome.unwrap_err().code, -32002);
        assert_eq!(legacy_answer(m::TOOLS_CALL, relayed()).outcome.unwrap_err().code, -32602);
        let other = Answer::error(RpcError::new(-32602, "bad cursor"));
        assert_eq!(legacy_answer(m::RESOURCES_READ, other).outcome.unwrap_err().code, -32602);
    }
}
