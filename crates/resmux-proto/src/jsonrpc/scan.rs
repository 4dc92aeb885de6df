//! An incremental pass over a JSON-RPC response to `resources/read` that is too large to be
//! parsed whole: bytes go in as they arrive, the downstream form comes out.
//!
//! What it does, and nothing more: it checks the message is well-formed JSON (UTF-8 checked
//! by [`Utf8Check`] before it), that it is a response to the expected id with `jsonrpc` 2.0,
//! writes out its `result` (the caller frames it for the client, with the client's id),
//! rewrites `result.<list>[].<item_key>` through [`ScanSpec::uri_out`] (the rule of
//! [`crate::router::rewrite`]: `contents[].uri`), and adds the members of [`ScanSpec::defaults`] that the result
//! lacks (a legacy upstream's `resultType` and cache hints). Every other byte of the result
//! (`text`, `blob`, `mimeType`, `_meta`, …) is copied through as received, escapes and all,
//! with insignificant whitespace dropped (so the output never holds a raw newline, and can
//! go out as one SSE `data:` line or one stdio line). Other top-level members are dropped.
//! An `error` member is captured whole (bounded) for the buffered error path.
//!
//! Memory: a stack of at most `max_depth` frames, one key and one literal of bounded size,
//! and the captured `id`, `jsonrpc`, `error` or `uri` value, bounded by `capture_limit`.

mod lexeme;
mod members;

use lexeme::Esc;
pub use lexeme::Utf8Check;

use super::lexeme::{is_string_stop, is_ws};

/// Rewrites one item URI into the downstream namespace.
pub type UriOut = Box<dyn Fn(&str) -> String + Send + Sync>;

/// What the pass needs to know of the request and of the routing.
pub struct ScanSpec {
    /// The id the upstream request carried, as JSON text.
    pub up_id: Box<str>,
    /// The result's array of items whose `item_key` is rewritten (`contents`, `uri`).
    pub list: &'static str,
    pub item_key: &'static str,
    /// Rewrites one item's URI; `None` leaves the list untouched.
    pub uri_out: Option<UriOut>,
    /// Result members added (key, raw JSON value) when the result lacks them.
    pub defaults: Vec<(&'static str, String)>,
    /// Largest captured value (`id`, `error`, a `uri`).
    pub capture_limit: usize,
    /// Deepest nesting accepted.
    pub max_depth: usize,
}

/// Why the message cannot be relayed: the upstream broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("malformed JSON at byte {at}: {what}")]
    Syntax { at: u64, what: &'static str },
    #[error("response is not UTF-8")]
    NotUtf8,
    #[error("nested deeper than {0}")]
    TooDeep(usize),
    #[error("a captured value exceeds {0} bytes")]
    TooLarge(usize),
    #[error("expected a response, got a request or notification")]
    NotResponse,
    #[error("response id {got} does not match request id {want}")]
    WrongId { got: String, want: String },
    #[error("`jsonrpc` is not \"2.0\"")]
    Version,
    #[error("response without result or error, or with both")]
    NoOutcome,
    #[error("`{0}` must be {1}")]
    Shape(&'static str, &'static str),
    #[error("list item without its URI")]
    MissingUri,
    #[error("message ended early")]
    Truncated,
}

/// Where the bytes of the value being scanned go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    Out,
    Cap,
    Drop,
}

/// What the value at the current position is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Goes wherever its container goes.
    Inherit,
    /// The message itself.
    Top,
    Result,
    Contents,
    Item,
    Uri,
    Id,
    Version,
    Error,
    /// An unknown top-level member.
    Drop,
}

#[derive(Debug)]
struct Frame {
    obj: bool,
    slot: Slot,
    sink: Sink,
    members: usize,
    /// Result: which of `defaults` it has (bit i); item: whether it has its `uri`.
    seen: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Value,
    /// An array just opened: a value or `]`.
    ArrStart,
    Key,
    KeyStr,
    Colon,
    Str,
    Lit,
    After,
    End,
}

const KEY_MAX: usize = 256;
const LIT_MAX: usize = 512;

