//! Encoding of mirrored header values (SEP-2243): plain visible ASCII as is, anything else as
//! `=?base64?<base64(utf8)>?=`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const OPEN: &str = "=?base64?";
const CLOSE: &str = "?=";

/// Encodes `value` for a mirrored header, choosing the base64 sentinel form when the plain form
/// cannot carry it: non-ASCII, control characters, leading/trailing whitespace, or a value that
/// itself looks like the sentinel.
pub fn encode(value: &str) -> String {
    if needs_base64(value) {
        let mut out = String::with_capacity(OPEN.len() + CLOSE.len() + value.len() * 4 / 3 + 4);
        out.push_str(OPEN);
        STANDARD.encode_string(value.as_bytes(), &mut out);
        out.push_str(CLOSE);
        out
    } else {
        value.to_owned()
    }
}

fn needs_base64(value: &str) -> bool {
    let bytes = value.as_bytes();
    let visible = |b: &u8| (0x20..0x7f).contains(b);
    !bytes.iter().all(visible)
        || bytes.first().is_some_and(|b| *b == b' ')
        || bytes.last().is_some_and(|b| *b == b' ')
        || (value.starts_with(OPEN) && value.ends_with(CLOSE))
}

/// Why a header value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("header value is not visible ASCII")]
    InvalidCharacters,
    #[error("header value has a malformed base64 sentinel")]
    BadBase64,
    #[error("header value decodes to invalid UTF-8")]
    BadUtf8,
}

/// Whether `value` is visible ASCII or tab: what `http::HeaderValue::to_str` accepts, and what
/// a mirrored value must be. Every byte is looked at (no early exit, so the compiler can check
/// many at once: the common case is that all pass).
pub fn is_visible(value: &[u8]) -> bool {
    value.iter().fold(true, |ok, &b| ok & ((0x20..0x7f).contains(&b) || b == b'\t'))
}

/// Decodes a mirrored header value from its raw bytes; borrowed unless it was base64-encoded.
pub fn decode(raw: &[u8]) -> Result<std::borrow::Cow<'_, str>, DecodeError> {
    decode_text(std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidCharacters)?)
}

/// [`decode`] for a value already known to be UTF-8 (it must still be visible ASCII).
pub fn decode_text(text: &str) -> Result<std::borrow::Cow<'_, str>, DecodeError> {
    if !is_visible(text.as_bytes()) {
        return Err(DecodeError::InvalidCharacters);
    }
    match text.strip_prefix(OPEN).and_then(|t| t.strip_suffix(CLOSE)) {
        Some(b64) => {
            let bytes = STANDARD.decode(b64).map_err(|_| DecodeError::BadBase64)?;
            String::from_utf8(bytes).map(std::borrow::Cow::Owned).map_err(|_| DecodeError::BadUtf8)
        }
        None => Ok(std::borrow::Cow::Borrowed(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_ascii_passes_through() {
        assert_eq!(encode("file:///a.md"), "file:///a.md");
        assert_eq!(decode(b"file:///a.md").unwrap(), "file:///a.md");
    }

    #[test]
    fn non_ascii_and_edges_use_the_sentinel() {
        assert_eq!(encode("file:///café"), "=?base64?ZmlsZTovLy9jYWbDqQ==?=");
        assert!(encode(" lead").starts_with(OPEN));
        assert!(encode("=?base64?abc?=").starts_with(OPEN));
        assert_eq!(decode(b"=?base64?ZmlsZTovLy9jYWbDqQ==?=").unwrap(), "file:///café");
    }

    #[test]
    fn malformed_values_are_rejected() {
        assert_eq!(decode(b"=?base64?***?="), Err(DecodeError::BadBase64));
        assert_eq!(decode(b"a\x01b"), Err(DecodeError::InvalidCharacters));
        assert_eq!(decode("é".as_bytes()), Err(DecodeError::InvalidCharacters));
    }

    proptest! {
        #[test]
        fn round_trips(s in "\\PC*") {
            let encoded = encode(&s);
            prop_assert_eq!(decode(encoded.as_bytes()).unwrap(), s);
        }
    }
}
