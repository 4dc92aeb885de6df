//! Relaying a legacy server's questions to the downstream client as MRTR (reference §7.5).
//!
//! When a legacy server asks the client something in the middle of a call (elicitation,
//! sampling, roots) and the downstream request declared that capability, the proxy holds the
//! upstream call open in a task, hands the question to the client as an `input_required`
//! result, and on the client's retry posts its answer upstream and reads on.

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::http::{self, Headers, HttpTransport};
use super::sse::SseStream;
use super::{Era, OnBehalf, ProgressSink, Transport, Upstream, legacy};
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::Reply;
use crate::jsonrpc::encode_request;
use crate::jsonrpc::{Incoming, Kind};
use tokio::time::{Instant, timeout_at};

/// The outcome of a call that may ask the client questions.
pub enum Relayed {
    Done(Reply),
    /// The upstream asked something; the call is held until the client answers.
    Asked(ServerRequest, HeldCall),
}

impl Upstream {
    /// Sends a call whose mid-call questions (legacy server requests with a method in `relay`)
    /// are handed back instead of declined. Only legacy HTTP upstreams ask such questions on
    /// the call's own stream; for any other upstream this is [`Upstream::request`].
    pub async fn call_relayed(
        &self,
        method: &str,
        params: &[u8],
        relay: Vec<String>,
        progress: Option<&ProgressSink>,
        on: OnBehalf<'_>,
    ) -> Result<Relayed, UpstreamError> {
        let timeout = self.0.config.timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || UpstreamError::new(self.name(), UpstreamErrorKind::Timeout { after: timeout });
        let era = self.wait_era(deadline).await;
        let (Era::Legacy(session), Transport::Http(t)) = (&era, &self.0.transport) else {
            return self.request_with(method, params, progress, on).await.map(Relayed::Done);
        };
        if relay.is_empty() {
            return self.request_with(method, params, progress, on).await.map(Relayed::Done);
        }
        let auth = timeout_at(deadline, self.auth_for(on)).await.map_err(|_| timed_out())??;
        let header = auth.as_deref().map(|a| a.header());
        let permit = timeout_at(deadline, self.0.in_flight.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .expect("semaphore is never closed");
        let translated = legacy::translate_params(params).into_owned();
        let id = self.next_id();
        let body = encode_request(&id, method, &translated);
        let headers = http::Headers::Legacy { version: &session.version, session: session.id.as_deref() };
        let opened =
            timeout_at(deadline, t.open(id.as_json(), body, &headers, header)).await.map_err(|_| timed_out())??;
        match opened {
            http::Opened::Reply(ex) => {
                if http::session_lost(ex.status, Some(&ex.reply)) {
                    drop(permit);
                    // A fresh session, then the plain path (no questions can be relayed there).
                    self.reinitialize(&era).await?;
                    return self.request_with(method, params, None, on).await.map(Relayed::Done);
                }
                Ok(Relayed::Done(legacy::translate_reply(method, &translated, ex.reply, &self.0.config)))
            }
            http::Opened::Stream { body, .. } => {
                let owned = OwnedHeaders {
                    version: session.version.clone(),
                    session: session.id.clone(),
                    auth: header.cloned(),
                };
                let held = hold(
                    t.clone(),
                    owned,
                    id.as_json().to_owned(),
                    body,
                    relay,
                    legacy::answer_server_request,
                    Some(permit),
                    &self.0.tracker,
                );
                self.next_step(held, method, &translated).await
            }
        }
    }

    /// Answers the pending question of a held call and reads on to its next step.
    pub async fn resume_relayed(
        &self,
        mut held: HeldCall,
        method: &str,
        params: &[u8],
        answer: Bytes,
    ) -> Result<Relayed, UpstreamError> {
        if !held.answer(answer).await {
            return Err(UpstreamError::new(
                self.name(),
                UpstreamErrorKind::Disconnected { reason: "held call ended".into() },
            ));
        }
        let translated = legacy::translate_params(params).into_owned();
        self.next_step(held, method, &translated).await
    }

    pub(super) async fn next_step(
        &self,
        mut held: HeldCall,
        method: &str,
        translated: &[u8],
    ) -> Result<Relayed, UpstreamError> {
        let timeout = self.0.config.timeout;
        let step = tokio::time::timeout(timeout, held.next())
            .await
            .map_err(|_| UpstreamError::new(self.name(), UpstreamErrorKind::Timeout { after: timeout }))?;
        match step {
            Step::Asked(question) => Ok(Relayed::Asked(question, held)),
            Step::Done(Ok(reply)) => {
                Ok(Relayed::Done(legacy::translate_reply(method, translated, reply, &self.0.config)))
            }
            Step::Done(Err(e)) => Err(e),
        }
    }
}

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
    /// The upstream's name, for the error when the call's task is gone.
    upstream: std::sync::Arc<str>,
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
        let upstream = &self.upstream;
        self.steps.recv().await.unwrap_or_else(|| {
            let kind = UpstreamErrorKind::Disconnected { reason: "held call ended".into() };
            Step::Done(Err(UpstreamError::new(upstream.clone(), kind)))
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
    let upstream = transport.name();
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
                    let e = transport.err_disconnected("stream ended");
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
    HeldCall { upstream, steps, answers, task }
}

/// Owned copy of a legacy request's protocol headers, for a task.
pub struct OwnedHeaders {
    pub version: String,
    pub session: Option<String>,
    /// The call's `Authorization` value (its caller's upstream credential).
    pub auth: Option<::http::HeaderValue>,
}

impl OwnedHeaders {
    fn as_headers(&self) -> Headers<'_> {
        Headers::Legacy { version: &self.version, session: self.session.as_deref() }
    }
}
