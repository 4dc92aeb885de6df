//! An ordered, borrowed view of a JSON object whose values stay raw.
//!
//! Rewriting one field (a URI, a cursor) of a large result means parsing the top level only:
//! the other values are checked by the reader but neither unescaped nor copied.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::lex::{self, JsonError, Reader};

/// The text of one JSON value the codec checked (or wrote itself), borrowed. What
/// `&RawValue` is to serde_json, without a parse to make one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// Only the codec makes these, from text it checked or wrote.
    pub(crate) fn checked(text: &'a str) -> Self {
        Self(text)
    }

    /// The JSON text.
    pub fn get(&self) -> &'a str {
        self.0
    }

    /// Whether the value is an object.
    pub fn is_object(&self) -> bool {
        self.0.starts_with('{')
    }
}

impl<'a> From<&'a RawValue> for RawJson<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Self(raw.get())
    }
}

/// A JSON object as an ordered list of `(key, raw value)` pairs. Duplicate keys are rejected at
/// parse time: a proxy that forwards both copies lets two parsers disagree about the value.
#[derive(Debug, Clone, Default)]
pub struct RawObject<'a> {
    /// Keys unescaped; values as checked JSON text.
    entries: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> RawObject<'a> {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: impl Into<RawJson<'a>>) -> Result<Self, JsonError> {
        Self::parse_str(raw.into().get())
    }

    /// Parses `text`, which must be a JSON object (nested at most [`lex::MAX_DEPTH`] deep).
    pub fn parse_str(text: &'a str) -> Result<Self, JsonError> {
        let mut reader = Reader::new(text, lex::MAX_DEPTH);
        let obj = Self::read(&mut reader, 0, |_, _, _| Ok(None))?;
        reader.end()?;
        obj
    }

    /// Reads the object at `reader`'s cursor, inside `depth` open containers. `nested` sees
    /// each key first and may read its value itself (returning the value's text); otherwise
    /// the value is read raw. The outer error is the text's (not JSON); the inner one (a
    /// duplicate key, or a value that is not an object) is found with the whole value read,
    /// so the caller can report either.
    pub(crate) fn read(
        reader: &mut Reader<'a>,
        depth: usize,
        mut nested: impl FnMut(&mut Reader<'a>, &str, usize) -> Result<Option<&'a str>, JsonError>,
    ) -> Result<Result<Self, JsonError>, JsonError> {
        // Room for a request's `params` or `_meta` from the start: the size a first push would
        // allocate anyway, without the growth path (docs/hit-path-profile.md).
        let mut entries: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::with_capacity(4);
        let mut duplicate = None;
        let read = reader.object(depth, |r, key| {
            let key = key.decode()?;
            let value = match nested(r, &key, depth + 1)? {
                Some(text) => text,
                None => r.value(depth + 1)?,
            };
            if duplicate.is_none() && entries.iter().any(|(seen, _)| *seen == key) {
                duplicate = Some(JsonError::Duplicate(key.into_owned()));
            } else {
                entries.push((key, Cow::Borrowed(value)));
            }
            Ok(())
        });
        match read {
            Ok(()) => {}
            Err(JsonError::NotObject) => return Ok(Err(JsonError::NotObject)),
            Err(e) => return Err(e),
        }
        Ok(match duplicate {
            Some(e) => Err(e),
            None => Ok(Self { entries }),
        })
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<RawJson<'_>> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| RawJson(v))
    }

    /// The raw value of `key` with the lifetime of the parsed text (`None` for values set
    /// after parsing).
    pub fn get_borrowed(&self, key: &str) -> Option<RawJson<'a>> {
        match self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v) {
            Some(Cow::Borrowed(v)) => Some(RawJson(v)),
            _ => None,
        }
    }

    /// The value of `key` when it is a JSON string.
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        self.get(key).and_then(raw_str)
    }

    /// Whether `key` is present (with any value, `null` included).
    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Sets `key` to `value`, keeping its position when it exists, appending otherwise.
    pub fn set(&mut self, key: &'a str, value: Cow<'a, RawValue>) {
        let text = match value {
            Cow::Borrowed(v) => Cow::Borrowed(v.get()),
            Cow::Owned(v) => Cow::Owned(String::from(Box::<str>::from(v))),
        };
        self.set_text(key, text);
    }

    /// Sets `key` to a raw value borrowed from checked text.
    pub fn set_raw(&mut self, key: &'a str, value: RawJson<'a>) {
        self.set_text(key, Cow::Borrowed(value.0));
    }

    /// Sets `key` to JSON text the codec checked or wrote.
    fn set_text(&mut self, key: &'a str, value: Cow<'a, str>) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((Cow::Borrowed(key), value)),
        }
    }

    /// Sets `key` to a JSON string.
    pub fn set_string(&mut self, key: &'a str, value: &str) {
        let mut out = Vec::with_capacity(value.len() + 2);
        super::lexeme::write_json_string(&mut out, value);
        self.set_text(key, Cow::Owned(String::from_utf8(out).expect("the codec writes UTF-8")));
    }

    /// Sets `key` to an integer.
    pub fn set_u64(&mut self, key: &'a str, value: u64) {
        self.set_text(key, Cow::Owned(itoa::Buffer::new().format(value).to_owned()));
    }

    /// Removes `key`, returning its value's text.
    pub fn remove(&mut self, key: &str) -> Option<Cow<'a, str>> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(at).1)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the object has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Iterates the entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, RawJson<'_>)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), RawJson(v)))
    }

    /// Appends the object's JSON text to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            super::lexeme::write_json_string(out, k);
            out.push(b':');
            out.extend_from_slice(v.as_bytes());
        }
        out.push(b'}');
    }

    /// The object's JSON text.
    pub fn to_vec(&self) -> Vec<u8> {
        let size = self.entries.iter().map(|(k, v)| k.len() + v.len() + 4).sum::<usize>();
        let mut out = Vec::with_capacity(size + 2);
        self.write_to(&mut out);
        out
    }

    /// The object as an owned raw value.
    pub fn to_raw(&self) -> Box<RawValue> {
        owned_raw(self.to_vec())
    }
}

