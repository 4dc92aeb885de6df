//! One legacy session: the protocol version negotiated at `initialize`, the URIs the client
//! subscribed with `resources/subscribe`, and its registration in the hub.
//!
//! The hub knows a session as one listener whose filter is the session's URIs plus every list
//! kind (legacy clients get `list_changed` unsolicited). The session is registered only while
//! it needs to be: while it has subscribed URIs, or while its standalone stream is open.
//! When the URI set changes, the new registration is made before the old one is dropped, and
//! the old one's pending changes move over, so upstream interest never flaps and no change is
//! lost.
//!
//! A registered session counts as one listen toward the hub's limits (`max_listeners`,
//! `max_listens_per_principal`), and its URI set is bounded by `max_uris_per_listen`: a
//! `resources/subscribe` beyond it is refused and leaves the set as it was.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::token::Nonce;
use crate::auth::Principal;
use crate::cluster::{Adopted, Cluster};
use crate::error::{DownstreamError, Error};
use crate::hub::{Hub, Listener, Notice, Subscription};
use crate::jsonrpc::RequestId;
use crate::mcp::Capability;
use crate::mcp::notify::Filter;

/// A legacy session. Shared (`Arc`) by the session table, the requests in flight and the
/// session's stream writer.
pub struct DownstreamSession {
    /// The protocol version negotiated at `initialize`.
    pub version: &'static str,
    /// Who created it: the only principal that may use it.
    pub owner: Principal,
    state: Mutex<State>,
    /// The hub listener the stream writer should drain, replaced as the URI set changes.
    current: watch::Sender<Option<Arc<Listener>>>,
    /// Fires when the session ends (DELETE, eviction, end of the stdio connection).
    ended: CancellationToken,
    /// Where its subscriptions are shared with the other replicas, in a cluster.
    shared: std::sync::OnceLock<Shared>,
}

/// A session's record in the cluster tier.
struct Shared {
    cluster: Cluster,
    nonce: Nonce,
    /// Its record's name in Redis.
    name: Box<str>,
    /// How long Redis keeps it without a change or a touch.
    keep: Duration,
    /// Set once the subscriptions recorded by another replica are restored here: whether the
    /// session goes on (false: it was ended elsewhere).
    restored: tokio::sync::OnceCell<bool>,
}

struct State {
    /// Subscribed URIs, in downstream (namespaced) form.
    uris: BTreeSet<String>,
    /// Whether the standalone stream is open (at most one per session).
    streaming: bool,
    sub: Option<Subscription>,
    /// Last request or stream activity, for idle eviction.
    last_seen: Instant,
}

/// Marks the session's stream open; dropping it marks it closed.
pub struct StreamGuard(Arc<DownstreamSession>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().expect("session state");
        state.streaming = false;
        state.last_seen = Instant::now();
        if state.uris.is_empty() {
            // Nothing to hold changes for until the next stream: leave the hub.
            state.sub = None;
            self.0.current.send_replace(None);
        }
    }
}

impl DownstreamSession {
    /// A session of `owner` negotiated for `version`, active as of `now`.
    pub fn new(version: &'static str, owner: Principal, now: Instant) -> Arc<Self> {
        Arc::new(Self {
            version,
            owner,
            state: Mutex::new(State { uris: BTreeSet::new(), streaming: false, sub: None, last_seen: now }),
            current: watch::channel(None).0,
            ended: CancellationToken::new(),
            shared: std::sync::OnceLock::new(),
        })
    }

    /// Shares the session's subscriptions through `cluster` under `nonce`. A session this
    /// replica created (`fresh`) has nothing to restore.
    pub fn share(&self, cluster: Cluster, nonce: Nonce, keep: Duration, fresh: bool) {
        let restored = match fresh {
            true => tokio::sync::OnceCell::new_with(Some(true)),
            false => tokio::sync::OnceCell::new(),
        };
        let name = cluster.session_name(&nonce).into();
        let _ = self.shared.set(Shared { cluster, nonce, name, keep, restored });
    }

    /// For a session another replica started: its subscriptions as recorded there, restored
    /// once (concurrent requests wait for the first); a session ended there is 404. Redis
    /// unreachable: it goes on with what this replica knows.
    pub async fn restore(&self, hub: &Hub, principal: &Principal) -> Result<(), Error> {
        let Some(shared) = self.shared.get() else { return Ok(()) };
        let alive = *shared
            .restored
            .get_or_init(|| async {
                match shared.cluster.adopt_session(&shared.nonce).await {
                    Ok(Adopted::Ended) => false,
                    Ok(Adopted::Subscribed(uris)) => {
                        for uri in uris {
                            if let Err(e) = self.subscribe(hub, principal, &uri) {
                                tracing::warn!(%uri, error = %e, "cannot restore a legacy session's subscription");
                            }
                        }
                        true
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot restore a legacy session's subscriptions from redis");
                        true
                    }
                }
            })
            .await;
        if alive { Ok(()) } else { Err(DownstreamError::SessionNotFound.into()) }
    }

