//! Envelope decode and encode: the codec's serde_json envelope (payload kept raw) against
//! simd-json (tape with reused buffers, and borrowed DOM) and a full serde_json DOM, at the
//! sizes MCP messages take: a small request, a 64 KiB read, a 1 MiB read.
//!
//! `cargo bench --bench codec`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use resmux::jsonrpc::{Incoming, RequestId, encode_result};

/// A `resources/read` response whose text is `size` bytes, with escapes as real text has.
fn message(size: usize) -> String {
    let line = "fn main() {\n    println!(\"hello, \\\"world\\\"\");\n}\n";
    let mut text = String::with_capacity(size + line.len());
    while text.len() < size {
        text.push_str(line);
    }
    text.truncate(size);
    serde_json::json!({"jsonrpc": "2.0", "id": 42, "result": {"resultType": "complete",
        "contents": [{"uri": "file:///src/main.rs", "mimeType": "text/x-rust", "text": text}],
        "ttlMs": 60000, "cacheScope": "public"}})
    .to_string()
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    for size in [300usize, 64 << 10, 1 << 20] {
        let msg = message(size);
        group.throughput(Throughput::Bytes(msg.len() as u64));
        group.bench_with_input(BenchmarkId::new("serde_envelope_raw_payload", size), &msg, |b, m| {
            b.iter(|| black_box(Incoming::parse(black_box(m)).unwrap().result.map(|r| r.get().len())))
        });
        let mut buffers = simd_json::Buffers::new(msg.len());
        let mut scratch = msg.clone().into_bytes();
        group.bench_with_input(BenchmarkId::new("simd_tape_reused_buffers", size), &msg, |b, m| {
            b.iter(|| {
                scratch.clear();
                scratch.extend_from_slice(m.as_bytes());
                let tape = simd_json::to_tape_with_buffers(&mut scratch, &mut buffers).unwrap();
                black_box(tape.0.len())
            })
        });
        group.bench_with_input(BenchmarkId::new("simd_borrowed_dom", size), &msg, |b, m| {
            b.iter(|| {
                let mut bytes = m.clone().into_bytes();
                let v = simd_json::to_borrowed_value(&mut bytes).unwrap();
                black_box(&v);
            })
        });
        group.bench_with_input(BenchmarkId::new("serde_value_dom", size), &msg, |b, m| {
            b.iter(|| black_box(serde_json::from_str::<serde_json::Value>(m).unwrap().is_object()))
        });
    }
    group.finish();
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode");
    let id = RequestId::number(7);
    for size in [300usize, 64 << 10, 1 << 20] {
        let msg = message(size);
        let result = serde_json::from_str::<serde_json::Value>(&msg).unwrap()["result"].clone();
        let raw = serde_json::to_vec(&result).unwrap();
        group.throughput(Throughput::Bytes(raw.len() as u64));
        group.bench_with_input(BenchmarkId::new("splice_id_into_raw_result", size), &raw, |b, r| {
            b.iter(|| black_box(encode_result(&id, black_box(r)).len()))
        });
        group.bench_with_input(BenchmarkId::new("serde_serialize_value", size), &result, |b, v| {
            b.iter(|| {
                let msg = serde_json::json!({"jsonrpc": "2.0", "id": 7, "result": v});
                black_box(serde_json::to_vec(&msg).unwrap().len())
            })
        });
        let simd_value: simd_json::OwnedValue = simd_json::serde::to_owned_value(&result).unwrap();
        group.bench_with_input(BenchmarkId::new("simd_serialize_value", size), &simd_value, |b, v| {
            b.iter(|| black_box(simd_json::prelude::Writable::encode(v).len()))
        });
    }
    group.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
