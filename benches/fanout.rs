//! Hub fan-out: one upstream change pushed into the coalescing queues of N listeners (what the
//! feed does per notification, never waiting on a connection), then drained by each writer.
//!
//! `cargo bench --bench fanout`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use resmux::auth::Principal;
use resmux::hub::{Listener, Notice, Topic};
use resmux::jsonrpc::RequestId;

fn fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("fanout");
    for n in [1usize, 100, 10_000] {
        let listeners: Vec<Arc<Listener>> = (0..n)
            .map(|i| {
                let topics = vec![(0, Topic::Uri("docs://status".into()))];
                Arc::new(Listener::new(i as u64, Principal::Anonymous, RequestId::number(i as u64), topics))
            })
            .collect();
        let change = Notice::Uri("docs+docs://status".into());
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("push", n), |b| {
            b.iter(|| {
                for l in &listeners {
                    l.push(&change);
                }
            })
        });
        group.bench_function(BenchmarkId::new("push_and_drain", n), |b| {
            b.iter(|| {
                let mut delivered = 0;
                for l in &listeners {
                    l.push(&change);
                    l.push(&change); // a repeat coalesces
                }
                for l in &listeners {
                    delivered += l.take().len();
                }
                black_box(delivered)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, fanout);
criterion_main!(benches);
