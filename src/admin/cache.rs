//! The admin listener's cache operations: `GET /admin/cache`, the data of the admin page's
//! Cache view (the top entries by hits and by bytes), and `POST /admin/cache/purge`, which
//! removes entries by URI, URI prefix or upstream (on every replica with `[cluster]`).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{Value, json};

use super::{Admin, text};
use crate::cache::{CachedMethod, EntryView};
use crate::mcp::method as m;
use crate::router::{PurgeError, PurgeRequest};

/// Longest a purge body may take to arrive: an operator's client sends it at once.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys a purge body may have; exactly one of them.
const KEYS: [&str; 3] = ["uri", "uri_prefix", "upstream"];

/// Why a purge body was refused (downstream: the operator's request); the text is the 400's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum BadPurge {
    #[error("the body is larger than [admin] max_body_bytes ({0} bytes)")]
    TooLarge(u64),
    #[error("the body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
    Slow,
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error("the body must be a JSON object with one of `uri`, `uri_prefix`, `upstream`")]
    NotObject,
    #[error("unknown key `{0}` (expected one of `uri`, `uri_prefix`, `upstream`)")]
    UnknownKey(String),
    #[error("give exactly one of `uri`, `uri_prefix`, `upstream`, not {0}")]
    KeyCount(usize),
    #[error("`{0}` must be a string")]
    WrongType(&'static str),
}

/// Reads a purge body: exactly one of `{"uri": …}`, `{"uri_prefix": …}`, `{"upstream": …}`.
fn parse_purge(body: &[u8]) -> Result<PurgeRequest, BadPurge> {
    let value: Value = serde_json::from_slice(body).map_err(|e| BadPurge::NotJson(e.to_string()))?;
    let Value::Object(map) = value else { return Err(BadPurge::NotObject) };
    if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(BadPurge::UnknownKey(unknown.clone()));
    }
    let mut given = KEYS.into_iter().filter_map(|k| map.get(k).map(|v| (k, v)));
    let (Some((key, value)), None) = (given.next(), given.next()) else {
        return Err(BadPurge::KeyCount(map.len()));
    };
    let text = value.as_str().ok_or(BadPurge::WrongType(key))?.to_owned();
    Ok(match key {
        "uri" => PurgeRequest::Uri(text),
        "uri_prefix" => PurgeRequest::UriPrefix(text),
        _ => PurgeRequest::Upstream(text),
    })
}

fn json_response(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    text(status, "application/json", body.to_string())
}

