//! Merged lists (DESIGN §3). A proxy page holds the current page of every upstream that still
//! has pages, fetched concurrently and concatenated in config order; the proxy's `nextCursor`
//! carries each remaining upstream's own cursor. Following it reaches every page of every
//! upstream exactly once.

use bytes::Bytes;
use futures_util::future::join_all;

use super::cursor::Positions;
use super::hints::Hints;
use super::rewrite::{self, Field};
use super::{Answer, Call, Router};
use crate::config::OnError;
use crate::error::{DownstreamError, Error, UpstreamError};
use crate::jsonrpc::{RawObject, RpcError, raw_str, write_json_string};
use crate::mcp::{self, method as m};
use crate::upstream::Reply;

/// One kind of list.
#[derive(Debug)]
pub struct ListKind {
    pub method: &'static str,
    /// The result's array field.
    pub items: &'static str,
    /// The identity field of each item.
    pub field: Field,
    /// The capability an upstream must declare to be asked.
    pub capability: &'static str,
}

pub const RESOURCES: ListKind = ListKind {
    method: m::RESOURCES_LIST,
    items: "resources",
    field: Field::Uri("uri"),
    capability: "resources",
};
pub const TEMPLATES: ListKind = ListKind {
    method: m::RESOURCES_TEMPLATES_LIST,
    items: "resourceTemplates",
    field: Field::Uri("uriTemplate"),
    capability: "resources",
};
pub const TOOLS: ListKind = ListKind {
    method: m::TOOLS_LIST,
    items: "tools",
    field: Field::Name("name"),
    capability: "tools",
};
pub const PROMPTS: ListKind = ListKind {
    method: m::PROMPTS_LIST,
    items: "prompts",
    field: Field::Name("name"),
    capability: "prompts",
};

/// Why one upstream's page is missing.
enum PageError {
    Failed(UpstreamError),
    Answered(RpcError),
    Malformed(String),
}

impl Router {
    pub(super) async fn list(&self, call: &Call<'_>, kind: &ListKind) -> Result<Answer, Error> {
        let positions = self.positions(call, kind)?;
        let pages = join_all(
            positions
                .iter()
                .map(|(index, cursor)| self.page(call, kind, *index, cursor.as_deref())),
        )
        .await;

        let mut items = Vec::new();
        let mut next: Positions = Vec::new();
        let mut hints: Option<Hints> = None;
        for ((index, _), page) in positions.iter().zip(pages) {
            let upstream = &self.0.upstreams[*index];
            match page.and_then(|body| self.take_page(kind, *index, &body, &mut items)) {
                Ok((page_hints, next_cursor)) => {
                    hints = Some(hints.map_or(page_hints, |h| h.combine(page_hints)));
                    if let Some(c) = next_cursor {
                        next.push((upstream.name().to_owned(), Some(c)));
                    }
                }
                Err(e) => {
                    let reason = match &e {
                        PageError::Failed(u) => u.to_string(),
                        PageError::Answered(r) => r.to_string(),
                        PageError::Malformed(s) => s.clone(),
                    };
                    if upstream.config().on_error == OnError::FailClosed {
                        return match e {
                            PageError::Failed(u) => Err(u.into()),
                            PageError::Answered(r) => {
                                Ok(Answer::error(rewrite::error(r, &self.0.ns, *index)))
                            }
                            PageError::Malformed(reason) => Err(UpstreamError::Protocol {
                                upstream: upstream.name().to_owned(),
                                reason,
                            }
                            .into()),
                        };
                    }
                    tracing::warn!(upstream = %upstream.name(), method = kind.method, %reason, "list page skipped (fail_open)");
                }
            }
        }
        // A page no upstream contributed to is not worth caching.
        let hints = hints.unwrap_or(Hints {
            ttl_ms: 0,
            public: false,
        });
        Ok(Answer::result(self.page_result(kind, &items, &next, hints)))
    }

