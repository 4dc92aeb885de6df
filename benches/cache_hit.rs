//! The cache hit path: a borrowed lookup of the request's base key (the public partition
//! answers; the caller's owner is never asked for), the remaining-TTL and id splice written
//! in one pass, over Zipf-distributed keys (a few hot resources, a long tail).
//!
//! `cargo bench --bench cache_hit`

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use resmux::auth::Principal;
use resmux::cache::{BaseKey, Cache, CachedMethod, Lookup, Owner, Partition, Stored, splice_ttl};
use resmux::config::CacheConfig;
use resmux::jsonrpc::{RequestId, encode_result_pieces};

/// Samples ranks 0..n with probability ∝ 1/(rank+1)^s by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += 1.0 / (k as f64).powf(s);
                acc
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= acc);
        Self { cdf, state: 0x9E3779B97F4A7C15 }
    }

    fn next(&mut self) -> usize {
        // xorshift: deterministic and cheap, so the sampler does not dominate the measurement.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1)
    }
}

fn key(i: usize) -> BaseKey {
    BaseKey {
        upstream: 0,
        method: CachedMethod::ResourcesRead,
        era: 0,
        params: format!(r#"{{"uri":"docs://item/{i}"}}"#).into_boxed_str(),
    }
}

fn hit_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _guard = rt.enter();
    let mut group = c.benchmark_group("cache_hit");
    for (size, n) in [(1024usize, 10_000usize), (64 << 10, 1_000)] {
        // Room for every entry: this measures hits, not eviction.
        let config = CacheConfig { max_bytes: 1 << 30, max_entry_bytes: 1 << 20, ..CacheConfig::default() };
        let cache = Cache::new(config, 1);
        let text = "x".repeat(size);
        for i in 0..n {
            let result = format!(
                r#"{{"resultType":"complete","contents":[{{"uri":"docs://item/{i}","text":"{text}"}}],"ttlMs":60000,"cacheScope":"public"}}"#
            );
            let ticket = cache.epochs().ticket(0, CachedMethod::ResourcesRead, Some(&format!("docs://item/{i}")));
            let stored = Stored::result(result.as_bytes()).unwrap();
            cache.store(key(i), Partition::Public, stored, Duration::from_secs(60), ticket, None);
        }
        let principal = Owner::Principal(Principal::user("bench", &[], &[]));
        let id = RequestId::number(1);
        let mut zipf = Zipf::new(n, 1.1);
        let keys: Vec<BaseKey> = (0..n).map(key).collect();
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("lookup_splice_encode", size), |b| {
            b.iter(|| {
                // A key per request, as the router builds one (the params copied once).
                let key = keys[zipf.next()].clone();
                match cache.lookup(&key, || &principal) {
                    Lookup::Fresh { entry, age } => {
                        let Stored::Result { tail } = &entry.stored else { unreachable!() };
                        let result = splice_ttl(tail, entry.remaining_ms(age));
                        black_box(encode_result_pieces(&id, &result).iter().map(|p| p.len()).sum::<usize>())
                    }
                    _ => unreachable!("every key is cached"),
                }
            })
        });
    }
    group.finish();
}

/// What the hit path adds for the metrics: the upstream's hit counter and the downstream
/// counter and latency histogram, through handles resolved ahead; beside it, for scale, one
/// labelled counter found by building and hashing its label set (the way every request was
/// counted before).
fn hit_metrics(c: &mut Criterion) {
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Labels {
        method: &'static str,
        outcome: &'static str,
    }
    let metrics = resmux::telemetry::Metrics::new();
    let meter = metrics.upstream_meter("docs");
    let mut group = c.benchmark_group("cache_hit_metrics");
    group.throughput(Throughput::Elements(1));
    group.bench_function("resolved_handles", |b| {
        b.iter(|| {
            meter.cache_hit(black_box(true));
            metrics.downstream(black_box("resources/read"), "hit", black_box(0.0002));
        })
    });
    let family = Family::<Labels, Counter>::default();
    group.bench_function("family_lookup_one_counter", |b| {
        b.iter(|| family.get_or_create(&Labels { method: black_box("resources/read"), outcome: "hit" }).inc())
    });
    group.finish();
}

criterion_group!(benches, hit_path, hit_metrics);
criterion_main!(benches);
