//! One stdio connection: how each incoming message is routed (era, method), what is in
//! flight and how to cancel it, the legacy session once the client initialized, and the end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::{CLOSE, DRAIN};
use crate::auth::Principal;
use crate::downstream::framing::Framing;
use crate::downstream::legacy::stream::{StreamOptions, pump};
use crate::downstream::legacy::{DownstreamSession, Legacy, negotiate, rpc_error};
use crate::downstream::listen::{self, WriteOptions};
use crate::downstream::progress;
use crate::downstream::validate::{self, Body};
use crate::error::Error;
use crate::hub::Hub;
use crate::jsonrpc::{Incoming, Kind, RawObject, RequestId, RpcError, code, encode_error};
use crate::mcp::{legacy_method as lm, method as m};
use crate::router::{Answer, Call, Router};

/// How long a listen (or the legacy session's notifications) waits for stdout to accept a
/// message. A stdio client that stops reading stalls everything it asked for, so waiting is
/// right, and changes coalesce meanwhile; ending the listen would end it silently.
const STDOUT_PATIENCE: Duration = Duration::from_secs(24 * 3600);

pub(super) struct Conn {
    /// Deepest JSON nesting accepted in a line (`[listen] max_json_depth`).
    max_depth: usize,
    router: Router,
    hub: Hub,
    legacy: Legacy,
    out: mpsc::Sender<Bytes>,
    /// stdio carries no credentials: the one client is anonymous.
    principal: Principal,
    /// What is in flight, by request id: its cancellation, and a sequence number so that a
    /// finishing request never forgets a newer one that reused its id. Bounded by the
    /// request slots plus the hub's limit on listens.
    in_flight: Mutex<HashMap<RequestId, InFlight>>,
    next_seq: AtomicU64,
    /// The legacy session, once the client sent `initialize`.
    session: Mutex<Option<Arc<DownstreamSession>>>,
    /// Fires at the end of the connection: listens end with their result.
    finish: CancellationToken,
    /// Request tasks (drained at the end) and long-lived streams (finished at the end).
    requests: TaskTracker,
    streams: TaskTracker,
}

struct InFlight {
    seq: u64,
    cancel: CancellationToken,
    listen: bool,
}

/// Where a request goes.
enum Route {
    Initialize,
    Legacy(Arc<DownstreamSession>),
    Modern,
}

impl Conn {
    pub fn new(router: Router, hub: Hub, out: mpsc::Sender<Bytes>, max_depth: usize) -> Self {
        Self {
            max_depth,
            legacy: Legacy::new(router.clone(), hub.clone()),
            router,
            hub,
            out,
            principal: Principal::Anonymous,
            in_flight: Mutex::default(),
            next_seq: AtomicU64::new(0),
            session: Mutex::default(),
            finish: CancellationToken::new(),
            requests: TaskTracker::new(),
            streams: TaskTracker::new(),
        }
    }

    /// Handles one line. Returns once the message is registered (and, for a request, has a
    /// slot), so that a later `notifications/cancelled` finds it.
    pub async fn dispatch(self: &Arc<Self>, line: String, permits: &Arc<Semaphore>) {
        if line.trim().is_empty() {
            return;
        }
        let msg = match Incoming::parse_limited(&line, self.max_depth) {
            Ok(msg) => msg,
            Err(e) => return self.send(&encode_error(e.id(), &e.to_rpc())).await,
        };
        match msg.kind {
            Kind::Notification if msg.method() == m::CANCELLED => return self.cancel(&msg),
            // `notifications/initialized` needs nothing; the proxy sends no requests whose
            // answers (`Kind::Response`) it would wait for.
            Kind::Notification | Kind::Response => return,
            Kind::Request => {}
        }
        let id = msg.id.clone().expect("requests have ids");
        if self.in_flight.lock().expect("in flight").contains_key(&id) {
            return self.send(&duplicate(&id)).await;
        }
        let modern = validate::is_modern(&msg);
        let route = if !modern && msg.method() == lm::INITIALIZE {
            if let Err(e) = self.start_session(&msg) {
                return self.send(&encode_error(Some(&id), &rpc_error(&e))).await;
            }
            Route::Initialize
        } else if let Some(session) = self.session.lock().expect("session").clone().filter(|_| !modern) {
            Route::Legacy(session)
        } else {
            match validate::check_body(&msg) {
                Ok(Body::Request(checked)) if checked.method == m::LISTEN => {
                    return self.start_listen(&id, checked.params).await;
                }
                Ok(_) => Route::Modern,
                Err(r) => return self.send(&encode_error(r.id.as_ref(), &Error::from(r.error).to_jsonrpc().1)).await,
            }
        };
        let Some((seq, cancel)) = self.register(&id, false) else {
            return self.send(&duplicate(&id)).await;
        };
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let (span, _) = crate::telemetry::request_span(crate::headers::Headers::NONE);
        self.requests.spawn(self.clone().run(line, id, seq, cancel, permit, route).instrument(span));
    }