    /// Upstream indices and cursors for this request.
    fn positions(
        &self,
        call: &Call<'_>,
        kind: &ListKind,
    ) -> Result<Vec<(usize, Option<String>)>, Error> {
        let Some(raw) = call.params.get("cursor") else {
            return Ok(self
                .0
                .upstreams
                .iter()
                .enumerate()
                .filter(|(_, u)| u.info().is_none_or(|i| i.has(kind.capability)))
                .map(|(i, _)| (i, None))
                .collect());
        };
        let bad = |why: String| {
            Error::from(DownstreamError::InvalidParams(format!(
                "invalid cursor: {why}"
            )))
        };
        let token = raw_str(raw).ok_or_else(|| bad("not a string".into()))?;
        let positions = self
            .0
            .cursors
            .decode(kind.method, &token)
            .map_err(|e| bad(e.to_string()))?;
        positions
            .into_iter()
            .map(|(name, cursor)| {
                let index = self.0.upstreams.iter().position(|u| u.name() == name);
                index
                    .map(|i| (i, cursor))
                    .ok_or_else(|| bad(format!("unknown upstream `{name}`")))
            })
            .collect()
    }

    /// Fetches one upstream's page.
    async fn page(
        &self,
        call: &Call<'_>,
        kind: &ListKind,
        index: usize,
        cursor: Option<&str>,
    ) -> Result<Bytes, PageError> {
        let upstream = &self.0.upstreams[index];
        let params = call.upstream_params(upstream, |p| match cursor {
            Some(c) => p.set_string("cursor", c),
            None => drop(p.remove("cursor")),
        });
        match upstream.request(kind.method, &params, None).await {
            Ok(Reply::Result(body)) => Ok(body),
            Ok(Reply::Error(e)) => Err(PageError::Answered(e)),
            Err(e) => Err(PageError::Failed(e)),
        }
    }

    /// Appends a page's items to `items`; returns its hints and its `nextCursor`.
    fn take_page(
        &self,
        kind: &ListKind,
        index: usize,
        body: &Bytes,
        items: &mut Vec<u8>,
    ) -> Result<(Hints, Option<String>), PageError> {
        let malformed = |e: String| PageError::Malformed(format!("{} page: {e}", kind.method));
        let text = std::str::from_utf8(body).map_err(|e| malformed(e.to_string()))?;
        let page = RawObject::parse_str(text).map_err(|e| malformed(e.to_string()))?;
        if let Some(array) = page.get(kind.items) {
            rewrite::list_items(array, kind.field, &self.0.ns, index, items).map_err(malformed)?;
        }
        let next = match page.get("nextCursor") {
            None => None,
            Some(raw) if raw.get() == "null" => None,
            Some(raw) => Some(
                raw_str(raw)
                    .ok_or_else(|| malformed("nextCursor is not a string".into()))?
                    .into_owned(),
            ),
        };
        Ok((Hints::of(&page, self.0.upstreams[index].config()), next))
    }

    fn page_result(&self, kind: &ListKind, items: &[u8], next: &Positions, hints: Hints) -> Bytes {
        let mut out = Vec::with_capacity(items.len() + 256);
        out.extend_from_slice(b"{\"resultType\":\"complete\",");
        write_json_string(&mut out, kind.items);
        out.extend_from_slice(b":[");
        out.extend_from_slice(items);
        out.push(b']');
        if !next.is_empty() {
            out.extend_from_slice(b",\"nextCursor\":");
            write_json_string(&mut out, &self.0.cursors.encode(kind.method, next));
        }
        out.extend_from_slice(b",\"ttlMs\":");
        out.extend_from_slice(itoa::Buffer::new().format(hints.ttl_ms).as_bytes());
        out.extend_from_slice(b",\"cacheScope\":\"");
        out.extend_from_slice(hints.scope().as_bytes());
        out.extend_from_slice(b"\",\"_meta\":{");
        write_json_string(&mut out, mcp::META_SERVER_INFO);
        out.push(b':');
        out.extend_from_slice(self.0.server_info.as_bytes());
        out.extend_from_slice(b"}}");
        Bytes::from(out)
    }
}
