//! One routed request and its answer.

use std::borrow::Cow;

use bytes::Bytes;

use sha2::{Digest, Sha256};

use crate::auth::Principal;
use crate::cache::Owner;
use crate::jsonrpc::{RawObject, RpcError, Spliced};
use crate::mcp;
use crate::upstream::Upstream;

/// A validated downstream request, borrowed from its body.
pub struct Call<'a> {
    pub method: &'a str,
    /// Top-level `params`, `_meta` included.
    pub params: &'a RawObject<'a>,
    /// `params._meta`.
    pub meta: &'a RawObject<'a>,
    pub principal: &'a Principal,
    /// Where the upstream's `notifications/progress` for this request go, when the client
    /// asked for progress (`_meta.progressToken`) on a transport that can carry it.
    pub progress: Option<Progress>,
}

/// Where a request's progress notifications go (see [`crate::upstream::ProgressSink`]).
pub type Progress = crate::upstream::ProgressSink;

impl<'a> Call<'a> {
    /// A call with no progress relay.
    pub fn new(method: &'a str, params: &'a RawObject<'a>, meta: &'a RawObject<'a>, principal: &'a Principal) -> Self {
        Call { method, params, meta, principal, progress: None }
    }

    /// Whose private results this call may see and store.
    ///
    /// An authenticated caller owns its own partition. For an anonymous caller (auth off),
    /// the owner is a digest of the request's canonical `_meta` (top-level keys sorted,
    /// values as sent) minus what the proxy rewrites before the upstream sees it
    /// (`progressToken`, the protocol version, an exported trace's `traceparent`). Why this is
    /// safe: the upstream sees only the proxy's own credential and the request bytes, and the
    /// cache key already holds the canonical params, so the `_meta` is the only part of the
    /// request the upstream could personalise on; two requests whose keys and owners are equal reach it as identical
    /// bytes, which it cannot tell apart. Callers whose `_meta` differs in anything (for
    /// example `clientInfo`) never share a private entry.
    pub fn owner(&self) -> Owner {
        if let Principal::User(_) = self.principal {
            return Owner::Principal(self.principal.clone());
        }
        let mut entries: Vec<(&str, &str)> = self
            .meta
            .iter()
            .filter(|(k, _)| *k != "progressToken" && *k != mcp::META_PROTOCOL_VERSION && !rewritten_trace(k))
            .map(|(k, v)| (k, v.get()))
            .collect();
        entries.sort_unstable();
        let mut h = Sha256::new();
        for (k, v) in entries {
            // Length-prefixed, so that no two different lists hash the same input.
            h.update((k.len() as u64).to_le_bytes());
            h.update(k.as_bytes());
            h.update((v.len() as u64).to_le_bytes());
            h.update(v.as_bytes());
        }
        let digest = h.finalize();
        Owner::Anonymous(digest[..16].try_into().expect("16 of 32 bytes"))
    }

    /// The `params` to send `upstream`: the downstream's, with `_meta` adjusted for the
    /// upstream (its protocol version; `progressToken` only where progress is relayed: an HTTP
    /// upstream answers it on the request's own stream, so the client's token passes through
    /// unchanged) and `edit` applied.
    pub fn upstream_params(&self, upstream: &Upstream, edit: impl FnOnce(&mut RawObject<'a>)) -> Vec<u8> {
        let mut meta = self.meta.clone();
        meta.set_string(mcp::META_PROTOCOL_VERSION, upstream.protocol_version());
        // Legacy and stdio clients send no capabilities; modern upstreams require the key.
        if !meta.contains(mcp::META_CLIENT_CAPABILITIES) {
            meta.set(
                mcp::META_CLIENT_CAPABILITIES,
                Cow::Owned(crate::jsonrpc::parse_raw("{}").expect("valid").to_owned()),
            );
        }
        if self.progress.is_none() || !upstream.is_http() {
            meta.remove("progressToken");
        }
        let mut params = self.params.clone();
        params.set("_meta", Cow::Owned(meta.to_raw()));
        edit(&mut params);
        params.to_vec()
    }
}

/// Whether `_meta` key `k` is the trace context the proxy replaces with its own before the
/// upstream sees it (with trace export, the `otel` feature): like the protocol version, it
/// tells no anonymous callers apart.
fn rewritten_trace(k: &str) -> bool {
    cfg!(feature = "otel") && k == "traceparent"
}

/// How the cache took part in an answer (the `resmux-cache` response header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    Stale,
    Bypass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Stale => "stale",
            CacheStatus::Bypass => "bypass",
        }
    }
}

/// A result's JSON text: whole or in shared pieces, or relayed from the upstream as it
/// arrives (a read past the cache's `max_entry_bytes`).
#[derive(Debug)]
pub enum Payload {
    Json(Spliced),
    /// Boxed: a relay's state is large beside two `Bytes`.
    Relayed(Box<super::large::Relay>),
}

impl Payload {
    /// The text in one piece, for a transport that writes whole messages: a relayed result
    /// is read to its end (bounded by the upstream's `max_message_bytes`).
    pub async fn into_bytes(self) -> Result<Bytes, crate::error::UpstreamError> {
        match self {
            Payload::Json(text) => Ok(text.to_bytes()),
            Payload::Relayed(relay) => relay.collect().await,
        }
    }
}

impl From<Bytes> for Payload {
    fn from(text: Bytes) -> Self {
        Payload::Json(Spliced::whole(text))
    }
}

/// What the proxy answers: a result (raw JSON) or a JSON-RPC error relayed from an upstream.
#[derive(Debug)]
pub struct Answer {
    pub outcome: Result<Payload, RpcError>,
    pub cache: CacheStatus,
    /// Seconds since the answer was fetched from upstream, for cached answers.
    pub age: Option<u64>,
}

impl Answer {
    /// A freshly computed result.
    pub fn result(body: Bytes) -> Self {
        Self { outcome: Ok(body.into()), cache: CacheStatus::Bypass, age: None }
    }

    /// A relayed upstream error.
    pub fn error(err: RpcError) -> Self {
        Self { outcome: Err(err), cache: CacheStatus::Bypass, age: None }
    }
}
