//! An ordered, borrowed view of a JSON object whose values stay raw.
//!
//! Rewriting one field (a URI, a cursor) of a large result means parsing the top level only:
//! the other values are validated by the parser but neither unescaped nor copied.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON object as an ordered list of `(key, raw value)` pairs. Duplicate keys are rejected at
/// parse time: a proxy that forwards both copies lets two parsers disagree about the value.
#[derive(Debug, Clone, Default)]
pub struct RawObject<'a> {
    entries: Vec<(Cow<'a, str>, Cow<'a, RawValue>)>,
}

impl<'a> RawObject<'a> {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: &'a RawValue) -> Result<Self, serde_json::Error> {
        Self::parse_str(raw.get())
    }

    /// Parses `text`, which must be a JSON object.
    pub fn parse_str(text: &'a str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_ref())
    }

    /// The raw value of `key` with the lifetime of the parsed text (`None` for values set
    /// after parsing).
    pub fn get_borrowed(&self, key: &str) -> Option<&'a RawValue> {
        match self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v) {
            Some(Cow::Borrowed(v)) => Some(v),
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
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((Cow::Borrowed(key), value)),
        }
    }

    /// Sets `key` to a JSON string.
    pub fn set_string(&mut self, key: &'a str, value: &str) {
        let mut out = Vec::with_capacity(value.len() + 2);
        super::write_json_string(&mut out, value);
        self.set(key, Cow::Owned(owned_raw(out)));
    }

    /// Sets `key` to an integer.
    pub fn set_u64(&mut self, key: &'a str, value: u64) {
        let mut buf = itoa::Buffer::new();
        self.set(key, Cow::Owned(owned_raw(buf.format(value).as_bytes().to_vec())));
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Cow<'a, RawValue>> {
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
    pub fn iter(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    /// Appends the object's JSON text to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            super::write_json_string(out, k);
            out.push(b':');
            out.extend_from_slice(v.get().as_bytes());
        }
        out.push(b'}');
    }

    /// The object's JSON text.
    pub fn to_vec(&self) -> Vec<u8> {
        let size = self.entries.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>();
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
pub fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjVisitor;
        impl<'de> Visitor<'de> for ObjVisitor {
            type Value = RawObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut entries: Vec<(Cow<'de, str>, Cow<'de, RawValue>)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    if entries.iter().any(|(seen, _)| *seen == k) {
                        return Err(de::Error::custom(format_args!("duplicate key `{k}`")));
                    }
                    entries.push((k, Cow::Borrowed(v)));
                }
                Ok(RawObject { entries })
            }
        }
        d.deserialize_map(ObjVisitor)
    }
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
