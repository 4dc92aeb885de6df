//! Reading `text/event-stream` (the WHATWG event-stream format) from upstreams: an incremental
//! decoder, and [`SseStream`], the one reader every upstream SSE body goes through.
//!
//! Bounded: an event larger than the limit, a line longer than it, and a flood of bytes that
//! never completes an event (comments, blank lines, unknown fields) all end the stream with an
//! error, so one hostile upstream costs at most `limit` bytes of buffer.

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;

mod data;

pub use data::{DataState, SseData};

/// One dispatched event. Comment lines and `event:` names are dropped: MCP defines none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The joined `data:` lines.
    pub data: String,
    /// The `id:` field, if any (legacy resumability).
    pub id: Option<String>,
    /// The `retry:` field in milliseconds, if any.
    pub retry: Option<u64>,
}

/// Why an SSE stream ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// One event (or one line) went past the limit.
    #[error("SSE event exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// More than the limit arrived without completing any event.
    #[error("{limit} bytes of SSE without an event")]
    NoEvent { limit: usize },
    /// The connection failed mid-stream.
    #[error("SSE stream broke: {0}")]
    Body(#[source] hyper::Error),
    /// An event's data went past the relay threshold: take the rest with
    /// [`SseDecoder::into_data`] (only with [`SseDecoder::stream_above`]).
    #[error("SSE event exceeds the relay threshold")]
    Large,
}

/// Feeds bytes in, takes events out.
#[derive(Debug)]
pub struct SseDecoder {
    buf: BytesMut,
    /// Bytes of `buf` already scanned for a line end (so each byte is scanned once).
    scanned: usize,
    pending: SseEvent,
    has_data: bool,
    /// Bytes of the event being assembled.
    pending_size: usize,
    /// Bytes consumed since the last dispatched event (comments and blank lines included).
    idle_size: usize,
    limit: usize,
    /// Events whose data grows past this are handed over for streaming, not refused.
    stream_above: Option<usize>,
    /// Whether [`SseError::Large`] came in the middle of a line.
    mid_line: bool,
}

impl SseDecoder {
    /// A decoder that refuses events larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            scanned: 0,
            pending: SseEvent::default(),
            has_data: false,
            pending_size: 0,
            idle_size: 0,
            limit,
            stream_above: None,
            mid_line: false,
        }
    }

    /// Hands events whose data grows past `threshold` over for streaming ([`SseError::Large`]).
    pub fn stream_above(mut self, threshold: usize) -> Self {
        self.stream_above = Some(threshold);
        self
    }

    /// Whether the event being assembled is past the relay threshold: `mid_line`, in a
    /// partly read `data:` line (the whole of `buf`), or at a line end.
    fn past_threshold(&mut self, mid_line: bool) -> bool {
        let Some(t) = self.stream_above else { return false };
        let past = if mid_line {
            self.buf.len() + self.pending_size > t && self.buf.starts_with(b"data:")
        } else {
            self.pending_size > t && self.has_data
        };
        self.mid_line = past && mid_line;
        past
    }

    /// After [`SseError::Large`]: the data read so far, and the reader of the rest of the
    /// event's data from `body`.
    pub fn into_data(self, body: hyper::body::Incoming) -> (Bytes, SseData) {
        let (prefix, pending, state) = self.handover();
        (prefix, SseData::new(body, pending, state))
    }

    /// After [`SseError::Large`]: the data read so far, the bytes received but not yet
    /// scanned, and where the rest of the event stands.
    fn handover(mut self) -> (Bytes, Bytes, DataState) {
        if !self.mid_line {
            // Handed over at a line end: `buf` holds whole lines still to be read.
            return (
                Bytes::from(std::mem::take(&mut self.pending.data).into_bytes()),
                self.buf.freeze(),
                DataState::LineStart,
            );
        }
        // In a partly read `data:` line, which is the whole of `buf`. When nothing follows
        // the colon yet, the optional space may still come.
        let state = if self.buf.len() == 5 { DataState::Space } else { DataState::Data };
        let skip = if self.buf.starts_with(b"data: ") { 6 } else { 5 };
        self.buf.advance(skip);
        if !self.has_data {
            // The usual case, one `data:` line: its bytes are handed over, not copied.
            return (self.buf.freeze(), Bytes::new(), state);
        }
        let mut prefix = std::mem::take(&mut self.pending.data).into_bytes();
        prefix.push(b'\n');
        prefix.extend_from_slice(&self.buf);
        (Bytes::from(prefix), Bytes::new(), state)
    }

    /// Appends received bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the buffered bytes hold one.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        let limit = self.limit;
        loop {
            let Some(end) = memchr::memchr2(b'\n', b'\r', &self.buf[self.scanned..]) else {
                self.scanned = self.buf.len();
                if self.past_threshold(true) {
                    return Err(SseError::Large);
                }
                if self.buf.len() + self.pending_size > limit {
                    return Err(SseError::TooLarge { limit });
                }
                return Ok(None);
            };
            let end = self.scanned + end;
            // A CR at the very end may be the first half of CRLF: wait for the next byte.
            if self.buf[end] == b'\r' && end + 1 == self.buf.len() {
                self.scanned = end;
                return Ok(None);
            }
            let skip = if self.buf[end] == b'\r' && self.buf[end + 1] == b'\n' { 2 } else { 1 };
            // The line is read in place and then passed over: splitting it off would make the
            // buffer shared, and each later `push` would then reclaim or reallocate it.
            self.scanned = 0;
            self.idle_size += end + skip;
            if end == 0 {
                self.buf.advance(skip);
                self.pending_size = 0;
                if self.has_data {
                    self.has_data = false;
                    self.idle_size = 0;
                    return Ok(Some(std::mem::take(&mut self.pending)));
                }
                self.pending = SseEvent { id: self.pending.id.take(), ..Default::default() };
            } else {
                self.pending_size += end;
                field(&mut self.pending, &mut self.has_data, &self.buf[..end]);
                self.buf.advance(end + skip);
                // At a line end: what is left in `buf` is further lines, not this one.
                if self.past_threshold(false) {
                    return Err(SseError::Large);
                }
                if self.pending_size > limit {
                    return Err(SseError::TooLarge { limit });
                }
            }
            if self.idle_size > limit {
                return Err(SseError::NoEvent { limit });
            }
        }
    }
}

