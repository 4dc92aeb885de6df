//! Logging setup, and the Prometheus metrics. Logs go to stderr, so that stdout stays free for
//! the stdio transport.

pub mod metrics;
#[cfg(feature = "otel")]
pub mod otel;

use std::borrow::Cow;

pub use metrics::{Metrics, Rejection, Snapshot, Totals};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// Installs the global subscriber; `RUST_LOG` overrides the configured level. No trace export.
pub fn init(config: &LogConfig) {
    let _ = install(config, &TelemetryConfig::default());
}

/// What [`install`] started: the trace exporter, when one is configured.
#[derive(Clone, Default)]
pub struct Telemetry {
    #[cfg(feature = "otel")]
    exporter: Option<otel::Exporter>,
}

impl Telemetry {
    /// Exports the spans ended so far (no-op without an exporter).
    pub async fn flush(&self) {
        #[cfg(feature = "otel")]
        if let Some(e) = &self.exporter {
            e.flush().await;
        }
    }

    /// Flushes and stops the exporter.
    pub async fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(e) = self.exporter {
            e.shutdown().await;
        }
    }
}

/// Why logging or trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.otlp_endpoint: this resmux was built without the `otel` feature")]
    NotBuilt,
    #[error("telemetry.otlp_endpoint: trace export needs the tokio runtime")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
    #[error("telemetry.otlp_endpoint: cannot build the exporter")]
    Exporter(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("installing the trace exporter")]
    Install(#[source] tracing_subscriber::util::TryInitError),
}

/// Installs the global subscriber: logs (text or JSON) to stderr, filtered by `log.level` or
/// `RUST_LOG`; with the `otel` feature and `telemetry.otlp_endpoint`, spans (at info and
/// above, whatever the log level) exported over OTLP/HTTP too. Call it inside the runtime.
pub fn install(log: &LogConfig, telemetry: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match log.format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    #[cfg(feature = "otel")]
    {
        let Some((exporter, tracer)) = otel::start(telemetry)? else {
            let _ = registry.try_init();
            return Ok(Telemetry::default());
        };
        let spans = otel::layer(tracer).with_filter(tracing_subscriber::filter::LevelFilter::INFO);
        registry.with(spans).try_init().map_err(TelemetryError::Install)?;
        Ok(Telemetry { exporter: Some(exporter) })
    }
    #[cfg(not(feature = "otel"))]
    {
        if telemetry.otlp_endpoint.is_some() {
            return Err(TelemetryError::NotBuilt);
        }
        let _ = registry.try_init();
        Ok(Telemetry::default())
    }
}

/// The span of one downstream request. Its fields are filled in as they become known: the
/// JSON-RPC `method` once the body is parsed, the `principal` id once authenticated (never a
/// credential), the `upstream` once routed, the `cache` outcome (`hit`, `miss`, `stale`,
/// `joined`, `bypass`) once answered.
///
/// With the `otel` feature the span continues the trace of the request's `traceparent`
/// header; the returned flag says it did (then `_meta.traceparent` is not looked at).
pub fn request_span(headers: crate::headers::Headers<'_>) -> (tracing::Span, bool) {
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        method = tracing::field::Empty,
        principal = tracing::field::Empty,
        upstream = tracing::field::Empty,
        cache = tracing::field::Empty,
    );
    #[cfg(feature = "otel")]
    let traced = otel::continue_from_headers(&span, headers);
    #[cfg(not(feature = "otel"))]
    let traced = {
        let _ = headers;
        false
    };
    (span, traced)
}

/// Records `value` as the current request span's `field`, unless no request span can be
/// enabled at all: the check is the subscriber's most verbose level, an atomic load. With
/// `log.level` below `info` and no trace export the span is disabled, and recording into it
/// would only cost a dispatcher and a current-span lookup.
fn record(field: &str, value: &str) {
    if tracing::level_filters::LevelFilter::current() >= tracing::Level::INFO {
        tracing::Span::current().record(field, value);
    }
}

/// Names the current request's JSON-RPC method. Legacy methods come from the request, so they
/// are bounded in length.
pub fn record_method(method: &str) {
    let mut end = method.len().min(64);
    while !method.is_char_boundary(end) {
        end -= 1;
    }
    record("method", &method[..end]);
}

/// Names the current request's principal (its id; empty for anonymous callers).
pub fn record_principal(principal: &crate::auth::Principal) {
    record("principal", principal.id());
}

/// Names the upstream the current request was routed to.
pub fn record_upstream(name: &str) {
    record("upstream", name);
}

/// How the cache took part in the current request.
pub fn record_cache(outcome: &'static str) {
    record("cache", outcome);
}

/// Continues the trace named by the request's `_meta.traceparent` (only with the `otel`
/// feature, and only when the header did not, `traced`).
pub fn continue_trace(meta: &crate::jsonrpc::RawObject<'_>, traced: bool) {
    #[cfg(feature = "otel")]
    if !traced && let Some(tp) = meta.get_str(otel::TRACEPARENT) {
        otel::continue_from_value(&tracing::Span::current(), &tp);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (meta, traced);
}

/// The span of one request to an upstream, a child of the downstream request's span.
pub fn upstream_span(upstream: &str, method: &str) -> tracing::Span {
    tracing::info_span!("upstream", otel.kind = "client", upstream, method)
}

/// The `traceparent` to send upstream: the current (upstream request) span's, when traces
/// are exported (`otel` feature); `None` otherwise.
pub fn traceparent() -> Option<String> {
    #[cfg(feature = "otel")]
    return otel::current();
    #[cfg(not(feature = "otel"))]
    None
}

/// Sets the `traceparent` header of an upstream request (see [`traceparent`]).
pub fn inject_header(headers: &mut http::HeaderMap) {
    if let Some(tp) = traceparent()
        && let Ok(v) = http::HeaderValue::from_str(&tp)
    {
        headers.insert("traceparent", v);
    }
}

/// `params` with `_meta.traceparent` set to the current span's (see [`traceparent`]);
/// unchanged (and not copied) when traces are not exported.
pub fn with_traceparent(params: &[u8]) -> Cow<'_, [u8]> {
    let Some(tp) = traceparent() else { return Cow::Borrowed(params) };
    let Ok(text) = std::str::from_utf8(params) else { return Cow::Borrowed(params) };
    let Ok(mut obj) = crate::jsonrpc::RawObject::parse_str(text) else { return Cow::Borrowed(params) };
    let meta = obj.get("_meta").map(|m| m.get().to_owned()).unwrap_or_else(|| "{}".to_owned());
    let Ok(mut meta_obj) = crate::jsonrpc::RawObject::parse_str(&meta) else { return Cow::Borrowed(params) };
    meta_obj.set_string("traceparent", &tp);
    let meta_raw = meta_obj.to_raw();
    obj.set("_meta", Cow::Owned(meta_raw));
    Cow::Owned(obj.to_vec())
}
