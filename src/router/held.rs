//! MRTR relay in the router: legacy servers' mid-call questions become `input_required`
//! results, and the client's retry resumes the held upstream call (reference §7.5).
//!
//! The `requestState` the client echoes is an unguessable handle into a table of held calls,
//! each bound to the caller (principal or anonymous `_meta` digest), method and target that started it; the state itself never
//! leaves the proxy. Held calls are bounded in number and lifetime.

use crate::upstream::OnBehalf;
use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::rewrite;
use super::{Answer, Call, Routing};
use crate::cache::Owner;
use crate::error::{DownstreamError, Error};
use crate::jsonrpc::{RawObject, RequestId, encode_result};
use crate::mcp;
use crate::upstream::relay::{HeldCall, ServerRequest};
use crate::upstream::{Relayed, Reply};

/// Prefix of the proxy's own `requestState` handles.
const HANDLE_PREFIX: &str = "resmux-held.";
/// The key of the one question in `inputRequests`.
const KEY: &str = "upstream";

/// One held call.
struct Held {
    call: HeldCall,
    question: ServerRequest,
    /// The upstream's slot (not its position, which a reload may move).
    slot: u32,
    /// Who started it: the principal, or for an anonymous caller its `_meta` digest (see
    /// [`Call::owner`]), so that another anonymous client cannot resume it either.
    owner: Owner,
    /// The authenticated principal's id, counted toward `max_held_calls_per_principal`.
    principal: Option<String>,
    method: String,
    target: String,
    expires: Instant,
}

/// Held calls by handle.
#[derive(Default)]
pub(super) struct HeldCalls {
    map: Mutex<HashMap<String, Held>>,
}

impl HeldCalls {
    /// Drops the calls past their `held_call_ttl` (abandoning their upstream calls); returns
    /// how many remain.
    pub(super) fn reap(&self, now: Instant) -> usize {
        let mut map = self.map.lock().expect("held lock");
        map.retain(|_, h| h.expires > now);
        map.len()
    }

    /// Calls held now.
    pub(super) fn len(&self) -> usize {
        self.map.lock().expect("held lock").len()
    }
}

/// The server-request methods a downstream request can answer, from its declared
/// `clientCapabilities`.
pub(super) fn relayable(meta: &RawObject<'_>) -> Vec<String> {
    let caps: Value =
        meta.get(mcp::META_CLIENT_CAPABILITIES).and_then(|c| serde_json::from_str(c.get()).ok()).unwrap_or(Value::Null);
    [("elicitation", "elicitation/create"), ("sampling", "sampling/createMessage"), ("roots", "roots/list")]
        .into_iter()
        .filter(|(cap, _)| caps.get(cap).is_some_and(|c| !c.is_null()))
        .map(|(_, method)| method.to_owned())
        .collect()
}

/// Whether a `requestState` is one of the proxy's handles.
pub(super) fn is_handle(state: &str) -> bool {
    state.starts_with(HANDLE_PREFIX)
}

impl Routing {
    /// Calls upstream `index`, relaying its questions when the client can answer them.
    pub(super) async fn call_relaying(&self, call: &Call<'_>, index: usize, target: &str) -> Result<Answer, Error> {
        let upstream = &self.0.upstreams[index];
        let params = call.upstream_params(upstream, |p| p.set_string("name", target));
        let outcome = upstream
            .call_relayed(
                call.method,
                &params,
                relayable(call.meta),
                call.progress.as_ref(),
                OnBehalf::Caller(call.principal),
            )
            .await?;
        self.relayed_answer(call, index, target, outcome)
    }

