//! Property-based fuzzing of the parsers that take hostile input (issue 11 §7): the envelope
//! codec, mirrored header values, list cursors, and namespacing / result rewriting.
//!
//! A coverage-guided fuzzer (`cargo fuzz`, libFuzzer) needs a nightly toolchain, and a project
//! machine has the stable one only; so these are proptest properties over arbitrary bytes plus
//! structure-aware generators, each case bounded in time. `PROPTEST_CASES` sets the number of
//! cases per property (proptest's default, 256, keeps `cargo nextest run` fast; CI can raise
//! it, e.g. `PROPTEST_CASES=5000`). The corpus under `fuzz/corpus/<target>/` (inputs that once
//! mattered: deep nesting, odd escapes, sentinel edge cases, forged cursors) is replayed by
//! [`corpus_replays`]; add a file there for every input that ever broke a target.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Value, json};

use resmux::jsonrpc::{Incoming, Kind, RequestId, encode_request};
use resmux::mcp::header_value;
use resmux::router::cursor::{CursorCodec, CursorError};
use resmux::router::namespace::{Namespace, Route};
use resmux::router::rewrite;

/// Most any one input may take: far above the real cost (microseconds), low enough to catch
/// anything super-linear.
const BOUND: Duration = Duration::from_secs(2);

fn bounded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    assert!(start.elapsed() < BOUND, "{what} took {:?}", start.elapsed());
    out
}

// ---- the targets: each takes raw bytes and must not panic -------------------------------

fn envelope(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = Incoming::parse(&text) {
        // Whatever parses is a well-formed envelope.
        match m.kind {
            Kind::Request => assert!(m.id.is_some() && m.method.is_some()),
            Kind::Notification => assert!(m.id.is_none() && m.method.is_some()),
            Kind::Response => assert!(m.result.is_some() != m.error.is_some()),
        }
        if let Some(p) = m.params {
            assert!(p.get().starts_with('{'));
        }
    }
}

fn header(data: &[u8]) {
    if let Ok(v) = header_value::decode(data) {
        // A decoded value encodes to something that decodes to it again.
        let again = header_value::encode(&v);
        assert_eq!(header_value::decode(again.as_bytes()).unwrap(), v);
    }
}

fn codec() -> CursorCodec {
    CursorCodec::new(b"fuzz key: fixed so that corpus cursors stay valid")
}

fn cursor(data: &[u8]) {
    let token = String::from_utf8_lossy(data);
    // Without the key nothing but a token this codec signed can open.
    if let Ok(p) = codec().decode("resources/list", "", &token) {
        assert_eq!(codec().decode("resources/list", "", &codec().encode("resources/list", "", &p)), Ok(p));
    }
}

fn namespace() -> Namespace {
    Namespace::new(&[("docs".into(), true), ("fs".into(), false), ("git-2".into(), true)])
}

fn rewrites(data: &[u8]) {
    let ns = namespace();
    let text = String::from_utf8_lossy(data);
    let _ = ns.route_uri(&text);
    let _ = ns.route_name(&text);
    // The URI checks take anything a client sends; the passthrough memory any page's bytes.
    let _ = ns.check_uri(&text);
    let _ = ns.check_template(&text);
    ns.remember_page(0, "uri", data);
    for index in 0..3 {
        let _ = rewrite::content_result(&bytes::Bytes::copy_from_slice(data), &ns, index);
        if let Ok(raw) = resmux::jsonrpc::parse_raw(&text) {
            let mut out = Vec::new();
            if rewrite::list_items(raw, rewrite::Field::Uri("uri"), &ns, index, &mut out).is_ok() && !out.is_empty() {
                let joined = format!("[{}]", String::from_utf8(out).unwrap());
                assert!(serde_json::from_str::<Value>(&joined).is_ok(), "rewritten items are JSON: {joined}");
            }
            if let Ok(mut obj) = resmux::jsonrpc::RawObject::parse(raw) {
                let _ = rewrite::read_object(&mut obj, &ns, index);
            }
        }
    }
}

/// A fuzz target: takes any bytes, must not panic.
type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 4] =
    [("envelope", envelope), ("header_value", header), ("cursor", cursor), ("rewrite", rewrites)];

