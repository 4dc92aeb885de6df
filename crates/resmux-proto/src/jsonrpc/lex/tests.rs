use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::jsonrpc::RawObject;

/// Reads one whole value of `text` the way the codec does; `Ok` with its slice.
fn read(text: &str, max_depth: usize) -> Result<&str, JsonError> {
    let mut r = Reader::new(text, max_depth);
    let value = r.value(0)?;
    r.end()?;
    Ok(value)
}

fn accepts_like_serde(text: &str) -> Result<(), TestCaseError> {
    let ours = read(text, MAX_DEPTH).is_ok();
    let theirs = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
    prop_assert_eq!(ours, theirs, "{:?}", text);
    Ok(())
}

fn awkward_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_/]{0,12}",
        "\\PC{0,10}",
        prop::collection::vec(
            prop_oneof![Just('"'), Just('\\'), Just('\u{1}'), Just('\n'), Just('é'), Just('😀')],
            0..6
        )
        .prop_map(|c| c.into_iter().collect()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        awkward_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(awkward_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Puts insignificant whitespace after every structural character.
fn spaced(text: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        out.push(c);
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if matches!(c, '{' | '}' | '[' | ']' | ',' | ':') {
            out.push_str(" \n\t\r");
        }
    }
    out
}

proptest! {
    #[test]
    fn valid_json_reads_whole_as_serde_does(value in json_value()) {
        for text in [value.to_string(), serde_json::to_string_pretty(&value).unwrap(), spaced(&value.to_string())] {
            prop_assert_eq!(read(&text, MAX_DEPTH), Ok(text.trim_end()));
        }
    }

    #[test]
    fn objects_have_serde_s_entries(map in prop::collection::btree_map(awkward_string(), json_value(), 0..8)) {
        let value = Value::Object(map.into_iter().collect());
        for text in [value.to_string(), spaced(&value.to_string())] {
            let obj = RawObject::parse_str(&text).unwrap();
            // serde_json's own parse of the same text (its float parsing is not exact).
            let want: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(obj.len(), want.len());
            for (k, v) in obj.iter() {
                let parsed: Value = serde_json::from_str(v.get()).unwrap();
                prop_assert_eq!(Some(&parsed), want.get(k), "{}", k);
            }
        }
    }

    #[test]
    fn mutated_json_is_refused_exactly_when_serde_refuses_it(
        value in json_value(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..20), 1..4),
    ) {
        const BYTES: &[u8] = b"\"\\{}[],:0-+.eEu \n\x01xtn";
        let mut bytes = value.to_string().into_bytes();
        for (at, what) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match BYTES.get(what) {
                Some(b) => bytes[i] = *b,
                None => drop(bytes.remove(i)),
            }
        }
        if let Ok(text) = String::from_utf8(bytes) {
            accepts_like_serde(&text)?;
            let half = (0..=text.len() / 2).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
            accepts_like_serde(&text[..half])?;
        }
    }
}

#[test]
fn keys_are_unescaped_and_duplicates_found_through_escapes() {
    let obj = RawObject::parse_str(r#"{ "k\u0041" : [1, {"x": "}"}] , "b\"" :"v"}"#).unwrap();
    assert_eq!(obj.get("kA").unwrap().get(), r#"[1, {"x": "}"}]"#);
    assert_eq!(obj.get_str("b\"").unwrap(), "v");
    assert_eq!(RawObject::parse_str(r#"{"a":1,"\u0061":2}"#).unwrap_err(), JsonError::Duplicate("a".into()));
    // A lone surrogate is refused in a key (it is decoded), kept raw in a value (as serde_json
    // does for values it does not decode).
    assert!(RawObject::parse_str(r#"{"\ud800":1}"#).unwrap_err().is_syntax());
    assert!(RawObject::parse_str(r#"{"a":"\ud800"}"#).is_ok());
}

#[test]
fn refuses_what_json_refuses() {
    for bad in [
        "",
        " ",
        "{",
        "{}x",
        "{} {}",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{1:2}",
        "01",
        "1.",
        ".5",
        "-",
        "1e",
        "+1",
        "tru",
        "nul",
        "\"a",
        "\"\\x\"",
        "\"\\u12\"",
        "\"a\u{1}b\"",
        "[1 2]",
        "{\"a\":1 \"b\":2}",
        "]",
        "\u{feff}{}",
    ] {
        assert!(read(bad, MAX_DEPTH).is_err(), "{bad:?}");
        assert!(serde_json::from_str::<serde::de::IgnoredAny>(bad).is_err(), "serde agrees on {bad:?}");
    }
    for good in ["0", "-0.5e+3", "1E9", "true", " null ", "\"\\/\\b\\f\\n\\r\\t\\u00e9\"", "[]", "{}", "[[],{}]"] {
        assert_eq!(read(good, MAX_DEPTH), Ok(good.trim()), "{good:?}");
    }
}

#[test]
fn non_objects_are_told_from_non_json() {
    assert_eq!(RawObject::parse_str("[1]").unwrap_err(), JsonError::NotObject);
    assert!(RawObject::parse_str("[1").unwrap_err().is_syntax());
    assert!(RawObject::parse_str("{").unwrap_err().is_syntax());
}

#[test]
fn depth_is_bounded_without_recursion() {
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    assert!(read(&nested(3), 3).is_ok());
    assert_eq!(read(&nested(4), 3), Err(JsonError::TooDeep(3)));
    assert!(read(&nested(MAX_DEPTH), MAX_DEPTH).is_ok());
    assert_eq!(read(&"[".repeat(1_000_000), MAX_DEPTH), Err(JsonError::TooDeep(MAX_DEPTH)));
    assert_eq!(read(&"{\"a\":".repeat(1_000_000), 64), Err(JsonError::TooDeep(64)));
    assert_eq!(RawObject::parse_str(&format!("{{\"a\":{}}}", nested(MAX_DEPTH))).unwrap_err(), JsonError::TooDeep(128));
}

#[test]
fn long_strings_are_scanned_in_words_and_stop_at_the_first_special_byte() {
    for len in 0..40 {
        let s = "é".repeat(len / 2) + &"x".repeat(len);
        let text = format!("\"{s}\"");
        assert_eq!(read(&text, 1), Ok(text.as_str()));
        let bad = format!("\"{s}\u{1f}{s}\"");
        assert!(read(&bad, 1).is_err());
        let escaped = format!("\"{s}\\\"{s}\"");
        assert_eq!(read(&escaped, 1), Ok(escaped.as_str()));
    }
    assert_eq!(crate::jsonrpc::lexeme::string_stops(u64::from_le_bytes(*b"abc\"defg")).trailing_zeros() / 8, 3);
    assert_eq!(
        crate::jsonrpc::lexeme::string_stops(u64::from_le_bytes(*b"\x80\xff\x7f~ }{\\")).trailing_zeros() / 8,
        7
    );
    assert_eq!(
        crate::jsonrpc::lexeme::string_stops(u64::from_le_bytes(*b"\xe9\x1f\"\"\"\"\"\"")).trailing_zeros() / 8,
        1
    );
    assert_eq!(crate::jsonrpc::lexeme::string_stops(u64::from_le_bytes(*b"plain ok")), 0);
}
