//! Hub fan-out: one upstream change pushed into the coalescing queues of N listeners (what the
//! feed does per notification, never waiting on a connection), then drained by each writer;
//! and the registry's part in it, side by side: `global_lock` pushes to every listener with
//! the registry's lock held (the hub before #14), `snapshot` takes the topic's snapshot under
//! the lock and pushes with it released (the hub now). `join_during_fanout` measures what
//! that lock costs everyone else: one listener joining and leaving while another thread
//! delivers changes to N listeners without pause.
//!
//! `cargo bench --bench fanout`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use resmux::auth::Principal;
use resmux::hub::{Listener, Notice, Registry, Topic};
use resmux::jsonrpc::RequestId;

const SIZES: [usize; 4] = [1, 100, 10_000, 100_000];

fn topic() -> Topic {
    Topic::Uri("docs://status".into())
}

fn listener(i: usize) -> Arc<Listener> {
    Arc::new(Listener::new(i as u64, Principal::Anonymous, RequestId::number(i as u64), vec![(0, topic())]))
}

fn registry(n: usize) -> Mutex<Registry> {
    let mut reg = Registry::default();
    for i in 0..n {
        reg.join(&listener(i));
    }
    Mutex::new(reg)
}

/// The hub before #14: every push under the registry's lock.
fn global_lock(reg: &Mutex<Registry>, change: &Notice) {
    let reg = reg.lock().unwrap();
    if let Some(ids) = reg.topics.get(&(0, topic())) {
        for id in ids.iter() {
            if let Some(l) = reg.listeners.get(&id) {
                l.push(change);
            }
        }
    }
}

/// The hub now: the topic's snapshot under the lock, the pushes without it.
fn snapshot(reg: &Mutex<Registry>, change: &Notice) {
    let watchers = reg.lock().unwrap().watchers(0, topic());
    for l in watchers.iter().flat_map(|w| w.iter()) {
        l.push(change);
    }
}

type Strategy = fn(&Mutex<Registry>, &Notice);
const STRATEGIES: [(&str, Strategy); 2] = [("global_lock", global_lock), ("snapshot", snapshot)];

fn fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("fanout");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let listeners: Vec<Arc<Listener>> = (0..n).map(listener).collect();
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
        let reg = registry(n);
        for (name, deliver) in STRATEGIES {
            group
                .bench_function(BenchmarkId::new(format!("registry_{name}"), n), |b| b.iter(|| deliver(&reg, &change)));
        }
    }
    group.finish();
}

fn join_during_fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("join_during_fanout");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    for n in [10_000, 100_000] {
        for (name, deliver) in STRATEGIES {
            let reg = Arc::new(registry(n));
            let stop = Arc::new(AtomicBool::new(false));
            let feed = std::thread::spawn({
                let (reg, stop) = (reg.clone(), stop.clone());
                move || {
                    let change = Notice::Uri("docs+docs://status".into());
                    while !stop.load(Ordering::Relaxed) {
                        deliver(&reg, &change);
                    }
                }
            });
            let joiner = listener(n + 1);
            group.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    reg.lock().unwrap().join(&joiner);
                    black_box(reg.lock().unwrap().leave(joiner.id));
                })
            });
            stop.store(true, Ordering::Relaxed);
            feed.join().unwrap();
        }
    }
    group.finish();
}

criterion_group!(benches, fanout, join_during_fanout);
criterion_main!(benches);