/// Wraps JSON text the codec itself produced as a raw value.
pub(crate) fn owned_raw(json: Vec<u8>) -> Box<RawValue> {
    let text = String::from_utf8(json).expect("the codec writes UTF-8");
    RawValue::from_string(text).expect("the codec writes valid JSON")
}

/// The value of a raw JSON string, borrowed when it has no escapes; `None` for non-strings.
pub fn raw_str<'a>(raw: impl Into<RawJson<'a>>) -> Option<Cow<'a, str>> {
    let inner = raw.into().0.strip_prefix('"')?.strip_suffix('"')?;
    // Checked JSON: the only byte inside a string that needs escaping is an escape's `\`.
    lex::decode_string(inner, !super::lexeme::needs_no_escape(inner)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_one_field_and_keeps_the_rest_verbatim() {
        let text = r#"{"uri":"file:///a","text":"x\ny \u00e9","n":[1, 2]}"#;
        let mut obj = RawObject::parse_str(text).unwrap();
        assert_eq!(obj.get_str("uri").unwrap(), "file:///a");
        obj.set_string("uri", "docs+file:///a");
        let out = String::from_utf8(obj.to_vec()).unwrap();
        assert_eq!(out, r#"{"uri":"docs+file:///a","text":"x\ny \u00e9","n":[1, 2]}"#);
    }

    #[test]
    fn rejects_duplicates_and_non_objects() {
        assert!(RawObject::parse_str(r#"{"a":1,"a":2}"#).is_err());
        assert!(RawObject::parse_str("[1]").is_err());
        assert!(RawObject::parse_str("{").is_err());
    }

    #[test]
    fn escaped_strings_are_unescaped() {
        let obj = RawObject::parse_str(r#"{"k\u0041":"a\"b"}"#).unwrap();
        assert_eq!(obj.get_str("kA").unwrap(), "a\"b");
        assert!(obj.get_str("missing").is_none());
    }
}
