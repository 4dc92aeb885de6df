//! Request bodies seen before, decoded once (issue #14: the JSON reader was the largest part
//! of a cached read the proxy itself does, about 4,200 instructions of 24,000).
//!
//! A client that reads the same resource again, or polls the same list, sends the same body
//! with a new JSON-RPC id. Each worker thread keeps a small table of such bodies, decoded and
//! validated: a body whose bytes are a kept body's with only the id's JSON text changed is
//! served from that decode, with its own id. Everything else about the request is checked as
//! for a fresh one: the headers, authentication, rate, and [`super::validate::check_as`]
//! applies every body rule again to the kept decode (the memo saves the JSON reader, not
//! validation).
//!
//! Why a match is the same request: a kept body is `P + T + S`, where the codec read `T` as the
//! value of the envelope's `id` member. A new body that starts with `P`, ends with `S` and has
//! one complete JSON string or integer `T'` between them is read by the codec in exactly the
//! same states through `P` and `S` (JSON is read left to right, and `P` is the same bytes),
//! with `T'` in the place of `T`: the same message with another id. So a candidate is kept
//! only with the place the codec itself found for its id, and `T'` is held to a strict subset
//! of JSON's grammar (RequestId::from_plain_token: an integer without a leading zero, or a
//! string of printable ASCII with no escape).
//!
//! Finding a candidate is a guess that can only miss: the first `"id"` key in the text splits
//! it into a prefix and a suffix, and their hash picks one set of [`WAYS`] slots (no chains: a
//! fifth body in a full set takes a slot from one of the four). A guess fooled by the bytes (a key spelt
//! `\"id`, say) finds no kept body or one the match rules out, and the body is decoded as
//! usual. A body is kept the second time it is seen (the first sighting leaves only its
//! hash), so bodies that never repeat cost a hash per request and no copy.
//!
//! Bounds (`[listen] parse_memo_entries`, `parse_memo_max_bytes`): at most that many kept
//! bodies per worker thread and endpoint, each at most that long.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::jsonrpc::{Incoming, MessageError, RequestId};

self_cell::self_cell!(
    /// A kept body and the codec's decode of it.
    struct Decoded {
        owner: Box<str>,
        #[covariant]
        dependent: Incoming,
    }
);

/// One kept body, decoded, with the place of its id's JSON text.
pub(super) struct Template {
    decoded: Decoded,
    id: Range<usize>,
}

impl Template {
    /// The kept body's decode. Its `id` is the kept body's: a request served from it carries
    /// the id [`Memo::find`] read.
    pub(super) fn msg(&self) -> &Incoming<'_> {
        self.decoded.borrow_dependent()
    }

    /// The id of `body`, when `body` is this template's text with only the id's JSON text
    /// changed, to a string or integer the strict grammar takes.
    fn id_of(&self, body: &[u8]) -> Option<RequestId> {
        let text = self.decoded.borrow_owner().as_bytes();
        let (prefix, suffix) = (&text[..self.id.start], &text[self.id.end..]);
        if body.len() <= prefix.len() + suffix.len() || !body.starts_with(prefix) || !body.ends_with(suffix) {
            return None;
        }
        let token = &body[prefix.len()..body.len() - suffix.len()];
        if token.len() > MAX_ID {
            return None;
        }
        RequestId::from_plain_token(token)
    }
}

/// The longest id text a match takes (longer ones are decoded as usual).
const MAX_ID: usize = 64;

/// Where the first `"id"` key's value is, as a guess (see the module doc): after `"id"`,
/// optional white space, `:` and optional white space, a string to its next `"`, or an
/// integer's digits (anything else is no id a match takes).
fn guess(body: &[u8]) -> Option<Range<usize>> {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"id\""));
    let key = KEY.find(body)?;
    let ws = |at: usize| at + body[at..].iter().take_while(|b| b.is_ascii_whitespace()).count();
    let colon = ws(key + 4);
    if body.get(colon) != Some(&b':') {
        return None;
    }
    let start = ws(colon + 1);
    let len = match body.get(start)? {
        b'"' => memchr::memchr(b'"', &body[start + 1..])? + 2,
        b'-' => 1 + body[start + 1..].iter().take_while(|b| b.is_ascii_digit()).count(),
        _ => body[start..].iter().take_while(|b| b.is_ascii_digit()).count(),
    };
    Some(start..start + len)
}

