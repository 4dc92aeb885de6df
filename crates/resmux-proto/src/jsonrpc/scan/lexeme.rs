//! The incremental pass's view of JSON's lexemes ([`crate::jsonrpc::lexeme`]): a string's
//! escape state carried from one chunk to the next, and UTF-8 checked across chunk boundaries.

use crate::jsonrpc::lexeme::{UNICODE_HEX_DIGITS, is_simple_escape, is_string_stop};

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
                _ if is_string_stop(c) => None,
                _ => Some(Esc::None),
            },
            Esc::Backslash if is_simple_escape(c) => Some(Esc::None),
            Esc::Backslash if c == b'u' => Some(Esc::Hex(UNICODE_HEX_DIGITS)),
            Esc::Backslash => None,
            Esc::Hex(n) if c.is_ascii_hexdigit() => Some(if n == 1 { Esc::None } else { Esc::Hex(n - 1) }),
            Esc::Hex(_) => None,
        }
    }
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
