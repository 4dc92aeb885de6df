//! A request's headers as the endpoint reads them (issue #14: a cached read at the cost of a
//! bare server). hyper's path has them in an `http::HeaderMap`. The lean path
//! ([`crate::downstream`]'s own HTTP/1.1 reader) has them as its request's bytes and the
//! places httparse found each name and value in; building a `HeaderMap` from those cost about
//! a sixth of a cached read (hashing, two allocations, a `Bytes` per value, and their drop),
//! to be looked up a handful of times. [`Headers`] serves both: the same lookups, with the
//! same answers, on either.
//!
//! A [`Raw`] view is made only from what httparse's strict request parse found
//! ([`Raw::from_httparse`]): httparse lets through exactly the name and value bytes
//! `http` accepts (the unit tests hold it to that), so a request the lean path serves is one
//! hyper's path would have had the same headers for. hyper relies on the same: it builds its
//! `HeaderValue`s from httparse's values unchecked.

use std::ops::Range;

use http::{HeaderMap, HeaderName, header};

use crate::mcp;
use crate::mcp::validate::{Mirrored, Seen};

/// Where one header's name and value lie in a request's bytes.
pub type Place = (Range<usize>, Range<usize>);

/// The headers the endpoint reads. A [`Raw`] view finds each of them as it checks the
/// request's headers, so looking one up costs an index, not a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Host,
    Origin,
    Authorization,
    ContentType,
    ContentLength,
    Accept,
    SessionId,
    ProtocolVersion,
    Method,
    Name,
}

/// Each [`Known`]'s name, in its order.
static KNOWN: [HeaderName; 10] = [
    header::HOST,
    header::ORIGIN,
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::ACCEPT,
    mcp::header_name::SESSION_ID,
    mcp::header_name::PROTOCOL_VERSION,
    mcp::header_name::METHOD,
    mcp::header_name::NAME,
];

impl Known {
    #[cfg(test)]
    const ALL: [Known; 10] = [
        Self::Host,
        Self::Origin,
        Self::Authorization,
        Self::ContentType,
        Self::ContentLength,
        Self::Accept,
        Self::SessionId,
        Self::ProtocolVersion,
        Self::Method,
        Self::Name,
    ];

    /// Its header name.
    pub fn name(self) -> &'static HeaderName {
        &KNOWN[self as usize]
    }

    /// The known header `raw` names, in any case (told apart by length first).
    fn of(raw: &[u8]) -> Option<Self> {
        let candidates: &[Known] = match raw.len() {
            4 => &[Self::Host],
            6 => &[Self::Origin, Self::Accept],
            8 => &[Self::Name],
            10 => &[Self::Method],
            12 => &[Self::ContentType],
            13 => &[Self::Authorization],
            14 => &[Self::ContentLength, Self::SessionId],
            20 => &[Self::ProtocolVersion],
            _ => return None,
        };
        candidates.iter().copied().find(|k| token_is(raw, k.name().as_str().as_bytes()))
    }
}

/// A header value that is not visible ASCII (`HeaderValue::to_str` fails on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotVisible;

/// The headers of one request.
#[derive(Clone, Copy)]
pub enum Headers<'a> {
    /// hyper's parse.
    Map(&'a HeaderMap),
    /// The lean path's: the request's bytes and each header's place in them.
    Raw(Raw<'a>),
}

/// Headers left where they were read. Names are as sent (any case); values as `http` would
/// hold them.
#[derive(Clone, Copy)]
pub struct Raw<'a> {
    bytes: &'a [u8],
    /// `bytes` as text, when they are UTF-8 (a head with only ASCII in it is): then a value
    /// is a slice of it, not checked again.
    text: Option<&'a str>,
    places: &'a [Place],
    first: Firsts,
}

/// Where each [`Known`] header's first value is among a head's headers: its index, plus one
/// (0: absent). Built as the headers are read, in their order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Firsts([u16; KNOWN.len()]);

impl Firsts {
    /// Notes that header number `i` (fewer than 65,535) is named `name`; the known header
    /// it is, if any.
    pub fn note(&mut self, i: usize, name: &[u8]) -> Option<Known> {
        let known = Known::of(name)?;
        let slot = &mut self.0[known as usize];
        if *slot == 0 {
            *slot = i as u16 + 1;
        }
        Some(known)
    }

    /// The table for the headers at `places` in `bytes`.
    pub fn of(bytes: &[u8], places: &[Place]) -> Self {
        let mut firsts = Self::default();
        for (i, (name, _)) in places.iter().enumerate() {
            firsts.note(i, &bytes[name.clone()]);
        }
        firsts
    }
}

/// Whether the token `raw` (only RFC 9110 token bytes, as httparse leaves a name) is
/// `lower`, a lower-case name of letters and `-`, in any case. Setting bit 5 lower-cases a
/// letter; of the name bytes only a letter's two cases become that letter, and only `-`
/// itself becomes `-` (CR would, but is no name byte). No early exit, so the compiler can
/// compare many bytes at once.
fn token_is(raw: &[u8], lower: &[u8]) -> bool {
    raw.len() == lower.len() && raw.iter().zip(lower).fold(0, |diff, (&r, &l)| diff | ((r | 0x20) ^ l)) == 0
}

