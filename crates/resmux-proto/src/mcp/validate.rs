//! The spec's request validation (reference §1.4, §1.7, §2.1): required `_meta` fields,
//! mirrored headers against the body (Streamable HTTP only), supported version, known method.
//! Shared by the proxy's endpoints (HTTP and stdio) and the built-in sample server.

use std::borrow::Cow;

use http::HeaderMap;

use crate::error::DownstreamError;
use crate::jsonrpc::{Incoming, Kind, MessageError, RawObject, RequestId};
use crate::mcp::{self, header_name, header_value};

/// A request that passed validation, borrowed from the body.
pub struct Checked<'a> {
    pub id: RequestId,
    pub method: &'a str,
    pub params: &'a RawObject<'a>,
    pub meta: &'a RawObject<'a>,
}

/// What a valid body holds.
pub enum Body<'a> {
    Request(Checked<'a>),
    /// A notification: acknowledged with 202 and otherwise ignored over HTTP.
    Notification,
}

/// A validation failure, with the request id when it could be read.
pub struct Rejected {
    pub id: Option<RequestId>,
    pub error: DownstreamError,
}

fn reject(id: Option<&RequestId>, error: DownstreamError) -> Rejected {
    Rejected { id: id.cloned(), error }
}

/// One mirrored header as the transport read it: its first value, as `HeaderMap::get` gives
/// it. The transport reads the three in whatever form it holds its headers (the lean path's
/// raw lines, hyper's map), so this module needs neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'a> {
    Absent,
    /// Present, but not visible ASCII (what `HeaderValue::to_str` refuses).
    NotVisible,
    Text(&'a str),
}

impl<'a> Seen<'a> {
    /// A header's first value as a transport reads it: absent, or its text when it is visible
    /// ASCII (whatever the transport's error for one that is not).
    pub fn of_text<E>(value: Option<Result<&'a str, E>>) -> Self {
        match value {
            None => Seen::Absent,
            Some(Ok(text)) => Seen::Text(text),
            Some(Err(_)) => Seen::NotVisible,
        }
    }

    fn of(value: Option<&'a http::HeaderValue>) -> Self {
        Self::of_text(value.map(http::HeaderValue::to_str))
    }
}

/// The three headers that mirror the body: protocol version, method and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mirrored<'a> {
    pub version: Seen<'a>,
    pub method: Seen<'a>,
    pub name: Seen<'a>,
}

impl<'a> Mirrored<'a> {
    /// The mirrored headers of a header map.
    pub fn from_map(map: &'a HeaderMap) -> Self {
        Mirrored {
            version: Seen::of(map.get(header_name::PROTOCOL_VERSION)),
            method: Seen::of(map.get(header_name::METHOD)),
            name: Seen::of(map.get(header_name::NAME)),
        }
    }
}

/// Why a mirrored header cannot be compared with the body.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("missing {0} header")]
    Missing(&'static str),
    #[error("{name} header: {source}")]
    Undecodable {
        name: &'static str,
        #[source]
        source: header_value::DecodeError,
    },
}

/// Validates one POST body against its mirrored headers.
pub fn check<'a>(headers: Mirrored<'_>, msg: &'a Incoming<'a>) -> Result<Body<'a>, Rejected> {
    check_with(Some(headers), msg)
}

/// Validates one message of a transport without headers (stdio): everything but the
/// mirrored headers.
pub fn check_body<'a>(msg: &'a Incoming<'a>) -> Result<Body<'a>, Rejected> {
    check_with(None, msg)
}

fn check_with<'a>(headers: Option<Mirrored<'_>>, msg: &'a Incoming<'a>) -> Result<Body<'a>, Rejected> {
    let id = match msg.kind {
        Kind::Notification => return Ok(Body::Notification),
        Kind::Response => {
            return Err(reject(
                msg.id.as_ref(),
                DownstreamError::InvalidRequest("clients do not send responses".into()),
            ));
        }
        Kind::Request => msg.id.as_ref().expect("requests have ids"),
    };
    let method = msg.method();
    let missing = |what: &str| reject(Some(id), DownstreamError::MissingMeta(format!("missing required `{what}`")));
    // The codec read params and `_meta` as objects in the envelope's pass.
    let params = msg
        .params_object()
        .ok_or_else(|| missing("params._meta"))?
        .map_err(|e| reject(Some(id), DownstreamError::InvalidParams(e.to_string())))?;
    if !params.contains("_meta") {
        return Err(missing("params._meta"));
    }
    let meta = match msg.meta_object() {
        Some(Ok(meta)) => meta,
        _ => return Err(reject(Some(id), DownstreamError::MissingMeta("`_meta` must be an object".into()))),
    };
    let version = meta.get_str(mcp::META_PROTOCOL_VERSION).ok_or_else(|| missing(mcp::META_PROTOCOL_VERSION))?;
    match meta.get(mcp::META_CLIENT_CAPABILITIES) {
        Some(caps) if caps.get().starts_with('{') => {}
        Some(_) => {
            return Err(reject(
                Some(id),
                DownstreamError::MissingMeta(format!("`{}` must be an object", mcp::META_CLIENT_CAPABILITIES)),
            ));
        }
        None => return Err(missing(mcp::META_CLIENT_CAPABILITIES)),
    }

    if let Some(headers) = headers {
        check_headers(headers, id, method, &version, params)?;
    }
    if !mcp::SUPPORTED_MODERN.contains(&&*version) {
        return Err(reject(
            Some(id),
            DownstreamError::UnsupportedVersion {
                requested: version.into_owned(),
                supported: mcp::SUPPORTED_MODERN.iter().map(|s| s.to_string()).collect(),
            },
        ));
    }
    if !mcp::is_known_request(method) {
        return Err(reject(Some(id), DownstreamError::MethodNotFound(method.to_owned())));
    }
    Ok(Body::Request(Checked { id: id.clone(), method, params, meta }))
}