    /// Records the subscriptions for the other replicas (after `resources/subscribe` or
    /// `unsubscribe`).
    pub async fn save(&self) {
        let Some(shared) = self.shared.get() else { return };
        if let Err(e) = shared.cluster.store_session(&shared.nonce, &self.subscribed(), shared.keep).await {
            tracing::warn!(error = %e, "cannot record a legacy session's subscriptions in redis");
        }
    }

    /// The cluster record's nonce, for keeping it alive.
    pub fn shared_nonce(&self) -> Option<Nonce> {
        self.shared.get().map(|s| s.nonce)
    }

    /// The cluster record's name, to match an end announced by another replica.
    pub fn shared_name(&self) -> Option<&str> {
        self.shared.get().map(|s| &*s.name)
    }

    /// Records activity at `now`.
    pub fn touch(&self, now: Instant) {
        let mut state = self.state.lock().expect("session state");
        state.last_seen = state.last_seen.max(now);
    }

    /// When the session went quiet, or `None` while its stream is open (never idle then).
    pub fn idle_since(&self) -> Option<Instant> {
        let state = self.state.lock().expect("session state");
        (!state.streaming).then_some(state.last_seen)
    }

    /// The subscribed URIs.
    pub fn subscribed(&self) -> Vec<String> {
        self.state.lock().expect("session state").uris.iter().cloned().collect()
    }

    /// Adds `uri` to the subscribed set (`resources/subscribe`).
    pub fn subscribe(&self, hub: &Hub, principal: &Principal, uri: &str) -> Result<(), Error> {
        let mut state = self.state.lock().expect("session state");
        if state.uris.contains(uri) {
            return Ok(());
        }
        let mut uris = state.uris.clone();
        uris.insert(uri.to_owned());
        self.register(&mut state, hub, principal, uris)
    }

    /// Removes `uri` from the subscribed set (`resources/unsubscribe`).
    pub fn unsubscribe(&self, hub: &Hub, principal: &Principal, uri: &str) -> Result<(), Error> {
        let mut state = self.state.lock().expect("session state");
        if !state.uris.contains(uri) {
            return Ok(());
        }
        let mut uris = state.uris.clone();
        uris.remove(uri);
        self.register(&mut state, hub, principal, uris)
    }

    /// Opens the session's one standalone stream; a second one is a conflict.
    pub fn open_stream(self: &Arc<Self>, hub: &Hub, principal: &Principal) -> Result<StreamGuard, Error> {
        let mut state = self.state.lock().expect("session state");
        if self.ended.is_cancelled() {
            return Err(DownstreamError::SessionNotFound.into());
        }
        if state.streaming {
            return Err(DownstreamError::StreamConflict.into());
        }
        state.streaming = true;
        if state.sub.is_none() {
            let uris = state.uris.clone();
            if let Err(e) = self.register(&mut state, hub, principal, uris) {
                state.streaming = false;
                return Err(e);
            }
        }
        Ok(StreamGuard(self.clone()))
    }

    /// Follows the hub listener the stream should drain.
    pub fn listener(&self) -> watch::Receiver<Option<Arc<Listener>>> {
        self.current.subscribe()
    }

    /// Fires when the session ends.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    /// Ends the session: its stream closes and it leaves the hub.
    pub fn end(&self) {
        let mut state = self.state.lock().expect("session state");
        self.ended.cancel();
        state.uris.clear();
        state.sub = None;
        self.current.send_replace(None);
    }

    /// Makes the hub registration match `uris` (make-before-break), then records them.
    fn register(
        &self,
        state: &mut State,
        hub: &Hub,
        principal: &Principal,
        uris: BTreeSet<String>,
    ) -> Result<(), Error> {
        if self.ended.is_cancelled() {
            return Err(DownstreamError::SessionNotFound.into());
        }
        let wanted = state.streaming || !uris.is_empty();
        let new = match wanted {
            true => Some(hub.subscribe(principal, RequestId::number(0), &filter(&uris))?),
            false => None,
        };
        if let (Some(old), Some(new)) = (&state.sub, &new) {
            let carried: Vec<Notice> = old
                .listener
                .take()
                .into_iter()
                .filter(|p| match p {
                    Notice::Uri(uri) => uris.contains(&**uri),
                    Notice::List(_) => true,
                })
                .collect();
            if !carried.is_empty() {
                new.listener.push_all(&carried);
            }
        }
        let old = std::mem::replace(&mut state.sub, new);
        state.uris = uris;
        self.current.send_replace(state.sub.as_ref().map(|s| s.listener.clone()));
        // Only now does the old registration leave the hub.
        drop(old);
        Ok(())
    }
}

/// What the hub should deliver to a session subscribed to `uris`: those URIs, and every list
/// change (the hub honours what the upstreams declared).
fn filter(uris: &BTreeSet<String>) -> Filter {
    let mut f = Filter { uris: uris.clone(), ..Filter::default() };
    for kind in Capability::ALL {
        f.set_list(kind, true);
    }
    f
}