/// The longest header name `http` accepts.
const MAX_NAME: usize = (1 << 16) - 1;

/// Whether a name of `len` bytes is one `http` takes (httparse has no bound of its own).
pub fn name_fits(len: usize) -> bool {
    len <= MAX_NAME
}

/// A value as text, as `HeaderValue::to_str` gives it (`None` where `to_str` fails).
pub fn to_str(value: &[u8]) -> Option<&str> {
    if mcp::header_value::is_visible(value) { std::str::from_utf8(value).ok() } else { None }
}

impl<'a> Raw<'a> {
    /// The headers httparse found in a request head: `places` are where its strict request
    /// parse (`httparse::Request`, no lenient options) put each name and value in `bytes`.
    /// httparse lets through only the name and value bytes `http` accepts, which is why
    /// hyper builds its own `HeaderValue`s from them unchecked (`header_value!` in hyper's
    /// `proto/h1/role.rs`; the unit tests here hold httparse to that, byte by byte and on
    /// arbitrary heads). The reader checked what httparse does not, each name's length
    /// ([`name_fits`]), and noted the known names in `first` as it read them: the lean head
    /// parse does both in its one pass over the headers.
    ///
    /// # Panics
    /// When a place lies outside `bytes`.
    pub fn from_httparse(bytes: &'a [u8], places: &'a [Place], first: Firsts) -> Self {
        debug_assert!(places.len() < usize::from(u16::MAX) && places.iter().all(|(n, _)| name_fits(n.len())));
        debug_assert_eq!(first, Firsts::of(bytes, places));
        Self { bytes, text: std::str::from_utf8(bytes).ok(), places, first }
    }

    /// [`Self::from_httparse`] with the known names noted here, for tests.
    #[cfg(test)]
    pub(crate) fn of_places(bytes: &'a [u8], places: &'a [Place]) -> Self {
        Self::from_httparse(bytes, places, Firsts::of(bytes, places))
    }

    /// The value at `at` as text, when it is visible ASCII.
    fn visible(self, at: &Range<usize>) -> Result<&'a str, NotVisible> {
        let text = match self.text {
            Some(text) => text.get(at.clone()),
            None => std::str::from_utf8(&self.bytes[at.clone()]).ok(),
        };
        text.filter(|text| mcp::header_value::is_visible(text.as_bytes())).ok_or(NotVisible)
    }

    /// Where the first value of `name` is.
    fn value(self, name: Known) -> Option<&'a Range<usize>> {
        match self.first.0[name as usize] {
            0 => None,
            at => Some(&self.places[usize::from(at) - 1].1),
        }
    }

    fn pairs(self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.places.iter().map(move |(name, value)| (&self.bytes[name.clone()], &self.bytes[value.clone()]))
    }
}

impl<'a> Headers<'a> {
    /// No headers (a transport without them).
    pub const NONE: Headers<'static> =
        Headers::Raw(Raw { bytes: &[], text: Some(""), places: &[], first: Firsts([0; KNOWN.len()]) });

    /// Every header, names and values, in an order where each name's values keep theirs.
    pub fn iter(self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        let (map, raw) = match self {
            Self::Map(map) => (Some(map), None),
            Self::Raw(raw) => (None, Some(raw)),
        };
        let map = map.into_iter().flat_map(|m| m.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())));
        map.chain(raw.into_iter().flat_map(Raw::pairs))
    }

    /// Every value of `name`, in the order sent.
    pub fn get_all(self, name: &HeaderName) -> impl Iterator<Item = &'a [u8]> {
        let lower = name.as_str().as_bytes();
        let (map, raw) = match self {
            Self::Map(map) => (Some(map.get_all(name).iter().map(http::HeaderValue::as_bytes)), None),
            Self::Raw(raw) => {
                (None, Some(raw.pairs().filter(move |(n, _)| n.eq_ignore_ascii_case(lower)).map(|(_, v)| v)))
            }
        };
        map.into_iter().flatten().chain(raw.into_iter().flatten())
    }

    /// The first value of `name`, as `HeaderMap::get` gives it.
    pub fn get(self, name: Known) -> Option<&'a [u8]> {
        match self {
            Self::Map(map) => map.get(name.name()).map(http::HeaderValue::as_bytes),
            Self::Raw(raw) => raw.value(name).map(|at| &raw.bytes[at.clone()]),
        }
    }

    /// The first value of `name`, when present, as text (`Err` when it is not visible ASCII,
    /// as `HeaderValue::to_str` judges).
    pub fn visible(self, name: Known) -> Option<Result<&'a str, NotVisible>> {
        match self {
            Self::Map(map) => map.get(name.name()).map(|v| v.to_str().map_err(|_| NotVisible)),
            Self::Raw(raw) => raw.value(name).map(|at| raw.visible(at)),
        }
    }

    /// The first values of each of `names`, as [`Self::visible`] gives them. On a
    /// `HeaderMap` this is one pass over its headers, not a hashed lookup per name.
    pub fn visible_many<const N: usize>(self, names: [Known; N]) -> [Option<Result<&'a str, NotVisible>>; N] {
        match self {
            Self::Map(map) => {
                let mut found = [None; N];
                for (name, value) in map {
                    if let Some(at) = names.iter().position(|known| known.name() == name) {
                        found[at].get_or_insert(value);
                    }
                }
                found.map(|value| value.map(|v: &http::HeaderValue| v.to_str().map_err(|_| NotVisible)))
            }
            Self::Raw(_) => names.map(|known| self.visible(known)),
        }
    }

    /// The first value of `name` as text (`None` when absent, or not visible ASCII, as
    /// `HeaderValue::to_str` judges).
    pub fn get_str(self, name: Known) -> Option<&'a str> {
        self.visible(name)?.ok()
    }

    /// Whether `name` is present.
    pub fn contains(self, name: Known) -> bool {
        self.get(name).is_some()
    }
}

