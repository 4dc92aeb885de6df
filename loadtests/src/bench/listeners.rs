//! `--listeners N`: `subscriptions/listen` streams held on the hottest URIs while measuring,
//! each on its own connection; the acknowledgment latency of each and the notifications they
//! receive. With `--trigger-url`, the bench POSTs there at `--trigger-rate` and a
//! notification's delivery latency is the time since the latest trigger was sent (right while
//! delivery takes less than one trigger period).
//!
//! Every listen request is counted once (method `subscriptions/listen`) in the phase it was
//! sent in: acknowledged as a success, refused by its answer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use resmux::mcp::method as m;
use resmux::upstream::sse::SseDecoder;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::args::Secrets;
use super::counts::{Phase, Sent};
use super::endpoint::{Endpoint, Era, json_string};
use super::reply::{self, Kind, Reply};
use crate::histogram::Histogram;
use crate::measure::{Failure, add_failure, merge_failures};
use crate::report::Latency;
use crate::wire::{self, StreamMessage};

/// Largest SSE event a listener accepts.
const MAX_EVENT: usize = 1 << 20;
/// Most distinct URIs the listeners spread over (the hottest ones).
const HOT_URIS: usize = 10;

/// What the listeners saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ListenFigures {
    pub listeners: u64,
    pub acked: u64,
    pub refused: u64,
    /// Acknowledged streams the server ended before the run did.
    pub dropped: u64,
    pub notifications: u64,
    /// Send to acknowledgment.
    pub ack_ms: Latency,
    /// Latest trigger to notification (with --trigger-url).
    pub delivery_ms: Latency,
    pub failures: BTreeMap<String, Failure>,
    #[serde(skip)]
    ack: Histogram,
    #[serde(skip)]
    delivery: Histogram,
}

impl ListenFigures {
    /// Adds another round's figures.
    pub fn merge(&mut self, o: &ListenFigures) {
        self.listeners += o.listeners;
        self.acked += o.acked;
        self.refused += o.refused;
        self.dropped += o.dropped;
        self.notifications += o.notifications;
        self.ack.merge(&o.ack);
        self.delivery.merge(&o.delivery);
        merge_failures(&mut self.failures, &o.failures);
    }

    /// Fills the percentile figures.
    pub fn finish(&mut self) {
        self.ack_ms = Latency::of(&self.ack);
        self.delivery_ms = Latency::of(&self.delivery);
    }
}

struct Shared {
    base: Instant,
    /// Nanoseconds after `base` of the latest trigger sent, 0 before the first.
    last_trigger_ns: AtomicU64,
    acked: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
    notifications: AtomicU64,
    ack: Mutex<Histogram>,
    delivery: Mutex<Histogram>,
    failures: Mutex<BTreeMap<String, Failure>>,
    /// The listen requests' counts, merged into the measured phase at the end.
    phase: Mutex<Phase>,
}

/// Open listen streams.
pub struct Listeners {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
    count: usize,
}

/// Opens `n` listeners on `wl`'s hottest URIs and waits until each is acknowledged or
/// refused (or `deadline`).
pub async fn open(ep: Arc<Endpoint>, uris: &[String], n: usize, timeout: Duration, secrets: Secrets) -> Listeners {
    let shared = Arc::new(Shared {
        base: Instant::now(),
        last_trigger_ns: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        notifications: AtomicU64::new(0),
        ack: Mutex::new(Histogram::new()),
        delivery: Mutex::new(Histogram::new()),
        failures: Mutex::new(BTreeMap::new()),
        phase: Mutex::new(Phase::default()),
    });
    let (stop, stop_rx) = watch::channel(false);
    let settled = Arc::new(tokio::sync::Semaphore::new(0));
    let mut tasks = JoinSet::new();
    let hot = uris.len().clamp(1, HOT_URIS);
    for i in 0..n {
        let Some(uri) = uris.get(i % hot) else { break };
        let params = format!(r#"{{"notifications":{{"resourceSubscriptions":[{}]}}}}"#, json_string(uri));
        let (ep, shared, stop, settled, secrets) =
            (ep.clone(), shared.clone(), stop_rx.clone(), settled.clone(), secrets.clone());
        tasks.spawn(async move {
            listener(i, &ep, &params, &shared, stop, &settled, timeout, &secrets).await;
        });
    }
    let _ = tokio::time::timeout(timeout + Duration::from_secs(1), settled.acquire_many(n as u32)).await;
    Listeners { shared, tasks, stop, count: n }
}

impl Listeners {
    /// Notes that a trigger was sent now.
    pub fn triggered(&self) {
        let ns = Instant::now().saturating_duration_since(self.shared.base).as_nanos() as u64;
        self.shared.last_trigger_ns.store(ns.max(1), Ordering::Relaxed);
    }

    /// Closes every stream; returns the figures and the listen requests' counts.
    pub async fn finish(mut self) -> (ListenFigures, Phase) {
        let _ = self.stop.send(true);
        let closing = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), closing).await.is_err() {
            self.tasks.abort_all();
        }
        let s = &self.shared;
        let figures = ListenFigures {
            listeners: self.count as u64,
            acked: s.acked.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            notifications: s.notifications.load(Ordering::Relaxed),
            failures: s.failures.lock().map(|f| f.clone()).unwrap_or_default(),
            ack: s.ack.lock().map(|h| h.clone()).unwrap_or_default(),
            delivery: s.delivery.lock().map(|h| h.clone()).unwrap_or_default(),
            ..ListenFigures::default()
        };
        let phase = s.phase.lock().map(|p| p.clone()).unwrap_or_default();
        (figures, phase)
    }
}

