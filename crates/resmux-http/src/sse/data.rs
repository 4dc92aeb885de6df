//! The rest of one SSE event's data, read as it arrives: what the event-stream format makes
//! of its `data:` lines (joined with `\n`; comments, other fields and CRs dropped), up to the
//! blank line that ends the event. For results too large to hold (see
//! [`super::SseError::Large`]).

use bytes::Bytes;
use http_body_util::BodyExt;

/// Where a line of the event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataState {
    LineStart,
    /// Reading a field name.
    Name,
    /// After `data:`: one space may follow.
    Space,
    Data,
    /// A line of another field, or a comment.
    Skip,
}

/// Longest field name looked at (`data` is 4 bytes; longer names are skipped).
const NAME_MAX: usize = 8;

/// Reads the rest of one event's data.
pub struct SseData {
    body: Option<hyper::body::Incoming>,
    /// Bytes received but not scanned yet.
    pending: Bytes,
    state: DataState,
    name: Vec<u8>,
    /// Whether a data line was read (a further one is joined with `\n`).
    had_data: bool,
    /// A CR ended the last line; an LF right after it belongs to that line end.
    after_cr: bool,
    pub(super) done: bool,
}

impl SseData {
    /// The rest of an event whose data was read up to `state`, `pending` received unscanned.
    pub(super) fn new(body: hyper::body::Incoming, pending: Bytes, state: DataState) -> Self {
        Self { body: Some(body), pending, state, name: Vec::new(), had_data: true, after_cr: false, done: false }
    }

    #[cfg(test)]
    pub(super) fn detached(state: DataState) -> Self {
        Self {
            body: None,
            pending: Bytes::new(),
            state,
            name: Vec::new(),
            had_data: true,
            after_cr: false,
            done: false,
        }
    }

    /// The next piece of the event's data; `None` at the event's end (or the body's).
    pub async fn next(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        let mut out = Vec::new();
        loop {
            if self.done {
                return Ok(None);
            }
            if !self.pending.is_empty() {
                let pending = std::mem::take(&mut self.pending);
                let used = self.scan(&pending, &mut out);
                self.pending = pending.slice(used..);
                if !out.is_empty() {
                    return Ok(Some(Bytes::from(out)));
                }
                continue;
            }
            let Some(body) = self.body.as_mut() else { return Ok(None) };
            match body.frame().await {
                None => self.done = true,
                Some(Err(e)) => return Err(e),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.pending = data;
                    }
                }
            }
        }
    }

    /// Scans `input`, appending data bytes to `out`; returns how much it used (all, unless
    /// the event ended).
    pub(super) fn scan(&mut self, input: &[u8], out: &mut Vec<u8>) -> usize {
        let mut i = 0;
        while i < input.len() && !self.done {
            let b = input[i];
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                i += 1;
                continue;
            }
            let eol = b == b'\n' || b == b'\r';
            if eol {
                self.after_cr = b == b'\r';
                match self.state {
                    DataState::LineStart => self.done = true,
                    // `data` alone on its line: an empty data line.
                    DataState::Name if self.name == b"data" => self.data_line(out),
                    _ => {}
                }
                self.state = DataState::LineStart;
                i += 1;
                continue;
            }
            match self.state {
                DataState::LineStart => {
                    self.name.clear();
                    self.state = DataState::Name;
                    continue; // the byte starts the name
                }
                DataState::Name if b == b':' => {
                    if self.name == b"data" {
                        self.data_line(out);
                        self.state = DataState::Space;
                    } else {
                        self.state = DataState::Skip;
                    }
                }
                DataState::Name => {
                    self.name.push(b);
                    if self.name.len() > NAME_MAX {
                        self.state = DataState::Skip;
                    }
                }
                DataState::Space => {
                    self.state = DataState::Data;
                    if b != b' ' {
                        continue;
                    }
                }
                DataState::Data => {
                    let run = input[i..].iter().position(|c| *c == b'\n' || *c == b'\r').unwrap_or(input.len() - i);
                    out.extend_from_slice(&input[i..i + run]);
                    i += run;
                    continue;
                }
                DataState::Skip => {}
            }
            i += 1;
        }
        i
    }

    fn data_line(&mut self, out: &mut Vec<u8>) {
        if self.had_data {
            out.push(b'\n');
        }
        self.had_data = true;
    }
}
