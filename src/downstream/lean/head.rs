//! The first request's head, parsed with `httparse` from the lean path's small buffer: the
//! head alone decides whether the lean path keeps the connection, so no other request's body
//! is read twice.

use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Version};

use crate::mcp::H_METHOD;

/// Headers a lean head may carry; a head with more is left to hyper (its own bound is 100).
const MAX_HEADERS: usize = 64;

/// What the bytes read so far hold.
#[derive(Debug)]
pub(super) enum Parsed {
    /// A complete head the lean path may serve: a `POST` to the endpoint's path over HTTP/1.1
    /// whose `Mcp-Method` (which every modern request mirrors from its body, reference §2.1)
    /// is `method`, with a `Content-Length` of at most the lean body bound and no
    /// `Transfer-Encoding`, `Expect` or `Upgrade`.
    Lean(Box<Head>),
    /// Not complete yet.
    Partial,
    /// Anything else (another method, path or version, a chunked or large body, a malformed
    /// head): hyper serves it from the bytes read so far.
    Other,
}

/// A parsed head: the request without its body, where its body starts, and its length.
#[derive(Debug)]
pub(super) struct Head {
    pub request: Request<()>,
    pub head_len: usize,
    pub body_len: usize,
    /// The client asked to close the connection after this exchange.
    pub close: bool,
}

/// Parses `buf` as the start of a `method` request to `path` whose body is at most
/// `max_body` bytes.
pub(super) fn parse(buf: &[u8], path: &str, method: &str, max_body: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if req.method != Some("POST") || req.path != Some(path) || req.version != Some(1) {
        return Parsed::Other;
    }
    let mut map = HeaderMap::with_capacity(req.headers.len());
    let mut body_len = None;
    let mut named = false;
    for h in req.headers.iter() {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(h.name.as_bytes()), HeaderValue::from_bytes(h.value))
        else {
            return Parsed::Other;
        };
        if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE {
            return Parsed::Other;
        }
        if name.as_str() == H_METHOD {
            if named || h.value != method.as_bytes() {
                return Parsed::Other;
            }
            named = true;
        }
        if name == CONTENT_LENGTH {
            // Exactly one plain decimal length; anything else is hyper's to judge.
            let n =
                std::str::from_utf8(h.value).ok().filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
            match (body_len, n.and_then(|v| v.parse::<usize>().ok())) {
                (None, Some(n)) if n <= max_body => body_len = Some(n),
                _ => return Parsed::Other,
            }
        }
        map.append(name, value);
    }
    let (Some(body_len), true) = (body_len, named) else { return Parsed::Other };
    let close = map
        .get_all(CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))));
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.version_mut() = Version::HTTP_11;
    match path.parse() {
        Ok(uri) => *request.uri_mut() = uri,
        Err(_) => return Parsed::Other,
    }
    *request.headers_mut() = map;
    Parsed::Lean(Box::new(Head { request, head_len, body_len, close }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTEN: &[u8] = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
        Mcp-Method: subscriptions/listen\r\ncontent-length: 2\r\nConnection: keep-alive, close\r\n\r\n{}";
    const M: &str = "subscriptions/listen";

    #[test]
    fn a_small_post_to_the_path_is_lean() {
        let Parsed::Lean(head) = parse(LISTEN, "/mcp", M, 100) else { panic!("not lean") };
        assert_eq!(head.head_len, LISTEN.len() - 2);
        assert_eq!(head.body_len, 2);
        assert!(head.close);
        assert_eq!(head.request.headers()["content-type"], "application/json");
        assert_eq!(head.request.uri().path(), "/mcp");
        assert!(matches!(parse(&LISTEN[..20], "/mcp", M, 100), Parsed::Partial));
    }

    #[test]
    fn everything_else_is_left_to_hyper() {
        let other = |raw: &[u8]| {
            // Every case names the method, unless it is about the method.
            let raw = String::from_utf8_lossy(raw).replacen("\r\n", "\r\nmcp-method: subscriptions/listen\r\n", 1);
            matches!(parse(raw.as_bytes(), "/mcp", M, 100), Parsed::Other)
        };
        let bare = |raw: &[u8]| matches!(parse(raw, "/mcp", M, 100), Parsed::Other);
        assert!(bare(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\n\r\n"), "no Mcp-Method");
        assert!(bare(b"POST /mcp HTTP/1.1\r\nmcp-method: resources/read\r\ncontent-length: 2\r\n\r\n"));
        assert!(bare(
            b"POST /mcp HTTP/1.1\r\nmcp-method: subscriptions/listen\r\nmcp-method: subscriptions/listen\r\ncontent-length: 2\r\n\r\n"
        ));
        assert!(other(b"GET /mcp HTTP/1.1\r\nhost: x\r\n\r\n"));
        assert!(other(b"POST /other HTTP/1.1\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp?x=1 HTTP/1.1\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.0\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\n\r\n"), "no length");
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 101\r\n\r\n"), "over the bound");
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: +2\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"));
        assert!(other(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        assert!(other(b"POST /mcp HTTP/1.1\r\nbad header\r\n\r\n"));
    }
}
