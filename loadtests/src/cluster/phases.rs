//! The measured phases of a cluster run: Zipf reads across the replicas, the probes of
//! sharing and of cold keys, and the listeners that count upstream listens.

use super::*;

pub(super) fn item(key: usize) -> Op {
    Op::Read { uri: format!("{}://item/{key}", upstream_name(0)) }
}

/// `total` reads from `s.clients` closed-loop clients, read `n` of the batch on replica
/// `n % replicas`.
pub(super) async fn reads(
    s: &Scenario,
    endpoints: &[SocketAddr],
    sample: &Sample,
    total: u64,
    seed: u64,
    seen: &mut std::collections::HashSet<usize>,
) -> ReadPhase {
    let before = sample.count(m::RESOURCES_READ);
    let tickets = Arc::new(AtomicU64::new(0));
    let zipf = Arc::new(Zipf::new(s.resources, s.zipf_s));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..s.clients {
        let tickets = tickets.clone();
        let zipf = zipf.clone();
        let endpoints = endpoints.to_vec();
        let auth = s.principals.authorization(&format!("client-{c}"));
        let timeout = s.request_timeout.0;
        tasks.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut conns: Vec<Option<Conn>> = endpoints.iter().map(|_| None).collect();
            let mut latency = Histogram::new();
            let mut cache = CacheCounts::default();
            let mut failures = std::collections::BTreeMap::new();
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut keys = std::collections::HashSet::new();
            loop {
                let n = tickets.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let ep = (n % endpoints.len() as u64) as usize;
                let key = zipf.sample(&mut rng);
                keys.insert(key);
                let op = item(key);
                if conns[ep].as_ref().is_none_or(Conn::is_closed) {
                    match Conn::open(endpoints[ep], CONNECT_TIMEOUT, auth.clone()).await {
                        Ok(conn) => conns[ep] = Some(conn),
                        Err(e) => {
                            errors += 1;
                            add_failure(&mut failures, "connect", &format!("{e:#}"));
                            continue;
                        }
                    }
                }
                let conn = conns[ep].as_mut().expect("connected above");
                let t0 = Instant::now();
                match tokio::time::timeout(timeout, conn.call(&op)).await {
                    Ok(Ok(answer)) => {
                        cache.add(answer.cache.as_ref());
                        match answer.outcome {
                            Outcome::Ok => {
                                ok += 1;
                                latency.record(t0.elapsed().as_nanos() as u64);
                            }
                            Outcome::Failed { kind, detail } => {
                                errors += 1;
                                add_failure(&mut failures, &kind, &detail);
                            }
                        }
                    }
                    Ok(Err(e)) => {
                        conns[ep] = None;
                        errors += 1;
                        add_failure(&mut failures, "connection", &format!("{e:#}"));
                    }
                    Err(_) => {
                        conns[ep] = None;
                        errors += 1;
                        add_failure(&mut failures, "timeout", &format!("no answer within {timeout:?}"));
                    }
                }
            }
            (ok, errors, latency, cache, failures, keys)
        });
    }
    let mut phase = ReadPhase::default();
    let mut latency = Histogram::new();
    while let Some(joined) = tasks.join_next().await {
        let Ok((ok, errors, h, cache, failures, keys)) = joined else { continue };
        for k in keys {
            if seen.insert(k) {
                phase.new_keys += 1;
            }
        }
        phase.reads += ok + errors;
        phase.errors += errors;
        latency.merge(&h);
        phase.cache.merge(&cache);
        for (k, f) in failures {
            let e = phase.failures.entry(k).or_default();
            if e.count == 0 {
                e.example = f.example;
            }
            e.count += f.count;
        }
    }
    phase.upstream_reads = sample.count(m::RESOURCES_READ).saturating_sub(before);
    phase.upstream_reads_per_10k = if phase.reads == 0 {
        0.0
    } else {
        (phase.upstream_reads as f64 * 10_000.0 / phase.reads as f64 * 10.0).round() / 10.0
    };
    phase.latency_ms = Latency::of(&latency);
    phase
}

/// The hit-path probes: see the module comment.
pub(super) async fn probe(s: &Scenario, spec: &ClusterSpec, endpoints: &[SocketAddr], sample: &Sample) -> Probes {
    let mut p = Probes { keys: spec.probe_keys, ..Default::default() };
    let auth = s.principals.authorization("probe");
    let (Ok(mut a), Ok(mut b)) = (
        Conn::open(endpoints[0], CONNECT_TIMEOUT, auth.clone()).await,
        Conn::open(endpoints[1], CONNECT_TIMEOUT, auth).await,
    ) else {
        p.errors = spec.probe_keys as u64 * 3;
        return p;
    };
    let keys: Vec<usize> = (s.resources..s.resources + spec.probe_keys).collect();
    let mut hist = [Histogram::new(), Histogram::new(), Histogram::new()];
    let mut cache = [CacheCounts::default(); 3];
    for step in 0..3 {
        let before = sample.count(m::RESOURCES_READ);
        let conn = if step < 2 { &mut a } else { &mut b };
        for &k in &keys {
            let op = item(k);
            let t0 = Instant::now();
            match tokio::time::timeout(s.request_timeout.0, conn.call(&op)).await {
                Ok(Ok(answer)) if answer.outcome == Outcome::Ok => {
                    hist[step].record(t0.elapsed().as_nanos() as u64);
                    cache[step].add(answer.cache.as_ref());
                }
                _ => p.errors += 1,
            }
        }
        p.upstream_reads[step] = sample.count(m::RESOURCES_READ).saturating_sub(before);
    }
    p.upstream_fetch_ms = Latency::of(&hist[0]);
    p.local_hit_ms = Latency::of(&hist[1]);
    p.other_replica_ms = Latency::of(&hist[2]);
    [p.upstream_fetch_cache, p.local_hit_cache, p.other_replica_cache] = cache;
    p
}

/// The listeners: see the module comment.
pub(super) async fn listeners(
    s: &Scenario,
    spec: &ClusterSpec,
    endpoints: &[SocketAddr],
    sample: &Sample,
) -> ListenPhase {
    if s.listeners == 0 {
        return ListenPhase::default();
    }
    let addressing = Addressing::replicas(endpoints.to_vec());
    let open_before = sample.listens_open();
    let total_before = sample.listens_total();
    let l = listen::open(s.listeners, &addressing, s.principals, LISTEN_DEADLINE, None, 1).await;
    tokio::time::sleep(spec.settle.0).await;
    let open = sample.listens_open();
    let opened = sample.listens_total();
    let period = Duration::from_secs_f64(1.0 / s.update_hz);
    // The changes start one period from now and run `changes` periods.
    let clock = Clock::starting_now(period, period * spec.changes as u32);
    l.measuring_from(&clock);
    let changes = if l.acked() > 0 { l.drive_changes(sample, s.update_hz, &clock).await } else { 0 };
    let stats = l.finish(changes, period, open).await;
    ListenPhase {
        listeners: stats.listeners,
        acked: stats.acked,
        refused: stats.refused,
        upstream_listens_open_before: open_before,
        upstream_listens_open: open,
        upstream_listens_total: opened,
        upstream_listens_opened_for_listeners: opened.saturating_sub(total_before),
        changes,
        delivered: stats.notifications,
        expected: changes * stats.acked,
        dropped: stats.dropped,
        notify_ms: Latency::of(&stats.latency),
        failures: stats.failures,
    }
}
