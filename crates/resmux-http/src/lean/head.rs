//! A request's head, parsed with `httparse` from the lean path's small buffer: the head alone
//! decides whether the lean path serves the request or hands the connection to hyper, so no
//! body is read twice.

use std::mem::MaybeUninit;

use http::header::{CONNECTION, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderName, Uri};

use crate::headers::{Firsts, KnownNames, Place, name_fits, to_str};

/// Headers a lean head may carry; a head with more is left to hyper (its own bound is 100).
const MAX_HEADERS: usize = 64;

/// Which requests the lean path takes.
#[derive(Debug, Clone, Copy)]
pub struct Takes<K> {
    /// Requests whose `marker` header is `marker_value` (answered with a stream).
    pub streams: bool,
    /// Every other `POST`.
    pub requests: bool,
    pub marker: K,
    pub marker_value: &'static [u8],
}

/// What the bytes read so far hold.
#[derive(Debug)]
pub(super) enum Parsed<K> {
    /// A complete head of at most the head bound that the lean path may serve: a `POST` to
    /// the service's path over HTTP/1.1 that `Takes` covers (a stream is told by its marker
    /// header), with a `Content-Length` of at most the lean body bound, at most one marker
    /// header, and no `Transfer-Encoding`, `Expect` or `Upgrade`.
    Lean(Head<K>),
    /// Not complete yet.
    Partial,
    /// Anything else (another method, path or version, a chunked or large body, a head over
    /// the bound, a malformed head): hyper serves it from the bytes read so far.
    Other,
}

/// Where each header's name and value are in the request's bytes. The connection keeps one
/// of these from request to request, so a head costs no allocation of its own.
pub(super) type Ranges = Vec<Place>;

/// A parsed head: where its body starts, and its length (its headers' places are in the
/// [`Ranges`] it was parsed with, and the endpoint reads them there through
/// [`crate::headers::Raw`] once the request's bytes are all in).
#[derive(Debug)]
pub(super) struct Head<K> {
    pub head_len: usize,
    pub body_len: usize,
    /// The client asked to close the connection after this exchange.
    pub close: bool,
    /// Where each known header's first value is in the [`Ranges`] (noted as they were read,
    /// so the endpoint's view of them needs no second pass).
    pub first: Firsts<K>,
}

/// The bounds a lean head is held to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// `max_header_bytes`: a longer head is hyper's to refuse (431).
    pub head: usize,
    /// The largest body taken on the lean path.
    pub body: usize,
}

/// Whether a head that was still partial at `prev_len` bytes may have ended in `buf`: the
/// end of a head (`\r\n\r\n`, or `\n\n`) lies in or straddles what came since. hyper parses a
/// partial head again only when this holds (`is_complete_fast` in its `proto::h1::role`), so
/// a malformed start that arrives in pieces (`a` then `{`) is not refused until its head
/// seems to end, while the same bytes in one read are refused at once. The lean path hands
/// a malformed head to hyper, which judges it afresh, so it must wait as hyper would.
pub(super) fn may_have_ended(buf: &[u8], prev_len: usize) -> bool {
    let since = buf.get(prev_len.saturating_sub(3)..).unwrap_or_default();
    since.windows(4).any(|w| w == b"\r\n\r\n") || since.windows(2).any(|w| w == b"\n\n")
}

