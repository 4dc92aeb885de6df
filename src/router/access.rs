//! Authorization in the router (DESIGN §6): what the caller may reach on each upstream, by
//! its `[[upstream.allow]]` rules ([`crate::auth::policy`]). Lists are filtered item by item,
//! one upstream page at a time before pages are merged (so merged cursors, which carry each
//! upstream's own cursor, stay valid); a forbidden read, call, prompt or completion gets the
//! very answer a missing one gets, so existence does not leak. The checks run before the
//! cache is consulted: a public entry is served only to a caller allowed to see it.

use bytes::Bytes;
use serde_json::value::RawValue;

use super::merge::identity;
use super::namespace::{NAME_SEP, URI_SEP};
use super::rewrite::Field;
use super::{Call, Routing};
use crate::auth::policy::{self, Kind};
use crate::error::{Error, UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::RawObject;
use crate::mcp::List;

impl Routing {
    /// Whether upstream `index` applies any rules (else everything is allowed, for free).
    pub(super) fn restricted(&self, index: usize) -> bool {
        !self.0.upstreams[index].config().allow.is_empty()
    }

    /// Whether the caller may reach anything on upstream `index`.
    pub(super) fn reaches(&self, call: &Call<'_>, index: usize) -> bool {
        policy::reaches_upstream(&self.0.upstreams[index].config().allow, call.principal)
    }

    /// Whether the caller may reach `value` (in the upstream's own form) on upstream `index`.
    pub(super) fn allowed(&self, call: &Call<'_>, index: usize, kind: Kind, value: &str) -> bool {
        policy::allows(&self.0.upstreams[index].config().allow, call.principal, kind, value)
    }

    /// The items of one upstream's page (downstream form, comma-separated) that the caller
    /// may see.
    pub(super) fn filter_page(&self, call: &Call<'_>, kind: List, index: usize, items: Bytes) -> Result<Bytes, Error> {
        if !self.restricted(index) || items.is_empty() {
            return Ok(items);
        }
        let malformed = |reason: String| {
            Error::from(UpstreamError::new(
                self.0.upstreams[index].name(),
                UpstreamErrorKind::Protocol { reason: reason.into() },
            ))
        };
        let text = std::str::from_utf8(&items).map_err(|e| malformed(e.to_string()))?;
        let wrapped = format!("[{text}]");
        let array: Vec<&RawValue> = serde_json::from_str(&wrapped).map_err(|e| malformed(e.to_string()))?;
        let (key, what, sep) = match identity(kind) {
            Field::Uri(k) => (k, Kind::Uri, URI_SEP.to_string()),
            Field::Name(k) => (k, if kind == List::Prompts { Kind::Prompt } else { Kind::Tool }, NAME_SEP.to_owned()),
        };
        let prefix = self.0.ns.prefix(index).map(|p| format!("{p}{sep}"));
        let mut out = Vec::with_capacity(items.len());
        for item in array {
            let obj = RawObject::parse(item).map_err(|e| malformed(e.to_string()))?;
            let Some(value) = obj.get_str(key) else { continue };
            let native = match &prefix {
                Some(p) => value.strip_prefix(p.as_str()).unwrap_or(&value),
                None => &value,
            };
            if self.allowed(call, index, what, native) {
                if !out.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(item.get().as_bytes());
            }
        }
        Ok(Bytes::from(out))
    }
}
