use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};

fn spec(prefix: bool, defaults: bool) -> ScanSpec {
    ScanSpec {
        up_id: "7".into(),
        list: "contents",
        item_key: "uri",
        uri_out: prefix.then(|| Box::new(|u: &str| format!("docs+{u}")) as UriOut),
        defaults: if defaults {
            vec![("resultType", "\"complete\"".into()), ("ttlMs", "5000".into()), ("cacheScope", "\"private\"".into())]
        } else {
            Vec::new()
        },
        capture_limit: 1 << 16,
        max_depth: 64,
    }
}

/// Runs the pass over `input` split every `split` bytes.
fn run(input: &[u8], split: usize, spec: ScanSpec) -> Result<(Vec<u8>, Option<Vec<u8>>), ScanError> {
    let mut scan = ReadScan::new(spec);
    let mut utf8 = Utf8Check::default();
    let mut out = Vec::new();
    for chunk in input.chunks(split.max(1)) {
        utf8.push(chunk)?;
        scan.feed(chunk, &mut out)?;
    }
    utf8.finish()?;
    scan.finish()?;
    Ok((out, scan.error().map(<[u8]>::to_vec)))
}

#[test]
fn uris_are_rewritten_payload_kept_and_id_spliced() {
    let msg = br#"{"result":{"contents":[{"uri":"file:///a","mimeType":"text/plain","text":"a\n\"b\" \u00e9 \u2603"},
        {"blob":"AAAA","uri":"file:///b","_meta":{"uri":"x"}}],"ttlMs":5},"jsonrpc":"2.0","id":7}"#;
    for split in [1, 2, 3, 7, 64, 4096] {
        let (out, error) = run(msg, split, spec(true, false)).unwrap();
        assert!(error.is_none());
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"contents":[{"uri":"docs+file:///a","mimeType":"text/plain","text":"a\n\"b\" \u00e9 \u2603"},{"blob":"AAAA","uri":"docs+file:///b","_meta":{"uri":"x"}}],"ttlMs":5}"#
        );
    }
}

#[test]
fn missing_hints_are_added_and_present_ones_kept() {
    let msg = br#"{"jsonrpc":"2.0","id":7,"result":{"contents":[],"ttlMs":9}}"#;
    let (out, _) = run(msg, 5, spec(false, true)).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, json!({"contents":[],"ttlMs":9,"resultType":"complete","cacheScope":"private"}));
    let (out, _) = run(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#, 1, spec(false, true)).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, json!({"resultType":"complete","ttlMs":5000,"cacheScope":"private"}));
}

#[test]
fn errors_are_captured_not_written() {
    let msg = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"nf","data":{"uri":"a:b"}}}"#;
    let (out, error) = run(msg, 3, spec(true, true)).unwrap();
    assert!(out.is_empty());
    let e: Value = serde_json::from_slice(&error.unwrap()).unwrap();
    assert_eq!(e["code"], -32602);
}

#[test]
fn protocol_breaks_are_refused() {
    let cases: &[(&[u8], ScanError)] = &[
        (br#"{"jsonrpc":"2.0","id":8,"result":{}}"#, ScanError::WrongId { got: "8".into(), want: "7".into() }),
        (br#"{"jsonrpc":"1.0","id":7,"result":{}}"#, ScanError::Version),
        (br#"{"jsonrpc":"2.0","id":7}"#, ScanError::NoOutcome),
        (br#"{"jsonrpc":"2.0","id":7,"method":"x"}"#, ScanError::NotResponse),
        (br#"{"jsonrpc":"2.0","id":7,"result":[]}"#, ScanError::Shape("result", "an object")),
        (br#"{"jsonrpc":"2.0","id":7,"result":{"contents":[{"text":"x"}]}}"#, ScanError::MissingUri),
        (br#"{"jsonrpc":"2.0","id":7,"result":{"contents":[{"uri":"a:b","text":"x"}]}"#, ScanError::Truncated),
    ];
    for (msg, want) in cases {
        assert_eq!(run(msg, 2, spec(true, false)).unwrap_err(), *want, "{}", String::from_utf8_lossy(msg));
    }
    let deep = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"a":{}1{}}}}}"#, "[".repeat(70), "]".repeat(70));
    assert_eq!(run(deep.as_bytes(), 9, spec(true, false)).unwrap_err(), ScanError::TooDeep(64));
    for bad in
        [&br#"{"jsonrpc":"2.0","id":7,"result":{"a":tru}}"#[..], br#"{"jsonrpc":"2.0","id":7,"result":{"a":01}}"#]
    {
        assert!(matches!(run(bad, 4, spec(true, false)), Err(ScanError::Syntax { .. })));
    }
    assert_eq!(
        run(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"a\":\"\xff\"}}", 4, spec(true, false)).unwrap_err(),
        ScanError::NotUtf8
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-4000i64..4000).prop_map(|n| json!(n as f64 / 4.0)), // exact in binary: no parse rounding
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,4}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// The pass agrees with the buffered path: the same rewrite, whatever the chunking, and
    /// the payload values unchanged.
    #[test]
    fn agrees_with_a_whole_parse(
        texts in prop::collection::vec(("\\PC{0,20}", json_value()), 0..4),
        extra in json_value(),
        split in 1usize..50,
        pretty in any::<bool>(),
    ) {
        let contents: Vec<Value> = texts.iter().enumerate()
            .map(|(i, (t, m))| json!({"uri": format!("file:///{i}"), "text": t, "_meta": m}))
            .collect();
        let msg = json!({"id": 7, "result": {"contents": contents, "extra": extra}, "jsonrpc": "2.0"});
        let text = if pretty { serde_json::to_vec_pretty(&msg).unwrap() } else { serde_json::to_vec(&msg).unwrap() };
        let (out, _) = run(&text, split, spec(true, false)).unwrap();
        prop_assert!(!out.contains(&b'\n'));
        let got: Value = serde_json::from_slice(&out).unwrap();
        let mut want = msg["result"].clone();
        for (i, item) in want["contents"].as_array_mut().unwrap().iter_mut().enumerate() {
            item["uri"] = json!(format!("docs+file:///{i}"));
        }
        prop_assert_eq!(&got, &want);
    }

    /// Any one-byte change the pass accepts leaves well-formed JSON; any it makes malformed is
    /// refused.
    #[test]
    fn damage_is_refused(pos in any::<prop::sample::Index>(), byte in any::<u8>(), split in 1usize..40) {
        let msg = br#"{"jsonrpc":"2.0","id":7,"result":{"contents":[{"uri":"a:b","text":"x\"y","n":[1,2.5e3,true,null]}]}}"#;
        let mut damaged = msg.to_vec();
        damaged[pos.index(msg.len())] = byte;
        let whole: Result<Value, _> = serde_json::from_slice(&damaged);
        if let Ok((out, _)) = run(&damaged, split, spec(true, false)) {
            prop_assert!(whole.is_ok(), "accepted malformed {}", String::from_utf8_lossy(&damaged));
            prop_assert!(serde_json::from_slice::<Value>(&out).is_ok());
        }
    }
}
