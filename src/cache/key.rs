//! Cache keys: upstream, method, canonical params without `_meta`, protocol era, partition.

use std::hash::{Hash, Hasher};

use crate::auth::Principal;
use crate::jsonrpc::{RawObject, write_json_string};

/// Methods whose complete results are cacheable: the cache's own identity of a method, part of
/// every key. Not a [`crate::mcp::List`]: it also names `resources/read`, which is no list
/// (`From<List>` in `epochs.rs` maps the four lists onto it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CachedMethod {
    ResourcesRead,
    ResourcesList,
    TemplatesList,
    ToolsList,
    PromptsList,
}

impl CachedMethod {
    pub fn of(method: &str) -> Option<Self> {
        use crate::mcp::method as m;
        Some(match method {
            m::RESOURCES_READ => Self::ResourcesRead,
            m::RESOURCES_LIST => Self::ResourcesList,
            m::RESOURCES_TEMPLATES_LIST => Self::TemplatesList,
            m::TOOLS_LIST => Self::ToolsList,
            m::PROMPTS_LIST => Self::PromptsList,
            _ => return None,
        })
    }
}

/// Who may see an entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Partition {
    /// `cacheScope: public`: anyone.
    Public,
    /// `private` (or no scope): only this owner.
    Private(Owner),
}

/// Whose private results these are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// An authenticated principal.
    Principal(Principal),
    /// An anonymous caller, told apart by the request's `_meta` (see
    /// [`crate::router::Call::owner`]): a digest of its canonical form.
    Anonymous([u8; 16]),
}

/// A cache key. Its partition is set at lookup (public first, then the caller's) and at store
/// (from the result's scope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub upstream: u32,
    pub method: CachedMethod,
    /// Protocol era of the upstream at fetch time (its version's index).
    pub era: u8,
    /// Canonical params: top-level keys sorted, `_meta` dropped, values verbatim.
    pub params: Box<str>,
    pub partition: Partition,
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.upstream.hash(state);
        self.method.hash(state);
        self.era.hash(state);
        self.params.hash(state);
        self.partition.hash(state);
    }
}

impl CacheKey {
    /// Bytes this key costs in the store.
    pub fn weight(&self) -> usize {
        std::mem::size_of::<Self>() + self.params.len()
    }
}

/// Canonical form of request params for keying: top-level keys sorted, `_meta` dropped,
/// values as sent.
pub fn canonical_params(params: &RawObject<'_>) -> Box<str> {
    canonical(params, None)
}

/// [`canonical_params`] of `params` with `key` set to the JSON string `value`, or removed when
/// `value` is `None`, without building the edited object.
pub fn canonical_params_with(params: &RawObject<'_>, key: &str, value: Option<&str>) -> Box<str> {
    canonical(params, Some((key, value)))
}

fn canonical(params: &RawObject<'_>, edit: Option<(&str, Option<&str>)>) -> Box<str> {
    enum Val<'a> {
        Raw(&'a str),
        Str(&'a str),
    }
    let mut entries: Vec<(&str, Val<'_>)> = params
        .iter()
        .filter(|(k, _)| *k != "_meta" && edit.is_none_or(|(ek, _)| ek != *k))
        .map(|(k, v)| (k, Val::Raw(v.get())))
        .collect();
    if let Some((k, Some(v))) = edit {
        entries.push((k, Val::Str(v)));
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(64);
    out.push(b'{');
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_string(&mut out, k);
        out.push(b':');
        match v {
            Val::Raw(raw) => out.extend_from_slice(raw.as_bytes()),
            Val::Str(s) => write_json_string(&mut out, s),
        }
    }
    out.push(b'}');
    String::from_utf8(out).expect("JSON text is UTF-8").into_boxed_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ignores_meta_and_order() {
        let a = RawObject::parse_str(r#"{"uri":"x","_meta":{"a":1},"b":2}"#).unwrap();
        let b = RawObject::parse_str(r#"{"b":2,"uri":"x"}"#).unwrap();
        assert_eq!(canonical_params(&a), canonical_params(&b));
        assert_eq!(&*canonical_params(&a), r#"{"b":2,"uri":"x"}"#);
        let c = RawObject::parse_str(r#"{"uri":"y"}"#).unwrap();
        assert_ne!(canonical_params(&a), canonical_params(&c));
        // Editing while canonicalizing equals canonicalizing the edited object.
        assert_eq!(&*canonical_params_with(&a, "uri", Some("y")), r#"{"b":2,"uri":"y"}"#);
        assert_eq!(&*canonical_params_with(&a, "b", None), r#"{"uri":"x"}"#);
        assert_eq!(&*canonical_params_with(&c, "cursor", Some("a\"b")), r#"{"cursor":"a\"b","uri":"y"}"#);
    }
}
