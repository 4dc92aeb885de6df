//! The request headers the MCP endpoint reads by name: its vocabulary ([`Known`]) for
//! `resmux_http`'s header views, which serve hyper's `HeaderMap` and the lean path's raw head
//! with the same lookups (see [`resmux_http::headers`]).

use http::{HeaderName, header};
use resmux_http::headers::{self as view, KnownNames, token_is};

use crate::mcp;
use crate::mcp::validate::{Mirrored, Seen};

pub use resmux_http::headers::{NotVisible, Place, name_fits, to_str};

/// A request's headers, looked up in the MCP vocabulary.
pub type Headers<'a> = view::Headers<'a, Known>;
/// The lean path's raw view of them.
pub type Raw<'a> = view::Raw<'a, Known>;
/// Where each known header first is in a raw head.
pub type Firsts = view::Firsts<Known>;

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
    pub(crate) const ALL: [Known; 10] = [
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
}

impl KnownNames for Known {
    const COUNT: usize = KNOWN.len();
    const CONTENT_LENGTH: Self = Self::ContentLength;

    #[inline]
    fn index(self) -> usize {
        self as usize
    }

    #[inline]
    fn name(self) -> &'static HeaderName {
        Known::name(self)
    }

    /// The known header `raw` names, in any case (told apart by length first).
    #[inline]
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

/// The three mirrored headers the spec's validation compares with the body, read in one pass
/// over the headers as they were read.
pub fn mirrored(headers: Headers<'_>) -> Mirrored<'_> {
    let [version, method, name] =
        headers.visible_many([Known::ProtocolVersion, Known::Method, Known::Name]).map(Seen::of_text);
    Mirrored { version, method, name }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;
    use resmux_http::headers::lines;

    proptest! {
        /// The mirrored triple reads the same from the lean path's raw head as from the map
        /// hyper would have built from the same headers.
        #[test]
        fn the_mirrored_headers_read_the_same_raw_or_mapped(
            headers in proptest::collection::vec((0..4usize, any::<bool>(), "[ -~\t\u{80}-\u{ff}]{0,8}"), 0..8)
        ) {
            const NAMES: [&str; 4] = ["mcp-protocol-version", "mcp-method", "mcp-name", "host"];
            let mut map = HeaderMap::new();
            let mut sent = Vec::new();
            for (i, upper, value) in &headers {
                let name = if *upper { NAMES[*i].to_ascii_uppercase() } else { NAMES[*i].to_owned() };
                map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_bytes(value.as_bytes()).unwrap());
                sent.push((name, value.clone()));
            }
            let sent: Vec<(&str, &str)> = sent.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            let (bytes, places) = lines(&sent);
            prop_assert_eq!(mirrored(Headers::Raw(Raw::of_places(&bytes, &places))), mirrored(Headers::Map(&map)));
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
    fn every_known_name_sits_at_its_own_index() {
        for (i, known) in Known::ALL.into_iter().enumerate() {
            assert_eq!(known.index(), i);
            assert_eq!(<Known as KnownNames>::name(known), &KNOWN[i]);
        }
        assert_eq!(Known::COUNT, Known::ALL.len());
    }
}
