//! Progress relay: a `tools/call` or `prompts/get` whose `_meta` carries a `progressToken`
//! gets the upstream's `notifications/progress` while it runs. Over HTTP the answer is then an
//! SSE stream (the progress notifications, then the response), as a server answers such a
//! request itself; over stdio the notifications are written before the response.

use std::future::Future;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::body::Body as RespBody;
use super::framing::Framing;
use super::listen::sse_response;
use super::validate::{self, Body};
use crate::auth::Principal;
use crate::jsonrpc::{Incoming, RawObject, RequestId, encode_error, encode_result};
use crate::mcp::method as m;
use crate::router::{Answer, Call, Router};

/// Progress notifications buffered between the upstream reader and the client. Past it,
/// reports are dropped (see [`crate::router::Progress`]).
const PENDING: usize = 32;

/// Whether a validated request asks for progress that the proxy relays.
pub(super) fn wanted(method: &str, meta: &RawObject<'_>) -> bool {
    matches!(method, m::TOOLS_CALL | m::PROMPTS_GET) && meta.get("progressToken").is_some_and(|t| t.get() != "null")
}

/// A channel for one request's progress.
pub(super) fn channel() -> (mpsc::Sender<Bytes>, mpsc::Receiver<Bytes>) {
    mpsc::channel(PENDING)
}

/// Drives `handled` to its answer while delivering each progress message that arrives
/// meanwhile (in order, then any left when it finishes).
pub(super) async fn relay<T, D, DF>(
    handled: impl Future<Output = T>,
    mut rx: mpsc::Receiver<Bytes>,
    mut deliver: D,
) -> T
where
    D: FnMut(Bytes) -> DF,
    DF: Future<Output = ()>,
{
    tokio::pin!(handled);
    let answer = loop {
        tokio::select! {
            biased;
            Some(message) = rx.recv() => deliver(message).await,
            answer = &mut handled => break answer,
        }
    };
    while let Ok(message) = rx.try_recv() {
        deliver(message).await;
    }
    answer
}

/// The JSON-RPC response to a routed request.
/// A relayed result is read whole here (these transports write whole messages), within the
/// upstream's `max_message_bytes`.
pub(super) async fn encode_answer(id: &RequestId, answer: Result<Answer, crate::error::Error>) -> Bytes {
    match answer {
        Ok(Answer { outcome: Ok(result), .. }) => match result.into_bytes().await {
            Ok(result) => encode_result(id, &result),
            Err(e) => encode_error(Some(id), &crate::error::Error::from(e).to_jsonrpc().1),
        },
        Ok(Answer { outcome: Err(e), .. }) => encode_error(Some(id), &e),
        Err(e) => encode_error(Some(id), &e.to_jsonrpc().1),
    }
}

/// Serves a validated HTTP request that asked for progress: an SSE response, fed by a task
/// that owns the request (`body`, parsed again there: the borrowed parse of the caller cannot
/// outlive it). The task ends with the response, or early when the client goes away.
pub(super) fn serve_http(
    router: Router,
    tracker: &tokio_util::task::TaskTracker,
    body: Bytes,
    principal: Principal,
) -> http::Response<RespBody> {
    let (tx, rx) = mpsc::channel::<Bytes>(PENDING);
    // In the request's span: the task is the request.
    let span = tracing::Span::current();
    tracker.spawn(tracing::Instrument::instrument(
        async move {
            let Ok(text) = std::str::from_utf8(&body) else { return };
            let Ok(msg) = Incoming::parse(text) else { return };
            let Ok(Body::Request(checked)) = validate::check_body(&msg) else { return };
            let (progress, progress_rx) = channel();
            let mut call = Call::new(checked.method, checked.params, checked.meta, &principal);
            call.progress = Some(progress);
            let handled = router.handle(&call);
            let answer = relay(handled, progress_rx, |message| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(Framing::Sse.frame(&message)).await;
                }
            })
            .await;
            let _ = tx.send(Framing::Sse.frame(&encode_answer(&checked.id, answer).await)).await;
        },
        span,
    ));
    sse_response(super::body::channel(rx))
}
