//! Merged lists (DESIGN §3). A proxy page holds the current page of every upstream that still
//! has pages, fetched concurrently and concatenated in config order; the proxy's `nextCursor`
//! carries each remaining upstream's own cursor. Following it reaches every page of every
//! upstream exactly once.

use crate::upstream::OnBehalf;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::future::join_all;

use super::cursor::Positions;
use super::fetched::{Fetched, Got, Served};
use super::hints::Hints;
use super::rewrite::{self, Field};
use super::{Answer, CacheStatus, Call, Routing};
use crate::cache::{CachedMethod, Stored};
use crate::config::OnError;
use crate::error::{DownstreamError, Error, UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::{RawObject, RpcError, raw_str, write_json_string};
use crate::mcp::{self, List};
use crate::telemetry::metrics::NarrowReason;
use crate::upstream::Reply;

/// The identity field of each item of `list`, and how it is namespaced.
pub(super) fn identity(list: List) -> Field {
    match list {
        List::Resources => Field::Uri("uri"),
        List::Templates => Field::Uri("uriTemplate"),
        List::Tools | List::Prompts => Field::Name("name"),
    }
}

/// Per upstream and list: until when its pages count as private (DESIGN §3), in ms on
/// tokio's clock (which paused-time tests move).
pub(super) struct ScopeMemo {
    origin: tokio::time::Instant,
    private_until: Vec<[AtomicU64; 4]>,
}

impl ScopeMemo {
    pub(super) fn new(upstreams: usize) -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            private_until: (0..upstreams).map(|_| Default::default()).collect(),
        }
    }

    /// Whether a page of `list` from upstream slot `index` that its upstream scoped `public` (or
    /// not) for `ttl_ms` counts as public: not while a private page of it is within its TTL.
    pub(super) fn public(&self, index: usize, list: List, public: bool, ttl_ms: u64) -> bool {
        let Some(slot) = self.private_until.get(index).map(|s| &s[list.slot()]) else { return public };
        let now = self.origin.elapsed().as_millis() as u64;
        if !public {
            slot.fetch_max(now + ttl_ms, Ordering::Relaxed);
            return false;
        }
        slot.load(Ordering::Relaxed) <= now
    }
}

/// Sets or removes `cursor` in request params.
fn set_cursor(p: &mut RawObject<'_>, cursor: Option<&str>) {
    match cursor {
        Some(c) => p.set_string("cursor", c),
        None => drop(p.remove("cursor")),
    }
}

/// The cache status of a merged page: a miss if any page missed, a hit only if all hit.
fn combine_status(a: CacheStatus, b: CacheStatus) -> CacheStatus {
    use CacheStatus::*;
    match (a, b) {
        (Miss, _) | (_, Miss) => Miss,
        (Stale, _) | (_, Stale) => Stale,
        (Bypass, _) | (_, Bypass) => Bypass,
        (Hit, Hit) => Hit,
    }
}

/// Why one upstream's page is missing.
enum PageError {
    Failed(UpstreamError),
    Answered(RpcError),
}

