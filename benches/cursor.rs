//! The proxy's HMAC'd composite cursor: encode and decode with 1, 4 and 16 upstreams still
//! holding pages.
//!
//! `cargo bench --bench cursor`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use resmux::router::cursor::CursorCodec;

fn cursor(c: &mut Criterion) {
    let codec = CursorCodec::new(b"bench-key");
    let mut group = c.benchmark_group("cursor");
    group.throughput(Throughput::Elements(1));
    for n in [1usize, 4, 16] {
        let positions: Vec<(String, Option<String>)> =
            (0..n).map(|i| (format!("upstream-{i}"), Some(format!("opaque-cursor-{i}-MTAw")))).collect();
        let token = codec.encode("resources/list", "owner", &positions);
        group.bench_function(BenchmarkId::new("encode", n), |b| {
            b.iter(|| black_box(codec.encode("resources/list", "owner", black_box(&positions)).len()))
        });
        group.bench_function(BenchmarkId::new("decode", n), |b| {
            b.iter(|| black_box(codec.decode("resources/list", "owner", black_box(&token)).unwrap().len()))
        });
    }
    group.finish();
}

criterion_group!(benches, cursor);
criterion_main!(benches);
