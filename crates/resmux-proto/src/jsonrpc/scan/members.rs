//! The members of the pass: what a key makes of its value, the end of a value (captures
//! checked, the URI rewritten), the end of a container (missing result members added).

use super::{KEY_MAX, ReadScan, ScanError, Sink, Slot, State};
use crate::jsonrpc::lexeme::is_scalar_literal;

impl ReadScan {
    /// String bytes of a key (held while it may be one the pass looks for) or of a value.
    pub(super) fn string_bytes(
        &mut self,
        key: bool,
        sink: Sink,
        bytes: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ScanError> {
        if !key {
            return self.write(sink, bytes, out);
        }
        if self.key_watched {
            if self.key.len() + bytes.len() <= KEY_MAX {
                self.key.extend_from_slice(bytes);
                return Ok(());
            }
            // Longer than any key the pass looks for: written through from here on.
            self.key_watched = false;
            let held = std::mem::take(&mut self.key);
            self.write(sink, &held, out)?;
        }
        self.write(sink, bytes, out)
    }

    /// A key is complete: decide the slot of its value.
    pub(super) fn end_key(&mut self, out: &mut Vec<u8>) -> Result<(), ScanError> {
        self.state = State::Colon;
        if !self.key_watched {
            self.slot = Slot::Inherit;
            return Ok(());
        }
        let raw = std::mem::take(&mut self.key);
        let name: std::borrow::Cow<'_, str> = match serde_json::from_slice(&raw) {
            Ok(name) => name,
            Err(_) => return Err(self.syntax("bad key")),
        };
        let frame = self.stack.last_mut().expect("in an object");
        let rewriting = self.spec.uri_out.is_some();
        self.slot = match (frame.slot, &*name) {
            (Slot::Top, "result") => Slot::Result,
            (Slot::Top, "id") => Slot::Id,
            (Slot::Top, "jsonrpc") => Slot::Version,
            (Slot::Top, "error") => Slot::Error,
            (Slot::Top, "method") => return Err(ScanError::NotResponse),
            (Slot::Top, _) => Slot::Drop,
            (Slot::Result, key) if rewriting && key == self.spec.list => Slot::Contents,
            (Slot::Item, key) if rewriting && key == self.spec.item_key => {
                frame.seen = 1;
                Slot::Uri
            }
            (Slot::Result, key) => {
                if let Some(n) = self.spec.defaults.iter().position(|(k, _)| *k == key) {
                    frame.seen |= 1 << n;
                }
                Slot::Inherit
            }
            _ => Slot::Inherit,
        };
        let sink = frame.sink;
        self.write(sink, &raw, out)?;
        self.key = raw;
        Ok(())
    }

    pub(super) fn end_literal(&mut self, out: &mut Vec<u8>) -> Result<(), ScanError> {
        if !is_scalar_literal(&self.lit) {
            return Err(self.syntax("bad literal"));
        }
        let lit = std::mem::take(&mut self.lit);
        self.write(self.sink, &lit, out)?;
        self.lit = lit;
        self.value_done(out)
    }

    /// Closes the innermost container with `b`.
    pub(super) fn close(&mut self, b: u8, out: &mut Vec<u8>) -> Result<(), ScanError> {
        let frame = self.stack.pop().expect("in a container");
        if frame.obj != (b == b'}') {
            return Err(self.syntax("mismatched bracket"));
        }
        match frame.slot {
            Slot::Result => {
                let mut any = frame.members > 0;
                for (n, (key, value)) in self.spec.defaults.iter().enumerate() {
                    if frame.seen & (1 << n) == 0 {
                        if any {
                            out.push(b',');
                        }
                        any = true;
                        crate::jsonrpc::lexeme::write_json_string(out, key);
                        out.push(b':');
                        out.extend_from_slice(value.as_bytes());
                    }
                }
            }
            Slot::Item if frame.seen == 0 => return Err(ScanError::MissingUri),
            _ => {}
        }
        self.write(frame.sink, &[b], out)?;
        self.slot = frame.slot;
        self.sink = frame.sink;
        self.value_done(out)
    }

    /// A value is complete: finish a capture, then expect what follows it.
    pub(super) fn value_done(&mut self, out: &mut Vec<u8>) -> Result<(), ScanError> {
        let capturing = self.sink == Sink::Cap && self.stack.len() == self.cap_depth;
        let slot = self.slot;
        if capturing {
            let cap = std::mem::take(&mut self.cap);
            match slot {
                Slot::Id => {
                    if cap != self.spec.up_id.as_bytes() {
                        let got = String::from_utf8_lossy(&cap).into_owned();
                        return Err(ScanError::WrongId { got, want: self.spec.up_id.to_string() });
                    }
                    self.seen_id = true;
                }
                Slot::Version if cap == b"\"2.0\"" => self.seen_version = true,
                Slot::Version => return Err(ScanError::Version),
                Slot::Error if self.result => return Err(ScanError::NoOutcome),
                Slot::Error => self.error = Some(cap),
                Slot::Uri => {
                    let uri: String = serde_json::from_slice(&cap).map_err(|_| self.syntax("bad uri string"))?;
                    let f = self.spec.uri_out.as_ref().expect("uri slots exist only when rewriting");
                    crate::jsonrpc::lexeme::write_json_string(out, &f(&uri));
                }
                _ => {}
            }
        }
        if slot == Slot::Top {
            if !self.seen_version {
                return Err(ScanError::Version);
            }
            if !self.seen_id {
                return Err(ScanError::WrongId { got: "none".into(), want: self.spec.up_id.to_string() });
            }
            if !(self.result || self.error.is_some()) {
                return Err(ScanError::NoOutcome);
            }
            self.state = State::End;
            return Ok(());
        }
        self.state = State::After;
        Ok(())
    }
}
