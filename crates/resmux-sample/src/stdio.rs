//! The sample server over stdio: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::handler::{Handled, ListenStep, Sample, ack_notification};
use resmux_proto::jsonrpc::{Incoming, Kind, RawObject, RpcError, code, encode_error, encode_result};
use resmux_proto::mcp;

/// Serves `sample` on this process's stdin/stdout until stdin closes.
pub async fn serve_stdio(sample: Sample) -> std::io::Result<()> {
    let cancel = CancellationToken::new();
    sample.start_ticking(cancel.clone());
    // Bounded: when stdout backs up, handlers wait rather than buffer without limit.
    let (out, mut out_rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.write_all(b"\n").await.is_err() {
                break;
            }
            if out_rx.is_empty() && stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let listens: Arc<Mutex<HashMap<String, CancellationToken>>> = Arc::default();
    let mut lines = FramedRead::new(tokio::io::stdin(), LinesCodec::new_with_max_length(1 << 20));
    while let Some(line) = lines.next().await {
        let Ok(line) = line else { continue };
        let msg = match Incoming::parse(&line) {
            Ok(m) => m,
            Err(e) => {
                let _ = out.send(String::from_utf8_lossy(&encode_error(e.id(), &e.to_rpc())).into_owned()).await;
                continue;
            }
        };
        match msg.kind {
            Kind::Notification if msg.method() == mcp::method::CANCELLED => {
                let target = msg
                    .params
                    .and_then(|p| RawObject::parse(p).ok())
                    .and_then(|p| p.get("requestId").map(|r| r.get().to_owned()));
                if let Some(id) = target
                    && let Some(token) = listens.lock().expect("listens").remove(&id)
                {
                    token.cancel();
                }
            }
            Kind::Request => {
                let id = msg.id.clone().expect("requests have ids");
                let method = msg.method().to_owned();
                let params = msg.params.map(|p| p.get().to_owned()).unwrap_or_else(|| "{}".into());
                let sample = sample.clone();
                let out = out.clone();
                let listens = listens.clone();
                tokio::spawn(async move {
                    let Ok(obj) = RawObject::parse_str(&params) else {
                        return;
                    };
                    let version = obj
                        .get("_meta")
                        .and_then(|m| RawObject::parse(m).ok())
                        .and_then(|m| m.get_str(mcp::META_PROTOCOL_VERSION).map(|v| v.into_owned()));
                    let reply = match version.as_deref() {
                        None => encode_error(
                            Some(&id),
                            &RpcError::new(code::INVALID_PARAMS, "missing _meta protocolVersion"),
                        ),
                        Some(v) if v != mcp::MODERN_VERSION => encode_error(
                            Some(&id),
                            &RpcError::new(code::UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
                                .with_data(serde_json::json!({"supported": [mcp::MODERN_VERSION], "requested": v})),
                        ),
                        Some(_) => match sample.handle(&method, &obj).await {
                            Handled::Result(v) => encode_result(&id, &serde_json::to_vec(&v).expect("json")),
                            Handled::Error(e) => encode_error(Some(&id), &e),
                            Handled::Listen(listen) => {
                                let token = CancellationToken::new();
                                listens.lock().expect("listens").insert(id.as_json().to_owned(), token.clone());
                                let sub = id.as_json().to_owned();
                                let _guard = sample.listen_opened(&listen);
                                let mut updates = sample.subscribe_updates();
                                if out.send(ack_notification(&sub, &listen.ack)).await.is_err() {
                                    return;
                                }
                                loop {
                                    tokio::select! {
                                        _ = token.cancelled() => return,
                                        u = updates.recv() => match u {
                                            Ok(event) => match listen.step(&sub, &event) {
                                                ListenStep::Skip => {}
                                                ListenStep::Send(text) => {
                                                    if out.send(text).await.is_err() { return }
                                                }
                                                ListenStep::End(text) => {
                                                    listens.lock().expect("listens").remove(&sub);
                                                    let _ = out.send(text).await;
                                                    return;
                                                }
                                            },
                                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                                            Err(_) => return,
                                        },
                                    }
                                }
                            }
                        },
                    };
                    let _ = out.send(String::from_utf8_lossy(&reply).into_owned()).await;
                });
            }
            _ => {}
        }
    }
    cancel.cancel();
    for (_, token) in listens.lock().expect("listens").drain() {
        token.cancel();
    }
    drop(out);
    let _ = writer.await;
    Ok(())
}
