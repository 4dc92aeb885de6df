//! A listen's messages as a stream the connection pulls: the acknowledgment once the upstreams
//! carry what was honoured, then the listener's pending changes each time it is woken (all of
//! them in one chunk), keep-alives while idle (where the framing has them), and the listen's
//! result when the proxy shuts down.
//!
//! Nothing runs for a listener between polls: the fan-out queues a change in its coalescing
//! set and wakes the connection's task, which takes the set when it can write. A connection
//! that cannot write does not poll, and its listener's changes coalesce meanwhile; the hub
//! drops a listener that took nothing for the slow-listener time.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, Sleep, sleep};

use super::{ack, final_result, notification};
use crate::downstream::framing::Framing;
use crate::hub::{Ending, Subscription};

/// Longest wait for the upstreams to carry a new listen before it is acknowledged anyway (one
/// that is down resyncs its listeners when it is back).
const MAX_ACK_WAIT: Duration = Duration::from_secs(3);

/// Where a listen stream is.
enum Phase {
    /// Waiting (bounded) for the upstreams; the acknowledgment comes next.
    Ready(Pin<Box<dyn Future<Output = ()> + Send>>),
    Live,
    Done,
}

/// One listen's stream of framed messages.
pub struct ListenStream {
    sub: Subscription,
    phase: Phase,
    framing: Framing,
    /// The next keep-alive (none where the framing has none).
    keepalive: Option<Pin<Box<Sleep>>>,
}

impl ListenStream {
    /// The stream of `sub` as SSE events (what an HTTP listen's body carries).
    pub fn sse(sub: Subscription) -> Self {
        Self::new(sub, Framing::Sse)
    }

    /// The stream of `sub`, framed with `framing`. The hub drops the listener once it takes
    /// nothing for the slow-listener time.
    pub(in crate::downstream) fn new(sub: Subscription, framing: Framing) -> Self {
        sub.listener.drop_when_stalled();
        let (hub, listener) = (sub.hub().clone(), sub.listener.clone());
        let wait = hub.config().ack_timeout.min(MAX_ACK_WAIT);
        // Acknowledged once the upstreams carry what was honoured, so no change after the
        // acknowledgment is missed.
        let ready = Box::pin(async move {
            hub.ready(&listener, wait).await;
        });
        Self { sub, phase: Phase::Ready(ready), framing, keepalive: None }
    }

    fn sid(&self) -> &str {
        self.sub.listener.subscription.as_json()
    }

    fn keepalive_every(&self) -> Duration {
        self.sub.hub().config().keepalive.max(Duration::from_millis(10))
    }

    /// The pending changes as one chunk, if any.
    fn changes(&self) -> Option<Bytes> {
        let taken = self.sub.listener.take_timed();
        if taken.is_empty() {
            return None;
        }
        let (count, since) = (taken.len(), taken.since);
        let sid = self.sid();
        let framing = self.framing;
        let chunk = SCRATCH.with_borrow_mut(|out| {
            out.clear();
            taken.for_each(|change| framing.append(out, |out| notification(out, sid, &change)));
            // Copied out at its exact length: one allocation, which the `Bytes` owns as is
            // (a vector with spare room would need a second one for the shared count).
            let chunk = Bytes::copy_from_slice(out);
            if out.capacity() > MAX_SCRATCH {
                *out = Vec::new();
            }
            chunk
        });
        // From the fan-out of the oldest change of this chunk (an upper bound for the others,
        // which coalesced behind it).
        if let Some(at) = since {
            let after = at.elapsed();
            (0..count).for_each(|_| self.sub.hub().delivered(after));
        }
        Some(chunk)
    }
}

/// Largest scratch buffer a worker thread keeps for building chunks (a chunk of many changes
/// grows it past this once; it is not kept).
const MAX_SCRATCH: usize = 16 << 10;

thread_local! {
    /// Where a chunk is built before it is copied out at its exact length.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl futures_util::Stream for ListenStream {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        match &mut this.phase {
            Phase::Ready(ready) => {
                ready!(ready.as_mut().poll(cx));
                this.phase = Phase::Live;
                if let Some(ka) = this.framing.keepalive().map(|_| this.keepalive_every()) {
                    this.keepalive = Some(Box::pin(sleep(ka)));
                }
                let honoured = std::mem::take(&mut this.sub.honoured);
                let sid = this.sid();
                return Poll::Ready(Some(this.framing.build(160, |out| ack(out, sid, &honoured))));
            }
            Phase::Done => return Poll::Ready(None),
            Phase::Live => {}
        }
        let listener = &this.sub.listener;
        let woken = listener.poll_woken(cx);
        let ending = listener.ending();
        if ending == Ending::Closed {
            this.phase = Phase::Done;
            return Poll::Ready(None);
        }
        // Changes pending at shutdown go out before the result.
        if woken.is_ready()
            && let Some(chunk) = this.changes()
        {
            return Poll::Ready(Some(chunk));
        }
        if ending == Ending::Finished {
            this.phase = Phase::Done;
            let sid = this.sid();
            return Poll::Ready(Some(this.framing.build(128, |out| final_result(out, sid))));
        }
        let every = this.keepalive_every();
        if let Some(ka) = &mut this.keepalive
            && ka.as_mut().poll(cx).is_ready()
        {
            // Every period from the last one, whatever was written meanwhile: resetting the
            // timer at each write would cost a timer update per listener per change.
            let (next, now) = (ka.deadline() + every, Instant::now());
            ka.as_mut().reset(if next > now { next } else { now + every });
            return Poll::Ready(this.framing.keepalive());
        }
        Poll::Pending
    }
}
