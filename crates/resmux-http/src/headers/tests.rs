use super::*;
use http::{HeaderValue, header};
use proptest::prelude::*;

/// A vocabulary for the tests: the names the old MCP table had, spelled out here, so the
/// view's rules are checked on names of every length the proxy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum T {
    Host,
    Origin,
    ContentType,
    ContentLength,
    Accept,
    ProtocolVersion,
    Method,
    Name,
    Kind,
}

static NAMES_OF_T: [HeaderName; 9] = [
    header::HOST,
    header::ORIGIN,
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::ACCEPT,
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("mcp-method"),
    HeaderName::from_static("mcp-name"),
    HeaderName::from_static("x-kind"),
];

impl T {
    pub(crate) const ALL: [T; 9] = [
        Self::Host,
        Self::Origin,
        Self::ContentType,
        Self::ContentLength,
        Self::Accept,
        Self::ProtocolVersion,
        Self::Method,
        Self::Name,
        Self::Kind,
    ];
}

impl KnownNames for T {
    const COUNT: usize = 9;
    const CONTENT_LENGTH: Self = Self::ContentLength;

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static HeaderName {
        &NAMES_OF_T[self as usize]
    }

    fn of(raw: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|k| token_is(raw, k.name().as_str().as_bytes()))
    }
}

type H<'a> = Headers<'a, T>;

/// The headers httparse's strict request parse (the lean path's) finds in `lines`, with
/// their places; `None` when it refuses them.
fn httparse_places(lines: &[u8]) -> Option<(Vec<u8>, Vec<Place>)> {
    let mut head = b"POST /mcp HTTP/1.1\r\n".to_vec();
    head.extend_from_slice(lines);
    head.extend_from_slice(b"\r\n");
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => panic!("a whole head: {head:?}"),
        Err(_) => return None,
    }
    let at = |part: &[u8]| part.as_ptr() as usize - head.as_ptr() as usize;
    let places = req
        .headers
        .iter()
        .map(|h| {
            (at(h.name.as_bytes())..at(h.name.as_bytes()) + h.name.len(), at(h.value)..at(h.value) + h.value.len())
        })
        .collect();
    Some((head, places))
}

/// Every name and value httparse found in `lines` is one `http` accepts.
fn http_accepts_all(bytes: &[u8], places: &[Place]) -> bool {
    places.iter().all(|(n, v)| {
        HeaderName::from_bytes(&bytes[n.clone()]).is_ok() && HeaderValue::from_bytes(&bytes[v.clone()]).is_ok()
    })
}

/// The rule [`Raw::from_httparse`] rests on, byte by byte: a name or value with any byte
/// in it, at its start, inside, or past the 32 bytes httparse's vector code takes at
/// once, is found by httparse exactly when `http` accepts it, and whatever else
/// httparse makes of the line, `http` accepts.
#[test]
fn httparse_keeps_exactly_the_name_and_value_bytes_http_accepts() {
    let pad = "p".repeat(40);
    for b in 0..=255u8 {
        if let Ok(v) = HeaderValue::from_bytes(&[b]) {
            assert_eq!(to_str(&[b]).is_some(), v.to_str().is_ok(), "to_str of byte {b:#04x}");
        }
        for (before, after) in [("", "z"), ("a", "z"), (pad.as_str(), "z")] {
            let mut token = before.as_bytes().to_vec();
            token.push(b);
            token.extend_from_slice(after.as_bytes());
            for as_name in [true, false] {
                let line = if as_name { [&token[..], b": v"].concat() } else { [b"x: ", &token[..]].concat() };
                let parsed = httparse_places(&[&line[..], b"\r\n"].concat());
                let http_ok = if as_name {
                    HeaderName::from_bytes(&token).is_ok()
                } else {
                    HeaderValue::from_bytes(&token).is_ok()
                };
                let what = if as_name { "name" } else { "value" };
                if let Some((bytes, places)) = &parsed {
                    assert!(http_accepts_all(bytes, places), "byte {b:#04x} in a {what}: {line:?}");
                }
                // A value's leading and trailing spaces and tabs are not part of it (RFC 9110 OWS).
                let want = match token[0] {
                    b' ' | b'\t' if !as_name => &token[1..],
                    _ => &token[..],
                };
                let found = parsed.as_ref().is_some_and(|(bytes, places)| {
                    places.iter().any(|(n, v)| &bytes[if as_name { n.clone() } else { v.clone() }] == want)
                });
                assert_eq!(found, http_ok, "byte {b:#04x} in a {what}: {line:?}");
            }
        }
    }
}

proptest! {
    /// On arbitrary header lines (CR, LF, colons, spaces, tabs, DEL, NUL and obs-text
    /// among them), whatever httparse accepts, `http` accepts.
    #[test]
    fn whatever_httparse_accepts_http_accepts(
        lines in proptest::collection::vec(
            prop_oneof![
                4 => proptest::sample::select(b"abcXYZ-_~!09".to_vec()),
                2 => proptest::sample::select(b":\r\n \t".to_vec()),
                1 => any::<u8>(),
            ],
            0..80,
        )
    ) {
        if let Some((bytes, places)) = httparse_places(&[&lines[..], b"\r\n"].concat()) {
            prop_assert!(http_accepts_all(&bytes, &places), "{:?}", String::from_utf8_lossy(&lines));
        }
    }
}

