//! Exact counts: every request sent is counted once, under its method and the phase it was
//! sent in, with its outcome (result, `input_required`, JSON-RPC error code, HTTP status,
//! timeout, broken connection) and the `resmux-cache` header. A server's own per-method
//! counters are the sum of the phases.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::args::Secrets;
use super::reply::{Kind, Reply};
use crate::histogram::Histogram;
use crate::measure::{Failure, add_failure, merge_failures};
use crate::report::Latency;
use crate::requests::CacheCounts;

/// Distinct JSON-RPC error codes, and failure classes, kept apart per method and phase; a
/// server answering with ever new codes adds to `rpc_errors_other` (and the class
/// `METHOD: other`) instead of growing the report without bound.
pub const MAX_CLASSES: usize = 256;

/// How one sent request ended.
pub enum Sent {
    Answered(Reply),
    /// No answer within the timeout (the server may still have handled it).
    Timeout,
    /// The connection failed after the request was handed to it.
    Broken(String),
    /// The connection closed before the request was written: the server never saw it.
    NotSent(String),
}

/// The figures of one method in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MethodCounts {
    /// Requests sent (each counted once, whatever became of it).
    pub sent: u64,
    /// Successful results (2xx and a JSON-RPC result), `input_required` included.
    pub ok: u64,
    /// Of `ok`: MRTR `input_required` results.
    pub input_required: u64,
    /// `sent - ok`.
    pub errors: u64,
    /// Answers per HTTP status (every answer, successful or not).
    pub http_status: BTreeMap<u16, u64>,
    /// JSON-RPC errors per code (at most [`MAX_CLASSES`] codes).
    pub rpc_errors: BTreeMap<i64, u64>,
    /// JSON-RPC errors with a code beyond the first [`MAX_CLASSES`].
    pub rpc_errors_other: u64,
    /// Answers without a JSON-RPC response (an HTTP error page, an empty body).
    pub no_response: u64,
    pub timeouts: u64,
    /// Connections that broke with the request on them.
    pub broken: u64,
    /// `resmux-cache` header values (`absent` when the server sends none).
    pub cache: CacheCounts,
    /// Latency of successful answers from the intended send time (the open loop's schedule;
    /// the actual send in the closed loop).
    pub latency_ms: Latency,
    /// Latency of successful answers from the actual send (equal to `latency_ms` closed-loop).
    pub service_ms: Latency,
    #[serde(skip)]
    pub latency: Histogram,
    #[serde(skip)]
    pub service: Histogram,
}

impl MethodCounts {
    fn merge(&mut self, o: &MethodCounts) {
        self.sent += o.sent;
        self.ok += o.ok;
        self.input_required += o.input_required;
        self.errors += o.errors;
        for (k, v) in &o.http_status {
            *self.http_status.entry(*k).or_default() += v;
        }
        for (k, v) in &o.rpc_errors {
            self.add_rpc(*k, *v);
        }
        self.rpc_errors_other += o.rpc_errors_other;
        self.no_response += o.no_response;
        self.timeouts += o.timeouts;
        self.broken += o.broken;
        self.cache.merge(&o.cache);
        self.latency.merge(&o.latency);
        self.service.merge(&o.service);
    }

    fn add_rpc(&mut self, code: i64, n: u64) {
        if self.rpc_errors.len() < MAX_CLASSES || self.rpc_errors.contains_key(&code) {
            *self.rpc_errors.entry(code).or_default() += n;
        } else {
            self.rpc_errors_other += n;
        }
    }

    /// Fills the percentile figures from the histograms.
    pub fn finish(&mut self) {
        self.latency_ms = Latency::of(&self.latency);
        self.service_ms = Latency::of(&self.service);
    }
}

/// Every method's figures in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Phase {
    pub methods: BTreeMap<&'static str, MethodCounts>,
    /// Requests that never left: no connection could be opened for them, or it closed before
    /// the request was written. They are not in any method's `sent`.
    pub not_sent: u64,
    /// Failure classes with a count and one example (secrets redacted).
    pub failures: BTreeMap<String, Failure>,
    #[serde(skip)]
    pub latency: Histogram,
    #[serde(skip)]
    pub service: Histogram,
    /// Successful answers per 100 ms since the phase began.
    #[serde(skip)]
    pub timeline: Vec<u64>,
}

