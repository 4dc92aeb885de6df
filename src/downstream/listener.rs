//! Accepting downstream connections: `TCP_NODELAY`, a bound on concurrent connections, HTTP/1.1
//! keep-alive or HTTP/2 (prior knowledge), and graceful shutdown on cancellation.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Endpoint;

/// How long open connections get to finish in-flight requests after shutdown begins.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `endpoint` on `listener` until `cancel`, then drains open connections.
pub async fn serve(listener: TcpListener, endpoint: Endpoint, max_connections: usize, cancel: CancellationToken) {
    let graceful = GracefulShutdown::new();
    // Each connection holds a permit; at the bound, accepting pauses (the kernel backlog holds
    // further connections) instead of failing them.
    let permits = Arc::new(Semaphore::new(max_connections));
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => break,
            p = permits.clone().acquire_owned() => p.expect("never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let endpoint = endpoint.clone();
        let service = service_fn(move |req| {
            let endpoint = endpoint.clone();
            async move { Ok::<_, Infallible>(endpoint.serve(req).await) }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "downstream connection ended with error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(DRAIN) => tracing::warn!("forcing shutdown with connections still open"),
    }
}