#[test]
fn what_http_refuses_httparse_refuses() {
    for bad in [&b"bad name: x"[..], b": x", b"x: a\x7fb", b"x: a\rb", b"x: a\0b", b"a\"b: x"] {
        assert!(httparse_places(&[bad, b"\r\n"].concat()).is_none(), "{:?}", String::from_utf8_lossy(bad));
    }
    let (bytes, places) = httparse_places(b"x: tab\there\r\nobs: caf\xe9\r\n").expect("tab and obs-text");
    assert!(http_accepts_all(&bytes, &places), "tab and obs-text are values http keeps");
    // The one rule httparse does not have, a name's length, is `http`'s own.
    for (len, ok) in [(MAX_NAME, true), (MAX_NAME + 1, false)] {
        let line = [&vec![b'a'; len][..], b": v\r\n"].concat();
        assert!(httparse_places(&line).is_some(), "httparse takes a name of any length");
        assert_eq!(name_fits(len), ok);
        assert_eq!(HeaderName::from_bytes(&vec![b'a'; len]).is_ok(), ok);
    }
}

const NAMES: [&str; 8] =
    ["Host", "MCP-PROTOCOL-VERSION", "mcp-method", "Accept", "X-Custom", "mcp-name", "Origin", "content-type"];

proptest! {
    /// Every lookup answers on the raw view what it answers on the `HeaderMap` hyper
    /// would have built from the same headers.
    #[test]
    fn a_raw_view_answers_as_the_map_would(
        headers in proptest::collection::vec((0..NAMES.len(), any::<bool>(), "[ -~\t\u{80}-\u{ff}]{0,8}"), 0..10)
    ) {
        let mut sent = Vec::new();
        let mut map = HeaderMap::new();
        for (i, upper, value) in &headers {
            let name = if *upper { NAMES[*i].to_ascii_uppercase() } else { NAMES[*i].to_ascii_lowercase() };
            map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_bytes(value.as_bytes()).unwrap());
            sent.push((name, value.clone()));
        }
        let sent: Vec<(&str, &str)> = sent.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let (bytes, places) = lines(&sent);
        let raw = H::Raw(Raw::of_places(&bytes, &places));
        let map = H::Map(&map);
        for known in T::ALL {
            prop_assert_eq!(raw.get(known), map.get(known));
            prop_assert_eq!(raw.get_str(known), map.get_str(known));
            prop_assert_eq!(raw.visible(known), map.visible(known));
            prop_assert_eq!(raw.contains(known), map.contains(known));
        }
        for name in NAMES {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            prop_assert_eq!(raw.get_all(&name).collect::<Vec<_>>(), map.get_all(&name).collect::<Vec<_>>());
        }
        let lower = |h: H<'_>| {
            let mut all: Vec<_> = h.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec())).collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        };
        prop_assert_eq!(lower(raw), lower(map));
        let three = [T::ProtocolVersion, T::Method, T::Name];
        prop_assert_eq!(raw.visible_many(three), map.visible_many(three));
        prop_assert_eq!(map.visible_many(three), three.map(|k| map.visible(k)));
    }
}

#[test]
fn a_token_matches_a_known_name_only_in_its_own_letters() {
    for known in T::ALL {
        let lower = known.name().as_str().as_bytes();
        // Every name byte in every position: only the two cases of the same letter match.
        for at in 0..lower.len() {
            for b in (0..=255u8).filter(|&b| HeaderName::from_bytes(&[b]).is_ok()) {
                let mut raw = lower.to_vec();
                raw[at] = b;
                assert_eq!(token_is(&raw, lower), b.eq_ignore_ascii_case(&lower[at]), "{raw:?} against {lower:?}");
            }
        }
        assert!(!token_is(&lower[1..], lower));
    }
}

#[test]
fn a_head_that_is_not_utf8_still_gives_its_other_values_as_text() {
    let mut bytes = b"host: a\r\nmcp-name: caf".to_vec();
    bytes.push(0xe9);
    bytes.extend_from_slice(b"\r\n");
    let places = [(0..4, 6..7), (9..17, 19..23)];
    let raw = H::Raw(Raw::of_places(&bytes, &places));
    let map = HeaderMap::from_iter([
        (header::HOST, http::HeaderValue::from_static("a")),
        (HeaderName::from_static("mcp-name"), http::HeaderValue::from_bytes(b"caf\xe9").unwrap()),
    ]);
    for headers in [raw, H::Map(&map)] {
        assert_eq!(headers.visible(T::Host), Some(Ok("a")));
        assert_eq!(headers.get_str(T::Host), Some("a"));
        assert_eq!(headers.visible(T::Name), Some(Err(NotVisible)));
        assert_eq!(headers.get(T::Name), Some(&b"caf\xe9"[..]));
        assert_eq!(headers.get_str(T::Name), None);
    }
}

#[test]
fn no_headers_has_none() {
    assert_eq!(H::NONE.get(T::Host), None);
    assert_eq!(H::NONE.iter().count(), 0);
}
