//! The sample server speaking the legacy 2025-11-25 Streamable HTTP revision, as the servers
//! built on the TypeScript SDK 1.x do: `initialize` mints a session, later requests must carry
//! it (an unknown one gets 404), `resources/subscribe` registers URIs whose changes arrive on
//! the session's GET stream, and results carry none of the 2026-07-28 fields.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handler::{Handled, Sample, SampleEvent};
use super::respond::{Closed, Resp, json, record_and_fail, sse, status};
use resmux_http::whole::whole;
use resmux_proto::jsonrpc::{Incoming, Kind, RawObject, RpcError, code, encode_error, encode_result, raw_str};
use resmux_proto::mcp;

pub(super) async fn serve(
    sample: &Sample,
    req: Request<hyper::body::Incoming>,
    cancel: CancellationToken,
) -> Result<Resp, Closed> {
    let session = req.headers().get(mcp::H_SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let known = session.as_ref().is_some_and(|s| sample.sessions().map.lock().expect("sessions").contains_key(s));
    if *req.method() != Method::POST {
        sample.recorder().record(req.method().as_str(), req.headers(), None, serde_json::Value::Null);
    }
    match *req.method() {
        Method::GET if known => return Ok(stream(sample, session.expect("known"), cancel)),
        Method::DELETE if known => {
            sample.sessions().map.lock().expect("sessions").remove(session.as_deref().expect("known"));
            return Ok(status(StatusCode::OK));
        }
        Method::GET | Method::DELETE => return Ok(status(StatusCode::NOT_FOUND)),
        Method::POST => {}
        _ => return Ok(status(StatusCode::METHOD_NOT_ALLOWED)),
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = whole(body, 1 << 20).await else {
        return Ok(status(StatusCode::PAYLOAD_TOO_LARGE));
    };
    let Ok(text) = std::str::from_utf8(&body) else { return Ok(status(StatusCode::BAD_REQUEST)) };
    let Ok(msg) = Incoming::parse(text) else { return Ok(status(StatusCode::BAD_REQUEST)) };
    if let Some(failed) = record_and_fail(sample, "POST", &parts.headers, &msg)? {
        return Ok(failed);
    }
    Ok(post(sample, session.filter(|_| known), &msg, text).await)
}

/// Answers a POSTed message; `session` is the request's session when the server knows it.
async fn post(sample: &Sample, session: Option<String>, msg: &Incoming<'_>, text: &str) -> Resp {
    if msg.method() == "initialize" {
        let id = msg.id.clone().expect("initialize is a request");
        let sessions = sample.sessions();
        let sid = {
            let mut next = sessions.next.lock().expect("sessions");
            *next += 1;
            format!("legacy-session-{next}")
        };
        sessions.map.lock().expect("sessions").insert(sid.clone(), HashSet::new());
        *sessions.initializations.lock().expect("sessions") += 1;
        let result = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"resources": {"subscribe": true}, "tools": {}, "prompts": {}},
            "serverInfo": {"name": sample.spec().name, "version": "1.0.0"},
        });
        let mut resp = json(StatusCode::OK, encode_result(&id, result.to_string().as_bytes()));
        resp.headers_mut().insert(mcp::H_SESSION_ID, HeaderValue::from_str(&sid).expect("ascii"));
        return resp;
    }
    let Some(sid) = session else { return status(StatusCode::NOT_FOUND) };
    match msg.kind {
        Kind::Response => {
            // The client's answer to a question asked mid-call.
            let key = msg.id.as_ref().map(|i| i.as_json().to_owned()).unwrap_or_default();
            if let Some(tx) = sample.sessions().asked.lock().expect("asked").remove(&key) {
                let _ = tx.send(serde_json::from_str(text).unwrap_or_default());
            }
            return status(StatusCode::ACCEPTED);
        }
        Kind::Notification => return status(StatusCode::ACCEPTED),
        Kind::Request => {}
    }
    let id = msg.id.clone().expect("requests have ids");
    let params = msg.params.and_then(|p| RawObject::parse(p).ok()).unwrap_or_default();
    let uri = params.get("uri").and_then(raw_str).map(|u| u.into_owned());
    match msg.method() {
        m @ ("resources/subscribe" | "resources/unsubscribe") => {
            sample.note(m);
            let mut map = sample.sessions().map.lock().expect("sessions");
            let set = map.entry(sid).or_default();
            if let Some(uri) = uri {
                if msg.method() == "resources/subscribe" {
                    set.insert(uri);
                } else {
                    set.remove(&uri);
                }
            }
            return json(StatusCode::OK, encode_result(&id, b"{}"));
        }
        "ping" => return json(StatusCode::OK, encode_result(&id, b"{}")),
        "tools/call" if params.get_str("name").as_deref() == Some("confirm") => {
            sample.note("tools/call");
            return confirm(sample, id);
        }
        _ => {}
    }
    match sample.handle(msg.method(), &params).await {
        Handled::Result(mut v) => {
            // Legacy results predate these fields.
            if let Some(obj) = v.as_object_mut() {
                for k in ["resultType", "ttlMs", "cacheScope", "_meta"] {
                    obj.remove(k);
                }
            }
            json(StatusCode::OK, encode_result(&id, v.to_string().as_bytes()))
        }
        Handled::Error(e) if e.code == code::INVALID_PARAMS && uri.is_some() && msg.method() == "resources/read" => {
            // 2025-11-25's "resource not found".
            let e = RpcError::new(code::LEGACY_RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({"uri": uri}));
            json(StatusCode::OK, encode_error(Some(&id), &e))
        }
        Handled::Error(e) => json(StatusCode::OK, encode_error(Some(&id), &e)),
        Handled::Listen(_) => {
            json(StatusCode::OK, encode_error(Some(&id), &RpcError::new(code::METHOD_NOT_FOUND, "Method not found")))
        }
    }
}