/// The pass over one message.
pub struct ReadScan {
    spec: ScanSpec,
    stack: Vec<Frame>,
    state: State,
    /// The slot of the value expected or being scanned, and where its bytes go.
    slot: Slot,
    sink: Sink,
    esc: Esc,
    /// The current key of a watched object, raw (quotes included).
    key: Vec<u8>,
    /// Whether the current key is buffered (watched frames, short keys).
    key_watched: bool,
    lit: Vec<u8>,
    /// The captured value and the depth it started at.
    cap: Vec<u8>,
    cap_depth: usize,
    at: u64,
    seen_id: bool,
    seen_version: bool,
    result: bool,
    error: Option<Vec<u8>>,
}

impl ReadScan {
    pub fn new(spec: ScanSpec) -> Self {
        Self {
            spec,
            stack: Vec::new(),
            state: State::Start,
            slot: Slot::Top,
            sink: Sink::Drop,
            esc: Esc::None,
            key: Vec::new(),
            key_watched: false,
            lit: Vec::new(),
            cap: Vec::new(),
            cap_depth: 0,
            at: 0,
            seen_id: false,
            seen_version: false,
            result: false,
            error: None,
        }
    }

    /// Whether the message is complete (only whitespace may follow).
    pub fn done(&self) -> bool {
        self.state == State::End
    }

    /// The raw `error` object of an error response, once the message is complete.
    pub fn error(&self) -> Option<&[u8]> {
        self.error.as_deref().filter(|_| self.done())
    }

    /// Whether the message is a result (its first byte was written).
    pub fn is_result(&self) -> bool {
        self.result
    }

    /// The end of the input: the message must be complete.
    pub fn finish(&self) -> Result<(), ScanError> {
        if self.done() { Ok(()) } else { Err(ScanError::Truncated) }
    }

    fn syntax(&self, what: &'static str) -> ScanError {
        ScanError::Syntax { at: self.at, what }
    }

    fn write(&mut self, sink: Sink, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), ScanError> {
        match sink {
            Sink::Out => out.extend_from_slice(bytes),
            Sink::Cap => {
                if self.cap.len() + bytes.len() > self.spec.capture_limit {
                    return Err(ScanError::TooLarge(self.spec.capture_limit));
                }
                self.cap.extend_from_slice(bytes);
            }
            Sink::Drop => {}
        }
        Ok(())
    }