    /// Serves one request unless it is cancelled first.
    async fn run(
        self: Arc<Self>,
        line: String,
        id: RequestId,
        seq: u64,
        cancel: CancellationToken,
        _permit: OwnedSemaphorePermit,
        route: Route,
    ) {
        let msg = Incoming::parse_limited(&line, self.max_depth).expect("parsed once already");
        let reply = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            reply = self.answer(&msg, &id, route) => Some(reply),
        };
        self.forget(&id, seq);
        if let Some(reply) = reply {
            self.send(&reply).await;
        }
    }

    async fn answer(&self, msg: &Incoming<'_>, id: &RequestId, route: Route) -> Bytes {
        let p = &self.principal;
        crate::telemetry::record_method(msg.method());
        match route {
            Route::Initialize => {
                legacy_reply(id, self.legacy.initialize(msg.params, p).await.map(|(_, result)| Answer::result(result)))
                    .await
            }
            Route::Legacy(session) => {
                legacy_reply(id, self.legacy.request(&session, msg.method(), msg.params, p).await).await
            }
            Route::Modern => {
                let answer = match validate::check_body(msg) {
                    Ok(Body::Request(c)) => {
                        crate::telemetry::continue_trace(c.meta, false);
                        let mut call = Call::new(c.method, c.params, c.meta, p);
                        if progress::wanted(c.method, call.meta) {
                            let (tx, rx) = progress::channel();
                            call.progress = Some(tx);
                            progress::relay(self.router.handle(&call), rx, |m| async move { self.send(&m).await }).await
                        } else {
                            self.router.handle(&call).await
                        }
                    }
                    _ => Err(Error::Internal("a validated request no longer validates".into())),
                };
                progress::encode_answer(id, answer).await
            }
        }
    }

    /// A legacy `initialize`: the connection becomes the session (once), and its
    /// notifications start flowing to stdout.
    fn start_session(&self, msg: &Incoming<'_>) -> Result<(), Error> {
        let mut slot = self.session.lock().expect("session");
        if slot.is_some() {
            return Ok(());
        }
        let requested = msg
            .params
            .and_then(|p| RawObject::parse(p).ok())
            .and_then(|p| p.get_str("protocolVersion").map(|v| v.into_owned()));
        let session = DownstreamSession::new(
            negotiate(requested.as_deref()),
            self.principal.clone(),
            tokio::time::Instant::now(),
        );
        let guard = session.open_stream(&self.hub, &self.principal)?;
        let opts = StreamOptions {
            framing: Framing::Lines,
            keepalive: self.hub.config().keepalive,
            slow: STDOUT_PATIENCE,
            stop: self.finish.clone(),
        };
        self.streams.spawn(pump(session.clone(), guard, self.out.clone(), opts));
        *slot = Some(session);
        Ok(())
    }

    /// A modern `subscriptions/listen`: registered now, written by its own task.
    async fn start_listen(self: &Arc<Self>, id: &RequestId, params: &RawObject<'_>) {
        let sub = match listen::subscribe(&self.hub, id, params, &self.principal, 0) {
            Ok(sub) => sub,
            Err(e) => return self.send(&encode_error(Some(id), &e.to_jsonrpc().1)).await,
        };
        let Some((seq, cancel)) = self.register(id, true) else {
            return self.send(&duplicate(id)).await;
        };
        let opts = WriteOptions {
            framing: Framing::Lines,
            cancelled: cancel,
            finish: self.finish.clone(),
            slow: STDOUT_PATIENCE,
        };
        let (me, id) = (self.clone(), id.clone());
        self.streams.spawn(async move {
            listen::write(sub, me.out.clone(), opts).await;
            me.forget(&id, seq);
        });
    }

    /// `notifications/cancelled {requestId}`: the request or listen ends without a response.
    fn cancel(&self, msg: &Incoming<'_>) {
        let target = msg
            .params
            .and_then(|p| RawObject::parse(p).ok())
            .and_then(|p| p.get("requestId").and_then(RequestId::from_raw));
        let Some(target) = target else { return };
        if let Some(entry) = self.in_flight.lock().expect("in flight").remove(&target) {
            entry.cancel.cancel();
        }
    }

    /// A line over the size limit.
    pub async fn too_long(&self, max: usize) {
        let err = RpcError::new(code::INVALID_REQUEST, format!("Invalid request: message exceeds {max} bytes"));
        self.send(&encode_error(None, &err)).await;
    }

    /// Stdin closed: in-flight requests get [`DRAIN`] to finish (then are cancelled), listens
    /// end with their result, the legacy session ends.
    pub async fn close(&self) {
        self.requests.close();
        if timeout(DRAIN, self.requests.wait()).await.is_err() {
            tracing::warn!("cancelling requests still in flight after stdin closed");
            for entry in self.in_flight.lock().expect("in flight").values().filter(|e| !e.listen) {
                entry.cancel.cancel();
            }
        }
        self.finish.cancel();
        if let Some(session) = self.session.lock().expect("session").take() {
            session.end();
        }
        self.streams.close();
        if timeout(CLOSE, self.streams.wait()).await.is_err() {
            tracing::warn!("some listens did not end in time");
        }
    }

    fn register(&self, id: &RequestId, listen: bool) -> Option<(u64, CancellationToken)> {
        let mut in_flight = self.in_flight.lock().expect("in flight");
        if in_flight.contains_key(id) {
            return None;
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        in_flight.insert(id.clone(), InFlight { seq, cancel: cancel.clone(), listen });
        Some((seq, cancel))
    }

    fn forget(&self, id: &RequestId, seq: u64) {
        let mut in_flight = self.in_flight.lock().expect("in flight");
        if in_flight.get(id).is_some_and(|e| e.seq == seq) {
            in_flight.remove(id);
        }
    }

    async fn send(&self, message: &[u8]) {
        // Fails only when stdout is gone, and then there is no one to tell.
        let _ = self.out.send(Framing::Lines.frame(message)).await;
    }
}

/// A legacy route's reply: errors in their legacy form.
async fn legacy_reply(id: &RequestId, outcome: Result<Answer, Error>) -> Bytes {
    match outcome {
        Ok(answer) => progress::encode_answer(id, Ok(answer)).await,
        Err(e) => encode_error(Some(id), &rpc_error(&e)),
    }
}

/// JSON-RPC forbids reusing an id that is still awaiting its response.
fn duplicate(id: &RequestId) -> Bytes {
    encode_error(Some(id), &RpcError::new(code::INVALID_REQUEST, "Invalid request: this id is already in flight"))
}
