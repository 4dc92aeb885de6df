//! The codec's JSON reader: one pass over the text that checks it is JSON (RFC 8259, the
//! grammar serde_json accepts) and hands back borrowed slices of the values the caller looks
//! at, so an envelope, its `params` and their `_meta` are read in the same pass instead of
//! being re-parsed from captured raw values (the crate forbids `unsafe`, and serde_json only
//! makes a `&RawValue` by parsing).
//!
//! Nesting is bounded without recursion: the containers a skipped value opens are kept as
//! one bit each in a `u128`, so the depth bound is at most [`MAX_DEPTH`].

use std::borrow::Cow;

use super::lexeme::{KEYWORDS, UNICODE_HEX_DIGITS, is_simple_escape, is_ws, number_len, string_stops};

/// The deepest nesting the reader can track (and serde_json's own recursion limit).
pub const MAX_DEPTH: usize = 128;

/// Why text is not JSON of the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON.
    #[error("{what} at byte {at}")]
    Syntax { at: usize, what: &'static str },
    /// Nested deeper than the bound.
    #[error("JSON nested deeper than {0} levels")]
    TooDeep(usize),
    /// JSON, but not an object where one is required.
    #[error("expected a JSON object")]
    NotObject,
    /// An object names a key twice: a proxy that forwards both lets two parsers disagree.
    #[error("duplicate key `{0}`")]
    Duplicate(String),
}

impl JsonError {
    /// Whether the text is not JSON at all (as opposed to JSON of the wrong shape).
    pub fn is_syntax(&self) -> bool {
        matches!(self, Self::Syntax { .. } | Self::TooDeep(_))
    }
}

/// One object key as it appears in the text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key<'a> {
    /// Between the quotes, escapes as written.
    inner: &'a str,
    escaped: bool,
}

impl<'a> Key<'a> {
    /// The key as written, when it has no escapes (so it is its own value).
    pub(crate) fn plain(&self) -> Option<&'a str> {
        (!self.escaped).then_some(self.inner)
    }

    /// The key unescaped; borrowed when it has no escapes.
    #[inline]
    pub(crate) fn decode(&self) -> Result<Cow<'a, str>, JsonError> {
        decode_string(self.inner, self.escaped)
    }
}

/// The value of a checked JSON string's inside (quotes stripped): borrowed without escapes;
/// with them, unescaped by serde_json, which also refuses unpaired surrogates in `\u` escapes.
#[inline]
pub(crate) fn decode_string(inner: &str, escaped: bool) -> Result<Cow<'_, str>, JsonError> {
    if escaped { unescape(inner).map(Cow::Owned) } else { Ok(Cow::Borrowed(inner)) }
}

/// [`decode_string`] of a string with escapes: the rare case, kept out of line.
#[cold]
fn unescape(inner: &str) -> Result<String, JsonError> {
    let quoted = format!("\"{inner}\"");
    serde_json::from_str::<String>(&quoted)
        .map_err(|_| JsonError::Syntax { at: 0, what: "invalid `\\u` escape in a string" })
}

