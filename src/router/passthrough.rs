//! URIs as the spec means them: a server uses `https://` (and any `[proxy]
//! passthrough_schemes`) for resources the client fetches from the web itself, without the
//! server. Namespacing such a URI would make it unfetchable, so it passes through unprefixed;
//! the proxy then routes a read or listen of it to the upstream that listed it, remembered
//! here from that upstream's `resources/list` and `resources/templates/list` pages.
//!
//! The memory is filled whenever the proxy fetches a page from an upstream or adopts one from
//! the cluster tier (not on local cache hits: the page was remembered when it was fetched),
//! and bounded by `max_passthrough_uris`, least recently used forgotten first. It is keyed by
//! upstream name, so that it outlives a reload that replaces an upstream; a reload that
//! removes one forgets it. It shares the staleness of any list: an upstream that stops listing
//! a URI stays its holder until the entry is evicted or the upstream is removed.

use std::sync::Arc;

use moka::policy::EvictionPolicy;
use serde_json::value::RawValue;

use crate::config::ProxyConfig;
use crate::jsonrpc::RawObject;
use crate::mcp::uri;

/// The upstreams (by name) that listed one passthrough URI.
type Holders = Arc<[Arc<str>]>;

/// The proxy's URI rules: which schemes pass through, the longest URI a client may send,
/// and which upstream listed each passthrough URI. Shared by every routing generation.
pub struct UriRules {
    /// Lowercase.
    schemes: Box<[Box<str>]>,
    max_bytes: usize,
    listed: moka::sync::Cache<Box<str>, Holders>,
}

impl std::fmt::Debug for UriRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UriRules")
            .field("schemes", &self.schemes)
            .field("max_bytes", &self.max_bytes)
            .field("listed", &self.listed.entry_count())
            .finish()
    }
}

impl Default for UriRules {
    fn default() -> Self {
        Self::new(&ProxyConfig::default())
    }
}

impl UriRules {
    pub fn new(config: &ProxyConfig) -> Self {
        Self {
            schemes: config.passthrough_schemes.iter().map(|s| s.to_ascii_lowercase().into()).collect(),
            max_bytes: config.max_uri_bytes,
            listed: moka::sync::Cache::builder()
                .max_capacity(config.max_passthrough_uris)
                .eviction_policy(EvictionPolicy::lru())
                .build(),
        }
    }

    /// The longest URI a client may send (`max_uri_bytes`).
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Whether `uri` is of a passthrough scheme. No allocation: a scan of its scheme.
    pub fn passes(&self, uri: &str) -> bool {
        uri::scheme(uri).is_some_and(|s| self.schemes.iter().any(|p| p.eq_ignore_ascii_case(s)))
    }

    /// The upstreams that listed `uri`, by name.
    pub fn holders(&self, uri: &str) -> Option<Holders> {
        self.listed.get(uri)
    }

    /// Notes that upstream `name` listed `uri` (a passthrough URI or URI template). One that
    /// no client could send (invalid, or too long) is not worth the room.
    pub fn remember(&self, name: &str, uri: &str) {
        if self.holders(uri).is_some_and(|h| h.iter().any(|n| **n == *name)) {
            return;
        }
        if uri::check_template(uri, self.max_bytes).is_err() {
            return;
        }
        self.listed.entry(Box::from(uri)).and_upsert_with(|held| {
            let mut names: Vec<Arc<str>> = held.map(|e| e.into_value().to_vec()).unwrap_or_default();
            if !names.iter().any(|n| **n == *name) {
                names.push(name.into());
            }
            names.into()
        });
    }

    /// Notes the passthrough URIs among the items of one list page of upstream `name` (the
    /// items of a JSON array, without its brackets, as the cache keeps them), whose identity
    /// is `key` (`uri` or `uriTemplate`). Pages without a passthrough scheme in them cost a
    /// substring search.
    pub fn remember_page(&self, name: &str, key: &str, items: &[u8]) {
        if !self.schemes.iter().any(|s| contains_scheme(items, s)) {
            return;
        }
        let mut array = Vec::with_capacity(items.len() + 2);
        array.push(b'[');
        array.extend_from_slice(items);
        array.push(b']');
        // The page was checked (and namespaced) when it was fetched; a page that does not
        // parse now has nothing to remember.
        let Ok(items) = serde_json::from_slice::<Vec<&RawValue>>(&array) else { return };
        for item in items {
            if let Ok(obj) = RawObject::parse(item)
                && let Some(uri) = obj.get_str(key)
                && self.passes(&uri)
            {
                self.remember(name, &uri);
            }
        }
    }

    /// Forgets the upstreams not in `names` (a reload removed them).
    pub fn keep_only(&self, names: &[Arc<str>]) {
        for (uri, holders) in self.listed.iter() {
            if holders.iter().all(|h| names.contains(h)) {
                continue;
            }
            let kept: Vec<Arc<str>> = holders.iter().filter(|h| names.contains(h)).cloned().collect();
            if kept.is_empty() {
                self.listed.invalidate(&*uri);
            } else {
                self.listed.insert((*uri).clone(), kept.into());
            }
        }
    }
}

/// Whether `hay` holds `scheme:` in any letter case.
fn contains_scheme(hay: &[u8], scheme: &str) -> bool {
    let n = scheme.len() + 1;
    hay.windows(n).any(|w| w[n - 1] == b':' && w[..n - 1].eq_ignore_ascii_case(scheme.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> UriRules {
        let config = ProxyConfig {
            passthrough_schemes: vec!["https".into(), "Web+X".into()],
            max_passthrough_uris: 2,
            ..ProxyConfig::default()
        };
        UriRules::new(&config)
    }

    #[test]
    fn schemes_are_case_insensitive() {
        let r = rules();
        assert!(r.passes("https://a") && r.passes("HTTPS://a") && r.passes("web+x:y"));
        assert!(!r.passes("http://a") && !r.passes("docs+https://a") && !r.passes("https"));
    }

    #[test]
    fn pages_are_remembered_per_upstream() {
        let r = rules();
        let page = br#"{"uri":"https://a/1","name":"a"},{"uri":"docs://x","name":"x"}"#;
        r.remember_page("a", "uri", page);
        r.remember_page("b", "uri", page);
        r.remember_page("a", "uri", page);
        let names =
            |r: &UriRules| r.holders("https://a/1").map(|h| h.iter().map(|n| n.to_string()).collect::<Vec<_>>());
        assert_eq!(names(&r).unwrap(), ["a", "b"]);
        assert!(r.holders("docs://x").is_none(), "only passthrough URIs are remembered");
        r.remember("a", "https://bad uri");
        assert!(r.holders("https://bad uri").is_none(), "a URI no client could send is not kept");
        r.keep_only(&["b".into()]);
        assert_eq!(names(&r).unwrap(), ["b"]);
        r.keep_only(&[]);
        assert!(r.holders("https://a/1").is_none());
    }

    #[test]
    fn the_memory_is_bounded() {
        let r = rules();
        for i in 0..50 {
            r.remember("a", &format!("https://a/{i}"));
        }
        r.listed.run_pending_tasks();
        assert!(r.listed.entry_count() <= 2, "{}", r.listed.entry_count());
        assert!(r.holders("https://a/49").is_some(), "the most recent is kept");
    }
}
