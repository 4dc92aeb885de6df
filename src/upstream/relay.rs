//! Relaying a legacy server's questions to the downstream client as MRTR (reference §7.5).
//!
//! When a legacy server asks the client something in the middle of a call (elicitation,
//! sampling, roots) and the downstream request declared that capability, the proxy holds the
//! upstream call open in a task, hands the question to the client as an `input_required`
//! result, and on the client's retry posts its answer upstream and reads on.

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::http::{Headers, HttpTransport};
use super::reply::Reply;
use super::sse::SseStream;
use crate::error::UpstreamError;
use crate::jsonrpc::{Incoming, Kind};

/// A question a legacy server asked mid-call.
#[derive(Debug, Clone)]
pub struct ServerRequest {
    /// The server's request id, raw JSON (echoed in the answer).
    pub id: String,
    pub method: String,
    pub params: Value,
}

/// What a held call did next.
#[derive(Debug)]
pub enum Step {
    /// The server asks something the client must answer.
    Asked(ServerRequest),
    /// The call finished.
    Done(Result<Reply, UpstreamError>),
}

/// An upstream call held open across MRTR round trips. Dropping it abandons the call (its
/// connection closes, which a Streamable HTTP server treats as cancellation).
pub struct HeldCall {
    steps: mpsc::Receiver<Step>,
    answers: mpsc::Sender<Bytes>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HeldCall {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HeldCall {
    /// Sends the answer to the pending question (a JSON-RPC response to the server).
    pub async fn answer(&mut self, response: Bytes) -> bool {
        self.answers.send(response).await.is_ok()
    }

    /// The call's next step.
    pub async fn next(&mut self) -> Step {
        self.steps.recv().await.unwrap_or_else(|| {
            Step::Done(Err(UpstreamError::Disconnected { upstream: String::new(), reason: "held call ended".into() }))
        })
    }
}

/// Reads a call's SSE answer in a task: server requests whose method is in `relay` become
/// steps; others are answered by `answer_locally`; the final response ends it. `permit` (the
/// upstream's in-flight slot) is released while a question waits for the client and taken
/// again when the answer arrives.
#[allow(clippy::too_many_arguments)]
pub fn hold(
    transport: std::sync::Arc<HttpTransport>,
    headers: OwnedHeaders,
    id: String,
    body: hyper::body::Incoming,
    relay: Vec<String>,
    answer_locally: fn(&Incoming<'_>) -> Option<Bytes>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    tracker: &tokio_util::task::TaskTracker,
) -> HeldCall {
    // One question is open at a time, so one slot each way is enough.
    let (step_tx, steps) = mpsc::channel(1);
    let (answers, mut answer_rx) = mpsc::channel::<Bytes>(1);
    let task = tracker.spawn(async move {
        // The upstream's in-flight slot is held while the call runs, and given back while it
        // waits for the client (which may take `held_call_ttl`): a crowd of held calls must
        // not starve the upstream's other requests. It is taken again before the answer is
        // posted; the resuming request's `timeout` bounds that wait.
        let mut permit = permit;
        let slots = permit.as_ref().map(|p| p.semaphore().clone());
        let owned = headers;
        let headers = owned.as_headers();
        let mut stream = SseStream::new(body, transport.max_message());
        loop {
            let event = match stream.next().await {
                Ok(Some(event)) => event,
                Ok(None) => {
                    let e = UpstreamError::Disconnected { upstream: String::new(), reason: "stream ended".into() };
                    let _ = step_tx.send(Step::Done(Err(e))).await;
                    return;
                }
                Err(e) => {
                    let _ = step_tx.send(Step::Done(Err(transport.sse_error(e)))).await;
                    return;
                }
            };
            let message = Bytes::from(event.data);
            if let Ok(reply) = Reply::decode(&message, Some(&id)) {
                let _ = step_tx.send(Step::Done(Ok(reply))).await;
                return;
            }
            let Ok(text) = std::str::from_utf8(&message) else { continue };
            let Ok(msg) = Incoming::parse(text) else { continue };
            if msg.kind != Kind::Request {
                continue;
            }
            let response = if relay.iter().any(|m| m == msg.method()) {
                let request = ServerRequest {
                    id: msg.id.as_ref().map(|i| i.as_json().to_owned()).unwrap_or_default(),
                    method: msg.method().to_owned(),
                    params: msg.params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(Value::Null),
                };
                drop(permit.take());
                if step_tx.send(Step::Asked(request)).await.is_err() {
                    return;
                }
                let Some(answer) = answer_rx.recv().await else { return };
                if let Some(slots) = &slots {
                    match slots.clone().acquire_owned().await {
                        Ok(p) => permit = Some(p),
                        Err(_) => return,
                    }
                }
                answer
            } else {
                match answer_locally(&msg) {
                    Some(r) => r,
                    None => continue,
                }
            };
            let _ = transport.post_message(response, &headers, owned.auth.as_ref()).await;
        }
    });
    HeldCall { steps, answers, task }
}

/// Owned copy of a legacy request's protocol headers, for a task.
pub struct OwnedHeaders {
    pub version: String,
    pub session: Option<String>,
    /// The call's `Authorization` value (its caller's upstream credential).
    pub auth: Option<http::HeaderValue>,
}

impl OwnedHeaders {
    fn as_headers(&self) -> Headers<'_> {
        Headers::Legacy { version: &self.version, session: self.session.as_deref() }
    }
}
