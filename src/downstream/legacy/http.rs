//! Legacy sessions over Streamable HTTP (2025-03-26 .. 2025-11-25): `initialize` mints the
//! `Mcp-Session-Id`; later POSTs carry it; GET opens the session's standalone SSE stream;
//! DELETE ends the session.
//!
//! Statuses: an id that does not verify (forged, or another principal's: ids are bound to
//! their creator), or that names a session this process ended, is 404
//! on POST, GET and DELETE alike: the legacy transport's "session expired, initialize again",
//! which a legacy client understands whatever the method. (A GET or DELETE without any session
//! id is the modern endpoint's 405.) Errors answering a request travel in a 200 response, as
//! legacy servers send them; the transport's own refusals keep their statuses (400 for an
//! unsupported `MCP-Protocol-Version`, 406, 409 for a second stream, 429 at the limits).

use bytes::Bytes;
use http::header::ACCEPT;
use http::{HeaderValue, StatusCode};
use tokio::sync::mpsc;

use super::stream::{StreamOptions, pump};
use super::{Legacy, SessionTable, rpc_error};
use crate::auth::Principal;
use crate::downstream::framing::Framing;
use crate::downstream::listen::sse_response;
use crate::downstream::respond::{self, Resp, empty, json};
use crate::error::{DownstreamError, Error, Side};
use crate::headers::{self, Headers, Known};
use crate::jsonrpc::{Incoming, Kind, encode_error, encode_result};
use crate::mcp;

/// SSE frames buffered between a session's stream writer and its connection. Small on
/// purpose: changes wait (and coalesce) in the session's hub listener; when this is full the
/// writer waits, up to the slow-listener timeout, then closes the stream.
const FRAMES: usize = 8;

/// A legacy `initialize` (no modern `_meta`): answered by the proxy, with a new session id.
pub async fn initialize(legacy: &Legacy, sessions: &SessionTable, msg: &Incoming<'_>, principal: &Principal) -> Resp {
    let id = msg.id.as_ref().expect("requests have ids");
    let (version, result) = match legacy.initialize(msg.params, principal).await {
        Ok(answer) => answer,
        Err(e) => return error_answer(Some(id), &e, "initialize"),
    };
    let (token, _) = match sessions.create(version, principal) {
        Ok(created) => created,
        Err(e) => return respond::error(Some(id), e),
    };
    let mut resp = json(StatusCode::OK, encode_result(id, &result));
    resp.headers_mut().insert(mcp::H_SESSION_ID, HeaderValue::from_str(&token).expect("base64url is a valid header"));
    resp
}

/// A POST in a legacy session.
pub async fn post(
    legacy: &Legacy,
    sessions: &SessionTable,
    headers: Headers<'_>,
    session_id: &[u8],
    msg: &Incoming<'_>,
    principal: &Principal,
) -> Resp {
    let session = match resolve(sessions, session_id, principal).and_then(|s| check_version(headers).map(|()| s)) {
        Ok(s) => s,
        Err(e) => return respond::error(msg.id.as_ref(), e),
    };
    if let Err(e) = session.restore(legacy.hub(), principal).await {
        return respond::error(msg.id.as_ref(), e);
    }
    let id = match msg.kind {
        // `notifications/initialized` and `notifications/cancelled` need nothing: each
        // request is answered on its own POST, and the proxy sends no server requests whose
        // answers (`Kind::Response`) it would wait for.
        Kind::Notification | Kind::Response => return empty(StatusCode::ACCEPTED),
        Kind::Request => msg.id.as_ref().expect("requests have ids"),
    };
    match legacy.request(&session, msg.method(), msg.params, principal).await {
        Ok(answer) => respond::answer(id, answer),
        Err(e) => error_answer(Some(id), &e, msg.method()),
    }
}

/// GET: the session's standalone SSE stream of unsolicited notifications.
pub async fn get(
    legacy: &Legacy,
    sessions: &SessionTable,
    headers: Headers<'_>,
    session_id: &[u8],
    principal: &Principal,
) -> Resp {
    let accepts_sse = headers.get_all(&ACCEPT).any(|v| {
        headers::to_str(v).is_some_and(|v| {
            v.split(',')
                .any(|t| matches!(t.split(';').next().map(str::trim), Some("text/event-stream" | "text/*" | "*/*")))
        })
    });
    let resolved = match resolve(sessions, session_id, principal) {
        Ok(session) => session.restore(legacy.hub(), principal).await.map(|()| session),
        Err(e) => Err(e),
    };
    let opened = resolved.and_then(|session| {
        check_version(headers)?;
        if !accepts_sse {
            return Err(DownstreamError::NotAcceptable("the stream is text/event-stream".into()).into());
        }
        let guard = session.open_stream(legacy.hub(), principal)?;
        Ok((session, guard))
    });
    let (session, guard) = match opened {
        Ok(x) => x,
        Err(e) => return respond::error(None, e),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(FRAMES);
    let cfg = legacy.hub().config();
    let opts = StreamOptions {
        framing: Framing::Sse,
        keepalive: cfg.keepalive,
        slow: cfg.slow_listener_timeout,
        stop: legacy.hub().shutdown_token().clone(),
    };
    legacy.hub().tracker().spawn(pump(session, guard, tx, opts));
    sse_response(crate::downstream::body::channel(rx))
}

/// DELETE: ends the session (its owner only; anyone else gets 404).
pub async fn delete(sessions: &SessionTable, session_id: &[u8], principal: &Principal) -> Resp {
    let ended = match headers::to_str(session_id) {
        Some(token) => sessions.end_everywhere(token, principal).await,
        None => Err(DownstreamError::SessionNotFound.into()),
    };
    match ended {
        Ok(()) => empty(StatusCode::OK),
        Err(e) => respond::error(None, e),
    }
}

fn resolve(
    sessions: &SessionTable,
    session_id: &[u8],
    principal: &Principal,
) -> Result<std::sync::Arc<super::DownstreamSession>, Error> {
    let token = headers::to_str(session_id).ok_or(DownstreamError::SessionNotFound)?;
    sessions.resolve(token, principal)
}

/// `MCP-Protocol-Version` on a legacy request: absent means 2025-03-26; present, it must be a
/// legacy version the proxy speaks (a 400 otherwise, as the legacy transport prescribes).
fn check_version(headers: Headers<'_>) -> Result<(), Error> {
    let Some(value) = headers.get(Known::ProtocolVersion) else { return Ok(()) };
    let requested = String::from_utf8_lossy(value).into_owned();
    if mcp::SUPPORTED_LEGACY.contains(&requested.as_str()) {
        return Ok(());
    }
    Err(DownstreamError::UnsupportedVersion {
        requested,
        supported: mcp::SUPPORTED_LEGACY.iter().map(|s| s.to_string()).collect(),
    }
    .into())
}

/// An error answering a legacy request: 200, legacy codes.
fn error_answer(id: Option<&crate::jsonrpc::RequestId>, e: &Error, method: &str) -> Resp {
    if e.side() != Side::Downstream {
        tracing::warn!(method, error = %e, "legacy request failed");
    }
    json(StatusCode::OK, encode_error(id, &rpc_error(e)))
}
