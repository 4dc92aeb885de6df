//! The envelope's members, read in one pass with the codec's reader.

use std::borrow::Cow;

use crate::jsonrpc::lex::{JsonError, Key, Reader, decode_string};
use crate::jsonrpc::raw_object::{RawJson, RawObject};

/// The members an envelope may have, in the order of [`Envelope::seen`]'s bits.
const FIELDS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

/// Which of [`FIELDS`] `key` names: a plain key is compared as written (a key written with
/// escapes is unescaped first), so the common case costs no decoding per name.
fn field(key: Key<'_>) -> Option<usize> {
    let index = |name: &str| FIELDS.iter().position(|f| *f == name);
    match key.plain() {
        Some(name) => index(name),
        None => key.decode().ok().and_then(|name| index(&name)),
    }
}

/// The members of a message as read, before the JSON-RPC rules are checked.
#[derive(Default)]
pub(super) struct Envelope<'a> {
    pub jsonrpc: Option<Cow<'a, str>>,
    /// `Some` for any present value, `null` included.
    pub id: Option<RawJson<'a>>,
    pub method: Option<Cow<'a, str>>,
    pub params: Option<RawJson<'a>>,
    pub result: Option<RawJson<'a>>,
    pub error: Option<RawJson<'a>>,
    pub params_object: Option<Result<RawObject<'a>, JsonError>>,
    pub meta_object: Option<Result<RawObject<'a>, JsonError>>,
    /// The first member of the wrong type, or named twice; reported once the whole text is
    /// known to be JSON (text that is not JSON is a parse error whatever it holds).
    pub shape: Option<String>,
    seen: u8,
}

impl<'a> Envelope<'a> {
    /// Reads the value of member `key` (the reader is at the value).
    pub fn member(&mut self, r: &mut Reader<'a>, key: Key<'a>) -> Result<(), JsonError> {
        let Some(field) = field(key) else {
            r.value(1)?;
            return Ok(());
        };
        if self.seen & (1 << field) != 0 {
            self.shape.get_or_insert_with(|| format!("duplicate field `{}`", FIELDS[field]));
        }
        self.seen |= 1 << field;
        match field {
            0 => self.jsonrpc = self.string_or_null(r, FIELDS[field])?,
            1 => self.id = Some(RawJson::checked(r.value(1)?)),
            2 => self.method = self.string_or_null(r, FIELDS[field])?,
            3 => self.params = Some(self.params(r)?),
            4 => self.result = Some(RawJson::checked(r.value(1)?)),
            _ => self.error = Some(RawJson::checked(r.value(1)?)),
        }
        Ok(())
    }

    /// A member that must be a string; `null` counts as absent.
    fn string_or_null(&mut self, r: &mut Reader<'a>, name: &str) -> Result<Option<Cow<'a, str>>, JsonError> {
        // A string is read where it is, with what the reader learnt of its escapes.
        if let Some(string) = r.string_value() {
            let (inner, escaped) = string?;
            return decode_string(inner, escaped).map(Some);
        }
        // Not a string: `null`, or a member of the wrong type.
        let text = r.value(1)?;
        if text != "null" {
            self.shape.get_or_insert_with(|| format!("`{name}` must be a string"));
        }
        Ok(None)
    }

    /// `params`: an object is read into its entries, and its `_meta` into its own, on the way.
    fn params(&mut self, r: &mut Reader<'a>) -> Result<RawJson<'a>, JsonError> {
        if r.peek() != Some(b'{') {
            return r.value(1).map(RawJson::checked);
        }
        let start = r.position();
        let mut meta = None;
        let params = RawObject::read(r, 1, |r, key, depth| {
            if key != "_meta" || r.peek() != Some(b'{') {
                return Ok(None);
            }
            let start = r.position();
            meta = Some(RawObject::read(r, depth, |_, _, _| Ok(None))?);
            Ok(Some(r.since(start)))
        })?;
        self.params_object = Some(params);
        self.meta_object = meta;
        Ok(RawJson::checked(r.since(start)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `field` tells each of `FIELDS` by its index, written plainly or with escapes.
    #[test]
    fn each_field_is_told_by_its_index() {
        for (i, name) in FIELDS.iter().enumerate() {
            let plain = format!("{{\"{name}\":1}}");
            let escaped = format!("{{\"\\u{:04x}{}\":1}}", u32::from(name.as_bytes()[0]), &name[1..]);
            for text in [plain, escaped] {
                let mut r = Reader::new(&text, 4);
                let mut seen = None;
                r.object(0, |r, key| {
                    seen = Some(field(key));
                    r.value(1).map(drop)
                })
                .unwrap();
                assert_eq!(seen, Some(Some(i)), "{text}");
            }
        }
        let mut r = Reader::new(r#"{"ids":1}"#, 4);
        r.object(0, |r, key| {
            assert_eq!(field(key), None);
            r.value(1).map(drop)
        })
        .unwrap();
    }
}
