//! Resource URI syntax, as the proxy checks it before routing (the spec: servers MUST validate
//! every resource URI; the proxy is the server its clients see).
//!
//! A URI is RFC 3986 at the level of characters: a scheme (`ALPHA *( ALPHA / DIGIT / "+" /
//! "-" / "." )`) and `:`, then only unreserved and reserved characters and `%HH` escapes.
//! Non-ASCII characters are accepted where RFC 3987 (IRIs) accepts them (`ucschar`, and
//! `iprivate`), because the spec itself names non-ASCII resource URIs (the `Mcp-Name`
//! encoding) and the official SDKs pass them through; C1 controls, non-characters, Unicode
//! whitespace and the bidi formatting characters RFC 3987 §4.1 forbids are rejected.
//! Components are not parsed: which authority or path a server accepts is its own business.
//!
//! A URI template (`completion/complete` `ref/resource`) is RFC 6570: the same rules outside
//! its expressions; inside `{…}` an optional operator and comma-separated variable names,
//! each with an optional `*` or `:N` modifier.
//!
//! Cheap by construction: a short ASCII URI is one scan of its bytes against a table, with
//! no allocation (reads go through it on every request, cache hits too).

/// Why a URI is not acceptable. The message says what is wrong, never the URI itself (the
/// error carries that in `data.uri`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadUri {
    #[error("the URI is empty")]
    Empty,
    #[error("the URI is longer than {limit} bytes")]
    TooLong { limit: usize },
    #[error("the URI has no scheme (it must start with `scheme:`)")]
    NoScheme,
    #[error("a control character at byte {at}")]
    Control { at: usize },
    #[error("whitespace at byte {at}")]
    Whitespace { at: usize },
    #[error("a `%` not followed by two hex digits at byte {at}")]
    BadEscape { at: usize },
    #[error("a character not allowed in a URI at byte {at}")]
    Disallowed { at: usize },
    #[error("an unbalanced `{{` or `}}` at byte {at}")]
    Unbalanced { at: usize },
    #[error("an invalid template expression at byte {at}")]
    BadExpression { at: usize },
}

/// Byte classes of the ASCII table.
const OK: u8 = 1; // unreserved or reserved: allowed as is
const PCT: u8 = 2; // `%`
const CTL: u8 = 3; // C0 control or DEL
const WS: u8 = 4; // space
const BAD: u8 = 5; // other ASCII not allowed in a URI (`"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`)
const HIGH: u8 = 6; // a non-ASCII lead or continuation byte

const fn table() -> [u8; 256] {
    let mut t = [HIGH; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        t[b] = if c < 0x20 || c == 0x7f {
            CTL
        } else if c == b' ' {
            WS
        } else if c == b'%' {
            PCT
        } else if c.is_ascii_alphanumeric() {
            OK
        } else {
            match c {
                b'-' | b'.' | b'_' | b'~' => OK,
                b':' | b'/' | b'?' | b'#' | b'[' | b']' | b'@' => OK,
                b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => OK,
                _ => BAD,
            }
        };
        b += 1;
    }
    t
}

static CLASS: [u8; 256] = table();

/// The scheme of `uri` (before the first `:`), if it starts with a syntactically valid one.
pub fn scheme(uri: &str) -> Option<&str> {
    let bytes = uri.as_bytes();
    if !bytes.first().is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        match b {
            b':' => return Some(&uri[..i]),
            b'+' | b'-' | b'.' => {}
            _ if b.is_ascii_alphanumeric() => {}
            _ => return None,
        }
    }
    None
}

/// Checks a resource URI of at most `max_bytes`.
pub fn check(uri: &str, max_bytes: usize) -> Result<(), BadUri> {
    let rest = start(uri, max_bytes)?;
    chars(uri, rest, |_| false).map(drop)
}

/// Checks an RFC 6570 URI template of at most `max_bytes`.
pub fn check_template(template: &str, max_bytes: usize) -> Result<(), BadUri> {
    let mut at = start(template, max_bytes)?;
    let bytes = template.as_bytes();
    loop {
        // Literal text up to the next `{` (a `}` there is unbalanced).
        at = chars(template, at, |b| b == b'{' || b == b'}')?;
        match bytes.get(at) {
            None => return Ok(()),
            Some(b'}') => return Err(BadUri::Unbalanced { at }),
            Some(_) => {}
        }
        let close = bytes[at + 1..].iter().position(|&b| b == b'}').map(|p| at + 1 + p);
        let Some(close) = close else { return Err(BadUri::Unbalanced { at }) };
        expression(&bytes[at + 1..close], at + 1)?;
        at = close + 1;
    }
}