// ---- generators -------------------------------------------------------------------------

/// Arbitrary JSON values, nested up to a few levels, with awkward strings.
fn json_value() -> impl Strategy<Value = Value> {
    json_tree(true)
}

/// As [`json_value`]; without floats when `floats` is false. serde_json (without its
/// `float_roundtrip` feature) may parse a float's last digit differently from how it printed it,
/// so a float can change by one ulp when the proxy rewrites a tool result as a value (see
/// `content_results_get_every_resource_uri_prefixed`).
fn json_tree(floats: bool) -> impl Strategy<Value = Value> {
    let float = any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from);
    let float = if floats { float.boxed() } else { any::<i32>().prop_map(Value::from).boxed() };
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        float,
        "\\PC{0,12}".prop_map(Value::from),
        prop_oneof![Just("\\"), Just("\""), Just("[{"), Just("\u{0}"), Just("=?base64?")].prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text that is mostly JSON punctuation: finds the parser's and the depth scanner's edges.
fn jsonish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("{"),
            Just("}"),
            Just("["),
            Just("]"),
            Just("\""),
            Just("\\"),
            Just(":"),
            Just(","),
            Just("\"jsonrpc\":\"2.0\""),
            Just("\"id\":1"),
            Just("\"method\":\"m\""),
            Just("\"params\":"),
            Just("\"result\":"),
            Just("null"),
            Just("1e999"),
            Just("\u{feff}"),
        ],
        0..200,
    )
    .prop_map(|parts| parts.concat())
}

fn id() -> impl Strategy<Value = RequestId> {
    prop_oneof![
        any::<u64>().prop_map(RequestId::number),
        "\\PC{0,10}".prop_map(|s| {
            let raw = serde_json::value::to_raw_value(&s).unwrap();
            RequestId::from_raw(&*raw).unwrap()
        }),
    ]
}