/// A cursor over JSON text.
pub(crate) struct Reader<'a> {
    text: &'a str,
    pos: usize,
    max_depth: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `text` that refuses nesting deeper than `max_depth` (at most [`MAX_DEPTH`]).
    pub(crate) fn new(text: &'a str, max_depth: usize) -> Self {
        Self { text, pos: 0, max_depth: max_depth.min(MAX_DEPTH) }
    }

    pub(crate) fn error(&self, what: &'static str) -> JsonError {
        JsonError::Syntax { at: self.pos, what }
    }

    /// Where the cursor is.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// The text from `start` to the cursor.
    pub(crate) fn since(&self, start: usize) -> &'a str {
        &self.text[start..self.pos]
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// Skips insignificant whitespace.
    pub(crate) fn ws(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.pos += 1;
        }
    }

    /// Checks that only whitespace is left.
    pub(crate) fn end(&mut self) -> Result<(), JsonError> {
        self.ws();
        if self.pos == self.text.len() { Ok(()) } else { Err(self.error("trailing characters")) }
    }

    fn expect(&mut self, b: u8, what: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(if self.peek().is_none() { "unexpected end of input" } else { what }))
        }
    }

    /// Reads the string at the cursor (its opening quote); returns its inside and whether it
    /// has escapes.
    #[inline]
    fn string(&mut self) -> Result<(&'a str, bool), JsonError> {
        let bytes = self.text.as_bytes();
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            while let Some(chunk) = bytes.get(i..i + 8) {
                let stop = string_stops(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
                if stop != 0 {
                    i += (stop.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            match bytes.get(i) {
                None => {
                    self.pos = i;
                    return Err(self.error("unexpected end of input in a string"));
                }
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok((&self.text[start..i], escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    let hex = usize::from(UNICODE_HEX_DIGITS);
                    match bytes.get(i + 1) {
                        Some(&c) if is_simple_escape(c) => i += 2,
                        Some(b'u')
                            if bytes.get(i + 2..i + 2 + hex).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
                        {
                            i += 2 + hex
                        }
                        _ => {
                            self.pos = i;
                            return Err(self.error("invalid escape"));
                        }
                    }
                }
                Some(c) if *c < 0x20 => {
                    self.pos = i;
                    return Err(self.error("control character in a string"));
                }
                Some(_) => i += 1,
            }
        }
    }

    /// The string at the cursor (after whitespace), read as [`Reader::value`] reads it, as
    /// its inside and whether it has escapes; `None` (nothing read) when the value there is
    /// not a string.
    pub(crate) fn string_value(&mut self) -> Option<Result<(&'a str, bool), JsonError>> {
        self.ws();
        (self.peek() == Some(b'"')).then(|| self.string())
    }

    fn number(&mut self) -> Result<(), JsonError> {
        match number_len(&self.text.as_bytes()[self.pos..]) {
            Some(n) => {
                self.pos += n;
                Ok(())
            }
            None => Err(self.error("invalid number")),
        }
    }

    fn keyword(&mut self) -> Result<(), JsonError> {
        let rest = &self.text.as_bytes()[self.pos..];
        match KEYWORDS.iter().find(|word| rest.starts_with(word)) {
            Some(word) => {
                self.pos += word.len();
                Ok(())
            }
            None => Err(self.error("expected a value")),
        }
    }

    /// A value that is not a container.
    fn scalar(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b't' | b'f' | b'n') => self.keyword(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    /// Reads the value at the cursor (after whitespace), inside `depth` open containers;
    /// returns its text.
    pub(crate) fn value(&mut self, depth: usize) -> Result<&'a str, JsonError> {
        self.ws();
        let start = self.pos;
        match self.peek() {
            Some(b'{' | b'[') => self.container(depth)?,
            _ => self.scalar()?,
        }
        Ok(&self.text[start..self.pos])
    }

    /// Skips the container at the cursor without recursion.
    fn container(&mut self, depth: usize) -> Result<(), JsonError> {
        enum Step {
            Open,
            Member,
            After,
            Closed,
        }
        // Bit i: whether the container i levels below the innermost is an object.
        let mut objects: u128 = 0;
        let mut level = 0usize;
        let mut step = Step::Open;
        loop {
            step = match step {
                Step::Open => {
                    if depth + level >= self.max_depth {
                        return Err(JsonError::TooDeep(self.max_depth));
                    }
                    let object = self.peek() == Some(b'{');
                    objects = (objects << 1) | u128::from(object);
                    level += 1;
                    self.pos += 1;
                    self.ws();
                    let close = if object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        Step::Closed
                    } else {
                        Step::Member
                    }
                }
                Step::Member => {
                    self.ws();
                    if objects & 1 == 1 {
                        self.key()?;
                    }
                    match self.peek() {
                        Some(b'{' | b'[') => Step::Open,
                        _ => {
                            self.scalar()?;
                            Step::After
                        }
                    }
                }
                Step::After => {
                    self.ws();
                    let close = if objects & 1 == 1 { b'}' } else { b']' };
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            Step::Member
                        }
                        Some(b) if b == close => {
                            self.pos += 1;
                            Step::Closed
                        }
                        None => return Err(self.error("unexpected end of input")),
                        Some(_) => return Err(self.error("expected `,` or the end of the container")),
                    }
                }
                Step::Closed => {
                    objects >>= 1;
                    level -= 1;
                    if level == 0 {
                        return Ok(());
                    }
                    Step::After
                }
            };
        }
    }

    /// Reads a key and its colon; the cursor ends before the value's whitespace.
    fn key(&mut self) -> Result<Key<'a>, JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.error(if self.peek().is_none() { "unexpected end of input" } else { "expected a key" }));
        }
        let (inner, escaped) = self.string()?;
        self.ws();
        self.expect(b':', "expected `:`")?;
        self.ws();
        Ok(Key { inner, escaped })
    }

    /// Reads the object at the cursor (after whitespace), inside `depth` open containers;
    /// `member` is called at each value with its key and must read the value (with `depth + 1`
    /// open containers). A value that is not an object is read whole and is
    /// [`JsonError::NotObject`], so the caller can tell it from text that is not JSON.
    pub(crate) fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, Key<'a>) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        self.ws();
        if self.peek() != Some(b'{') {
            self.value(depth)?;
            return Err(JsonError::NotObject);
        }
        if depth >= self.max_depth {
            return Err(JsonError::TooDeep(self.max_depth));
        }
        self.pos += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let key = self.key()?;
            member(self, key)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                None => return Err(self.error("unexpected end of input")),
                Some(_) => return Err(self.error("expected `,` or `}`")),
            }
        }
    }
}

#[cfg(test)]
mod tests;
