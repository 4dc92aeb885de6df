use super::*;

#[test]
fn the_mix_is_respected() {
    let mix = Mix { read: 6, list: 3, call: 1, discover: 0 };
    let mut rng = SmallRng::seed_from_u64(9);
    let mut counts = [0u32; 4];
    for _ in 0..100_000 {
        counts[pick(&mix, &mut rng) as usize] += 1;
    }
    assert!((59_000..61_000).contains(&counts[0]), "{counts:?}");
    assert!((29_000..31_000).contains(&counts[1]), "{counts:?}");
    assert!((9_500..10_500).contains(&counts[2]), "{counts:?}");
    assert_eq!(counts[3], 0);
}

#[test]
fn stats_merge_adds_everything() {
    let mut a = RequestStats::default();
    let mut b = RequestStats::default();
    let hit = http::HeaderValue::from_static("hit");
    a.record(Kind::Read, Duration::from_millis(1), &Outcome::Ok, Some(&hit), Duration::from_millis(50));
    b.record(
        Kind::List,
        Duration::from_millis(2),
        &Outcome::failed("http 500", "boom"),
        None,
        Duration::from_millis(250),
    );
    b.record(Kind::List, Duration::from_millis(3), &Outcome::Ok, None, Duration::from_millis(260));
    a.merge(&b);
    assert_eq!((a.ok, a.errors, a.requests()), (2, 1, 3));
    assert_eq!(a.cache.hit, 1);
    assert_eq!(a.cache.absent, 2);
    assert_eq!(a.timeline, vec![1, 0, 1]);
    assert_eq!(a.last_done, Some(Duration::from_millis(260)));
    assert_eq!(a.failures["resources/list: http 500"].example, "boom");
    assert_eq!(a.by_kind[Kind::List as usize].errors, 1);
    assert_eq!(a.latency.len(), 2);
}