    /// Scans `input`, appending the downstream form of what it completes to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), ScanError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Str | State::KeyStr => {
                    i += self.string(&input[i..], out)?;
                    continue;
                }
                State::Lit => {
                    if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
                        if self.lit.len() == LIT_MAX {
                            return Err(self.syntax("literal too long"));
                        }
                        self.lit.push(b);
                        i += 1;
                        self.at += 1;
                        continue;
                    }
                    self.end_literal(out)?;
                    continue; // `b` is looked at again, in the state after the value
                }
                _ if is_ws(b) => {}
                State::Start | State::Value => self.value(b, out)?,
                State::ArrStart if b == b']' => self.close(b, out)?,
                State::ArrStart => {
                    self.slot = self.element_slot();
                    self.value(b, out)?;
                }
                State::Key => match b {
                    b'"' => {
                        let frame = self.stack.last_mut().expect("in an object");
                        frame.members += 1;
                        self.key_watched = matches!(frame.slot, Slot::Top | Slot::Result | Slot::Item);
                        self.key.clear();
                        self.key.push(b);
                        if !self.key_watched {
                            self.write(frame_sink(&self.stack), b"\"", out)?;
                        }
                        self.state = State::KeyStr;
                    }
                    b'}' if self.stack.last().is_some_and(|f| f.members == 0) => self.close(b, out)?,
                    _ => return Err(self.syntax("expected a key")),
                },
                State::Colon if b == b':' => {
                    self.write(frame_sink(&self.stack), b":", out)?;
                    self.state = State::Value;
                }
                State::Colon => return Err(self.syntax("expected `:`")),
                State::After => match b {
                    b',' => {
                        self.write(frame_sink(&self.stack), b",", out)?;
                        let frame = self.stack.last_mut().expect("in a container");
                        if frame.obj {
                            self.state = State::Key;
                        } else {
                            frame.members += 1;
                            self.slot = self.element_slot();
                            self.state = State::Value;
                        }
                    }
                    b'}' | b']' => self.close(b, out)?,
                    _ => return Err(self.syntax("expected `,` or the end of a container")),
                },
                State::End => return Err(self.syntax("data after the message")),
            }
            i += 1;
            self.at += 1;
        }
        Ok(())
    }

    fn element_slot(&self) -> Slot {
        match self.stack.last() {
            Some(f) if f.slot == Slot::Contents => Slot::Item,
            _ => Slot::Inherit,
        }
    }

    /// The first byte of a value.
    fn value(&mut self, b: u8, out: &mut Vec<u8>) -> Result<(), ScanError> {
        let slot = self.slot;
        let sink = match slot {
            Slot::Inherit => frame_sink(&self.stack),
            Slot::Top | Slot::Drop => Sink::Drop,
            Slot::Result | Slot::Contents | Slot::Item => Sink::Out,
            Slot::Uri | Slot::Id | Slot::Version | Slot::Error => {
                self.cap.clear();
                self.cap_depth = self.stack.len();
                Sink::Cap
            }
        };
        let container = b == b'{' || b == b'[';
        let shape = match slot {
            Slot::Top if b != b'{' => Some(("message", "an object")),
            Slot::Result if b != b'{' => Some(("result", "an object")),
            Slot::Contents if b != b'[' => Some(("result.contents", "an array")),
            Slot::Item if b != b'{' => Some(("a list item", "an object")),
            Slot::Uri if b != b'"' => Some(("an item URI", "a string")),
            Slot::Error if b != b'{' => Some(("error", "an object")),
            _ => None,
        };
        if let Some((what, must)) = shape {
            return Err(ScanError::Shape(what, must));
        }
        if slot == Slot::Result {
            if self.result || self.error.is_some() {
                return Err(ScanError::NoOutcome);
            }
            self.result = true;
        }
        self.sink = sink;
        if container {
            if self.stack.len() >= self.spec.max_depth {
                return Err(ScanError::TooDeep(self.spec.max_depth));
            }
            self.stack.push(Frame { obj: b == b'{', slot, sink, members: 0, seen: 0 });
            self.write(sink, &[b], out)?;
            self.state = if b == b'{' { State::Key } else { State::ArrStart };
        } else if b == b'"' {
            self.write(sink, b"\"", out)?;
            self.esc = Esc::None;
            self.state = State::Str;
        } else if b == b'-' || b.is_ascii_alphanumeric() {
            self.lit.clear();
            self.lit.push(b);
            self.state = State::Lit;
        } else {
            return Err(self.syntax("expected a value"));
        }
        Ok(())
    }

    /// Scans string bytes; returns how many of `input` it consumed.
    fn string(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ScanError> {
        let key = self.state == State::KeyStr;
        let sink = if key { frame_sink(&self.stack) } else { self.sink };
        let mut i = 0;
        while i < input.len() {
            let (run, end) = match self.esc {
                Esc::None => match input[i..].iter().position(|&c| is_string_stop(c)) {
                    Some(n) => (n, true),
                    None => (input.len() - i, false),
                },
                _ => (0, true),
            };
            self.string_bytes(key, sink, &input[i..i + run], out)?;
            i += run;
            self.at += run as u64;
            if !end {
                break;
            }
            let c = input[i];
            self.esc = match self.esc.next(c) {
                Some(next) => next,
                None => return Err(self.syntax("bad string character or escape")),
            };
            self.string_bytes(key, sink, &[c], out)?;
            i += 1;
            self.at += 1;
            if c == b'"' && self.esc == Esc::Closed {
                self.esc = Esc::None;
                if key {
                    self.end_key(out)?;
                } else {
                    self.value_done(out)?;
                }
                break;
            }
        }
        Ok(i)
    }
}

/// Where the members of the innermost container go.
fn frame_sink(stack: &[Frame]) -> Sink {
    stack.last().map_or(Sink::Drop, |f| f.sink)
}

#[cfg(test)]
mod tests;
