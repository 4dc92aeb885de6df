use proptest::prelude::*;

use super::*;

const MAX: usize = 64;

#[test]
fn table() {
    let long = format!("https://example.com/{}", "a".repeat(MAX));
    let cases: &[(&str, Result<(), BadUri>)] = &[
        // What real servers use: the demo, the SDKs' and the conformance fixture's URIs.
        ("docs://faq", Ok(())),
        ("file:///home/user/a%20b.md", Ok(())),
        ("test://static-text", Ok(())),
        ("ts://doc/0", Ok(())),
        ("https://example.com/a?b=c&d=e#f", Ok(())),
        ("urn:isbn:0451450523", Ok(())),
        ("docs+file:///a", Ok(())),
        ("x:", Ok(())),
        ("docs://café/menü", Ok(())),
        ("http://[::1]:8080/", Ok(())),
        ("", Err(BadUri::Empty)),
        (&long, Err(BadUri::TooLong { limit: MAX })),
        ("no-scheme", Err(BadUri::NoScheme)),
        ("/abs/path", Err(BadUri::NoScheme)),
        ("1x://a", Err(BadUri::NoScheme)),
        (":a", Err(BadUri::NoScheme)),
        ("a\u{0}:b", Err(BadUri::NoScheme)),
        ("x://a\u{0}b", Err(BadUri::Control { at: 5 })),
        ("x://a\nb", Err(BadUri::Control { at: 5 })),
        ("x://a\rb", Err(BadUri::Control { at: 5 })),
        ("x://a\tb", Err(BadUri::Control { at: 5 })),
        ("x://a\u{7f}b", Err(BadUri::Control { at: 5 })),
        ("x://a\u{85}b", Err(BadUri::Control { at: 5 })),
        ("x://a b", Err(BadUri::Whitespace { at: 5 })),
        ("x://a\u{3000}b", Err(BadUri::Whitespace { at: 5 })),
        ("x://a%", Err(BadUri::BadEscape { at: 5 })),
        ("x://a%4", Err(BadUri::BadEscape { at: 5 })),
        ("x://a%zz", Err(BadUri::BadEscape { at: 5 })),
        ("x://a%4g", Err(BadUri::BadEscape { at: 5 })),
        ("x://a\"b", Err(BadUri::Disallowed { at: 5 })),
        ("x://a<b>", Err(BadUri::Disallowed { at: 5 })),
        ("x://a{b}", Err(BadUri::Disallowed { at: 5 })),
        ("x://a\\b", Err(BadUri::Disallowed { at: 5 })),
        ("x://a\u{202e}b", Err(BadUri::Disallowed { at: 5 })),
        ("x://a\u{fffe}b", Err(BadUri::Disallowed { at: 5 })),
    ];
    for (uri, want) in cases {
        assert_eq!(check(uri, MAX), *want, "{uri:?}");
    }
}

#[test]
fn templates() {
    let cases: &[(&str, Result<(), BadUri>)] = &[
        ("file:///{path}", Ok(())),
        ("test://template/{id}/data", Ok(())),
        ("https://example.com/{+path}{?q,lang}{#frag}", Ok(())),
        ("x://{a.b,c_d*,e:30}/{;x}{&y}{/z}{.w}", Ok(())),
        ("x://plain", Ok(())),
        ("x://{a%20b}", Ok(())),
        ("x://{a", Err(BadUri::Unbalanced { at: 4 })),
        ("x://a}", Err(BadUri::Unbalanced { at: 5 })),
        ("x://{}", Err(BadUri::BadExpression { at: 5 })),
        ("x://{+}", Err(BadUri::BadExpression { at: 5 })),
        ("x://{a b}", Err(BadUri::BadExpression { at: 6 })),
        ("x://{a-b}", Err(BadUri::BadExpression { at: 6 })),
        ("x://{a,}", Err(BadUri::BadExpression { at: 7 })),
        ("x://{a.}", Err(BadUri::BadExpression { at: 7 })),
        ("x://{a:0}", Err(BadUri::BadExpression { at: 6 })),
        ("x://{a:12345}", Err(BadUri::BadExpression { at: 6 })),
        ("x://{{a}}", Err(BadUri::BadExpression { at: 5 })),
        ("x://{=a}", Err(BadUri::BadExpression { at: 5 })),
        ("x://{a}\n", Err(BadUri::Control { at: 7 })),
        ("{a}://x", Err(BadUri::NoScheme)),
    ];
    for (template, want) in cases {
        assert_eq!(check_template(template, MAX), *want, "{template:?}");
    }
}

#[test]
fn schemes_and_truncation() {
    assert_eq!(scheme("HTTPS://a"), Some("HTTPS"));
    assert_eq!(scheme("docs+file:///a"), Some("docs+file"));
    assert_eq!(scheme("a/b:c"), None);
    assert_eq!(truncated("abc", 5), "abc");
    assert_eq!(truncated("aé", 2), "a");
}

/// A URI from the grammar: a scheme, `:`, then allowed characters, escapes and IRI chars.
fn valid_uri() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[A-Za-z0-9._~:/?#@!$&'()*+,;=\\[\\]-]",
        1 => "%[0-9A-Fa-f]{2}",
        1 => "[é世😀\u{e000}]",
    ];
    ("[A-Za-z][A-Za-z0-9+.-]{0,8}", prop::collection::vec(piece, 0..40))
        .prop_map(|(scheme, pieces)| format!("{scheme}:{}", pieces.concat()))
}

/// Something that breaks any URI it is inserted into after the scheme.
fn breaker() -> impl Strategy<Value = String> {
    prop_oneof!["[\u{0}-\u{1f}\u{7f}]", Just(" ".to_owned()), "%[0-9A-Fa-f]?[g-zG-Z]", Just("\u{85}".to_owned()),]
}

proptest! {
    #[test]
    fn grammar_uris_pass(uri in valid_uri()) {
        prop_assert_eq!(check(&uri, 4096), Ok(()));
        prop_assert_eq!(check_template(&uri.replace(['{', '}'], ""), 4096), Ok(()));
    }

    #[test]
    fn a_broken_uri_fails(uri in valid_uri(), bad in breaker(), at in any::<prop::sample::Index>()) {
        let colon = uri.find(':').expect("has a scheme") + 1;
        let bounds: Vec<usize> = (colon..=uri.len()).filter(|&i| uri.is_char_boundary(i)).collect();
        let at = bounds[at.index(bounds.len())];
        let broken = format!("{}{bad}{}", &uri[..at], &uri[at..]);
        prop_assert!(check(&broken, 4096).is_err(), "{:?} passed", broken);
        prop_assert!(check_template(&broken, 4096).is_err(), "{:?} passed as a template", broken);
    }

    #[test]
    fn a_trailing_percent_fails(uri in valid_uri(), hex in "[0-9A-Fa-f]?") {
        let broken = format!("{uri}%{hex}");
        prop_assert!(matches!(check(&broken, 4096), Err(BadUri::BadEscape { .. })), "{:?}", broken);
    }
}