/// The common start: length, emptiness, the scheme. Returns where the scheme's `:` ends.
fn start(uri: &str, max_bytes: usize) -> Result<usize, BadUri> {
    if uri.is_empty() {
        return Err(BadUri::Empty);
    }
    if uri.len() > max_bytes {
        return Err(BadUri::TooLong { limit: max_bytes });
    }
    match scheme(uri) {
        Some(s) => Ok(s.len() + 1),
        None => Err(BadUri::NoScheme),
    }
}

/// Scans URI characters from `at` until the end or a byte `stop` accepts (returned).
fn chars(s: &str, mut at: usize, stop: impl Fn(u8) -> bool) -> Result<usize, BadUri> {
    let bytes = s.as_bytes();
    while at < bytes.len() {
        let b = bytes[at];
        if stop(b) {
            return Ok(at);
        }
        match CLASS[b as usize] {
            OK => at += 1,
            PCT => {
                let hex = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(at + 1) && hex(at + 2)) {
                    return Err(BadUri::BadEscape { at });
                }
                at += 3;
            }
            CTL => return Err(BadUri::Control { at }),
            WS => return Err(BadUri::Whitespace { at }),
            BAD => return Err(BadUri::Disallowed { at }),
            _ => {
                // `at` is a char boundary: every byte before it was ASCII or a whole char.
                let c = s[at..].chars().next().ok_or(BadUri::Disallowed { at })?;
                iri_char(c, at)?;
                at += c.len_utf8();
            }
        }
    }
    Ok(at)
}

/// A non-ASCII character: RFC 3987 `ucschar` or `iprivate`, less what it forbids.
fn iri_char(c: char, at: usize) -> Result<(), BadUri> {
    let cp = c as u32;
    if (0x80..=0x9f).contains(&cp) {
        return Err(BadUri::Control { at });
    }
    if c.is_whitespace() {
        return Err(BadUri::Whitespace { at });
    }
    // Bidi formatting characters (RFC 3987 §4.1) and the non-characters of each plane.
    let bidi = matches!(cp, 0x200e | 0x200f | 0x202a..=0x202e | 0x2066..=0x2069);
    let nonchar = (0xfdd0..=0xfdef).contains(&cp) || cp & 0xfffe == 0xfffe;
    let ucs = matches!(cp, 0xa0..=0xd7ff | 0xe000..=0xffef | 0x1_0000..=0xd_ffff | 0xe_1000..=0x10_ffff);
    if bidi || nonchar || !ucs {
        return Err(BadUri::Disallowed { at });
    }
    Ok(())
}

/// One template expression's body (between the braces), which starts at byte `at`.
fn expression(body: &[u8], at: usize) -> Result<(), BadUri> {
    let bad = |i: usize| BadUri::BadExpression { at: at + i };
    let mut i = usize::from(matches!(body.first(), Some(b'+' | b'#' | b'.' | b'/' | b';' | b'?' | b'&')));
    if i >= body.len() {
        return Err(bad(0));
    }
    loop {
        // varname = varchar *( ["."] varchar ), varchar = ALPHA / DIGIT / "_" / pct-encoded
        let mut dot_ok = false;
        let begin = i;
        while i < body.len() {
            match body[i] {
                b if b.is_ascii_alphanumeric() || b == b'_' => {
                    i += 1;
                    dot_ok = true;
                }
                b'%' if body.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && body.get(i + 2).is_some_and(u8::is_ascii_hexdigit) =>
                {
                    i += 3;
                    dot_ok = true;
                }
                b'.' if dot_ok => {
                    i += 1;
                    dot_ok = false;
                }
                _ => break,
            }
        }
        if i == begin || !dot_ok {
            return Err(bad(i));
        }
        match body.get(i) {
            Some(b'*') => i += 1,
            Some(b':') => {
                // max-length = %x31-39 0*3DIGIT
                let digits = body[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
                if digits == 0 || digits > 4 || body[i + 1] == b'0' {
                    return Err(bad(i));
                }
                i += 1 + digits;
            }
            _ => {}
        }
        match body.get(i) {
            None => return Ok(()),
            Some(b',') => i += 1,
            Some(_) => return Err(bad(i)),
        }
    }
}

/// `uri` cut to at most `max` bytes (at a char boundary) for an error's `data.uri`, so that
/// an oversized URI is not echoed whole.
pub fn truncated(uri: &str, max: usize) -> &str {
    if uri.len() <= max {
        return uri;
    }
    let mut end = max;
    while !uri.is_char_boundary(end) {
        end -= 1;
    }
    &uri[..end]
}

#[cfg(test)]
mod tests;
