//! Namespacing (DESIGN §2): with several upstreams, each prefixed upstream's URIs become
//! `{name}+{uri}` and its tool and prompt names `{name}__{tool}`; with one upstream everything
//! passes through unchanged. Pure functions, property-tested.

use std::borrow::Cow;

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
}

/// The prefix of each upstream, in config order, and the unprefixed upstreams.
#[derive(Debug, Clone)]
pub struct Namespace {
    prefixes: Vec<Option<String>>,
    unprefixed: Vec<usize>,
}

impl<'a> Route<'a> {
    /// The upstreams to try, in order, and the value to send them.
    pub fn candidates(&self) -> (&[usize], &'a str) {
        match self {
            Route::Prefixed(i, v) => (std::slice::from_ref(i), v),
            Route::Unprefixed(list, v) => (list, v),
        }
    }
}

impl Namespace {
    /// `upstreams` is `(name, prefix wanted)` in config order. Prefixes apply only when there
    /// is more than one upstream.
    pub fn new(upstreams: &[(String, bool)]) -> Self {
        let several = upstreams.len() > 1;
        let prefixes: Vec<Option<String>> =
            upstreams.iter().map(|(name, wanted)| (several && *wanted).then(|| name.clone())).collect();
        let unprefixed = prefixes.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(i, _)| i).collect();
        Self { prefixes, unprefixed }
    }

    /// The prefix of upstream `index`, if it has one.
    pub fn prefix(&self, index: usize) -> Option<&str> {
        self.prefixes.get(index).and_then(|p| p.as_deref())
    }

    /// Routes a downstream resource URI (or URI template).
    pub fn route_uri<'a>(&'a self, uri: &'a str) -> Option<Route<'a>> {
        self.route(uri, |p| uri.strip_prefix(p)?.strip_prefix(URI_SEP))
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

    /// The downstream form of an upstream URI.
    pub fn uri_out<'a>(&self, index: usize, uri: &'a str) -> Cow<'a, str> {
        match self.prefix(index) {
            Some(p) => Cow::Owned(format!("{p}{URI_SEP}{uri}")),
            None => Cow::Borrowed(uri),
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
        assert_eq!(t.route_uri("file:///a"), Some(Route::Unprefixed(&[0], "file:///a")));
    }

    #[test]
    fn prefixed_and_unprefixed() {
        let t = table(&[("docs", true), ("fs", false), ("git", true)]);
        assert_eq!(t.uri_out(0, "file:///a"), "docs+file:///a");
        assert_eq!(t.name_out(2, "log"), "git__log");
        assert_eq!(t.route_uri("docs+file:///a"), Some(Route::Prefixed(0, "file:///a")));
        assert_eq!(t.route_name("git__log"), Some(Route::Prefixed(2, "log")));
        assert_eq!(t.route_uri("file:///b"), Some(Route::Unprefixed(&[1], "file:///b")));
        let all = table(&[("a", true), ("b", true)]);
        assert_eq!(all.route_uri("c+x:y"), None);
    }

    proptest! {
        #[test]
        fn round_trip(idx in 0usize..3, uri in "[a-z]{1,8}:[ -~]{0,30}", name in "[a-zA-Z0-9_]{1,20}") {
            let t = table(&[("docs", true), ("fs", true), ("git-2", true)]);
            let out = t.uri_out(idx, &uri);
            prop_assert_eq!(t.route_uri(&out), Some(Route::Prefixed(idx, uri.as_str())));
            let out = t.name_out(idx, &name);
            prop_assert_eq!(t.route_name(&out), Some(Route::Prefixed(idx, name.as_str())));
        }
    }
}
