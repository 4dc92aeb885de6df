//! Requests answered by one upstream: `resources/read`, `tools/call`, `prompts/get` and
//! `completion/complete`, routed by namespace and rewritten both ways.

use crate::upstream::OnBehalf;
use bytes::Bytes;

use super::fetched::{Fetched, Got, Served};
use super::hints::Hints;
use super::large::{Began, RelaySlot};
use super::namespace::{Route, Unrouted};
use super::rewrite;
use super::{Answer, CacheStatus, Call, Payload, Routing};
use crate::auth::policy::Kind;
use crate::cache::{CachedMethod, Stored};
use crate::error::{DownstreamError, Error, Reason, UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::{RawObject, RpcError, Spliced, code};
use crate::upstream::catalog::Named;
use crate::upstream::{Fetch, Reply};

/// Which request field names the target, and how it is namespaced.
#[derive(Clone, Copy)]
enum Target {
    Uri,
    Name,
}

impl Routing {
    pub(super) async fn read(&self, call: &Call<'_>) -> Result<Answer, Error> {
        let uri = required_str(call.params, "uri")?;
        self.0.ns.check_uri(&uri)?;
        let not_found = || Error::from(DownstreamError::ResourceNotFound { uri: uri.to_string() });
        let route = self.0.ns.route_uri(&uri).map_err(|e| unrouted(e, &uri))?;
        let (candidates, upstream_uri) = route.candidates();
        // A forbidden URI is not found: the same answer, before the cache is consulted. (Not
        // collected: a vector of them was an allocation per read.)
        let mut candidates =
            candidates.iter().copied().filter(|&i| self.allowed(call, i, Kind::Uri, upstream_uri)).peekable();
        while let Some(index) = candidates.next() {
            crate::telemetry::record_upstream(self.0.upstreams[index].name());
            let key = self.cache_key(call, index, CachedMethod::ResourcesRead, "uri", Some(upstream_uri));
            let mut served = self
                .through_cache(call, key, Some(upstream_uri), || self.fetch_read(call, index, upstream_uri))
                .await?;
            let mut relay = None;
            if let Got::Streamed(slot) = &served.got {
                relay = slot.take();
                if relay.is_none() {
                    // Another caller of the flight took the stream: this one reads its own.
                    let fetched = Box::pin(self.fetch_read(call, index, upstream_uri)).await?;
                    served = Served::fresh(fetched, CacheStatus::Bypass);
                    relay = if let Got::Streamed(slot) = &served.got { slot.take() } else { None };
                }
            }
            let answer = match served.got {
                Got::NotFound if candidates.peek().is_some() => continue,
                Got::NotFound => Err(not_found()),
                Got::Result(body) => {
                    Ok(Answer { outcome: Ok(Payload::Json(body)), cache: served.status, age: served.age })
                }
                Got::Streamed(_) => match relay {
                    Some(r) => Ok(Answer { outcome: Ok(Payload::Relayed(r)), cache: CacheStatus::Bypass, age: None }),
                    None => Err(Error::Internal("a relayed read was taken twice".into())),
                },
                Got::Relayed(e) => Ok(Answer { outcome: Err(e), cache: served.status, age: None }),
                Got::Page { .. } => Err(Error::Internal("a read produced a list page".into())),
            };
            return answer;
        }
        Err(not_found())
    }

    /// Reads `uri` from upstream `index` and prepares the answer for the cache.
    async fn fetch_read(&self, call: &Call<'_>, index: usize, uri: &str) -> Result<Fetched, Error> {
        let upstream = &self.0.upstreams[index];
        let params = call.upstream_params(upstream, |p| p.set_string("uri", uri));
        // Past what the cache can hold, an answer is relayed as it arrives, never held whole.
        let large = self.0.cache.max_entry_bytes().min(upstream.config().max_message_bytes as u64) as usize;
        let fetched = upstream.read_with(&params, OnBehalf::Caller(call.principal), large).await?;
        let error = |e: RpcError| match is_not_found(&e) {
            true => Fetched { got: Got::NotFound, stored: Some(Stored::NotFound), public: false, ttl_ms: 0 },
            false => {
                let e = rewrite::error(e, &self.0.ns, index);
                Fetched { got: Got::Relayed(e), stored: None, public: false, ttl_ms: 0 }
            }
        };
        let body = match fetched {
            Fetch::Reply(Reply::Result(body)) => body,
            Fetch::Reply(Reply::Error(e)) => return Ok(error(e)),
            Fetch::Large(body) => match self.relay(index, body).await? {
                Began::Error(e) => return Ok(error(e)),
                Began::Result(relay) => {
                    let got = Got::Streamed(RelaySlot::new(relay));
                    return Ok(Fetched { got, stored: None, public: false, ttl_ms: 0 });
                }
            },
        };
        let malformed = |reason: String| {
            Error::from(UpstreamError::new(upstream.name(), UpstreamErrorKind::Protocol { reason: reason.into() }))
        };
        let text = std::str::from_utf8(&body).map_err(|e| malformed(e.to_string()))?;
        let mut obj = RawObject::parse_str(text).map_err(|e| malformed(format!("read result: {e}")))?;
        let mut rewritten = rewrite::read_object(&mut obj, &self.0.ns, index).map_err(|e| malformed(e.to_string()))?;
        let judged = Hints::of(&obj, upstream.config(), self.0.cache.max_ttl());
        judged.count(upstream.meter());
        let hints = judged.hints;
        // The client is told what the proxy honours: the scope it keeps the answer in, and
        // the TTL it lowered (a client's own cache must not keep it longer either).
        if judged.changed() {
            obj.set_u64("ttlMs", hints.ttl_ms);
            obj.set_string("cacheScope", hints.scope());
            rewritten = true;
        }
        // Only complete results are cacheable; `input_required` (MRTR) never is.
        let complete = obj.get_str("resultType").is_none_or(|t| t == "complete");
        let stored = complete.then(|| Stored::result_of(&obj));
        let got = Got::Result(Spliced::whole(if rewritten { Bytes::from(obj.to_vec()) } else { body.clone() }));
        Ok(Fetched { got, stored, public: hints.public, ttl_ms: hints.ttl_ms })
    }

    /// `tools/call` and `prompts/get`: routed to the one upstream that owns the name (see
    /// [`Routing::owner`]) and sent there once. MRTR: a retry of a call the proxy holds
    /// resumes it; a call whose client can answer questions goes the relaying path, where a
    /// legacy upstream's mid-call questions become `input_required`.
    pub(super) async fn call_named(&self, call: &Call<'_>) -> Result<Answer, Error> {
        let name = required_str(call.params, "name")?;
        let kind = Named::of_call(call.method).expect("routed here for tools/call and prompts/get only");
        let unknown = || Error::from(DownstreamError::InvalidParams(format!("unknown {} `{name}`", kind.singular())));
        let Some(route) = self.0.ns.route_name(&name) else {
            return Err(unknown());
        };
        let (index, target) = self.owner(kind, &route).await;
        let upstream = &self.0.upstreams[index];
        crate::telemetry::record_upstream(upstream.name());
        if self.restricted(index) {
            // Forbidden and absent look alike: on an upstream with rules the proxy answers
            // both itself, with the answer a name no upstream serves gets.
            let what = if kind == Named::Tools { Kind::Tool } else { Kind::Prompt };
            if !self.allowed(call, index, what, target) || upstream.offers(kind, target).await == Some(false) {
                return Err(unknown());
            }
        }
        if kind == Named::Tools && upstream.is_http() {
            // The tool's `x-mcp-header` annotations must be known to mirror its arguments.
            if let Err(e) = upstream.ensure_catalog(kind).await {
                tracing::debug!(upstream = %upstream.name(), error = %e, "tools/list walk failed; no Mcp-Param headers");
            }
        }
        if let Some(state) = call.params.get_str("requestState")
            && super::held::is_handle(&state)
        {
            return self.resume_held(call, &state, target).await;
        }
        self.call_relaying(call, index, target).await
    }

    /// The upstream that owns a tool or prompt name: the prefixed one, or among unprefixed
    /// upstreams the first in config order whose list has it (the first candidate when none
    /// lists it, so that the caller gets that upstream's own "unknown" answer). Deterministic,
    /// and never more than one.
    async fn owner<'r>(&self, kind: Named, route: &Route<'r>) -> (usize, &'r str) {
        let (candidates, target) = route.candidates();
        if candidates.len() > 1 {
            for &index in candidates {
                if self.0.upstreams[index].offers(kind, target).await == Some(true) {
                    return (index, target);
                }
            }
        }
        (candidates[0], target)
    }

    pub(super) async fn complete(&self, call: &Call<'_>) -> Result<Answer, Error> {
        let bad = |why: &str| Error::from(DownstreamError::InvalidParams(why.to_owned()));
        let reference = call.params.get("ref").ok_or_else(|| bad("missing `ref`"))?;
        let reference = RawObject::parse(reference).map_err(|_| bad("`ref` must be an object"))?;
        let (target, key) = match reference.get_str("type").as_deref() {
            Some("ref/prompt") => (Target::Name, "name"),
            Some("ref/resource") => (Target::Uri, "uri"),
            _ => return Err(bad("`ref.type` must be ref/prompt or ref/resource")),
        };
        let value = reference.get_str(key).ok_or_else(|| bad("`ref` lacks its name or uri"))?;
        let route = match target {
            Target::Uri => {
                self.0.ns.check_template(&value)?;
                self.0.ns.route_uri(&value).map_err(|e| match e {
                    Unrouted::Ambiguous => unrouted(e, &value),
                    Unrouted::Unknown => bad(&format!("no upstream serves `{value}`")),
                })?
            }
            Target::Name => {
                self.0.ns.route_name(&value).ok_or_else(|| bad(&format!("no upstream serves `{value}`")))?
            }
        };
        let kind = match target {
            Target::Uri => Kind::Uri,
            Target::Name => Kind::Prompt,
        };
        let (index, reply) = self
            .forward(call, route, kind, |p, v| {
                let mut r = reference.clone();
                r.set_string(key, v);
                p.set("ref", std::borrow::Cow::Owned(r.to_raw()));
            })
            .await?;
        match reply {
            Reply::Result(body) => Ok(Answer::result(body)),
            Reply::Error(e) => Ok(Answer::error(rewrite::error(e, &self.0.ns, index))),
        }
    }

    /// Sends a `completion/complete` to the routed upstream. An unprefixed value goes to the
    /// unprefixed upstreams in config order until one does not answer "not found" (first
    /// wins): completion has no side effects, so asking the next one is safe.
    async fn forward(
        &self,
        call: &Call<'_>,
        route: Route<'_>,
        kind: Kind,
        set: impl Fn(&mut RawObject<'_>, &str),
    ) -> Result<(usize, Reply), Error> {
        let (candidates, value) = route.candidates();
        // Forbidden is answered like a value no upstream serves.
        let candidates: Vec<usize> =
            candidates.iter().copied().filter(|&i| self.allowed(call, i, kind, value)).collect();
        if candidates.is_empty() {
            return Err(DownstreamError::InvalidParams(format!("no upstream serves `{value}`")).into());
        }
        let mut last = None;
        for (n, &index) in candidates.iter().enumerate() {
            let upstream = &self.0.upstreams[index];
            crate::telemetry::record_upstream(upstream.name());
            let params = call.upstream_params(upstream, |p| set(p, value));
            let reply = upstream.request_with(call.method, &params, None, OnBehalf::Caller(call.principal)).await?;
            let more = n + 1 < candidates.len();
            match &reply {
                Reply::Error(e) if more && is_not_found(e) => {
                    last = Some((index, reply));
                }
                _ => return Ok((index, reply)),
            }
        }
        last.ok_or_else(|| Error::Internal("no upstream candidates".into()))
    }

    pub(super) fn rewrite(&self, r: Result<Bytes, rewrite::Unrewritable>, index: usize) -> Result<Bytes, Error> {
        r.map_err(|e| {
            UpstreamError::new(self.0.upstreams[index].name(), UpstreamErrorKind::Protocol { reason: Reason::of(e) })
                .into()
        })
    }
}

/// The answer for a resource URI that routes nowhere.
fn unrouted(e: Unrouted, uri: &str) -> Error {
    let uri = uri.to_owned();
    match e {
        Unrouted::Unknown => DownstreamError::ResourceNotFound { uri },
        Unrouted::Ambiguous => DownstreamError::AmbiguousUri { uri },
    }
    .into()
}

/// A required string parameter.
fn required_str<'o>(params: &'o RawObject<'_>, key: &str) -> Result<std::borrow::Cow<'o, str>, Error> {
    params.get_str(key).ok_or_else(|| DownstreamError::InvalidParams(format!("missing or non-string `{key}`")).into())
}

/// Whether an upstream error means "not found": -32602 (2026-07-28; for a read, whose only
/// parameter is the URI, that is what it means), or the legacy -32002.
fn is_not_found(e: &RpcError) -> bool {
    e.code == code::LEGACY_RESOURCE_NOT_FOUND || e.code == code::INVALID_PARAMS
}
