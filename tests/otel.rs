//! OpenTelemetry export (the `otel` feature): an OTLP/HTTP receiver in the test, on loopback,
//! receives the request spans with their attributes and the caller's trace; the upstream sees
//! the same trace in its `traceparent` header and in `_meta.traceparent`.
//!
//! A test binary of its own (`required-features = ["otel"]` in Cargo.toml), so that the build
//! with the feature compiles only this file and the library, not every test target a second
//! time: `cargo nextest run --features otel --test otel` (scripts/test runs it). It installs
//! the global subscriber, so it wants a process of its own, as nextest gives every test.

#[path = "scenarios/support.rs"]
mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;
use serde_json::{Value, json};

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

/// One received span: its ids (hex), name and string attributes.
#[derive(Debug, Clone)]
struct Received {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    attributes: HashMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP (protobuf) trace receiver on 127.0.0.1:0: its base URL and what it received.
async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let sink = sink.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let sink = sink.clone();
                    async move {
                        assert_eq!(req.uri().path(), "/v1/traces");
                        assert_eq!(req.headers()["content-type"], "application/x-protobuf");
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let export = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                        let mut sink = sink.lock().unwrap();
                        for rs in export.resource_spans {
                            for ss in rs.scope_spans {
                                for s in ss.spans {
                                    let attributes = (s.attributes.iter())
                                        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                            any_value::Value::StringValue(v) => Some((kv.key.clone(), v.clone())),
                                            _ => None,
                                        })
                                        .collect();
                                    sink.push(Received {
                                        trace_id: hex(&s.trace_id),
                                        span_id: hex(&s.span_id),
                                        parent_span_id: hex(&s.parent_span_id),
                                        name: s.name,
                                        attributes,
                                    });
                                }
                            }
                        }
                        let answer = ExportTraceServiceResponse::default().encode_to_vec();
                        let mut resp = http::Response::new(Full::new(Bytes::from(answer)));
                        resp.headers_mut().insert("content-type", "application/x-protobuf".parse().unwrap());
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (format!("http://{addr}"), received)
}

/// A read of `uri` with `extra` headers and `_meta` entries.
async fn read(p: &Proxy, uri: &str, headers: &[(&str, String)], meta_extra: Value) -> Exchange {
    let mut m = meta();
    for (k, v) in meta_extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri, "_meta": m}});
    let mut all = vec![
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", "resources/read".to_owned()),
        ("mcp-name", uri.to_owned()),
    ];
    all.extend(headers.iter().cloned());
    p.client.raw("POST", &all, body.to_string().into_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_spans_continue_the_callers_trace_and_the_upstream_sees_it() {
    let (collector, received) = receiver().await;
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.telemetry.otlp_endpoint = Some(collector);
    let telemetry = resmux::telemetry::install(&cfg.log, &cfg.telemetry).expect("the exporter starts");
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;

    // From the HTTP header.
    let (trace_a, parent_a) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let header = vec![("traceparent", format!("00-{trace_a}-{parent_a}-01"))];
    read(&p, "docs://item/0", &header, json!({})).await.result();
    // From `_meta` alone.
    let (trace_b, parent_b) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    read(&p, "docs://item/1", &[], json!({"traceparent": format!("00-{trace_b}-{parent_b}-01")})).await.result();
    // A hit, in the first trace again.
    let hit = read(&p, "docs://item/0", &header, json!({})).await;
    assert_eq!(hit.cache(), "hit");

    let spans = eventually("the request spans reach the collector", || {
        let (received, telemetry) = (received.clone(), telemetry.clone());
        async move {
            telemetry.flush().await;
            let spans = received.lock().unwrap().clone();
            let requests = spans.iter().filter(|s| s.name == "request").count();
            let upstreams = spans.iter().filter(|s| s.name == "upstream").count();
            (requests >= 3 && upstreams >= 2).then_some(spans)
        }
    })
    .await;
    let requests: Vec<&Received> = spans.iter().filter(|s| s.name == "request").collect();
    let find = |trace: &str, parent: &str, cache: &str| {
        (requests.iter())
            .find(|s| {
                s.trace_id == trace
                    && s.parent_span_id == parent
                    && s.attributes.get("cache").map(String::as_str) == Some(cache)
            })
            .copied()
            .unwrap_or_else(|| {
                panic!("no request span in trace {trace} under {parent} with cache={cache}: {requests:#?}")
            })
    };
    let miss_a = find(trace_a, parent_a, "miss");
    for (k, v) in [("method", "resources/read"), ("upstream", "docs")] {
        assert_eq!(miss_a.attributes.get(k).map(String::as_str), Some(v), "{miss_a:#?}");
    }
    find(trace_a, parent_a, "hit");
    let miss_b = find(trace_b, parent_b, "miss");
    assert!(
        !spans.iter().any(|s| s.attributes.keys().any(|k| k.contains("token") || k == "authorization")),
        "no credential in span attributes"
    );

    // The upstream span is the request span's child, and its id is what the upstream saw.
    for (trace, request) in [(trace_a, miss_a), (trace_b, miss_b)] {
        let child = (spans.iter())
            .find(|s| s.name == "upstream" && s.trace_id == trace && s.parent_span_id == request.span_id)
            .unwrap_or_else(|| panic!("no upstream span under {request:#?}"));
        assert_eq!(child.attributes.get("upstream").map(String::as_str), Some("docs"));
        assert_eq!(child.attributes.get("method").map(String::as_str), Some("resources/read"));
        let want = format!("00-{trace}-{}-01", child.span_id);
        let seen = up.sample.recorded_of("resources/read");
        let at_upstream = (seen.iter())
            .find(|r| r.header("traceparent") == Some(want.as_str()))
            .unwrap_or_else(|| panic!("the upstream saw no traceparent {want}: {seen:#?}"));
        assert_eq!(at_upstream.params["_meta"]["traceparent"], json!(want), "and in _meta");
    }
    p.app.shutdown().await;
    telemetry.shutdown().await;
}