/// Slots per set: a body may be kept in any of its set's, so a few bodies whose hashes pick
/// the same set do not take turns (with one slot per set, 10 bodies in 64 slots collided
/// about half the time, measured as 1,311 hits of 2,211 reads).
const WAYS: usize = 4;

/// A memo's mark on a slot: whose, and the hash of the body's text around its guessed id.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Mark {
    /// The memo (0: none).
    owner: u64,
    hash: u64,
}

/// One slot of a thread's table: a kept body, and the last body seen once. A body seen once
/// only leaves its mark, so a stream of bodies that never repeat passes by what is kept; a
/// kept body gives way only to one seen twice.
#[derive(Default)]
struct Slot {
    kept: Option<(Mark, Arc<Template>)>,
    seen: Mark,
}

thread_local! {
    /// Every memo's slots on this thread, as long as the largest memo's table.
    static TABLE: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// Tells one memo's slots from another's.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// An endpoint's memo.
pub(super) struct Memo {
    owner: u64,
    /// Sets of [`WAYS`] slots (fewer when the memo is smaller); 0: off.
    sets: usize,
    ways: usize,
    max_bytes: usize,
    max_depth: usize,
    hasher: foldhash::fast::RandomState,
}

/// What the memo knows of a body.
pub(super) enum Found {
    /// A kept body with another id: served from its decode, with this id.
    Hit(Arc<Template>, RequestId),
    /// Seen once before: decode it into a template ([`Memo::decode`]), and keep that when it
    /// is a valid request ([`Memo::keep`]).
    Again(Candidate),
    /// New, or not one the memo takes: decoded as usual.
    No,
}

/// A body seen for the second time: its mark, and the slot that held it.
pub(super) struct Candidate {
    mark: Mark,
    way: usize,
    guess: Range<usize>,
}

impl Memo {
    /// A memo of at most `slots` bodies per thread (0: none), each at most `max_bytes`,
    /// decoded at most `max_depth` deep.
    pub(super) fn new(slots: usize, max_bytes: usize, max_depth: usize) -> Self {
        let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
        let ways = slots.clamp(1, WAYS);
        let hasher = foldhash::fast::RandomState::default();
        Self { owner, sets: slots / ways, ways, max_bytes, max_depth, hasher }
    }

    /// What the memo knows of `body`.
    pub(super) fn find(&self, body: &[u8]) -> Found {
        if self.sets == 0 || body.len() > self.max_bytes {
            return Found::No;
        }
        let Some(guess) = self.guess(body) else { return Found::No };
        let mark = Mark { owner: self.owner, hash: self.hasher.hash_one((&body[..guess.start], &body[guess.end..])) };
        TABLE.with_borrow_mut(|table| {
            let set = self.set(table, mark.hash);
            if let Some((_, kept)) = set.iter().filter_map(|s| s.kept.as_ref()).find(|(m, _)| *m == mark) {
                return kept.id_of(body).map_or(Found::No, |id| Found::Hit(kept.clone(), id));
            }
            if let Some(way) = set.iter().position(|s| s.seen == mark) {
                return Found::Again(Candidate { mark, way, guess });
            }
            set[(mark.hash >> 32) as usize % set.len()].seen = mark;
            Found::No
        })
    }

    /// The set of slots `hash` belongs to, in `table` (grown to this memo's size).
    fn set<'t>(&self, table: &'t mut Vec<Slot>, hash: u64) -> &'t mut [Slot] {
        let len = self.sets * self.ways;
        if table.len() < len {
            table.resize_with(len, Slot::default);
        }
        let start = (hash % self.sets as u64) as usize * self.ways;
        &mut table[start..start + self.ways]
    }

    /// Where `body`'s id is guessed to be, when its text is short enough to keep.
    fn guess(&self, body: &[u8]) -> Option<Range<usize>> {
        guess(body).filter(|g| g.len() <= MAX_ID)
    }

    /// Decodes `body` (which [`Self::find`] found a second time) into a template; the
    /// codec's error, or `None` when the body is not UTF-8, as for a fresh decode.
    pub(super) fn decode(&self, body: &[u8]) -> Option<Result<Template, MessageError>> {
        let text: Box<str> = std::str::from_utf8(body).ok()?.into();
        let mut id = None;
        let decoded = Decoded::try_new(text, |text| {
            let msg = Incoming::parse_limited(text, self.max_depth)?;
            id = msg.id_span();
            Ok(msg)
        });
        Some(decoded.map(|decoded| Template { decoded, id: id.unwrap_or(0..0) }))
    }

    /// Keeps `template`, decoded from `candidate`'s body and valid as a request, in its set:
    /// in a slot keeping nothing of this memo's, else in the one that held its mark. Only when
    /// its id is where the guess put it (otherwise no later body would find it).
    pub(super) fn keep(&self, candidate: Candidate, template: &Arc<Template>) {
        if template.id != candidate.guess {
            return;
        }
        TABLE.with_borrow_mut(|table| {
            let set = self.set(table, candidate.mark.hash);
            if set.iter().any(|s| s.kept.as_ref().is_some_and(|(m, _)| *m == candidate.mark)) {
                return; // kept meanwhile, by another request on this thread
            }
            if set[candidate.way].seen == candidate.mark {
                set[candidate.way].seen = Mark::default();
            }
            let free = set.iter().position(|s| s.kept.as_ref().is_none_or(|(m, _)| m.owner != self.owner));
            set[free.unwrap_or(candidate.way)].kept = Some((candidate.mark, template.clone()));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: &str = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    /// Runs `body` through `memo` as the endpoint does: a hit's id, or the decode kept.
    fn look(memo: &Memo, body: &str) -> Option<RequestId> {
        match memo.find(body.as_bytes()) {
            Found::Hit(_, id) => Some(id),
            Found::Again(candidate) => {
                let template = Arc::new(memo.decode(body.as_bytes()).expect("UTF-8").expect("decodes"));
                memo.keep(candidate, &template);
                None
            }
            Found::No => None,
        }
    }

    fn with_id(id: &str) -> String {
        READ.replacen("\"id\":1", &format!("\"id\":{id}"), 1)
    }

    #[test]
    fn a_body_seen_twice_is_kept_and_the_next_with_another_id_is_a_hit() {
        let memo = Memo::new(8, 4096, 64);
        assert!(look(&memo, READ).is_none(), "first sighting");
        assert!(look(&memo, READ).is_none(), "second sighting: kept");
        for id in ["2", "-7", "0", "12345678901234567890123", r#""abc""#, r#""""#, r#""a b~""#] {
            assert_eq!(look(&memo, &with_id(id)).map(|i| i.as_json().to_owned()), Some(id.to_owned()), "{id}");
        }
    }

    #[test]
    fn an_id_outside_the_strict_grammar_is_decoded_as_usual() {
        let memo = Memo::new(8, 4096, 64);
        look(&memo, READ);
        look(&memo, READ);
        for id in ["01", "-", "1.5", "1e3", "null", "true", r#""a\"b""#, r#""a\\b""#, "\"é\"", "\"\t\"", "{}", "[1]"] {
            assert!(look(&memo, &with_id(id)).is_none(), "{id}");
        }
        let long = format!("\"{}\"", "x".repeat(MAX_ID));
        assert!(look(&memo, &with_id(&long)).is_none(), "an id past MAX_ID");
    }

    #[test]
    fn any_other_change_to_the_body_is_not_a_hit() {
        let memo = Memo::new(8, 4096, 64);
        look(&memo, READ);
        look(&memo, READ);
        let id_at = READ.find("\"id\":1").unwrap() + 5;
        for at in (0..READ.len()).filter(|&at| at != id_at) {
            // The last changed body may have taken the slot: the kept one is kept again.
            look(&memo, READ);
            look(&memo, READ);
            assert!(look(&memo, &with_id("2")).is_some(), "kept");
            let mut changed = READ.as_bytes().to_vec();
            changed[at] = if changed[at] == b'x' { b'y' } else { b'x' };
            let changed = String::from_utf8(changed).unwrap();
            assert!(look(&memo, &changed).is_none(), "byte {at} changed: {changed}");
        }
        assert!(look(&memo, &format!("{READ} ")).is_none(), "a byte more");
        assert!(look(&memo, &READ[..READ.len() - 1]).is_none(), "a byte less");
    }

    /// The guess can be fooled by a key spelt `\"id` (its text holds `"id":`); the memo then
    /// keeps nothing for it, since the codec's id is elsewhere, and so never serves a body
    /// whose `\"id` member changed as the kept one.
    #[test]
    fn a_guess_fooled_by_an_escaped_key_serves_nothing() {
        let fooled = r#"{"params":{"\"id":1,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}},"jsonrpc":"2.0","id":1,"method":"resources/read"}"#;
        let memo = Memo::new(8, 4096, 64);
        for _ in 0..3 {
            assert!(look(&memo, fooled).is_none());
        }
        let other = fooled.replacen("\"id\":1", "\"id\":2", 1);
        assert_ne!(other, fooled);
        assert!(look(&memo, &other).is_none(), "the escaped key's value changed: not the kept body");
    }

    #[test]
    fn memos_do_not_share_slots_and_bounds_hold() {
        let (a, b) = (Memo::new(4, 4096, 64), Memo::new(4, 4096, 64));
        look(&a, READ);
        look(&a, READ);
        assert!(look(&a, &with_id("2")).is_some());
        // One table per thread: the other memo's look may take the slot, but never its body.
        assert!(look(&b, &with_id("3")).is_none(), "another endpoint's memo");
        let off = Memo::new(0, 4096, 64);
        for _ in 0..3 {
            assert!(look(&off, READ).is_none(), "0 slots: off");
        }
        let short = Memo::new(4, READ.len() - 1, 64);
        for _ in 0..3 {
            assert!(look(&short, READ).is_none(), "longer than max_bytes");
        }
    }

    /// `READ` for `uri`, with id `id`.
    fn read_of(uri: &str, id: u32) -> String {
        with_id(&id.to_string()).replace("a://b", uri)
    }

    /// One set of four slots (a memo of 4): what is kept there, and what gives way.
    #[test]
    fn four_bodies_share_a_set_and_only_a_body_seen_twice_takes_a_slot() {
        let memo = Memo::new(4, 4096, 64);
        let uris = ["a://0", "a://1", "a://2", "a://3"];
        for uri in uris {
            look(&memo, &read_of(uri, 1));
            look(&memo, &read_of(uri, 2));
        }
        let hits = |memo: &Memo, id| uris.iter().filter(|u| look(memo, &read_of(u, id)).is_some()).count();
        assert_eq!(hits(&memo, 3), 4, "all four kept");
        for n in 0..100 {
            look(&memo, &read_of(&format!("once://{n}"), 1));
        }
        assert_eq!(hits(&memo, 4), 4, "bodies seen once leave what is kept");
        look(&memo, &read_of("a://4", 1));
        look(&memo, &read_of("a://4", 2));
        assert!(look(&memo, &read_of("a://4", 3)).is_some(), "a fifth body seen twice is kept");
        assert_eq!(hits(&memo, 5), 3, "in one of the four slots");
    }

    #[test]
    fn a_body_the_codec_refuses_is_not_kept() {
        let memo = Memo::new(8, 4096, 2);
        for _ in 0..3 {
            match memo.find(READ.as_bytes()) {
                Found::Again(_) => assert!(memo.decode(READ.as_bytes()).unwrap().is_err(), "deeper than 2"),
                Found::Hit(..) => panic!("never kept"),
                Found::No => {}
            }
        }
    }

    proptest::proptest! {
        /// Whatever a hit serves is what a fresh decode of the body reads: the same id, method
        /// and params.
        #[test]
        fn a_hit_reads_as_a_fresh_decode(id in "(-?[0-9]{1,25}|\"[ -~]{0,30}\"|[a-z\"\\\\.{}]{1,4})", edit in proptest::option::of((0usize..400, 0u8..128))) {
            let memo = Memo::new(8, 4096, 64);
            look(&memo, READ);
            look(&memo, READ);
            let mut body = with_id(&id).into_bytes();
            if let Some((at, byte)) = edit {
                let at = at % body.len();
                body[at] = byte;
            }
            if let Found::Hit(template, id) = memo.find(&body) {
                let text = std::str::from_utf8(&body).expect("a hit is UTF-8");
                let fresh = Incoming::parse(text).expect("a hit decodes");
                let kept = template.msg();
                proptest::prop_assert_eq!(fresh.id.as_ref().map(RequestId::as_json), Some(id.as_json()));
                proptest::prop_assert_eq!(fresh.method(), kept.method());
                proptest::prop_assert_eq!(fresh.kind, kept.kind);
                proptest::prop_assert_eq!(fresh.params.map(|p| p.get()), kept.params.map(|p| p.get()));
            }
        }
    }
}