impl Admin {
    /// `POST /admin/cache/purge`: `200 {"purged": N}` (entries removed on this replica; with
    /// `[cluster]` also `"shared"`, values deleted from Redis), `400 {"error": …}` for a body
    /// that names nothing valid, `503` when the shared tier failed after the local purge.
    pub async fn purge<B>(&self, req: Request<B>) -> Response<Full<Bytes>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let limit = self.0.max_body_bytes;
        let read = Limited::new(req.into_body(), usize::try_from(limit).unwrap_or(usize::MAX)).collect();
        let body = match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
            Ok(Ok(body)) => body.to_bytes(),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return bad(&BadPurge::TooLarge(limit)),
            Ok(Err(e)) => return bad(&BadPurge::NotJson(e.to_string())),
            Err(_) => return bad(&BadPurge::Slow),
        };
        let request = match parse_purge(&body) {
            Ok(r) => r,
            Err(e) => return bad(&e),
        };
        match self.0.router.purge(&request).await {
            Ok(purged) => {
                tracing::info!(purge = request.kind(), local = purged.local, shared = ?purged.shared, "cache purged");
                let mut body = json!({ "purged": purged.local });
                if let Some(shared) = purged.shared {
                    body["shared"] = json!(shared);
                }
                json_response(StatusCode::OK, body)
            }
            Err(e) => {
                let error = crate::error::chain(&e);
                if let PurgeError::Shared { local, .. } = e {
                    tracing::warn!(%error, "cache purge incomplete");
                    return json_response(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": error, "purged": local }));
                }
                json_response(StatusCode::BAD_REQUEST, json!({ "error": error }))
            }
        }
    }

    /// `GET /admin/cache`: the entry count and bytes, and the top entries by hits and by bytes,
    /// each with its upstream, method, URI as clients see it (reads) or list, scope (a private
    /// entry's owner only as a short keyed digest), remaining TTL, bytes and hits.
    pub fn cache_view(&self) -> Value {
        let router = &self.0.router;
        let cache = router.cache();
        let top = cache.top(self.0.cache_view_top);
        let upstreams = router.upstreams();
        let ns = router.namespace();
        let row = |e: &EntryView| {
            let position = upstreams.iter().position(|u| u.slot() == e.upstream)?;
            let (method, list) = method_and_list(e.method);
            let uri = e.uri.as_deref().map(|uri| ns.uri_out(position, uri).into_owned());
            Some(json!({
                "upstream": upstreams[position].name(),
                "method": method,
                "list": list,
                "uri": uri,
                "scope": if e.public { "public" } else { "private" },
                "owner": e.owner,
                "ttl_ms": e.remaining_ms,
                "stale": e.stale,
                "bytes": e.bytes,
                "hits": e.hits,
            }))
        };
        let rows = |list: &[EntryView]| list.iter().filter_map(row).collect::<Vec<_>>();
        json!({
            "entries": cache.entry_count(),
            "bytes": cache.weighted_size(),
            "top": self.0.cache_view_top,
            "by_hits": rows(&top.by_hits),
            "by_bytes": rows(&top.by_bytes),
            "upstreams": upstreams.iter().map(|u| u.name()).collect::<Vec<_>>(),
        })
    }
}

fn bad(why: &BadPurge) -> Response<Full<Bytes>> {
    json_response(StatusCode::BAD_REQUEST, json!({ "error": why.to_string() }))
}

/// The request method an entry answers, and the list it holds a page of.
fn method_and_list(method: CachedMethod) -> (&'static str, Option<&'static str>) {
    match method {
        CachedMethod::ResourcesRead => (m::RESOURCES_READ, None),
        CachedMethod::ResourcesList => (m::RESOURCES_LIST, Some("resources")),
        CachedMethod::TemplatesList => (m::RESOURCES_TEMPLATES_LIST, Some("resource templates")),
        CachedMethod::ToolsList => (m::TOOLS_LIST, Some("tools")),
        CachedMethod::PromptsList => (m::PROMPTS_LIST, Some("prompts")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_body_names_exactly_one_thing_by_a_string() {
        let ok = |b: &str| parse_purge(b.as_bytes());
        assert_eq!(ok(r#"{"uri":"docs+file:///a.md"}"#), Ok(PurgeRequest::Uri("docs+file:///a.md".into())));
        assert_eq!(ok(r#"{"uri_prefix":""}"#), Ok(PurgeRequest::UriPrefix(String::new())));
        assert_eq!(ok(r#"{"upstream":"docs"}"#), Ok(PurgeRequest::Upstream("docs".into())));
        assert_eq!(ok(r#"{"url":"x"}"#), Err(BadPurge::UnknownKey("url".into())));
        assert_eq!(ok(r#"{"uri":"a","upstream":"docs"}"#), Err(BadPurge::KeyCount(2)));
        assert_eq!(ok("{}"), Err(BadPurge::KeyCount(0)));
        assert_eq!(ok(r#"{"uri":7}"#), Err(BadPurge::WrongType("uri")));
        assert_eq!(ok(r#"["uri"]"#), Err(BadPurge::NotObject));
        assert!(matches!(ok("uri=a"), Err(BadPurge::NotJson(_))));
        assert!(BadPurge::KeyCount(2).to_string().contains("exactly one"));
    }
}
