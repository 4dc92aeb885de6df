//! The lean writer mirrors hyper's output: the status line, the response's headers in their
//! order and case, `connection: close`, `content-length` or `transfer-encoding: chunked`
//! (chunk sizes in upper-case hex), `date`. hyper is pinned to the minor version this was
//! checked against (`~1.12` in Cargo.toml); this test fails when hyper's output for these
//! cases moves away from the lean writer's, so an upgrade that changes it cannot pass
//! unnoticed.

use bytes::Bytes;

use super::{both, toy};

/// One request of each shape the lean writer has a rule for, and what it must write.
fn cases() -> Vec<(&'static str, String, String)> {
    let post = |extra: &str, body: &str| {
        format!("POST {} HTTP/1.1\r\nhost: a\r\n{extra}content-length: {}\r\n\r\n{body}", toy::PATH, body.len())
    };
    // What the toy says back about a request with `headers` headers and `body`.
    let said =
        |headers: usize, body: &str| format!("POST /mcp host=Some(\"a\") headers={headers} body={}:{body}", body.len());
    let whole =
        |head: &str, said: String| format!("{head}content-length: {}\r\ndate: <date>\r\n\r\n{said}", said.len());
    let json = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n";
    let streamed = said(3, "[1]");
    vec![
        (
            "a whole body: its headers in order, then content-length, then date",
            post("", "{}"),
            whole(&format!("{json}x-toy: 1\r\n"), said(2, "{}")),
        ),
        (
            "the client asks to close: connection: close before the length",
            post("connection: close\r\n", "{}"),
            whole(&format!("{json}x-toy: 1\r\nconnection: close\r\n"), said(3, "{}")),
        ),
        (
            "the response closes: its own connection header, not a second one",
            post("x-kind: close\r\n", ""),
            whole(&format!("{json}connection: close\r\n"), said(3, "")),
        ),
        (
            "a status without a body: no length",
            post("x-kind: empty\r\n", ""),
            "HTTP/1.1 204 No Content\r\ndate: <date>\r\n\r\n".to_owned(),
        ),
        (
            "a stream: chunked, sizes in upper-case hex, the last chunk",
            post("x-kind: stream\r\n", "[1]"),
            format!(
                "{json}transfer-encoding: chunked\r\ndate: <date>\r\n\r\n\
                 29\r\na first chunk, sixteen or more bytes long\r\n{:X}\r\n{streamed}\r\n0\r\n\r\n",
                streamed.len()
            ),
        ),
    ]
}

#[test]
fn hyper_writes_what_the_lean_writer_writes() {
    for (what, request, want) in cases() {
        let served = toy::lean_served();
        let (lean, hyper) = both(&[Bytes::from(request)]);
        assert_eq!(toy::lean_served(), served + 1, "{what}: the lean path served it");
        assert_eq!(hyper.written, want, "{what}: hyper's output moved");
        assert_eq!(lean.written, want, "{what}: the lean writer's output moved");
        assert_eq!(lean.closed, hyper.closed, "{what}");
    }
}

/// The `date` both write is an HTTP date of now, in the same form.
#[test]
fn both_dates_are_http_dates() {
    let request = format!("POST {} HTTP/1.1\r\ncontent-length: 0\r\n\r\n", toy::PATH);
    // Paused: the date is the system clock's, and the verdict's wait is not waited for real.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("a runtime");
    for server in [super::Server::Lean, super::Server::Hyper] {
        let seen = rt.block_on(super::serve_raw(server, vec![Bytes::from(request.clone())]));
        let date = seen.split("\r\ndate: ").nth(1).and_then(|d| d.split("\r\n").next()).expect("a date");
        assert_eq!(date.len(), "Fri, 04 Dec 2026 23:55:51 GMT".len(), "{server:?}: {date}");
        assert!(httpdate::parse_http_date(date).is_ok(), "{server:?}: {date}");
    }
}
