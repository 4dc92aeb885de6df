//! Authorization per upstream (`[[upstream.allow]]`, see [`AllowRule`]): which principals,
//! groups or scopes reach which URIs, tools and prompts. Pure functions over the config.
//!
//! No rules: everyone who authenticated reaches everything. With rules, a caller reaches what
//! at least one rule that applies to it allows. Values are the upstream's own (before
//! namespacing). Patterns are globs where `*` matches any run of characters (`/` included)
//! and every other character matches itself.

use super::Principal;
use crate::config::AllowRule;

/// What is being reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Uri,
    Tool,
    Prompt,
}

/// Whether `principal` may reach anything at all on an upstream with `rules`.
pub fn reaches_upstream(rules: &[AllowRule], principal: &Principal) -> bool {
    rules.is_empty() || rules.iter().any(|r| applies(r, principal))
}

/// Whether `principal` may reach `value` (a URI, URI template, tool or prompt name, as the
/// upstream knows it).
pub fn allows(rules: &[AllowRule], principal: &Principal, kind: Kind, value: &str) -> bool {
    rules.is_empty()
        || rules.iter().any(|r| {
            applies(r, principal)
                && match kind {
                    Kind::Uri => &r.uris,
                    Kind::Tool => &r.tools,
                    Kind::Prompt => &r.prompts,
                }
                .as_ref()
                .is_none_or(|patterns| patterns.iter().any(|p| glob(p, value)))
        })
}

/// Whether a rule's "who" matches: every given criterion must.
fn applies(rule: &AllowRule, principal: &Principal) -> bool {
    let identity = principal.identity();
    let id = principal.id();
    rule.principals.as_ref().is_none_or(|ps| identity.is_some() && ps.iter().any(|p| p == id))
        && rule.groups.as_ref().is_none_or(|gs| identity.is_some_and(|i| gs.iter().any(|g| i.groups.contains(g))))
        && rule.scopes.as_ref().is_none_or(|ss| identity.is_some_and(|i| ss.iter().all(|s| i.scopes.contains(s))))
}

/// `*`-glob matching, linear-time backtracking (the classic two-pointer algorithm).
pub fn glob(pattern: &str, value: &str) -> bool {
    let (p, v) = (pattern.as_bytes(), value.as_bytes());
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, vi));
            pi += 1;
        } else if pi < p.len() && p[pi] == v[vi] {
            pi += 1;
            vi += 1;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("docs://public/*", "docs://public/a/b"));
        assert!(!glob("docs://public/*", "docs://private/a"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("echo", "echo"));
        assert!(!glob("echo", "echo2"));
        assert!(glob("*item/1*", "gen://item/12"));
    }

    #[test]
    fn rules() {
        let alice = Principal::user("idp#alice", &["eng"], &["docs"]);
        let bot = Principal::user("ci-bot", &["ci"], &[]);
        let rules = vec![
            AllowRule { groups: Some(vec!["eng".into()]), ..Default::default() },
            AllowRule {
                principals: Some(vec!["ci-bot".into()]),
                uris: Some(vec!["gen://item/1*".into()]),
                tools: Some(vec![]),
                ..Default::default()
            },
        ];
        assert!(allows(&rules, &alice, Kind::Tool, "echo"));
        assert!(allows(&rules, &bot, Kind::Uri, "gen://item/10"));
        assert!(!allows(&rules, &bot, Kind::Uri, "gen://item/2"));
        assert!(!allows(&rules, &bot, Kind::Tool, "echo"));
        assert!(allows(&rules, &bot, Kind::Prompt, "summarize"));
        assert!(!reaches_upstream(&rules, &Principal::Anonymous));
        assert!(!reaches_upstream(&rules, &Principal::user("mallory", &[], &[])));
        assert!(allows(&[], &Principal::Anonymous, Kind::Uri, "x"));
        let scoped = vec![AllowRule { scopes: Some(vec!["docs".into()]), ..Default::default() }];
        assert!(reaches_upstream(&scoped, &alice) && !reaches_upstream(&scoped, &bot));
    }
}
