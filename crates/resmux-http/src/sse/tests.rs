use super::*;
use proptest::prelude::*;

#[test]
fn an_event_past_the_threshold_is_handed_over() {
    let mut d = SseDecoder::new(1 << 20).stream_above(8);
    d.push(b": hi\n\ndata: {\"a\":\"0123456789");
    assert!(matches!(d.next_event(), Err(SseError::Large)));
    assert!(d.mid_line);
    let mut d = SseDecoder::new(1 << 20).stream_above(14);
    d.push(b"data: 01234\ndata: 56789\ndata");
    assert!(matches!(d.next_event(), Err(SseError::Large)));
    assert!(!d.mid_line);
    assert_eq!(d.pending.data, "01234\n56789");
    // A long line of another field is refused as before.
    let mut d = SseDecoder::new(16).stream_above(8);
    d.push(b": 0123456789abcdefghij");
    assert!(matches!(d.next_event(), Err(SseError::TooLarge { .. })));
}

#[test]
fn a_handover_right_after_the_colon_still_drops_the_optional_space() {
    // The proptest's find: `data:` had arrived, its optional space not yet.
    let wire: &[u8] = b"data: 0123456789\ndata: abcdefghij\ndata: \n\n";
    let at = wire.len() - 4;
    assert_eq!(relayed(&[&wire[..at], &wire[at..]], 24).as_deref(), Some(&b"0123456789\nabcdefghij\n"[..]));
}

#[test]
fn the_data_of_a_large_event_is_read_on() {
    let mut data = SseData::detached(DataState::Data);
    let mut out = Vec::new();
    for chunk in [&b"abc\r"[..], b"\n: c\r\nid: 9\ndata:x\ndata", b"\n\ndata: next\n\n"] {
        data.scan(chunk, &mut out);
    }
    assert!(data.done);
    assert_eq!(out, b"abc\nx\n");
}

/// The event's data as the relay gets it: fed in `chunks` until the decoder hands the
/// event over, then read on by [`SseData`].
fn relayed(chunks: &[&[u8]], threshold: usize) -> Option<Vec<u8>> {
    let mut d = SseDecoder::new(1 << 20).stream_above(threshold);
    let mut rest = chunks.iter();
    loop {
        d.push(rest.next()?);
        match d.next_event() {
            Err(SseError::Large) => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) => {}
        }
    }
    let (prefix, pending, state) = d.handover();
    let mut data = SseData::detached(state);
    let mut out = prefix.to_vec();
    data.scan(&pending, &mut out);
    for chunk in rest {
        data.scan(chunk, &mut out);
    }
    Some(out)
}

proptest! {
    /// An event of many `data:` lines, split anywhere, comes out of the handover exactly
    /// as the event-stream format joins it (the bug this pins: a handover at a line end
    /// took the lines still buffered for the tail of the current one).
    #[test]
    fn a_large_event_of_many_lines_is_relayed_exactly(
        lines in proptest::collection::vec("[a-z0-9{}\":,]{0,12}", 2..12),
        cuts in proptest::collection::vec(1usize..40, 1..40),
        threshold in 4usize..40,
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut wire = String::new();
        for line in &lines {
            wire.push_str(&format!("data: {line}{eol}"));
        }
        wire.push_str(eol);
        let wire = wire.into_bytes();
        let mut chunks = Vec::new();
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            if at >= wire.len() {
                break;
            }
            let end = (at + cut).min(wire.len());
            chunks.push(&wire[at..end]);
            at = end;
        }
        // Each line counts with its field name; past the threshold the event must be
        // handed over (at the latest at its last line's end), never dispatched whole.
        let size: usize = lines.iter().map(|l| 6 + l.len()).sum();
        prop_assume!(size > threshold);
        let out = relayed(&chunks, threshold);
        prop_assert!(out.is_some(), "the event was not handed over");
        let out = String::from_utf8(out.unwrap_or_default()).expect("the relayed data is the UTF-8 it was sent as");
        prop_assert_eq!(out, lines.join("\n"));
    }
}

fn all(input: &[&[u8]]) -> Vec<SseEvent> {
    let mut d = SseDecoder::new(1 << 20);
    let mut out = Vec::new();
    for chunk in input {
        d.push(chunk);
        while let Some(e) = d.next_event().unwrap() {
            out.push(e);
        }
    }
    out
}

#[test]
fn events_comments_and_crlf() {
    let evs =
        all(&[b": keep-alive\r\n\r\nevent: message\r\ndata: {\"a\":1}\r\n\r\nid: 7\nretry: 500\ndata: x\ndata: y\n\n"]);
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[0].data, "{\"a\":1}");
    assert_eq!(evs[1], SseEvent { data: "x\ny".into(), id: Some("7".into()), retry: Some(500) });
}

#[test]
fn oversized_event_is_refused() {
    let mut d = SseDecoder::new(16);
    d.push(b"data: 0123456789abcdefghij");
    assert!(matches!(d.next_event(), Err(SseError::TooLarge { limit: 16 })));
    // Across lines of one event, each short.
    let mut d = SseDecoder::new(16);
    d.push(b"data: 0123456\ndata: 789abcdef\n");
    assert!(matches!(d.next_event(), Err(SseError::TooLarge { .. })));
}

#[test]
fn floods_that_never_complete_an_event_are_refused() {
    let mut d = SseDecoder::new(64);
    let mut refused = false;
    for _ in 0..100 {
        d.push(b": keep-alive\n\n");
        if let Err(e) = d.next_event() {
            assert!(matches!(e, SseError::NoEvent { limit: 64 }));
            refused = true;
            break;
        }
    }
    assert!(refused, "a comment-only flood must end the stream");
    // Keep-alives between real events never add up.
    let mut d = SseDecoder::new(64);
    for _ in 0..100 {
        d.push(b": ka\n\ndata: x\n\n");
        while d.next_event().unwrap().is_some() {}
    }
}

proptest! {
    #[test]
    fn chunking_does_not_matter(split in 1usize..40, crlf in any::<bool>()) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let text = format!("data: one{nl}{nl}:c{nl}data: two{nl}data: 2{nl}{nl}");
        let bytes = text.as_bytes();
        let chunks: Vec<&[u8]> = bytes.chunks(split).collect();
        let evs = all(&chunks);
        prop_assert_eq!(evs.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(), vec!["one", "two\n2"]);
    }
}