proptest! {
    // Cases from `PROPTEST_CASES` (default 256); failures are reported, not persisted (an
    // input worth keeping goes into the corpus).
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    // ---- the envelope codec ----

    #[test]
    fn envelope_never_panics_on_bytes(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        bounded("envelope", || envelope(&data));
    }

    #[test]
    fn envelope_never_panics_on_jsonish(text in jsonish()) {
        bounded("envelope", || envelope(text.as_bytes()));
    }

    #[test]
    fn envelope_refuses_any_deep_nesting(depth in 65usize..200_000, open in prop_oneof![Just('['), Just('{')]) {
        let text: String = std::iter::repeat_n(open, depth).collect();
        let e = bounded("deep", || Incoming::parse(&text).unwrap_err());
        prop_assert!(e.to_rpc().code == -32700 || e.to_rpc().code == -32600);
    }

    #[test]
    fn requests_round_trip(id in id(), method in "[a-z/_]{1,30}", params in prop::collection::btree_map("\\PC{0,8}", json_value(), 0..6)) {
        let params = serde_json::to_vec(&params).unwrap();
        let wire = encode_request(&id, &method, &params);
        let text = std::str::from_utf8(&wire).unwrap();
        let m = Incoming::parse(text).unwrap();
        prop_assert_eq!(m.kind, Kind::Request);
        prop_assert_eq!(m.id.as_ref(), Some(&id));
        prop_assert_eq!(m.method(), method.as_str());
        let back: Value = serde_json::from_str(m.params.unwrap().get()).unwrap();
        prop_assert_eq!(back, serde_json::from_slice::<Value>(&params).unwrap());
    }

    #[test]
    fn arbitrary_json_envelopes_never_panic(v in json_value(), extra in json_value()) {
        let msg = json!({"jsonrpc": "2.0", "id": v.clone(), "method": extra.clone(), "params": v, "result": extra});
        bounded("envelope", || envelope(msg.to_string().as_bytes()));
    }

    // ---- header values ----

    #[test]
    fn header_values_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        bounded("header", || header(&data));
    }

    #[test]
    fn header_values_round_trip(s in "\\PC{0,64}|[ -~]{0,64}|=\\?base64\\?[ -~]{0,20}\\?=") {
        let encoded = header_value::encode(&s);
        prop_assert!(encoded.bytes().all(|b| (0x20..0x7f).contains(&b)), "{encoded:?}");
        prop_assert_eq!(header_value::decode(encoded.as_bytes()).unwrap(), s);
    }

    // ---- cursors ----

    #[test]
    fn cursors_never_panic(data in prop::collection::vec(any::<u8>(), 0..1024), b64 in "[A-Za-z0-9_-]{0,300}") {
        bounded("cursor", || { cursor(&data); cursor(b64.as_bytes()) });
    }

    #[test]
    fn cursors_round_trip_and_tampering_is_refused(
        positions in prop::collection::vec(("[a-z]{1,8}", prop::option::of("\\PC{0,40}")), 0..5),
        flip in any::<prop::sample::Index>(),
    ) {
        let c = codec();
        let token = c.encode("tools/list", "o", &positions);
        prop_assert_eq!(c.decode("tools/list", "o", &token).unwrap(), positions);
        prop_assert_eq!(c.decode("prompts/list", "o", &token).unwrap_err(), CursorError::WrongMethod);
        prop_assert_eq!(c.decode("tools/list", "p", &token).unwrap_err(), CursorError::WrongOwner);
        let mut bytes = token.into_bytes();
        let i = flip.index(bytes.len());
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        prop_assert!(c.decode("tools/list", "o", &tampered).is_err());
        prop_assert!(CursorCodec::new(b"another key").decode("tools/list", "o", &tampered).is_err());
    }

    // ---- namespacing and rewriting ----

    #[test]
    fn rewriting_never_panics(data in prop::collection::vec(any::<u8>(), 0..1024), text in jsonish()) {
        bounded("rewrite", || { rewrites(&data); rewrites(text.as_bytes()) });
    }

    #[test]
    fn any_uri_and_name_round_trip(index in prop_oneof![Just(0usize), Just(2usize)], value in "\\PC{0,60}") {
        let ns = namespace();
        let out = ns.uri_out(index, &value);
        if ns.rules().passes(&value) {
            // A passthrough URI (`https:`) is never prefixed; none was listed, so it goes to
            // the unprefixed upstream.
            prop_assert_eq!(ns.route_uri(&out), Ok(Route::Unprefixed(&[1], value.as_str())));
        } else {
            prop_assert_eq!(ns.route_uri(&out), Ok(Route::Prefixed(index, value.as_str())));
        }
        let out = ns.name_out(index, &value);
        prop_assert_eq!(ns.route_name(&out), Some(Route::Prefixed(index, value.as_str())));
        // The unprefixed upstream passes values through untouched.
        prop_assert_eq!(ns.uri_out(1, &value), value.as_str());
    }

    #[test]
    fn content_results_get_every_resource_uri_prefixed(uris in prop::collection::vec("\\PC{0,30}", 0..6), noise in json_tree(false)) {
        let mut content: Vec<Value> = uris
            .iter()
            .enumerate()
            .map(|(i, u)| if i % 2 == 0 {
                json!({"type": "resource_link", "uri": u, "name": "n"})
            } else {
                json!({"type": "resource", "resource": {"uri": u, "text": "t"}})
            })
            .collect();
        content.push(json!({"type": "text", "text": noise}));
        let result = bytes::Bytes::from(json!({"content": content}).to_string());
        let ns = namespace();
        let out: Value = serde_json::from_slice(&rewrite::content_result(&result, &ns, 0).unwrap()).unwrap();
        for (i, u) in uris.iter().enumerate() {
            let got = if i % 2 == 0 { &out["content"][i]["uri"] } else { &out["content"][i]["resource"]["uri"] };
            prop_assert_eq!(got.as_str().unwrap(), format!("docs+{u}"));
        }
        prop_assert_eq!(&out["content"][uris.len()]["text"], &noise);
    }
}

/// Every file under `fuzz/corpus/<target>/` goes through its target.
#[test]
fn corpus_replays() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut total = 0;
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no corpus", dir.display());
        for file in files {
            let data = std::fs::read(&file).unwrap();
            bounded(&file.display().to_string(), || target(&data));
            total += 1;
        }
    }
    assert!(total >= 20, "corpus has {total} inputs");
}
