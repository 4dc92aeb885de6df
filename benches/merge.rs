//! Merging N upstream list pages into one proxy page: namespacing every item's URI (raw
//! field rewrite) and concatenating, as a merged `resources/list` does on a miss. (On a hit
//! the namespaced items come from the cache and only the concatenation remains.)
//!
//! `cargo bench --bench merge`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use resmux::jsonrpc::parse_raw;
use resmux::router::namespace::Namespace;
use resmux::router::rewrite::{Field, list_items};

fn page(upstream: usize, items: usize) -> String {
    let items: Vec<serde_json::Value> = (0..items)
        .map(|i| {
            serde_json::json!({"uri": format!("file:///up{upstream}/doc-{i}.md"), "name": format!("doc-{i}"),
                               "title": format!("Document {i}"), "mimeType": "text/markdown", "size": 1234})
        })
        .collect();
    serde_json::to_string(&items).unwrap()
}

fn merge(c: &mut Criterion) {
    let mut group = c.benchmark_group("merge");
    for n in [2usize, 8, 32] {
        let names: Vec<(String, bool)> = (0..n).map(|i| (format!("up{i}"), true)).collect();
        let ns = Namespace::new(&names);
        let pages: Vec<String> = (0..n).map(|i| page(i, 10)).collect();
        group.throughput(Throughput::Elements((n * 10) as u64));
        group.bench_function(BenchmarkId::new("rewrite_and_concat", n), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(n * 1200);
                for (i, p) in pages.iter().enumerate() {
                    let mut items = Vec::with_capacity(p.len() + 100);
                    list_items(parse_raw(p).unwrap(), Field::Uri("uri"), &ns, i, &mut items).unwrap();
                    if !out.is_empty() {
                        out.push(b',');
                    }
                    out.extend_from_slice(&items);
                }
                black_box(out.len())
            })
        });
        // The cached case: items already namespaced, only concatenation.
        let cached: Vec<Vec<u8>> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut items = Vec::new();
                list_items(parse_raw(p).unwrap(), Field::Uri("uri"), &ns, i, &mut items).unwrap();
                items
            })
            .collect();
        group.bench_function(BenchmarkId::new("concat_cached", n), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(n * 1200);
                for items in &cached {
                    if !out.is_empty() {
                        out.push(b',');
                    }
                    out.extend_from_slice(items);
                }
                black_box(out.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, merge);
criterion_main!(benches);
