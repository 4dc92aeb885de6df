//! The small lexical pieces of the incremental pass: string escapes, literals, whitespace,
//! and UTF-8 checked across chunk boundaries.

/// Where a string scan stands with respect to escapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Esc {
    None,
    /// After a backslash.
    Backslash,
    /// Hex digits of a `\u` escape still to come.
    Hex(u8),
    /// The closing quote was seen.
    Closed,
}

impl Esc {
    /// The state after string byte `c`, or `None` when `c` cannot stand there.
    pub fn next(self, c: u8) -> Option<Esc> {
        match self {
            Esc::None | Esc::Closed => match c {
                b'"' => Some(Esc::Closed),
                b'\\' => Some(Esc::Backslash),
                0..0x20 => None,
                _ => Some(Esc::None),
            },
            Esc::Backslash => match c {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(Esc::None),
                b'u' => Some(Esc::Hex(4)),
                _ => None,
            },
            Esc::Hex(n) if c.is_ascii_hexdigit() => Some(if n == 1 { Esc::None } else { Esc::Hex(n - 1) }),
            Esc::Hex(_) => None,
        }
    }
}

/// JSON whitespace.
pub fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Whether `lit` is `true`, `false`, `null` or a number in JSON's grammar.
pub fn valid_literal(lit: &[u8]) -> bool {
    if matches!(lit, b"true" | b"false" | b"null") {
        return true;
    }
    let mut s = lit.strip_prefix(b"-").unwrap_or(lit);
    let digits = |s: &mut &[u8]| {
        let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
        *s = &s[n..];
        n
    };
    match s.first() {
        Some(b'0') => s = &s[1..],
        Some(b'1'..=b'9') => {
            digits(&mut s);
        }
        _ => return false,
    }
    if let Some(rest) = s.strip_prefix(b".") {
        s = rest;
        if digits(&mut s) == 0 {
            return false;
        }
    }
    if let Some(rest) = s.strip_prefix(b"e").or_else(|| s.strip_prefix(b"E")) {
        s = rest.strip_prefix(b"+").or_else(|| rest.strip_prefix(b"-")).unwrap_or(rest);
        if digits(&mut s) == 0 {
            return false;
        }
    }
    s.is_empty()
}

/// Checks a byte stream is UTF-8, chunk by chunk; a character split between two chunks is
/// carried (at most 3 bytes).
#[derive(Debug, Default)]
pub struct Utf8Check {
    carry: [u8; 4],
    held: usize,
}

impl Utf8Check {
    /// Checks the next chunk.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<(), super::ScanError> {
        let bad = || super::ScanError::NotUtf8;
        if self.held > 0 {
            let need = match self.carry[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (need - self.held).min(chunk.len());
            self.carry[self.held..self.held + take].copy_from_slice(&chunk[..take]);
            self.held += take;
            chunk = &chunk[take..];
            if self.held < need {
                return Ok(());
            }
            std::str::from_utf8(&self.carry[..need]).map_err(|_| bad())?;
            self.held = 0;
        }
        match std::str::from_utf8(chunk) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                let rest = &chunk[e.valid_up_to()..];
                self.carry[..rest.len()].copy_from_slice(rest);
                self.held = rest.len();
                Ok(())
            }
            Err(_) => Err(bad()),
        }
    }

    /// The end of the stream: no character may be left half.
    pub fn finish(&self) -> Result<(), super::ScanError> {
        if self.held == 0 { Ok(()) } else { Err(super::ScanError::NotUtf8) }
    }
}
