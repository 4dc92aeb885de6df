//! Copies of the body on a 1 MiB cache hit, counted: the bytes allocated from the stored
//! entry to the pieces the response body writes (the remaining-TTL splice, then the id
//! splice), with a counting global allocator. The stored form and the wire form are the
//! ones the proxy uses ([`Stored::result`], [`splice_ttl`], [`encode_result_pieces`]); the
//! "two copies" line does what the hit path did before the pieces (both splices into one
//! buffer each) for comparison.
//!
//! `cargo bench --bench hit_copies`

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use resmux::cache::{Stored, splice_ttl};
use resmux::jsonrpc::{RequestId, encode_result, encode_result_pieces};

/// Counts the bytes every allocation asks for.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bytes allocated by `f`, the least of a few runs.
fn allocated(mut f: impl FnMut() -> usize) -> (usize, usize) {
    let mut least = usize::MAX;
    let mut written = 0;
    for _ in 0..5 {
        let before = ALLOCATED.load(Relaxed);
        written = black_box(f());
        least = least.min(ALLOCATED.load(Relaxed) - before);
    }
    (least, written)
}

fn main() {
    let size = 1 << 20;
    let text = "x".repeat(size);
    let result = format!(
        r#"{{"resultType":"complete","contents":[{{"uri":"docs://item/1","text":"{text}"}}],"ttlMs":60000,"cacheScope":"public"}}"#
    );
    let Some(Stored::Result { tail }) = Stored::result(result.as_bytes()) else { unreachable!() };
    let id = RequestId::number(42);
    let (pieces, written) = allocated(|| {
        let spliced = splice_ttl(&tail, 59_000);
        encode_result_pieces(&id, &spliced).iter().map(|p| p.len()).sum()
    });
    let (whole, _) = allocated(|| {
        let spliced = splice_ttl(&tail, 59_000).to_bytes();
        encode_result(&id, &spliced).len()
    });
    let copies = |bytes: usize| bytes as f64 / tail.len() as f64;
    println!("1 MiB cache hit, {written} bytes written:");
    println!("  before (two splices into buffers): {whole} bytes allocated = {:.2} copies of the body", copies(whole));
    println!(
        "  now    (pieces, tail shared)     : {pieces} bytes allocated = {:.4} copies of the body",
        copies(pieces)
    );
    assert!(pieces < tail.len(), "a hit must not copy its body");
}