/// The mirrored headers against the body (reference §2.1).
fn check_headers(
    headers: Mirrored<'_>,
    id: &RequestId,
    method: &str,
    version: &str,
    params: &RawObject<'_>,
) -> Result<(), Rejected> {
    let mismatch = |m: String| reject(Some(id), DownstreamError::HeaderMismatch(m));
    let header = |name, seen| decoded(name, seen).map_err(|e| mismatch(e.to_string()));
    let h_version = header(mcp::H_PROTOCOL_VERSION, headers.version)?;
    if h_version != version {
        return Err(mismatch(format!(
            "MCP-Protocol-Version header value '{h_version}' does not match body value '{version}'"
        )));
    }
    let h_method = header(mcp::H_METHOD, headers.method)?;
    if h_method != method {
        return Err(mismatch(format!("Mcp-Method header value '{h_method}' does not match body value '{method}'")));
    }
    if let Some(field) = mcp::name_param(method) {
        let h_name = header(mcp::H_NAME, headers.name)?;
        let body_name = params.get_str(field);
        if body_name.as_deref() != Some(&*h_name) {
            return Err(mismatch(format!(
                "Mcp-Name header value '{h_name}' does not match body value '{}'",
                body_name.as_deref().unwrap_or("")
            )));
        }
    }
    Ok(())
}

/// A mirrored header's value, decoded; why not when it is missing or undecodable.
fn decoded<'a>(name: &'static str, seen: Seen<'a>) -> Result<Cow<'a, str>, Unreadable> {
    let text = match seen {
        Seen::Absent => return Err(Unreadable::Missing(name)),
        Seen::NotVisible => Err(header_value::DecodeError::InvalidCharacters),
        Seen::Text(text) => Ok(text),
    };
    text.and_then(header_value::decode_text).map_err(|source| Unreadable::Undecodable { name, source })
}

/// Whether a message opens the modern way: its `params._meta` names a protocol version. Such
/// a message is served statelessly whatever else it carries (a dual-era server picks the
/// era from the request's shape, reference §7); anything else may belong to a legacy session.
pub fn is_modern(msg: &Incoming<'_>) -> bool {
    matches!(msg.params_object(), Some(Ok(_)))
        && msg.meta_object().is_some_and(|meta| meta.is_ok_and(|m| m.contains(mcp::META_PROTOCOL_VERSION)))
}

/// Maps a codec failure to the downstream error.
pub fn message_error(e: MessageError) -> Rejected {
    let id = e.id().cloned();
    let error = match e {
        MessageError::Parse(m) => DownstreamError::Parse(m),
        MessageError::Invalid { reason, .. } => DownstreamError::InvalidRequest(reason),
    };
    Rejected { id, error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const READ: &str = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b",
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    /// The mismatch message for `headers` (in order, names as sent), or `None` when they pass.
    fn mismatch(headers: &[(&str, &str)]) -> Option<String> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        let msg = Incoming::parse(READ).expect("valid JSON-RPC");
        match check(Mirrored::from_map(&map), &msg) {
            Ok(_) => None,
            Err(Rejected { error: DownstreamError::HeaderMismatch(m), .. }) => Some(m),
            Err(Rejected { error, .. }) => panic!("not a header mismatch: {error}"),
        }
    }

    const VERSION: (&str, &str) = ("MCP-Protocol-Version", "2026-07-28");
    const METHOD: (&str, &str) = ("Mcp-Method", "resources/read");
    const NAME: (&str, &str) = ("Mcp-Name", "a://b");

    #[test]
    fn the_mirrored_headers_are_found_whatever_their_case_and_place() {
        assert_eq!(mismatch(&[("host", "x"), VERSION, ("accept", "*/*"), METHOD, NAME]), None);
        assert_eq!(mismatch(&[NAME, METHOD, VERSION]), None);
        assert_eq!(mismatch(&[("mcp-name", "=?base64?YTovL2I=?="), METHOD, VERSION]), None, "a base64-wrapped value");
    }

    #[test]
    fn a_missing_or_different_header_is_named() {
        assert_eq!(mismatch(&[VERSION, METHOD]).as_deref(), Some("missing mcp-name header"));
        assert_eq!(mismatch(&[METHOD, NAME]).as_deref(), Some("missing mcp-protocol-version header"));
        assert!(mismatch(&[VERSION, ("mcp-method", "tools/call"), NAME]).is_some_and(|m| m.contains("'tools/call'")));
        assert!(mismatch(&[VERSION, METHOD, ("mcp-name", "a://c")]).is_some_and(|m| m.contains("'a://c'")));
    }

    #[test]
    fn of_two_values_the_first_is_compared_as_a_lookup_would() {
        assert_eq!(mismatch(&[VERSION, METHOD, NAME, ("mcp-name", "a://c")]), None);
        assert!(mismatch(&[VERSION, METHOD, ("mcp-name", "a://c"), NAME]).is_some_and(|m| m.contains("'a://c'")));
    }
}
