//! Byte streams for the framing tests: pipelined HTTP/1.x requests from a grammar whose
//! every part is sometimes wrong. Request lines with other methods, targets and versions;
//! bodies framed by `Content-Length` (right, short, long, duplicated, signed, overflowing,
//! over the lean bound), by `Transfer-Encoding` (chunked, with extensions, malformed, with a
//! length too), or not at all; `Expect`, `Upgrade`, `Connection` tokens, obs-fold, bare LF,
//! bad header lines, oversized heads; and bodies that look like requests.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use super::MAX_HEAD;

/// One to three requests, back to back: half of them ones the lean path takes (so that it,
/// and what follows its answers, is exercised as much as what it hands to hyper).
pub(super) fn stream() -> impl Strategy<Value = Vec<u8>> {
    vec(prop_oneof![request(), lean_request()], 1..4).prop_map(|requests| requests.concat())
}

/// How a request's body is framed.
#[derive(Debug, Clone)]
enum Framing {
    /// No length at all.
    None,
    /// `Content-Length` values as sent (one header each), and the body actually sent.
    Length(Vec<String>, Vec<u8>),
    /// `Transfer-Encoding` as sent, a `Content-Length` too if any, and the body as sent.
    Encoded(String, Option<String>, Vec<u8>),
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => vec(select(b"{}[]\"a:1,".to_vec()), 0..24),
        1 => Just(b"POST /mcp HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec()),
        1 => Just(b"0\r\n\r\n".to_vec()),
    ]
}

fn framing() -> impl Strategy<Value = Framing> {
    let length = prop_oneof![
        3 => Just(None),
        1 => select(vec!["+2", "-1", " 2", "2 2", "0x2", "", "002", "18446744073709551616", "2, 2", "2,3"])
            .prop_map(|v| Some(v.to_owned())),
    ];
    let chunked = prop_oneof![
        4 => Just("2\r\n{}\r\n0\r\n\r\n".to_owned()),
        1 => Just("2;ext=1\r\n{}\r\n0\r\n\r\n".to_owned()),
        1 => Just("zz\r\n{}\r\n0\r\n\r\n".to_owned()),
        1 => Just("fffffffffffffffffff\r\n{}\r\n0\r\n\r\n".to_owned()),
        1 => Just("2\r\n{}0\r\n\r\n".to_owned()),
        1 => Just("0\r\nx-trailer: 1\r\n\r\n".to_owned()),
    ];
    prop_oneof![
        1 => Just(Framing::None),
        // A right length, the most common case, and what the lean path takes.
        8 => body().prop_map(|b| Framing::Length(vec![b.len().to_string()], b)),
        // Short or long by a few bytes: the rest is read as the next request, or awaited.
        2 => (body(), -3i64..4).prop_map(|(b, off)| {
            let n = (b.len() as i64 + off).max(0);
            Framing::Length(vec![n.to_string()], b)
        }),
        2 => (body(), any::<bool>()).prop_map(|(b, same)| {
            let other = if same { b.len() } else { b.len() + 1 };
            Framing::Length(vec![b.len().to_string(), other.to_string()], b)
        }),
        2 => (body(), length.clone()).prop_map(|(b, v)| Framing::Length(vec![v.unwrap_or_default()], b)),
        // Over the lean path's body bound: hyper's.
        1 => Just(Framing::Length(vec![(70 << 10).to_string()], vec![b'x'; 70 << 10])),
        3 => (select(vec!["chunked", "Chunked", "gzip, chunked", "chunked, gzip", "identity", "chunked ,"]), length, chunked)
            .prop_map(|(te, cl, body)| Framing::Encoded(te.to_owned(), cl, body.into_bytes())),
    ]
}

/// A header line's name and value (an empty name: the value is the whole line; `bad header`:
/// a name with a space and no colon after it).
fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let line = |n: &str, v: &[u8]| (n.to_owned(), v.to_vec());
    prop_oneof![
        4 => select(vec![line("host", b"a"), line("Host", b"b\xc3\xa9"), line("HOST", b"c"), line("accept", b"*/*")]),
        4 => select(vec![
            line("x-kind", b"stream"),
            line("X-Kind", b"close"),
            line("x-kind", b"empty"),
            line("x-kind", b"other"),
        ]),
        3 => select(vec![
            line("connection", b"close"),
            line("Connection", b"keep-alive"),
            line("connection", b"keep-alive, close"),
            line("connection", b"close\xc3\xa9"),
            line("connection", b"close, \xc3\xa9"),
            line("connection", b"x, CLOSE "),
            line("connection", b"upgrade"),
        ]),
        1 => select(vec![line("expect", b"100-continue"), line("Expect", b"x"), line("upgrade", b"websocket")]),
        1 => select(vec![
            line("x-fold", b"a\r\n b"),
            line("x-nul", b"a\0b"),
            line("x-del", b"a\x7fb"),
            line("x-sp ", b"1"),
            line("bad header", b"x"),
            line("", b"no name"),
        ]),
        // A head over the bound, with this line alone or with the others.
        1 => (MAX_HEAD - 400..MAX_HEAD + 200).prop_map(|n| ("x-pad".to_owned(), vec![b'p'; n])),
    ]
}