impl Phase {
    /// Counts one sent request of `method`. `times` is (from the intended send, from the actual
    /// send) and `at` the completion time since the phase began.
    pub fn record(
        &mut self,
        method: &'static str,
        sent: &Sent,
        times: (Duration, Duration),
        at: Duration,
        secrets: &Secrets,
    ) {
        if let Sent::NotSent(e) = sent {
            return self.connect_failed(e, secrets);
        }
        let m = self.methods.entry(method).or_default();
        m.sent += 1;
        let failure = match sent {
            Sent::Answered(r) => {
                *m.http_status.entry(r.status).or_default() += 1;
                m.cache.add(r.cache.as_ref());
                match r.kind {
                    Kind::Rpc(code) => m.add_rpc(code, 1),
                    Kind::NoResponse => m.no_response += 1,
                    Kind::InputRequired if r.is_ok() => m.input_required += 1,
                    _ => {}
                }
                if r.is_ok() {
                    m.ok += 1;
                    let (lat, svc) = (times.0.as_nanos() as u64, times.1.as_nanos() as u64);
                    m.latency.record(lat);
                    m.service.record(svc);
                    self.latency.record(lat);
                    self.service.record(svc);
                    let slot = (at.as_millis() / 100) as usize;
                    if slot >= self.timeline.len() {
                        self.timeline.resize(slot + 1, 0);
                    }
                    self.timeline[slot] += 1;
                    None
                } else {
                    let class = match r.kind {
                        Kind::Rpc(code) => format!("http {} rpc {code}", r.status),
                        _ => format!("http {}", r.status),
                    };
                    Some((class, r.detail.as_str()))
                }
            }
            Sent::Timeout => {
                m.timeouts += 1;
                m.cache.add(None);
                Some(("timeout".to_owned(), "no answer within the timeout"))
            }
            Sent::NotSent(_) => None,
            Sent::Broken(e) => {
                m.broken += 1;
                m.cache.add(None);
                Some(("connection".to_owned(), e.as_str()))
            }
        };
        if let Some((class, detail)) = failure {
            m.errors += 1;
            let mut key = format!("{method}: {class}");
            if self.failures.len() >= MAX_CLASSES && !self.failures.contains_key(&key) {
                key = format!("{method}: other");
            }
            // Only the first example of a class is kept, so only it is redacted.
            let detail = if self.failures.contains_key(&key) { String::new() } else { secrets.redact(detail) };
            add_failure(&mut self.failures, &key, &detail);
        }
    }

    /// Counts a request that could not be sent: `error` says why.
    pub fn connect_failed(&mut self, error: &str, secrets: &Secrets) {
        self.not_sent += 1;
        let detail = if self.failures.contains_key("not sent") { String::new() } else { secrets.redact(error) };
        add_failure(&mut self.failures, "not sent", &detail);
    }

    pub fn merge(&mut self, o: &Phase) {
        for (k, v) in &o.methods {
            self.methods.entry(k).or_default().merge(v);
        }
        self.not_sent += o.not_sent;
        merge_failures(&mut self.failures, &o.failures);
        self.latency.merge(&o.latency);
        self.service.merge(&o.service);
        if o.timeline.len() > self.timeline.len() {
            self.timeline.resize(o.timeline.len(), 0);
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            *a += b;
        }
    }

    /// Requests sent, successful, and failed, over every method.
    pub fn totals(&self) -> (u64, u64, u64) {
        self.methods.values().fold((0, 0, 0), |(s, o, e), m| (s + m.sent, o + m.ok, e + m.errors))
    }

    /// Fills every method's percentile figures.
    pub fn finish(&mut self) {
        for m in self.methods.values_mut() {
            m.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, kind: Kind) -> Sent {
        Sent::Answered(Reply { status, kind, detail: "d".into(), cache: None, session: None })
    }

    #[test]
    fn ever_new_error_codes_do_not_grow_the_counts() {
        let s = Secrets::default();
        let mut p = Phase::default();
        for code in 0..10_000 {
            p.record("tools/call", &reply(400, Kind::Rpc(code)), (Duration::ZERO, Duration::ZERO), Duration::ZERO, &s);
        }
        let m = &p.methods["tools/call"];
        assert_eq!(m.rpc_errors.len(), MAX_CLASSES);
        assert_eq!(m.rpc_errors.values().sum::<u64>() + m.rpc_errors_other, 10_000);
        assert!(p.failures.len() <= MAX_CLASSES + 1);
        assert_eq!(p.failures.values().map(|f| f.count).sum::<u64>(), 10_000);
    }

    #[test]
    fn every_request_is_counted_once_by_outcome() {
        let s = Secrets::default();
        let t = (Duration::from_millis(2), Duration::from_millis(1));
        let mut p = Phase::default();
        p.record("resources/read", &reply(200, Kind::Complete), t, Duration::from_millis(150), &s);
        p.record("resources/read", &reply(200, Kind::InputRequired), t, Duration::ZERO, &s);
        p.record("resources/read", &reply(400, Kind::Rpc(-32602)), t, Duration::ZERO, &s);
        p.record("resources/read", &reply(200, Kind::Rpc(-32002)), t, Duration::ZERO, &s);
        p.record("tools/call", &reply(503, Kind::NoResponse), t, Duration::ZERO, &s);
        p.record("tools/call", &Sent::Timeout, t, Duration::ZERO, &s);
        p.record("tools/call", &Sent::Broken("reset".into()), t, Duration::ZERO, &s);
        p.connect_failed("refused", &s);
        p.record("tools/call", &Sent::NotSent("closed".into()), t, Duration::ZERO, &s);
        let read = &p.methods["resources/read"];
        assert_eq!((read.sent, read.ok, read.input_required, read.errors), (4, 2, 1, 2));
        assert_eq!(read.rpc_errors, BTreeMap::from([(-32602, 1), (-32002, 1)]));
        assert_eq!(read.http_status, BTreeMap::from([(200, 3), (400, 1)]));
        let call = &p.methods["tools/call"];
        assert_eq!((call.sent, call.errors, call.no_response, call.timeouts, call.broken), (3, 3, 1, 1, 1));
        assert_eq!(p.totals(), (7, 2, 5));
        assert_eq!(p.not_sent, 2);
        assert_eq!(p.timeline, vec![1, 1]);
        let mut q = Phase::default();
        q.merge(&p);
        q.merge(&p);
        assert_eq!(q.totals(), (14, 4, 10));
        assert_eq!(q.failures["tools/call: timeout"].count, 2);
        assert_eq!(q.latency.len(), 4);
    }
}