/// The three mirrored headers the spec's validation compares with the body, read in one pass
/// over the headers as they were read.
pub fn mirrored(headers: Headers<'_>) -> Mirrored<'_> {
    fn seen(value: Option<Result<&str, NotVisible>>) -> Seen<'_> {
        match value {
            None => Seen::Absent,
            Some(Err(NotVisible)) => Seen::NotVisible,
            Some(Ok(text)) => Seen::Text(text),
        }
    }
    let [version, method, name] = headers.visible_many([Known::ProtocolVersion, Known::Method, Known::Name]);
    Mirrored { version: seen(version), method: seen(method), name: seen(name) }
}

/// Headers as a lean request's bytes and places, for tests.
#[cfg(test)]
pub(crate) fn lines(headers: &[(&str, &str)]) -> (Vec<u8>, Vec<Place>) {
    let (mut bytes, mut places) = (Vec::new(), Vec::new());
    for (name, value) in headers {
        let at = bytes.len();
        bytes.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        let value_at = at + name.len() + 2;
        places.push((at..at + name.len(), value_at..value_at + value.len()));
    }
    (bytes, places)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

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
            let raw = Headers::Raw(Raw::of_places(&bytes, &places));
            let map = Headers::Map(&map);
            for known in Known::ALL {
                prop_assert_eq!(raw.get(known), map.get(known));
                prop_assert_eq!(raw.get_str(known), map.get_str(known));
                prop_assert_eq!(raw.visible(known), map.visible(known));
                prop_assert_eq!(raw.contains(known), map.contains(known));
            }
            for name in NAMES {
                let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
                prop_assert_eq!(raw.get_all(&name).collect::<Vec<_>>(), map.get_all(&name).collect::<Vec<_>>());
            }
            let lower = |h: Headers<'_>| {
                let mut all: Vec<_> = h.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec())).collect();
                all.sort_by(|a, b| a.0.cmp(&b.0));
                all
            };
            prop_assert_eq!(lower(raw), lower(map));
            let three = [Known::ProtocolVersion, Known::Method, Known::Name];
            prop_assert_eq!(raw.visible_many(three), map.visible_many(three));
            prop_assert_eq!(mirrored(raw), mirrored(map));
            prop_assert_eq!(map.visible_many(three), three.map(|k| map.visible(k)));
        }
    }

    #[test]
    fn a_token_matches_a_known_name_only_in_its_own_letters() {
        for known in Known::ALL {
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
    fn each_known_name_is_found_in_any_case_and_no_other() {
        for known in Known::ALL {
            let name = known.name().as_str();
            assert_eq!(Known::of(name.as_bytes()), Some(known));
            assert_eq!(Known::of(name.to_ascii_uppercase().as_bytes()), Some(known));
            let mut near = name.as_bytes().to_vec();
            near[0] ^= 1;
            assert_eq!(Known::of(&near), None, "{name} changed");
        }
        assert_eq!(Known::of(b"x-custom"), None);
    }

    #[test]
    fn a_head_that_is_not_utf8_still_gives_its_other_values_as_text() {
        let mut bytes = b"host: a\r\nmcp-name: caf".to_vec();
        bytes.push(0xe9);
        bytes.extend_from_slice(b"\r\n");
        let places = [(0..4, 6..7), (9..17, 19..23)];
        let raw = Headers::Raw(Raw::of_places(&bytes, &places));
        let map = HeaderMap::from_iter([
            (header::HOST, http::HeaderValue::from_static("a")),
            (mcp::header_name::NAME, http::HeaderValue::from_bytes(b"caf\xe9").unwrap()),
        ]);
        for headers in [raw, Headers::Map(&map)] {
            assert_eq!(headers.visible(Known::Host), Some(Ok("a")));
            assert_eq!(headers.get_str(Known::Host), Some("a"));
            assert_eq!(headers.visible(Known::Name), Some(Err(NotVisible)));
            assert_eq!(headers.get(Known::Name), Some(&b"caf\xe9"[..]));
            assert_eq!(headers.get_str(Known::Name), None);
        }
    }

    #[test]
    fn no_headers_has_none() {
        assert_eq!(Headers::NONE.get(Known::Host), None);
        assert_eq!(Headers::NONE.iter().count(), 0);
    }
}