/// A request the lean path takes: a small `POST` to the path with a right length, and headers
/// that are all well formed (some of them still change how it is answered).
fn lean_request() -> impl Strategy<Value = Vec<u8>> {
    let line = |n: &str, v: &[u8]| (n.to_owned(), v.to_vec());
    let header = select(vec![
        line("host", b"a"),
        line("Host", b"b\xc3\xa9"),
        line("accept", b"*/*"),
        line("x-kind", b"stream"),
        line("X-Kind", b"close"),
        line("x-kind", b"empty"),
        line("connection", b"keep-alive"),
        line("Connection", b"close"),
    ]);
    let eol = prop_oneof![9 => Just("\r\n"), 1 => Just("\n")];
    (eol, vec(header, 0..4), body()).prop_map(|(eol, headers, body)| {
        let framing = Framing::Length(vec![body.len().to_string()], body);
        Request {
            method: "POST",
            target: "/mcp",
            version: "HTTP/1.1",
            eol,
            headers,
            framing,
            framing_first: false,
            many: 0,
        }
        .bytes()
    })
}

/// A request from the whole grammar.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![8 => Just("POST"), 1 => Just("GET"), 1 => Just("post"), 1 => Just("PUT")];
    let target = prop_oneof![8 => Just("/mcp"), 1 => Just("/other"), 1 => Just("/mcp?x=1"), 1 => Just("http://a/mcp")];
    let version =
        prop_oneof![8 => Just("HTTP/1.1"), 2 => Just("HTTP/1.0"), 1 => Just("HTTP/1.2"), 1 => Just("HTTP/2.0")];
    let eol = prop_oneof![9 => Just("\r\n"), 1 => Just("\n")];
    let many = prop_oneof![20 => Just(0usize), 1 => Just(70usize)];
    (method, target, version, eol, vec(header(), 0..5), framing(), any::<bool>(), many).prop_map(
        |(method, target, version, eol, headers, framing, framing_first, many)| {
            Request { method, target, version, eol, headers, framing, framing_first, many }.bytes()
        },
    )
}

/// The parts of one request.
struct Request {
    method: &'static str,
    target: &'static str,
    version: &'static str,
    eol: &'static str,
    headers: Vec<(String, Vec<u8>)>,
    framing: Framing,
    /// The framing's headers before the others (or after them).
    framing_first: bool,
    /// Filler headers after them all.
    many: usize,
}

impl Request {
    fn bytes(self) -> Vec<u8> {
        let Self { method, target, version, eol, headers, framing, framing_first, many } = self;
        let mut lines: Vec<(String, Vec<u8>)> = headers;
        let (framed, body) = match framing {
            Framing::None => (Vec::new(), Vec::new()),
            Framing::Length(values, body) => {
                (values.into_iter().map(|v| ("content-length".to_owned(), v.into_bytes())).collect(), body)
            }
            Framing::Encoded(te, cl, body) => {
                let mut framed = vec![("transfer-encoding".to_owned(), te.into_bytes())];
                framed.extend(cl.map(|v| ("Content-Length".to_owned(), v.into_bytes())));
                (framed, body)
            }
        };
        if framing_first {
            lines.splice(0..0, framed);
        } else {
            lines.extend(framed);
        }
        lines.extend((0..many).map(|i| (format!("x-{i}"), b"1".to_vec())));
        let mut out = format!("{method} {target} {version}{eol}").into_bytes();
        for (name, value) in lines {
            if !name.is_empty() {
                out.extend_from_slice(name.as_bytes());
                // A line with a space in its name and no colon.
                if name != "bad header" {
                    out.extend_from_slice(b": ");
                }
            }
            out.extend_from_slice(&value);
            out.extend_from_slice(eol.as_bytes());
        }
        out.extend_from_slice(eol.as_bytes());
        out.extend_from_slice(&body);
        out
    }
}