impl Routing {
    pub(super) async fn list(&self, call: &Call<'_>, kind: List) -> Result<Answer, Error> {
        let positions = self.positions(call, kind)?;
        let pages =
            join_all(positions.iter().map(|(index, cursor)| self.page(call, kind, *index, cursor.as_deref()))).await;

        let mut items = Vec::new();
        let mut next: Positions = Vec::new();
        let mut hints: Option<Hints> = None;
        let mut status: Option<CacheStatus> = None;
        let mut age = None;
        for ((index, _), page) in positions.iter().zip(pages) {
            let upstream = &self.0.upstreams[*index];
            let failure = match page {
                Ok(Served {
                    got: Got::Page { items: page_items, next: page_next, .. },
                    public,
                    ttl_ms,
                    status: s,
                    age: a,
                }) => {
                    let page_items = self.filter_page(call, kind, *index, page_items)?;
                    if !page_items.is_empty() {
                        if !items.is_empty() {
                            items.push(b',');
                        }
                        items.extend_from_slice(&page_items);
                    }
                    let mut public = self.scope_memo(*index, kind, public, ttl_ms);
                    // Narrowed by the caller's rules, the page is no longer the same document
                    // for everyone.
                    if public && self.restricted(*index) {
                        upstream.meter().scope_narrowed(NarrowReason::Filtered);
                        public = false;
                    }
                    let page_hints = Hints { ttl_ms, public };
                    hints = Some(hints.map_or(page_hints, |h| h.combine(page_hints)));
                    status = Some(status.map_or(s, |prev| combine_status(prev, s)));
                    age = age.max(a);
                    if let Some(c) = page_next {
                        next.push((upstream.name().to_owned(), Some(c.into())));
                    }
                    continue;
                }
                Ok(Served { got: Got::Relayed(e), .. }) => PageError::Answered(e),
                Ok(_) => PageError::Failed(UpstreamError::new(
                    upstream.name(),
                    UpstreamErrorKind::Protocol { reason: "list request produced no page".into() },
                )),
                Err(Error::Upstream(u)) => PageError::Failed(u),
                Err(other) => return Err(other),
            };
            if upstream.config().on_error == OnError::FailClosed {
                return match failure {
                    PageError::Failed(u) => Err(u.into()),
                    PageError::Answered(r) => Ok(Answer::error(rewrite::error(r, &self.0.ns, *index))),
                };
            }
            let reason = match &failure {
                PageError::Failed(u) => u.to_string(),
                PageError::Answered(r) => r.to_string(),
            };
            tracing::warn!(upstream = %upstream.name(), method = kind.method(), %reason, "list page skipped (fail_open)");
            self.0.metrics.list_skip(upstream.name());
        }
        // A page no upstream contributed to is not worth caching downstream either.
        let mut hints = hints.unwrap_or(Hints { ttl_ms: 0, public: false });
        // A next cursor is bound to its principal: another caller could not follow it.
        if !next.is_empty() && call.principal.identity().is_some() {
            hints.public = false;
        }
        Ok(Answer {
            outcome: Ok(self
                .page_result(
                    kind,
                    &super::cursor::owner_of(call.principal.identity().map(|i| i.id.as_str())),
                    &items,
                    &next,
                    hints,
                )
                .into()),
            cache: status.unwrap_or(CacheStatus::Bypass),
            age,
        })
    }

    /// DESIGN §3: a list that was private within its last TTL stays private, so that a page
    /// served from an older public entry cannot make a merged page public.
    fn scope_memo(&self, index: usize, kind: List, public: bool, ttl_ms: u64) -> bool {
        let slot = self.0.upstreams[index].slot() as usize;
        self.0.shared.scope_memo.public(slot, kind, public, ttl_ms)
    }

    /// One upstream's page, through the cache.
    async fn page(&self, call: &Call<'_>, kind: List, index: usize, cursor: Option<&str>) -> Result<Served, Error> {
        let key = self.cache_key(call, index, CachedMethod::from(kind), "cursor", cursor);
        self.through_cache(call, key, None, || self.fetch_page(call, kind, index, cursor)).await
    }

    /// Fetches one upstream's page and puts its items in downstream form.
    async fn fetch_page(
        &self,
        call: &Call<'_>,
        kind: List,
        index: usize,
        cursor: Option<&str>,
    ) -> Result<Fetched, Error> {
        let upstream = &self.0.upstreams[index];
        let params = call.upstream_params(upstream, |p| set_cursor(p, cursor));
        let body = match upstream.request_with(kind.method(), &params, None, OnBehalf::Caller(call.principal)).await? {
            Reply::Result(body) => body,
            Reply::Error(e) => {
                return Ok(Fetched { got: Got::Relayed(e), stored: None, public: false, ttl_ms: 0 });
            }
        };
        let malformed = |e: String| {
            Error::from(UpstreamError::new(
                upstream.name(),
                UpstreamErrorKind::Protocol { reason: format!("{} page: {e}", kind.method()).into() },
            ))
        };
        let text = std::str::from_utf8(&body).map_err(|e| malformed(e.to_string()))?;
        let page = RawObject::parse_str(text).map_err(|e| malformed(e.to_string()))?;
        let mut items = Vec::new();
        if let Some(array) = page.get(kind.items()) {
            rewrite::list_items(array, identity(kind), &self.0.ns, index, &mut items)
                .map_err(|e| malformed(e.to_string()))?;
            self.remember_page(index, kind, &items);
        }
        let next: Option<Box<str>> = match page.get("nextCursor") {
            None => None,
            Some(raw) if raw.get() == "null" => None,
            Some(raw) => Some(raw_str(raw).ok_or_else(|| malformed("nextCursor is not a string".into()))?.into()),
        };
        let judged = Hints::of(&page, upstream.config(), self.0.cache.max_ttl());
        judged.count(upstream.meter());
        let hints = judged.hints;
        let items = Bytes::from(items);
        let complete = page.get_str("resultType").is_none_or(|t| t == "complete");
        let stored = complete.then(|| Stored::Page { items: items.clone(), next: next.clone(), public: hints.public });
        Ok(Fetched { got: Got::Page { items, next }, stored, public: hints.public, ttl_ms: hints.ttl_ms })
    }

