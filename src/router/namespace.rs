//! Namespacing (DESIGN §2): with several upstreams, each prefixed upstream's URIs become
//! `{name}+{uri}` and its tool and prompt names `{name}__{tool}`; with one upstream everything
//! passes through unchanged. URIs of a passthrough scheme (`https://`, which the client
//! fetches itself) are never prefixed: they route to the upstream that listed them
//! ([`UriRules`]). Everything else is pure functions, property-tested.

use std::borrow::Cow;
use std::sync::Arc;

pub use super::passthrough::UriRules;

/// Separator between prefix and URI: keeps the result a valid RFC 3986 URI (`docs+file:///a`,
/// the prefix joins the scheme).
pub const URI_SEP: char = '+';
/// Separator between prefix and a tool or prompt name.
pub const NAME_SEP: &str = "__";

/// Where a downstream URI or name goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// To upstream `index`, with the prefix removed.
    Prefixed(usize, &'a str),
    /// To the unprefixed upstreams, tried in config order; the value is unchanged.
    Unprefixed(&'a [usize], &'a str),
    /// A passthrough URI, to upstream `index`, which listed it; the value is unchanged.
    Listed(usize, &'a str),
}

/// Why a downstream URI goes nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrouted {
    /// No upstream serves it (no prefix matches; or a passthrough URI no upstream listed,
    /// with no unprefixed upstream to ask).
    Unknown,
    /// A passthrough URI that several upstreams listed: which one to ask is not known.
    Ambiguous,
}

/// The prefix of each upstream, in config order, and the unprefixed upstreams.
#[derive(Debug, Clone)]
pub struct Namespace {
    prefixes: Vec<Option<String>>,
    unprefixed: Vec<usize>,
    /// Upstream names in config order (passthrough URIs are remembered by name).
    names: Vec<Arc<str>>,
    rules: Arc<UriRules>,
}

impl<'a> Route<'a> {
    /// The upstreams to try, in order, and the value to send them.
    pub fn candidates(&self) -> (&[usize], &'a str) {
        match self {
            Route::Prefixed(i, v) | Route::Listed(i, v) => (std::slice::from_ref(i), v),
            Route::Unprefixed(list, v) => (list, v),
        }
    }
}

impl Namespace {
    /// `upstreams` is `(name, prefix wanted)` in config order. Prefixes apply only when there
    /// is more than one upstream. With the default URI rules (and a memory of its own).
    pub fn new(upstreams: &[(String, bool)]) -> Self {
        Self::with_rules(upstreams, Arc::new(UriRules::default()))
    }

