//! A request's headers as a service reads them. hyper's path has them in an `http::HeaderMap`.
//! The lean path ([`crate::lean`]) has them as its request's bytes and the places httparse
//! found each name and value in; building a `HeaderMap` from those costs hashing, two
//! allocations, a `Bytes` per value and their drop, to be looked up a handful of times.
//! [`Headers`] serves both: the same lookups, with the same answers, on either.
//!
//! The headers a service looks up by name are its vocabulary, a [`KnownNames`] type: a
//! [`Raw`] view notes where each of them first is as the head is parsed, so a lookup costs an
//! index, not a scan. This module knows no vocabulary of its own.
//!
//! A [`Raw`] view is made only from what httparse's strict request parse found
//! ([`Raw::from_httparse`]): httparse lets through exactly the name and value bytes
//! `http` accepts (the unit tests hold it to that), so a request the lean path serves is one
//! hyper's path would have had the same headers for. hyper relies on the same: it builds its
//! `HeaderValue`s from httparse's values unchecked.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::Range;

use http::{HeaderMap, HeaderName};

/// Where one header's name and value lie in a request's bytes.
pub type Place = (Range<usize>, Range<usize>);

/// The most names a vocabulary may have (the size of [`Firsts`]' table).
pub const MAX_KNOWN: usize = 16;

/// The headers a service looks up by name: a small enum, each variant one header name.
pub trait KnownNames: Copy + Eq + Debug + Send + Sync + 'static {
    /// How many names there are; at most [`MAX_KNOWN`].
    const COUNT: usize;
    /// The `Content-Length` header, which the lean path frames bodies by.
    const CONTENT_LENGTH: Self;

    /// Its position, below [`Self::COUNT`].
    fn index(self) -> usize;

    /// Its header name (lower case, as `http` keeps names).
    fn name(self) -> &'static HeaderName;

    /// The known name `raw` is, in any case. [`token_is`] compares one.
    fn of(raw: &[u8]) -> Option<Self>;
}

/// A header value that is not visible ASCII (`HeaderValue::to_str` fails on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotVisible;

/// The headers of one request.
pub enum Headers<'a, K> {
    /// hyper's parse.
    Map(&'a HeaderMap),
    /// The lean path's: the request's bytes and each header's place in them.
    Raw(Raw<'a, K>),
}

impl<K> Clone for Headers<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Headers<'_, K> {}

/// Headers left where they were read. Names are as sent (any case); values as `http` would
/// hold them.
pub struct Raw<'a, K> {
    bytes: &'a [u8],
    /// `bytes` as text, when they are UTF-8 (a head with only ASCII in it is): then a value
    /// is a slice of it, not checked again.
    text: Option<&'a str>,
    places: &'a [Place],
    first: Firsts<K>,
}

impl<K> Clone for Raw<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Raw<'_, K> {}

/// Where each known header's first value is among a head's headers: its index, plus one
/// (0: absent). Built as the headers are read, in their order.
pub struct Firsts<K>([u16; MAX_KNOWN], PhantomData<K>);

impl<K> Clone for Firsts<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Firsts<K> {}

impl<K> PartialEq for Firsts<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K> Eq for Firsts<K> {}

impl<K> Debug for Firsts<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Firsts").field(&self.0).finish()
    }
}

impl<K: KnownNames> Default for Firsts<K> {
    fn default() -> Self {
        const { assert!(K::COUNT <= MAX_KNOWN, "a vocabulary of more than MAX_KNOWN names") };
        Self([0; MAX_KNOWN], PhantomData)
    }
}