    /// Notes which passthrough URIs (and templates) upstream `index` listed on a page (its
    /// items in downstream form), so that a read of one goes there.
    pub(super) fn remember_page(&self, index: usize, kind: List, items: &[u8]) {
        if let Field::Uri(key) = identity(kind) {
            self.0.ns.remember_page(index, key, items);
        }
    }

    /// Upstream indices and cursors for this request.
    fn positions(&self, call: &Call<'_>, kind: List) -> Result<Vec<(usize, Option<String>)>, Error> {
        let Some(raw) = call.params.get("cursor") else {
            return Ok(self
                .0
                .upstreams
                .iter()
                .enumerate()
                .filter(|(i, u)| {
                    u.info().is_none_or(|info| info.has(kind.capability().name())) && self.reaches(call, *i)
                })
                .map(|(i, _)| (i, None))
                .collect());
        };
        let bad = |why: String| Error::from(DownstreamError::InvalidParams(format!("invalid cursor: {why}")));
        let token = raw_str(raw).ok_or_else(|| bad("not a string".into()))?;
        let owner = super::cursor::owner_of(call.principal.identity().map(|i| i.id.as_str()));
        let positions = self.0.cursors.decode(kind.method(), &owner, &token).map_err(|e| bad(e.to_string()))?;
        let positions: Vec<(usize, Option<String>)> = positions
            .into_iter()
            .map(|(name, cursor)| {
                let index = self.0.upstreams.iter().position(|u| u.name() == name);
                index.map(|i| (i, cursor)).ok_or_else(|| bad(format!("unknown upstream `{name}`")))
            })
            .collect::<Result<_, _>>()?;
        // A cursor naming an upstream the caller cannot reach (someone else's cursor) yields
        // nothing from it.
        Ok(positions.into_iter().filter(|(i, _)| self.reaches(call, *i)).collect())
    }

    fn page_result(&self, kind: List, owner: &str, items: &[u8], next: &Positions, hints: Hints) -> Bytes {
        let mut out = Vec::with_capacity(items.len() + 256);
        out.extend_from_slice(b"{\"resultType\":\"complete\",");
        write_json_string(&mut out, kind.items());
        out.extend_from_slice(b":[");
        out.extend_from_slice(items);
        out.push(b']');
        if !next.is_empty() {
            out.extend_from_slice(b",\"nextCursor\":");
            write_json_string(&mut out, &self.0.cursors.encode(kind.method(), owner, next));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_private_page_keeps_its_list_private_for_its_ttl() {
        let memo = ScopeMemo::new(2);
        assert!(memo.public(0, List::Tools, true, 1000));
        assert!(!memo.public(0, List::Tools, false, 1000));
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!memo.public(0, List::Tools, true, 1000), "still within the private page's TTL");
        assert!(memo.public(0, List::Prompts, true, 1000), "other lists are not affected");
        assert!(memo.public(1, List::Tools, true, 1000), "other upstreams are not affected");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(memo.public(0, List::Tools, true, 1000), "public again once the TTL has passed");
    }
}