    /// [`Namespace::new`] with `rules`, which every generation of the proxy's upstream set
    /// shares.
    pub fn with_rules(upstreams: &[(String, bool)], rules: Arc<UriRules>) -> Self {
        let several = upstreams.len() > 1;
        let prefixes: Vec<Option<String>> =
            upstreams.iter().map(|(name, wanted)| (several && *wanted).then(|| name.clone())).collect();
        let unprefixed = prefixes.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(i, _)| i).collect();
        let names = upstreams.iter().map(|(name, _)| Arc::from(name.as_str())).collect();
        Self { prefixes, unprefixed, names, rules }
    }

    /// The URI rules (passthrough schemes and memory, the URI size bound).
    pub fn rules(&self) -> &Arc<UriRules> {
        &self.rules
    }

    /// The namespace of another upstream set: the same rules, and the passthrough memory of
    /// the upstreams that left forgotten.
    pub fn successor(&self, upstreams: &[(String, bool)]) -> Self {
        let next = Self::with_rules(upstreams, self.rules.clone());
        next.rules.keep_only(&next.names);
        next
    }

    /// Notes the passthrough URIs that upstream `index` listed in a page of items whose
    /// identity is `key` (see [`UriRules::remember_page`]).
    pub fn remember_page(&self, index: usize, key: &str, items: &[u8]) {
        if let Some(name) = self.names.get(index) {
            self.rules.remember_page(name, key, items);
        }
    }

    /// Checks a downstream resource URI (syntax and size) before it is routed.
    pub fn check_uri(&self, uri: &str) -> Result<(), crate::error::DownstreamError> {
        crate::mcp::uri::check(uri, self.rules.max_bytes()).map_err(|e| self.bad_uri(uri, e))
    }

    /// Checks a downstream URI template (`completion/complete` `ref/resource`).
    pub fn check_template(&self, template: &str) -> Result<(), crate::error::DownstreamError> {
        crate::mcp::uri::check_template(template, self.rules.max_bytes()).map_err(|e| self.bad_uri(template, e))
    }

    fn bad_uri(&self, uri: &str, problem: crate::mcp::uri::BadUri) -> crate::error::DownstreamError {
        // An oversized URI is echoed no longer than the bound it broke.
        let uri = crate::mcp::uri::truncated(uri, self.rules.max_bytes()).to_owned();
        crate::error::DownstreamError::InvalidUri { uri, problem: std::sync::Arc::new(problem) }
    }

    /// The prefix of upstream `index`, if it has one.
    pub fn prefix(&self, index: usize) -> Option<&str> {
        self.prefixes.get(index).and_then(|p| p.as_deref())
    }

    /// Routes a downstream resource URI (or URI template).
    pub fn route_uri<'a>(&'a self, uri: &'a str) -> Result<Route<'a>, Unrouted> {
        if self.names.len() > 1 && self.rules.passes(uri) {
            return self.route_listed(uri);
        }
        self.route(uri, |p| uri.strip_prefix(p)?.strip_prefix(URI_SEP)).ok_or(Unrouted::Unknown)
    }

    /// A passthrough URI: to the one upstream that listed it; when none did, to the
    /// unprefixed upstreams (which would have got it unchanged anyway), if any.
    fn route_listed<'a>(&'a self, uri: &'a str) -> Result<Route<'a>, Unrouted> {
        let mut found = None;
        for name in self.rules.holders(uri).iter().flat_map(|h| h.iter()) {
            let Some(index) = self.names.iter().position(|n| n == name) else { continue };
            if found.replace(index).is_some_and(|other| other != index) {
                return Err(Unrouted::Ambiguous);
            }
        }
        match found {
            Some(index) => Ok(Route::Listed(index, uri)),
            None if !self.unprefixed.is_empty() => Ok(Route::Unprefixed(&self.unprefixed, uri)),
            None => Err(Unrouted::Unknown),
        }
    }

    /// Routes a downstream tool or prompt name.
    pub fn route_name<'a>(&'a self, name: &'a str) -> Option<Route<'a>> {
        self.route(name, |p| name.strip_prefix(p)?.strip_prefix(NAME_SEP))
    }

    fn route<'a>(&'a self, value: &'a str, strip: impl Fn(&str) -> Option<&'a str>) -> Option<Route<'a>> {
        for (i, p) in self.prefixes.iter().enumerate() {
            if let Some(p) = p
                && let Some(rest) = strip(p)
            {
                return Some(Route::Prefixed(i, rest));
            }
        }
        (!self.unprefixed.is_empty()).then_some(Route::Unprefixed(&self.unprefixed, value))
    }

    /// The downstream form of an upstream URI: prefixed, unless it is of a passthrough
    /// scheme.
    pub fn uri_out<'a>(&self, index: usize, uri: &'a str) -> Cow<'a, str> {
        match self.prefix(index) {
            Some(p) if !self.rules.passes(uri) => Cow::Owned(format!("{p}{URI_SEP}{uri}")),
            _ => Cow::Borrowed(uri),
        }
    }

    /// The downstream form of an upstream tool or prompt name.
    pub fn name_out<'a>(&self, index: usize, name: &'a str) -> Cow<'a, str> {
        match self.prefix(index) {
            Some(p) => Cow::Owned(format!("{p}{NAME_SEP}{name}")),
            None => Cow::Borrowed(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(specs: &[(&str, bool)]) -> Namespace {
        let v: Vec<(String, bool)> = specs.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        Namespace::new(&v)
    }

    #[test]
    fn single_upstream_passes_through() {
        let t = table(&[("docs", true)]);
        assert_eq!(t.uri_out(0, "file:///a"), "file:///a");
        assert_eq!(t.route_uri("file:///a"), Ok(Route::Unprefixed(&[0], "file:///a")));
        assert_eq!(t.uri_out(0, "https://a/b"), "https://a/b");
        assert_eq!(t.route_uri("https://a/b"), Ok(Route::Unprefixed(&[0], "https://a/b")), "nothing to remember");
    }

    #[test]
    fn prefixed_and_unprefixed() {
        let t = table(&[("docs", true), ("fs", false), ("git", true)]);
        assert_eq!(t.uri_out(0, "file:///a"), "docs+file:///a");
        assert_eq!(t.name_out(2, "log"), "git__log");
        assert_eq!(t.route_uri("docs+file:///a"), Ok(Route::Prefixed(0, "file:///a")));
        assert_eq!(t.route_name("git__log"), Some(Route::Prefixed(2, "log")));
        assert_eq!(t.route_uri("file:///b"), Ok(Route::Unprefixed(&[1], "file:///b")));
        let all = table(&[("a", true), ("b", true)]);
        assert_eq!(all.route_uri("c+x:y"), Err(Unrouted::Unknown));
    }

    #[test]
    fn passthrough_uris_route_to_who_listed_them() {
        let t = table(&[("a", true), ("b", true), ("c", true)]);
        let https = "https://example.com/x";
        assert_eq!(t.uri_out(0, https), https, "never prefixed");
        assert_eq!(t.uri_out(0, "HTTPS://example.com/x"), "HTTPS://example.com/x");
        assert_eq!(t.route_uri(https), Err(Unrouted::Unknown), "nobody listed it");
        t.remember_page(1, "uri", br#"{"uri":"https://example.com/x"}"#);
        assert_eq!(t.route_uri(https), Ok(Route::Listed(1, https)));
        t.remember_page(2, "uri", br#"{"uri":"https://example.com/x"}"#);
        assert_eq!(t.route_uri(https), Err(Unrouted::Ambiguous));
        // A reload that removes `c` forgets what it listed; `b` survives by name.
        let next = t.successor(&[("b".into(), true), ("a".into(), true)]);
        assert_eq!(next.route_uri(https), Ok(Route::Listed(0, https)));
        // An unprefixed upstream gets what no upstream listed, as it gets any unprefixed URI.
        let mixed = table(&[("a", true), ("fs", false)]);
        assert_eq!(mixed.route_uri("https://y/"), Ok(Route::Unprefixed(&[1], "https://y/")));
    }

    proptest! {
        #[test]
        fn round_trip(idx in 0usize..3, uri in "[a-z]{1,8}:[ -~]{0,30}", name in "[a-zA-Z0-9_]{1,20}") {
            let t = table(&[("docs", true), ("fs", true), ("git-2", true)]);
            prop_assume!(!t.rules().passes(&uri));
            let out = t.uri_out(idx, &uri);
            prop_assert_eq!(t.route_uri(&out), Ok(Route::Prefixed(idx, uri.as_str())));
            let out = t.name_out(idx, &name);
            prop_assert_eq!(t.route_name(&out), Some(Route::Prefixed(idx, name.as_str())));
        }
    }
}
