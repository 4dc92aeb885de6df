//! OpenTelemetry trace export (the `otel` feature): `tracing` spans become OTel spans through
//! `tracing-opentelemetry`, batched by the SDK and sent as OTLP/HTTP protobuf to
//! `[telemetry] otlp_endpoint` through resmux's own hyper client. W3C `traceparent` is
//! continued from the downstream request (header first, else `params._meta.traceparent`) and
//! sent upstream in both places.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::TelemetryConfig;
use crate::whole::whole;

/// How long one export may take; the SDK drops the batch after.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest collector answer read.
const MAX_ANSWER: usize = 64 << 10;

/// The W3C trace context header (and `_meta` key).
pub const TRACEPARENT: &str = "traceparent";

/// The running exporter: flushes and stops on [`Exporter::shutdown`].
#[derive(Clone)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Exports every span ended so far (blocking the calling thread: run it off the runtime's
    /// workers, as [`Exporter::flush`] does).
    fn flush_blocking(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "flushing spans failed");
        }
    }

    /// Exports every span ended so far.
    pub async fn flush(&self) {
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || me.flush_blocking()).await;
    }

    /// Flushes and stops the exporter.
    pub async fn shutdown(self) {
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = self.provider.shutdown() {
                tracing::warn!(error = %e, "stopping the span exporter failed");
            }
        })
        .await;
    }
}

/// The OTLP client: the SDK's batch processor exports from a thread of its own, outside the
/// runtime, so each export is run as a task on the runtime the proxy started on and awaited
/// from there.
#[derive(Debug)]
struct Client {
    client: crate::client::HttpClient,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let task = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, Full::new(body));
            let answer = tokio::time::timeout(EXPORT_TIMEOUT, client.request(request)).await??;
            let (parts, body) = answer.into_parts();
            let body = whole(body, MAX_ANSWER).await?;
            Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
        });
        task.await?
    }
}

/// Where spans go: the configured URL, with `/v1/traces` when it names no path.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    match endpoint.parse::<http::Uri>() {
        Ok(uri) if uri.path() == "/" || uri.path().is_empty() => format!("{trimmed}/v1/traces"),
        _ => endpoint.to_owned(),
    }
}

/// Builds the exporter and the tracer for `config`, or `None` when no endpoint is set.
pub(super) fn start(
    config: &TelemetryConfig,
) -> Result<Option<(Exporter, opentelemetry_sdk::trace::Tracer)>, super::TelemetryError> {
    let Some(endpoint) = &config.otlp_endpoint else { return Ok(None) };
    let runtime = tokio::runtime::Handle::try_current().map_err(super::TelemetryError::NoRuntime)?;
    let client = Client { client: crate::client::client(), runtime };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(client)
        .build()
        .map_err(|e| super::TelemetryError::Exporter(Box::new(e)))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(config.service_name.clone()).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("resmux");
    Ok(Some((Exporter { provider }, tracer)))
}

/// The `tracing` layer that turns spans into OTel spans. Context activation is off: a
/// request's parent can then still be set from its `_meta` after its span was entered (the
/// body is read inside the span), up to the moment its first child span starts.
pub(super) fn layer<S>(
    tracer: opentelemetry_sdk::trace::Tracer,
) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(tracer).with_context_activation(false)
}

struct Headers<'a>(crate::headers::Headers<'a>);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let name = http::HeaderName::from_bytes(key.as_bytes()).ok()?;
        self.0.get_all(&name).next().and_then(crate::headers::to_str)
    }
    fn keys(&self) -> Vec<&str> {
        // Names as sent (the lean path's are not lower-cased); each once.
        let mut keys: Vec<&str> = self.0.iter().filter_map(|(n, _)| std::str::from_utf8(n).ok()).collect();
        keys.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        keys
    }
}

struct One<'a>(Option<&'a str>);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if key == TRACEPARENT { self.0 } else { None }
    }
    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

#[derive(Default)]
struct Collect(Option<String>);

impl Injector for Collect {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

/// Makes `span` continue the trace of `traceparent`, when it is a valid one. Returns whether
/// it did.
fn continue_from(span: &tracing::Span, cx: opentelemetry::Context) -> bool {
    if !cx.span().span_context().is_valid() {
        return false;
    }
    span.set_parent(cx).is_ok()
}

/// Continues the trace named by the request's `traceparent` header, if any.
pub(super) fn continue_from_headers(span: &tracing::Span, headers: crate::headers::Headers<'_>) -> bool {
    continue_from(span, TraceContextPropagator::new().extract(&Headers(headers)))
}

/// Continues the trace named by `traceparent` (from `_meta`).
pub(super) fn continue_from_value(span: &tracing::Span, traceparent: &str) -> bool {
    continue_from(span, TraceContextPropagator::new().extract(&One(Some(traceparent))))
}

/// The `traceparent` of the current span, when it belongs to an exported trace.
pub(super) fn current() -> Option<String> {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut out = Collect::default();
    TraceContextPropagator::new().inject_context(&cx, &mut out);
    out.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_a_bare_endpoint_only() {
        assert_eq!(traces_url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://127.0.0.1:4318/"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/custom/traces"), "http://c:4318/custom/traces");
    }
}
