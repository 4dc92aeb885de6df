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
        let mut out = Vec::with_capacity(message.len() + 8);
        match self {
            Framing::Sse => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(message);
                out.extend_from_slice(b"\n\n");
            }
            Framing::Lines => {
                out.extend_from_slice(message);
                out.push(b'\n');
            }
        }
        Bytes::from(out)
    }

    /// What keeps an idle stream alive, if the transport has such a thing.
    pub fn keepalive(self) -> Option<Bytes> {
        match self {
            Framing::Sse => Some(Bytes::from_static(b":\n\n")),
            Framing::Lines => None,
        }
    }
}