impl Shared {
    fn count(&self, sent: &Sent, took: Duration, secrets: &Secrets) {
        if let Ok(mut p) = self.phase.lock() {
            p.record(m::LISTEN, sent, (took, took), Duration::ZERO, secrets);
        }
    }

    fn fail(&self, kind: &str, detail: &str) {
        if let Ok(mut f) = self.failures.lock() {
            add_failure(&mut f, kind, detail);
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn listener(
    i: usize,
    ep: &Endpoint,
    params: &str,
    s: &Shared,
    mut stop: watch::Receiver<bool>,
    settled: &tokio::sync::Semaphore,
    timeout: Duration,
    secrets: &Secrets,
) {
    let mut settle = Some(());
    let refuse = |s: &Shared, settle: &mut Option<()>| {
        s.refused.fetch_add(1, Ordering::Relaxed);
        if settle.take().is_some() {
            settled.add_permits(1);
        }
    };
    let mut conn = match ep.connect().await {
        Ok(c) => c,
        Err(e) => {
            if let Ok(mut p) = s.phase.lock() {
                p.connect_failed(&format!("{e:#}"), secrets);
            }
            refuse(s, &mut settle);
            return;
        }
    };
    let none = Arc::from(Vec::new());
    let req = ep.request(&Era::Modern, m::LISTEN, params, Some(1_000_000_000 + i as u64), &none);
    let t0 = Instant::now();
    let response = match tokio::time::timeout(timeout, conn.send(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            s.count(&Sent::Broken(format!("{e:#}")), t0.elapsed(), secrets);
            return refuse(s, &mut settle);
        }
        Err(_) => {
            s.count(&Sent::Timeout, t0.elapsed(), secrets);
            return refuse(s, &mut settle);
        }
    };
    let status = response.status().as_u16();
    if !wire::is_sse(response.headers().get(http::header::CONTENT_TYPE)) {
        // A refusal (or a one-shot answer): counted by what it says.
        let sent = match tokio::time::timeout(timeout, crate::conn::read_whole(response)).await {
            Ok(Ok((parts, body))) => Sent::Answered(reply::classify(&parts, &body)),
            Ok(Err(e)) => Sent::Broken(format!("{e:#}")),
            Err(_) => Sent::Timeout,
        };
        s.count(&sent, t0.elapsed(), secrets);
        return refuse(s, &mut settle);
    }
    let cache = response.headers().get(crate::conn::CACHE_HEADER).cloned();
    let mut body = response.into_body();
    let mut decoder = SseDecoder::new(MAX_EVENT);
    let mut acked = false;
    let ack_deadline = tokio::time::sleep(timeout);
    tokio::pin!(ack_deadline);
    loop {
        let frame = tokio::select! {
            _ = stop.wait_for(|v| *v) => break,
            _ = &mut ack_deadline, if !acked => {
                s.count(&Sent::Timeout, t0.elapsed(), secrets);
                s.fail("listen: no acknowledgment", "no acknowledgment within the timeout");
                return refuse(s, &mut settle);
            }
            f = body.frame() => f,
        };
        let data = match frame {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
            Some(Err(e)) if acked => {
                s.dropped.fetch_add(1, Ordering::Relaxed);
                s.fail("listen: stream error", &secrets.redact(&e.to_string()));
                break;
            }
            None if acked => {
                s.dropped.fetch_add(1, Ordering::Relaxed);
                s.fail("listen: stream ended", "the server closed the stream");
                break;
            }
            Some(Err(e)) => {
                s.count(&Sent::Broken(e.to_string()), t0.elapsed(), secrets);
                return refuse(s, &mut settle);
            }
            None => {
                s.count(&Sent::Broken("stream ended before the acknowledgment".into()), t0.elapsed(), secrets);
                return refuse(s, &mut settle);
            }
        };
        decoder.push(&data);
        while let Ok(Some(event)) = decoder.next_event() {
            match wire::stream_message(&event.data) {
                Ok(StreamMessage::Ack { .. }) if !acked => {
                    acked = true;
                    let took = t0.elapsed();
                    let ok = Reply {
                        status,
                        kind: Kind::Complete,
                        detail: String::new(),
                        cache: cache.clone(),
                        session: None,
                    };
                    s.count(&Sent::Answered(ok), took, secrets);
                    if let Ok(mut h) = s.ack.lock() {
                        h.record(took.as_nanos() as u64);
                    }
                    s.acked.fetch_add(1, Ordering::Relaxed);
                    if settle.take().is_some() {
                        settled.add_permits(1);
                    }
                }
                Ok(StreamMessage::Updated { .. }) => {
                    s.notifications.fetch_add(1, Ordering::Relaxed);
                    let last = s.last_trigger_ns.load(Ordering::Relaxed);
                    if last > 0 {
                        let now = Instant::now().saturating_duration_since(s.base).as_nanos() as u64;
                        if let Ok(mut h) = s.delivery.lock() {
                            h.record(now.saturating_sub(last));
                        }
                    }
                }
                Ok(StreamMessage::End(_)) if !acked => {
                    let answer = reply::classify_json(status, event.data.as_bytes());
                    s.count(&Sent::Answered(answer), t0.elapsed(), secrets);
                    return refuse(s, &mut settle);
                }
                Ok(StreamMessage::End(_)) => {
                    s.dropped.fetch_add(1, Ordering::Relaxed);
                    s.fail("listen: ended by the server", "the listen's final response arrived");
                    return;
                }
                Ok(_) => {}
                Err(e) => s.fail("listen: unreadable event", &e),
            }
        }
    }
    if !acked {
        s.count(&Sent::Broken("stopped before the acknowledgment".into()), t0.elapsed(), secrets);
        refuse(s, &mut settle);
    }
}
