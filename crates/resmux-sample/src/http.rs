//! The sample server over Streamable HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use serde_json::Value;

use super::handler::{Handled, Listen, ListenStep, Sample, ack_notification};
use super::respond::{Closed, Resp, json, record_and_fail, sse, status};
use resmux_http::whole::whole;
use resmux_proto::error::Error;
use resmux_proto::jsonrpc::{Incoming, RequestId, encode_error, encode_result};
use resmux_proto::mcp::validate::{self, Body};

/// A running sample HTTP server. Dropping it does not stop it; call [`SampleHttp::stop`].
pub struct SampleHttp {
    pub addr: SocketAddr,
    pub sample: Sample,
    cancel: CancellationToken,
    accept: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    tls: bool,
}

impl SampleHttp {
    /// Starts `sample` on `addr` (use port 0 for an ephemeral port).
    pub async fn start(sample: Sample, addr: SocketAddr) -> std::io::Result<Self> {
        Self::start_with(sample, addr, None).await
    }

    /// Starts `sample` on `addr` serving HTTPS with `tls` (which may require client
    /// certificates; see `resmux_http::tls::server_config`).
    pub async fn start_tls(sample: Sample, addr: SocketAddr, tls: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        Self::start_with(sample, addr, Some(TlsAcceptor::from(tls))).await
    }

    async fn start_with(sample: Sample, addr: SocketAddr, tls: Option<TlsAcceptor>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        sample.start_ticking(cancel.clone());
        let secure = tls.is_some();
        let accept = tokio::spawn(accept(listener, sample.clone(), tls, cancel.clone()));
        Ok(Self { addr, sample, cancel, accept: std::sync::Mutex::new(Some(accept)), tls: secure })
    }

    /// The MCP endpoint URL (`https://localhost:…` when serving TLS, so that the name matches
    /// a certificate issued for `localhost`).
    pub fn url(&self) -> String {
        match self.tls {
            true => format!("https://localhost:{}/mcp", self.addr.port()),
            false => format!("http://{}/mcp", self.addr),
        }
    }

    /// Stops listening and drops every open connection (as a crash would).
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    /// Stops, and returns once the port is free again.
    pub async fn stop_and_wait(&self) {
        self.cancel.cancel();
        let accept = self.accept.lock().expect("accept handle").take();
        if let Some(task) = accept {
            let _ = task.await;
        }
    }
}

async fn accept(listener: TcpListener, sample: Sample, tls: Option<TlsAcceptor>, cancel: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
        };
        let _ = stream.set_nodelay(true);
        let sample = sample.clone();
        let cancel = cancel.clone();
        let Some(acceptor) = tls.clone() else {
            tokio::spawn(serve_connection(TokioIo::new(stream), sample, cancel));
            continue;
        };
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
            let stream = tokio::select! {
                _ = cancel.cancelled() => return,
                r = handshake => match r {
                    Ok(Ok(s)) => s,
                    // A refused handshake (say, no client certificate) ends the connection.
                    _ => return,
                },
            };
            serve_connection(TokioIo::new(stream), sample, cancel).await;
        });
    }
}

/// Serves one connection (HTTP/1.1 or h2) until it ends or the server stops.
async fn serve_connection<I>(io: TokioIo<I>, sample: Sample, cancel: CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let inner = cancel.clone();
    let service = service_fn(move |req| {
        let sample = sample.clone();
        let cancel = inner.clone();
        async move { serve(&sample, req, cancel).await }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(io, service);
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = conn => {}
    }
}

async fn serve(
    sample: &Sample,
    req: Request<hyper::body::Incoming>,
    cancel: CancellationToken,
) -> Result<Resp, Closed> {
    if req.uri().path() != "/mcp" {
        return Ok(status(StatusCode::NOT_FOUND));
    }
    if sample.spec().legacy {
        return super::legacy::serve(sample, req, cancel).await;
    }
    if req.method() != Method::POST {
        sample.recorder().record(req.method().as_str(), req.headers(), None, Value::Null);
        return Ok(status(StatusCode::METHOD_NOT_ALLOWED));
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = whole(body, 1 << 20).await else {
        return Ok(status(StatusCode::PAYLOAD_TOO_LARGE));
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let msg = match Incoming::parse(text) {
        Ok(m) => m,
        Err(e) => return Ok(rejected(validate::message_error(e))),
    };
    if let Some(failed) = record_and_fail(sample, "POST", &parts.headers, &msg)? {
        return Ok(failed);
    }
    let checked = match validate::check(validate::Mirrored::from_map(&parts.headers), &msg) {
        Ok(Body::Notification) => return Ok(status(StatusCode::ACCEPTED)),
        Ok(Body::Request(c)) => c,
        Err(r) => return Ok(rejected(r)),
    };
    Ok(match sample.handle(checked.method, checked.params).await {
        Handled::Result(v) => json(StatusCode::OK, encode_result(&checked.id, &serde_json::to_vec(&v).expect("json"))),
        Handled::Error(e) => {
            // The spec's error table: some errors have their own status (400 for -32021, …).
            let code = StatusCode::from_u16(e.downstream_status()).unwrap_or(StatusCode::OK);
            json(code, encode_error(Some(&checked.id), &e))
        }
        Handled::Listen(listen) => listen_stream(sample, checked.id, listen, cancel),
    })
}

/// An SSE response: the acknowledgment, then an update per change of a subscribed URI, with
/// keep-alive comments; it ends when the client goes away or the server stops.
fn listen_stream(sample: &Sample, id: RequestId, listen: Listen, cancel: CancellationToken) -> Resp {
    // Bounded: a client that stops reading stalls only its own stream.
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let mut updates = sample.subscribe_updates();
    let guard = sample.listen_opened(&listen);
    let sub_id = id.as_json().to_owned();
    tokio::spawn(async move {
        let _guard = guard;
        let send = |text: String| Bytes::from(format!("data: {text}\n\n"));
        if tx.send(send(ack_notification(&sub_id, &listen.ack))).await.is_err() {
            return;
        }
        let mut keepalive = tokio::time::interval(Duration::from_secs(15));
        loop {
            let frame = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                _ = keepalive.tick() => Bytes::from_static(b":\n\n"),
                u = updates.recv() => match u {
                    Ok(event) => match listen.step(&sub_id, &event) {
                        ListenStep::Skip => continue,
                        ListenStep::Send(text) => send(text),
                        ListenStep::End(text) => {
                            let _ = tx.send(send(text)).await;
                            return;
                        }
                    },
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                },
            };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    sse(rx)
}

fn rejected(r: validate::Rejected) -> Resp {
    let (status, err) = Error::from(r.error).to_jsonrpc();
    json(status, encode_error(r.id.as_ref(), &err))
}