/// Applies one non-empty line to the event being assembled.
fn field(pending: &mut SseEvent, has_data: &mut bool, line: &[u8]) {
    if line[0] == b':' {
        return; // comment / keep-alive
    }
    let (name, value) = match memchr::memchr(b':', line) {
        Some(i) => {
            let v = &line[i + 1..];
            (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
        }
        None => (line, &b""[..]),
    };
    let value = String::from_utf8_lossy(value);
    match name {
        b"data" => {
            if *has_data {
                pending.data.push('\n');
            }
            pending.data.push_str(&value);
            *has_data = true;
        }
        b"id" if !value.contains('\0') => pending.id = Some(value.into_owned()),
        b"retry" => pending.retry = value.parse().ok(),
        _ => {}
    }
}

/// An upstream's SSE response body, read event by event.
pub struct SseStream {
    body: hyper::body::Incoming,
    decoder: SseDecoder,
}

impl SseStream {
    /// Reads `body`, refusing events (and floods) over `limit` bytes.
    pub fn new(body: hyper::body::Incoming, limit: usize) -> Self {
        Self { body, decoder: SseDecoder::new(limit) }
    }

    /// Hands an event whose data grows past `threshold` over for streaming: `next` then
    /// fails with [`SseError::Large`], and [`SseStream::into_data`] reads on.
    pub fn stream_above(mut self, threshold: usize) -> Self {
        self.decoder = self.decoder.stream_above(threshold);
        self
    }

    /// After [`SseError::Large`]: the event's data so far, and the reader of the rest.
    pub fn into_data(self) -> (Bytes, SseData) {
        self.decoder.into_data(self.body)
    }

    /// The next event: `None` when the upstream closed the stream, an error when the stream
    /// broke or went past the limit (the caller must then drop it).
    pub async fn next(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            if let Some(event) = self.decoder.next_event()? {
                return Ok(Some(event));
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(SseError::Body(e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.push(&data);
                    }
                }
            }
        }
    }

    /// The next event's data as bytes (see [`SseStream::next`]).
    pub async fn next_data(&mut self) -> Result<Option<Bytes>, SseError> {
        Ok(self.next().await?.map(|e| Bytes::from(e.data)))
    }
}

#[cfg(test)]
mod tests;
