use super::markdown::significant;
use super::*;

#[test]
fn rates_are_per_second() {
    let zero = std::time::Duration::ZERO;
    // The fourth bucket holds answers that arrived after the 0.3 s span.
    let r = rates(&[10, 20, 30, 1], 0.3, zero);
    assert_eq!(r.len(), 3);
    assert!((r[0].1 - 100.0).abs() < 1e-9);
    assert!((r[2].1 - 300.0).abs() < 1e-9);
    let long = rates(&vec![5; 600], 60.0, zero);
    assert_eq!(long.len(), 60);
    assert!(long.iter().all(|(_, v)| (v - 50.0).abs() < 1e-9));
    // Ten 100 ms buckets at 1 s width make one point; a partial bucket counts its share.
    let wide = rates(&[1; 10], 1.0, std::time::Duration::from_secs(1));
    assert_eq!(wide, vec![(0.5, 10.0)]);
    // Events in the first half only: the second half of the span still counts.
    let early = rates(&[1; 5], 1.0, std::time::Duration::from_secs(1));
    assert_eq!(early, vec![(0.5, 5.0)]);
    // 100 whole ticks (the 2 ms after the end dropped), in pairs to stay within 60 points.
    let ten = rates(&[1; 101], 10.002, zero);
    assert_eq!(ten.len(), 50);
    assert!((ten[49].0 - 9.9).abs() < 1e-9 && (ten[49].1 - 10.0).abs() < 1e-9, "{:?}", ten[49]);
    let partial = rates(&[10, 5], 0.15, zero);
    assert!((partial[1].1 - 100.0).abs() < 1e-6, "{partial:?}");
}

#[test]
fn numbers_are_grouped() {
    assert_eq!(thousands(1234567.4), "1,234,567");
    assert_eq!(thousands(999.0), "999");
    assert_eq!(thousands(0.0), "0");
    assert_eq!(significant(3.0 / 110_473.0), "0.0000272");
    assert_eq!(significant(1.0), "1.00");
    assert_eq!(significant(16.0), "16.0");
    assert_eq!(significant(0.0), "0");
}

#[test]
fn curves_rise_to_the_max() {
    let mut h = Histogram::new();
    for v in 1..=1000u64 {
        h.record(v * 1_000_000);
    }
    let c = curve(&h);
    assert_eq!(c.len(), 81);
    assert!(c.windows(2).all(|w| w[0].1 <= w[1].1));
    assert!((c.last().unwrap().1 - 1000.0).abs() < 10.0);
}