    /// Resumes a held call with the client's answer.
    pub(super) async fn resume_held(&self, call: &Call<'_>, state: &str, target: &str) -> Result<Answer, Error> {
        let bad = |m: &str| Error::from(DownstreamError::InvalidParams(m.to_owned()));
        let held = {
            let mut map = self.0.shared.held.map.lock().expect("held lock");
            map.remove(state).ok_or_else(|| bad("unknown or expired requestState"))?
        };
        if held.owner != call.owner() || held.method != call.method || held.target != target {
            // Not the caller's: put it back untouched.
            self.0.shared.held.map.lock().expect("held lock").insert(state.to_owned(), held);
            return Err(bad("requestState does not belong to this request"));
        }
        // A reload since the question may have moved the upstream, or replaced or removed it
        // (which ended its held calls): the call starts over.
        let Some(index) = self.position(held.slot) else {
            return Err(bad("the upstream holding this call was reconfigured; call again"));
        };
        let answer: Option<Value> = call
            .params
            .get("inputResponses")
            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
            .and_then(|r| r.get(KEY).cloned());
        let Some(answer) = answer else {
            // Spec: a retry missing responses gets a fresh input_required, not an error.
            return self.ask(held.call, held.question, index, call, target);
        };
        let id = RequestId::from_raw(
            &*serde_json::value::RawValue::from_string(held.question.id.clone()).map_err(|_| bad("held id"))?,
        )
        .ok_or_else(|| bad("held id"))?;
        let response = encode_result(&id, &serde_json::to_vec(&answer).expect("serializable"));
        let upstream = &self.0.upstreams[index];
        let params = call.upstream_params(upstream, |p| {
            p.remove("inputResponses");
            p.remove("requestState");
            p.set_string("name", target);
        });
        let outcome = upstream.resume_relayed(held.call, call.method, &params, response).await?;
        self.relayed_answer(call, index, target, outcome)
    }

    fn relayed_answer(&self, call: &Call<'_>, index: usize, target: &str, outcome: Relayed) -> Result<Answer, Error> {
        match outcome {
            Relayed::Done(Reply::Result(body)) => {
                Ok(Answer::result(self.rewrite(rewrite::content_result(&body, &self.0.ns, index), index)?))
            }
            Relayed::Done(Reply::Error(e)) => Ok(Answer::error(rewrite::error(e, &self.0.ns, index))),
            Relayed::Asked(question, held) => self.ask(held, question, index, call, target),
        }
    }

    /// Holds the call and answers `input_required` with the server's question. Over
    /// `max_held_calls_per_principal` the call is abandoned and the request gets `429`.
    fn ask(
        &self,
        held: HeldCall,
        question: ServerRequest,
        index: usize,
        call: &Call<'_>,
        target: &str,
    ) -> Result<Answer, Error> {
        let handle = format!("{HANDLE_PREFIX}{:032x}", rand::random::<u128>());
        let result = json!({
            "resultType": "input_required",
            "inputRequests": { KEY: {"method": question.method, "params": question.params} },
            "requestState": handle,
        });
        let now = Instant::now();
        let mut map = self.0.shared.held.map.lock().expect("held lock");
        map.retain(|_, h| h.expires > now);
        if map.len() >= self.0.proxy.max_held_calls {
            drop(map);
            tracing::warn!("too many held calls; abandoning one upstream call");
            return Ok(Answer::error(crate::jsonrpc::RpcError::new(
                crate::jsonrpc::code::INTERNAL_ERROR,
                "the proxy holds too many calls awaiting client input; retry later",
            )));
        }
        let principal = call.principal.identity().map(|i| i.id.clone());
        let cap = self.0.proxy.max_held_calls_per_principal;
        if let Some(id) = &principal
            && cap > 0
            && map.values().filter(|h| h.principal.as_ref() == Some(id)).count() >= cap
        {
            drop(map);
            tracing::debug!(principal = %id, "held calls per principal reached; abandoning one upstream call");
            return Err(DownstreamError::LimitReached(format!(
                "this principal has {cap} calls awaiting its input already; answer or abandon one first"
            ))
            .into());
        }
        map.insert(
            handle,
            Held {
                call: held,
                question,
                slot: self.0.upstreams[index].slot(),
                owner: call.owner(),
                principal,
                method: call.method.to_owned(),
                target: target.to_owned(),
                expires: now + self.0.proxy.held_call_ttl,
            },
        );
        Ok(Answer::result(Bytes::from(serde_json::to_vec(&result).expect("serializable"))))
    }

    /// Reaps expired held calls every quarter of `held_call_ttl` (between 100 ms and 60 s)
    /// until `cancel`, so that an abandoned call's upstream request and memory go within 25 %
    /// of its deadline, not at the next question.
    pub fn start_reaper(&self, cancel: &tokio_util::sync::CancellationToken, tracker: &tokio_util::task::TaskTracker) {
        let period = (self.0.proxy.held_call_ttl / 4)
            .clamp(std::time::Duration::from_millis(100), std::time::Duration::from_secs(60));
        let shared = self.0.shared.clone();
        crate::periodic::every(period, cancel, tracker, move || {
            shared.held.reap(Instant::now());
        });
    }

    /// Calls held now, awaiting their clients' answers.
    pub fn held_calls(&self) -> usize {
        self.0.shared.held.len()
    }
}