/// Parses `buf` as the start of a request to `uri` (the service's path) that `takes` covers,
/// within `bounds`; a lean head's headers are left in `ranges`.
pub(super) fn parse<K: KnownNames>(
    buf: &[u8],
    uri: &Uri,
    takes: Takes<K>,
    bounds: Bounds,
    ranges: &mut Ranges,
) -> Parsed<K> {
    // A connection's next request is looked for before it is read: nothing to parse yet.
    if buf.is_empty() {
        return Parsed::Partial;
    }
    // Left uninitialised: httparse writes the headers it finds (setting 64 empty ones was
    // about 2 KiB of stores per look).
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    // The head bound is a rule on every complete head, whatever the reads that brought it
    // (hyper's too: `parsed_len > max_header_size` is its 431), not only on a partial one.
    if head_len > bounds.head {
        return Parsed::Other;
    }
    if req.method != Some("POST") || req.path != Some(uri.path()) || req.version != Some(1) {
        return Parsed::Other;
    }
    // Where a slice httparse returned lies in `buf`.
    let at = |part: &[u8]| {
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + part.len()
    };
    ranges.clear();
    let mut body_len = None;
    let mut marker = None;
    let mut close = false;
    let mut first = Firsts::default();
    for (i, h) in req.headers.iter().enumerate() {
        let (name, value) = (h.name.as_bytes(), h.value);
        // httparse checks a name's bytes, not its length.
        if !name_fits(name.len()) {
            return Parsed::Other;
        }
        match first.note(i, name) {
            Some(known) if known == takes.marker => {
                if marker.is_some() {
                    return Parsed::Other;
                }
                marker = Some(value);
            }
            Some(known) if known == K::CONTENT_LENGTH => {
                // Exactly one plain decimal length; anything else is hyper's to judge.
                let n =
                    std::str::from_utf8(value).ok().filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
                match (body_len, n.and_then(|v| v.parse::<usize>().ok())) {
                    (None, Some(n)) if n <= bounds.body => body_len = Some(n),
                    _ => return Parsed::Other,
                }
            }
            Some(_) => {}
            None => {
                let is = |n: &HeaderName| name.eq_ignore_ascii_case(n.as_str().as_bytes());
                if is(&TRANSFER_ENCODING) || is(&EXPECT) || is(&UPGRADE) {
                    return Parsed::Other;
                }
                if is(&CONNECTION) {
                    // hyper's rule: a `close` token in any `Connection` line of visible ASCII
                    // (a line `to_str` refuses has no tokens).
                    close |=
                        to_str(value).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
                }
            }
        }
        ranges.push((at(name), at(value)));
    }
    let stream = marker == Some(takes.marker_value);
    let taken = if stream { takes.streams } else { takes.requests };
    let (Some(body_len), true) = (body_len, taken) else { return Parsed::Other };
    Parsed::Lean(Head { head_len, body_len, close, first })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::tests::T;
    use crate::headers::{Headers, Raw};

    const LISTEN_HEAD: &[u8] = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
        Mcp-Method: subscriptions/listen\r\ncontent-length: 2\r\nConnection: keep-alive, close\r\n\r\n{}";
    const READ_HEAD: &[u8] =
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nMcp-Method: resources/read\r\ncontent-length: 2\r\n\r\n{}";
    const LEGACY_HEAD: &[u8] = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}";
    const LISTEN: &[u8] = b"subscriptions/listen";
    const LISTENS: Takes<T> = Takes { streams: true, requests: false, marker: T::Method, marker_value: LISTEN };
    const REQUESTS: Takes<T> = Takes { streams: false, requests: true, marker: T::Method, marker_value: LISTEN };
    const BOTH: Takes<T> = Takes { streams: true, requests: true, marker: T::Method, marker_value: LISTEN };

    fn mcp() -> Uri {
        Uri::from_static("/mcp")
    }

    fn parse(raw: &[u8], uri: &Uri, takes: Takes<T>, max_body: usize) -> (Parsed<T>, Ranges) {
        let mut ranges = vec![(0..1, 0..1)];
        let parsed = super::parse(raw, uri, takes, Bounds { head: 1 << 20, body: max_body }, &mut ranges);
        (parsed, ranges)
    }

    fn lean(raw: &[u8], takes: Takes<T>) -> bool {
        matches!(parse(raw, &mcp(), takes, 100), (Parsed::Lean(_), _))
    }

    #[test]
    fn a_small_post_to_the_path_is_lean() {
        let (Parsed::Lean(head), ranges) = parse(LISTEN_HEAD, &mcp(), LISTENS, 100) else { panic!("not lean") };
        assert_eq!(head.head_len, LISTEN_HEAD.len() - 2);
        assert_eq!(head.body_len, 2);
        assert!(head.close);
        assert_eq!(ranges.len(), 5, "the ranges of an earlier head are gone");
        let headers = Headers::<T>::Raw(Raw::from_httparse(LISTEN_HEAD, &ranges, head.first));
        assert_eq!(headers.get_str(T::ContentType), Some("application/json"));
        assert_eq!(headers.get_str(T::Method), Some("subscriptions/listen"));
        assert_eq!(headers.iter().count(), 5);
        assert!(matches!(parse(&LISTEN_HEAD[..20], &mcp(), LISTENS, 100).0, Parsed::Partial));
        let (Parsed::Lean(head), _) = parse(READ_HEAD, &mcp(), REQUESTS, 100) else { panic!("not lean") };
        assert!(!head.close, "HTTP/1.1 keeps the connection by default");
    }

    #[test]
    fn the_known_headers_are_noted_as_they_are_read() {
        let mixed = b"POST /mcp HTTP/1.1\r\nX-A: 1\r\nHOST: a\r\nhost: b\r\nmcp-name: n\r\nAccept: */*\r\n\
            MCP-METHOD: resources/read\r\nContent-Length: 2\r\n\r\n{}";
        for raw in [LISTEN_HEAD, READ_HEAD, &mixed[..]] {
            let (Parsed::Lean(head), ranges) = parse(raw, &mcp(), BOTH, 100) else { panic!("not lean") };
            assert_eq!(head.first, Firsts::of(raw, &ranges), "{}", String::from_utf8_lossy(raw));
        }
        let (Parsed::Lean(head), ranges) = parse(&mixed[..], &mcp(), BOTH, 100) else { panic!("not lean") };
        let headers = Headers::<T>::Raw(Raw::from_httparse(&mixed[..], &ranges, head.first));
        assert_eq!(headers.get_str(T::Host), Some("a"), "the first of two");
        assert_eq!(headers.get_str(T::Name), Some("n"));
        assert_eq!(headers.get_str(T::Origin), None);
    }

    #[test]
    fn a_name_longer_than_http_takes_is_hypers() {
        for (len, lean) in [(65_535, true), (65_536, false)] {
            let raw = [
                &b"POST /mcp HTTP/1.1\r\nmcp-method: resources/read\r\n"[..],
                &vec![b'x'; len],
                b": v\r\n\
                content-length: 2\r\n\r\n{}",
            ]
            .concat();
            assert_eq!(matches!(parse(&raw, &mcp(), BOTH, 100).0, Parsed::Lean(_)), lean, "a name of {len}");
        }
    }

    #[test]
    fn each_setting_takes_its_own_requests() {
        assert!(lean(LISTEN_HEAD, LISTENS) && lean(LISTEN_HEAD, BOTH));
        assert!(!lean(LISTEN_HEAD, REQUESTS), "a listen with lean_listens off is hyper's");
        assert!(lean(READ_HEAD, REQUESTS) && lean(LEGACY_HEAD, REQUESTS) && lean(READ_HEAD, BOTH));
        assert!(!lean(READ_HEAD, LISTENS) && !lean(LEGACY_HEAD, LISTENS), "only listens with lean_requests off");
    }

    #[test]
    fn everything_else_is_left_to_hyper() {
        let other = |raw: &[u8]| {
            // Every case names the method, unless it is about the method.
            let raw = String::from_utf8_lossy(raw).replacen("\r\n", "\r\nmcp-method: subscriptions/listen\r\n", 1);
            matches!(parse(raw.as_bytes(), &mcp(), BOTH, 100).0, Parsed::Other)
        };
        let bare = |raw: &[u8]| matches!(parse(raw, &mcp(), LISTENS, 100).0, Parsed::Other);
        assert!(bare(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n"), "no Mcp-Method");
        assert!(bare(b"POST /mcp HTTP/1.1\r\nmcp-method: resources/read\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\nmcp-method: subscriptions/listen\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"GET /mcp HTTP/1.1\r\nhost: x\r\n\r\n"));
        assert!(other(b"DELETE /mcp HTTP/1.1\r\nhost: x\r\n\r\n"));
        assert!(other(b"POST /other HTTP/1.1\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp?x=1 HTTP/1.1\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST http://127.0.0.1/mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.0\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\n\r\n"), "no length");
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 101\r\n\r\n"), "over the bound");
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: +2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\nupgrade: websocket\r\n\r\n"));
        assert!(other(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\nbad header\r\n\r\n"));
        // A value `http` refuses (a DEL byte): httparse refuses it too, and hyper judges it.
        assert!(other(b"POST /mcp HTTP/1.1\r\nmcp-method: resources/read\r\nx: a\x7fb\r\ncontent-length: 0\r\n\r\n"));
    }

    /// A complete head one byte over the bound is hyper's (which answers 431), however it
    /// arrived; one at the bound is lean.
    #[test]
    fn a_complete_head_over_the_bound_is_hypers() {
        let len = READ_HEAD.len() - 2;
        for (bound, lean) in [(len, true), (len - 1, false)] {
            let mut ranges = Vec::new();
            let parsed = super::parse(READ_HEAD, &mcp(), BOTH, Bounds { head: bound, body: 100 }, &mut ranges);
            assert_eq!(matches!(parsed, Parsed::Lean(_)), lean, "a head of {len} with a bound of {bound}");
        }
    }
}