impl<K: KnownNames> Firsts<K> {
    /// Notes that header number `i` (fewer than 65,535) is named `name`; the known header
    /// it is, if any.
    #[inline]
    pub fn note(&mut self, i: usize, name: &[u8]) -> Option<K> {
        let known = K::of(name)?;
        let slot = &mut self.0[known.index()];
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
#[inline]
pub fn token_is(raw: &[u8], lower: &[u8]) -> bool {
    raw.len() == lower.len() && raw.iter().zip(lower).fold(0, |diff, (&r, &l)| diff | ((r | 0x20) ^ l)) == 0
}

/// The longest header name `http` accepts.
const MAX_NAME: usize = (1 << 16) - 1;

/// Whether a name of `len` bytes is one `http` takes (httparse has no bound of its own).
#[inline]
pub fn name_fits(len: usize) -> bool {
    len <= MAX_NAME
}

/// Whether every byte of a header value is visible ASCII or a tab, `HeaderValue::to_str`'s
/// rule (no early exit, as in [`token_is`]).
#[inline]
fn is_visible(value: &[u8]) -> bool {
    value.iter().fold(true, |ok, &b| ok & ((0x20..0x7f).contains(&b) || b == b'\t'))
}

/// A value as text, as `HeaderValue::to_str` gives it (`None` where `to_str` fails).
#[inline]
pub fn to_str(value: &[u8]) -> Option<&str> {
    if is_visible(value) { std::str::from_utf8(value).ok() } else { None }
}

impl<'a, K: KnownNames> Raw<'a, K> {
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
    pub fn from_httparse(bytes: &'a [u8], places: &'a [Place], first: Firsts<K>) -> Self {
        debug_assert!(places.len() < usize::from(u16::MAX) && places.iter().all(|(n, _)| name_fits(n.len())));
        debug_assert_eq!(first, Firsts::of(bytes, places));
        Self { bytes, text: std::str::from_utf8(bytes).ok(), places, first }
    }

    /// [`Self::from_httparse`] with the known names noted here, for tests.
    #[cfg(any(test, feature = "test-util"))]
    pub fn of_places(bytes: &'a [u8], places: &'a [Place]) -> Self {
        Self::from_httparse(bytes, places, Firsts::of(bytes, places))
    }

    /// The value at `at` as text, when it is visible ASCII.
    fn visible(self, at: &Range<usize>) -> Result<&'a str, NotVisible> {
        let text = match self.text {
            Some(text) => text.get(at.clone()),
            None => std::str::from_utf8(&self.bytes[at.clone()]).ok(),
        };
        text.filter(|text| is_visible(text.as_bytes())).ok_or(NotVisible)
    }

    /// Where the first value of `name` is.
    fn value(self, name: K) -> Option<&'a Range<usize>> {
        match self.first.0[name.index()] {
            0 => None,
            at => Some(&self.places[usize::from(at) - 1].1),
        }
    }

    fn pairs(self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.places.iter().map(move |(name, value)| (&self.bytes[name.clone()], &self.bytes[value.clone()]))
    }
}

impl<'a, K: KnownNames> Headers<'a, K> {
    /// No headers (a transport without them).
    pub const NONE: Headers<'static, K> =
        Headers::Raw(Raw { bytes: &[], text: Some(""), places: &[], first: Firsts([0; MAX_KNOWN], PhantomData) });

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
    #[inline]
    pub fn get(self, name: K) -> Option<&'a [u8]> {
        match self {
            Self::Map(map) => map.get(name.name()).map(http::HeaderValue::as_bytes),
            Self::Raw(raw) => raw.value(name).map(|at| &raw.bytes[at.clone()]),
        }
    }

    /// The first value of `name`, when present, as text (`Err` when it is not visible ASCII,
    /// as `HeaderValue::to_str` judges).
    #[inline]
    pub fn visible(self, name: K) -> Option<Result<&'a str, NotVisible>> {
        match self {
            Self::Map(map) => map.get(name.name()).map(|v| v.to_str().map_err(|_| NotVisible)),
            Self::Raw(raw) => raw.value(name).map(|at| raw.visible(at)),
        }
    }

    /// The first values of each of `names`, as [`Self::visible`] gives them. On a
    /// `HeaderMap` this is one pass over its headers, not a hashed lookup per name.
    pub fn visible_many<const N: usize>(self, names: [K; N]) -> [Option<Result<&'a str, NotVisible>>; N] {
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
    #[inline]
    pub fn get_str(self, name: K) -> Option<&'a str> {
        self.visible(name)?.ok()
    }

    /// Whether `name` is present.
    #[inline]
    pub fn contains(self, name: K) -> bool {
        self.get(name).is_some()
    }
}

/// Headers as a lean request's bytes and places, for tests.
#[cfg(any(test, feature = "test-util"))]
pub fn lines(headers: &[(&str, &str)]) -> (Vec<u8>, Vec<Place>) {
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
pub(crate) mod tests;