/// The `confirm` tool: asks the client (`elicitation/create`) on the call's own SSE stream,
/// waits for the answer POSTed back, then finishes the call with what the client said.
fn confirm(sample: &Sample, id: resmux_proto::jsonrpc::RequestId) -> Resp {
    let question_id = format!("\"q-{}\"", sample.total());
    let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
    sample.sessions().asked.lock().expect("asked").insert(question_id.clone(), answer_tx);
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let question = format!(
            r#"{{"jsonrpc":"2.0","id":{question_id},"method":"elicitation/create","params":{{"mode":"form","message":"Proceed?","requestedSchema":{{"type":"object","properties":{{"ok":{{"type":"boolean"}}}}}}}}}}"#
        );
        if tx.send(Bytes::from(format!("data: {question}\n\n"))).await.is_err() {
            return;
        }
        let text = match tokio::time::timeout(Duration::from_secs(30), answer_rx).await {
            Ok(Ok(answer)) if answer.get("result").is_some() => {
                format!("confirmed: {}", answer["result"]["action"].as_str().unwrap_or("?"))
            }
            Ok(Ok(answer)) => format!("declined: {}", answer["error"]["message"].as_str().unwrap_or("?")),
            _ => "no answer".to_owned(),
        };
        let result = json!({"content": [{"type": "text", "text": text}]});
        let _ = tx
            .send(Bytes::from(format!(
                "data: {}\n\n",
                String::from_utf8_lossy(&encode_result(&id, result.to_string().as_bytes()))
            )))
            .await;
    });
    sse(rx)
}

/// The session's GET stream: `notifications/resources/updated` for its subscribed URIs.
fn stream(sample: &Sample, sid: String, cancel: CancellationToken) -> Resp {
    // Bounded: a client that stops reading stalls only its own stream.
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let mut updates = sample.subscribe_updates();
    let sample = sample.clone();
    let streams = &sample.sessions().streams;
    streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(async move {
        let _open = StreamGuard(sample.clone());
        let mut keepalive = tokio::time::interval(Duration::from_secs(15));
        let mut event = 0u64;
        loop {
            let text = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                _ = keepalive.tick() => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() { return }
                    continue;
                }
                u = updates.recv() => match u {
                    Ok(SampleEvent::Updated(uri)) => {
                        let subscribed = sample.sessions().map.lock().expect("sessions").get(&sid).is_some_and(|s| s.contains(&uri));
                        if !subscribed { continue }
                        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}).to_string()
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                },
            };
            event += 1;
            let frame = format!("id: {sid}-{event}\nretry: 200\ndata: {text}\n\n");
            if tx.send(Bytes::from(frame)).await.is_err() {
                return;
            }
        }
    });
    sse(rx)
}

/// Counts a GET stream as closed when its task ends.
struct StreamGuard(Sample);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.sessions().streams.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
