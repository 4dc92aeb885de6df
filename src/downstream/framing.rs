//! How one outgoing JSON-RPC message is framed on a downstream transport: an SSE event on
//! HTTP streams, a line on stdio.

use bytes::Bytes;

/// A downstream transport's message framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `data: {json}\n\n`, with `:` comment lines as keep-alives.
    Sse,
    /// `{json}\n`; stdout carries nothing but messages, so there are no keep-alives.
    Lines,
}

impl Framing {
    /// One message, framed.
    pub fn frame(self, message: &[u8]) -> Bytes {
        self.build(message.len(), |out| out.extend_from_slice(message))
    }

    /// One message that `write` writes straight into the frame, so it is not built apart and
    /// copied in; `size` is a guess at its length.
    pub fn build(self, size: usize, write: impl FnOnce(&mut Vec<u8>)) -> Bytes {
        let mut out = Vec::with_capacity(size + 8);
        self.append(&mut out, write);
        Bytes::from(out)
    }

    /// Appends one message that `write` writes, framed, to `out` (several messages go out as
    /// one chunk this way).
    pub fn append(self, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
        if self == Framing::Sse {
            out.extend_from_slice(b"data: ");
        }
        write(out);
        out.extend_from_slice(match self {
            Framing::Sse => b"\n\n",
            Framing::Lines => b"\n",
        });
    }

    /// What keeps an idle stream alive, if the transport has such a thing.
    pub fn keepalive(self) -> Option<Bytes> {
        match self {
            Framing::Sse => Some(Bytes::from_static(b":\n\n")),
            Framing::Lines => None,
        }
    }
}
