//! JSON's lexemes (RFC 8259 §4-§7), the one definition both of the codec's readers use: the
//! whole-message reader ([`super::lex`], requests and small results) and the incremental pass
//! over large results ([`super::scan`]), as well as the writers. A reader differs from the
//! other in how it walks the text (a cursor over a complete text, or a state carried across
//! chunks), never in what it accepts.

/// JSON's insignificant whitespace.
#[inline]
pub(crate) fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Whether `b` ends a run of plain string bytes: the closing quote, an escape, or a control
/// character (which must be escaped).
#[inline]
pub(crate) fn is_string_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Whether `c` may follow a backslash as a one-character escape.
#[inline]
pub(crate) fn is_simple_escape(c: u8) -> bool {
    matches!(c, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
}

/// The hex digits a `\u` escape takes.
pub(crate) const UNICODE_HEX_DIGITS: u8 = 4;

/// [`is_string_stop`] for eight bytes at once: a lane that holds a stop has its high bit set
/// in the result, so the lowest set bit marks the first stop. Lanes above the first stop may
/// be flagged falsely (borrows), which a caller never looks at.
#[inline]
pub(crate) fn string_stops(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')))
}

/// Whether `s` has no byte a JSON string must escape, so that it is its own JSON text between
/// quotes.
pub(crate) fn needs_no_escape(s: &str) -> bool {
    let mut words = s.as_bytes().chunks_exact(8);
    let stops =
        words.by_ref().fold(0, |stops, w| stops | string_stops(u64::from_le_bytes(w.try_into().expect("8 bytes"))));
    stops == 0 && !words.remainder().iter().any(|&b| is_string_stop(b))
}

/// Appends `s` as a JSON string literal, escaped as serde_json escapes it. Text with nothing
/// to escape (a URI, a key, a cursor) is copied between quotes, found by the word-at-a-time
/// test; serde_json's escaper is a table lookup per byte (`benches/codec.rs`).
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    if needs_no_escape(s) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    // serde_json's escaper writes into any io::Write; a Vec never fails.
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
}

/// The length of the number that `text` starts with, in JSON's grammar (`-`, an integer part
/// without leading zeros, an optional fraction and exponent, each with at least one digit);
/// `None` when it does not start with one. What follows the number is the caller's to judge.
#[inline]
pub(crate) fn number_len(text: &[u8]) -> Option<usize> {
    let digits = |at: usize| text[at.min(text.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut at = usize::from(text.first() == Some(&b'-'));
    match text.get(at) {
        Some(b'0') => at += 1,
        Some(b'1'..=b'9') => at += digits(at),
        _ => return None,
    }
    if text.get(at) == Some(&b'.') {
        let n = digits(at + 1);
        if n == 0 {
            return None;
        }
        at += 1 + n;
    }
    if let Some(b'e' | b'E') = text.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = text.get(at) {
            at += 1;
        }
        let n = digits(at);
        if n == 0 {
            return None;
        }
        at += n;
    }
    Some(at)
}

/// The literal names JSON has.
pub(crate) const KEYWORDS: [&[u8]; 3] = [b"true", b"false", b"null"];

/// Whether `lit` is exactly one scalar that is not a string: `true`, `false`, `null` or a
/// number.
pub(crate) fn is_scalar_literal(lit: &[u8]) -> bool {
    KEYWORDS.contains(&lit) || number_len(lit) == Some(lit.len())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn numbers_as_the_grammar_has_them() {
        for ok in ["0", "-0", "12", "1.5", "-1.5e10", "1E+2", "1e-2", "0.0"] {
            assert!(is_scalar_literal(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "-", "01", "1.", ".5", "1e", "1e+", "+1", "0x1", "1.5.2", "--1", "tru", "nulls"] {
            assert!(!is_scalar_literal(bad.as_bytes()), "{bad}");
        }
        assert_eq!(number_len(b"12,"), Some(2), "the number ends where its grammar does");
        assert_eq!(number_len(b"-1.5e3]"), Some(6));
    }

    proptest! {
        /// The scalar grammar is serde_json's: a literal is accepted exactly when serde_json
        /// parses it as a number or keyword.
        #[test]
        fn scalars_agree_with_serde_json(lit in "-?[0-9]{0,3}(\\.[0-9]{0,2})?([eE][+-]?[0-9]{0,2})?|true|false|null|[a-z0-9.+-]{0,5}") {
            let serde = serde_json::from_str::<serde_json::Value>(&lit).is_ok_and(|v| !v.is_string() && !v.is_array() && !v.is_object());
            prop_assert_eq!(is_scalar_literal(lit.as_bytes()), serde);
        }

        /// The word-at-a-time stop finder agrees with the byte rule.
        #[test]
        fn word_stops_agree_with_byte_stops(bytes in proptest::collection::vec(any::<u8>(), 8)) {
            let word = u64::from_le_bytes(bytes.clone().try_into().expect("8 bytes"));
            let first = bytes.iter().position(|&b| is_string_stop(b));
            let found = (string_stops(word) != 0).then(|| (string_stops(word).trailing_zeros() / 8) as usize);
            prop_assert_eq!(found, first);
        }
    }
}
