//! Cache keys: upstream, method, canonical params without `_meta`, protocol era, partition.

use std::hash::{Hash, Hasher};

use resmux_proto::jsonrpc::{RawObject, write_json_string};
use resmux_proto::mcp::principal::Principal;

/// Methods whose complete results are cacheable: the cache's own identity of a method, part of
/// every key. Not a [`resmux_proto::mcp::List`]: it also names `resources/read`, which is no list
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
        use resmux_proto::mcp::method as m;
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

/// Who may see an entry: the partition of a stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partition {
    /// `cacheScope: public`: anyone.
    Public,
    /// `private` (or no scope): only this owner.
    Private(Owner),
}

impl Hash for Partition {
    fn hash<H: Hasher>(&self, state: &mut H) {
        PartitionRef::from(self).hash(state);
    }
}

/// A partition to look in, borrowed: hashes and compares like the [`Partition`] it names, so
/// a lookup needs no owned key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRef<'a> {
    Public,
    Private(&'a Owner),
}

impl Hash for PartitionRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            PartitionRef::Public => state.write_u8(0),
            PartitionRef::Private(owner) => {
                state.write_u8(1);
                owner.hash(state);
            }
        }
    }
}

impl<'a> From<&'a Partition> for PartitionRef<'a> {
    fn from(p: &'a Partition) -> Self {
        match p {
            Partition::Public => PartitionRef::Public,
            Partition::Private(owner) => PartitionRef::Private(owner),
        }
    }
}

/// Whose private results these are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// An authenticated principal.
    Principal(Principal),
    /// An anonymous caller, told apart by the request's `_meta` (see
    /// `router::Call::owner` in the proxy): a digest of its canonical form.
    Anonymous([u8; 16]),
}

/// What a request asks, the same for every caller: upstream, method, protocol era and
/// canonical params. A stored entry's key is a base key plus a [`Partition`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseKey {
    pub upstream: u32,
    pub method: CachedMethod,
    /// Protocol era of the upstream at fetch time (its version's index).
    pub era: u8,
    /// Canonical params: top-level keys sorted, `_meta` dropped, values verbatim.
    pub params: Box<str>,
}

impl BaseKey {
    /// The stored key of this base in `partition`.
    pub fn in_partition(self, partition: Partition) -> CacheKey {
        CacheKey { base: self, partition }
    }
}

/// A stored entry's key: what was asked, and who may see the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub base: BaseKey,
    pub partition: Partition,
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        KeyRef { base: &self.base, partition: PartitionRef::from(&self.partition) }.hash(state);
    }
}

/// A key to look up, borrowed from the request's base key and the caller's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    pub base: &'a BaseKey,
    pub partition: PartitionRef<'a>,
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.base.hash(state);
        self.partition.hash(state);
    }
}

impl moka::Equivalent<CacheKey> for KeyRef<'_> {
    fn equivalent(&self, key: &CacheKey) -> bool {
        *self.base == key.base && self.partition == PartitionRef::from(&key.partition)
    }
}

impl CacheKey {
    /// Bytes this key costs in the store.
    pub fn weight(&self) -> usize {
        std::mem::size_of::<Self>() + self.base.params.len()
    }

    /// The upstream slot the key belongs to.
    pub fn upstream(&self) -> u32 {
        self.base.upstream
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
    #[derive(Clone, Copy)]
    enum Val<'a> {
        Raw(&'a str),
        Str(&'a str),
    }
    // Request params hold a handful of keys: sorted on the stack, a Vec only past `SMALL`.
    const SMALL: usize = 8;
    let kept = params
        .iter()
        .filter(|(k, _)| *k != "_meta" && edit.is_none_or(|(ek, _)| ek != *k))
        .map(|(k, v)| (k, Val::Raw(v.get())));
    let added = edit.and_then(|(k, v)| v.map(|v| (k, Val::Str(v))));
    let mut small = [("", Val::Raw("")); SMALL];
    let mut large = Vec::new();
    let mut n = 0;
    for entry in kept.chain(added) {
        if n < SMALL {
            small[n] = entry;
        } else {
            if n == SMALL {
                large.extend_from_slice(&small);
            }
            large.push(entry);
        }
        n += 1;
    }
    let entries = if n <= SMALL { &mut small[..n] } else { &mut large[..] };
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    // Exact when no key or edited value needs escaping, so the box needs no shrinking.
    let value_len = |v: &Val<'_>| match v {
        Val::Raw(r) => r.len(),
        Val::Str(s) => s.len() + 2,
    };
    let size = 2 + n.saturating_sub(1) + entries.iter().map(|(k, v)| k.len() + 3 + value_len(v)).sum::<usize>();
    let mut out = Vec::with_capacity(size);
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
