//! Per-connection timing: a connection is *idle* (nothing in flight, no byte of a next request
//! read), *reading a head* (a byte arrived while idle, the request has not reached the service
//! yet), or *busy* (a request is in flight: from its head until its response body is done or
//! dropped — a listen stream stays busy for its whole life). An idle connection is closed after
//! `idle_timeout`, a head not finished `header_timeout` after its first byte; a busy one is left
//! alone (bodies have `body_timeout`, listens their own keep-alive and slow-listener rules).
//!
//! Three hooks feed it: [`Timed`] (the socket: a read while idle starts a head),
//! [`ConnTimer::begin`] (the service: a request arrived) and [`Tracked`] (the response body: the
//! request ends when it is dropped). [`ConnTimer::expired`] resolves when a deadline passes; the
//! connection's task then drops the connection, which closes the socket.
//!
//! The waiter is woken only when a hook sets a deadline *earlier* than the time it sleeps
//! towards (`target`): a head begun while it would wake after that head's deadline, a request
//! ending while it would wake after the new idle deadline. A request beginning only removes the
//! deadline; the waiter finds that out when it wakes. The waiter never sleeps longer than
//! `header_timeout` (or 1 s, if that is longer: a recheck): sleeping towards a later idle
//! deadline, or with no deadline
//! at all while a request is in flight, every next head or the end of every request would have
//! to wake it. A busy keep-alive connection's waiter so wakes about once per `header_timeout`,
//! finds the deadline moved and sleeps again, instead of being woken (and polled: see
//! [`crate::quiet`]) twice by every request. The price is that wake-up on quiet connections
//! too: an idle one wakes `idle_timeout / header_timeout` times before it is closed (6 with
//! the defaults), a listen stream, in flight for its whole life, once per `header_timeout`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Which deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// A request head did not finish within `header_timeout` of its first byte.
    Header,
    /// Nothing in flight and nothing begun for `idle_timeout`.
    Idle,
}

/// The activity of one connection.
pub struct ConnTimer {
    origin: Instant,
    header_timeout: Duration,
    idle_timeout: Duration,
    /// Requests whose response has not ended (HTTP/1: at most one).
    in_flight: AtomicUsize,
    /// Milliseconds after `origin`, plus one, of the first byte of the head being read; 0: none.
    head_at: AtomicU64,
    /// Milliseconds after `origin` since which nothing has been in flight.
    idle_at: AtomicU64,
    /// Milliseconds after `origin` of the time [`ConnTimer::expired`] sleeps towards (a deadline,
    /// or a recheck while a request is in flight); [`NO_TARGET`] before it first looked.
    target: AtomicU64,
    /// Wakes [`ConnTimer::expired`] to recompute its deadline.
    changed: Notify,
}

/// The shortest recheck, in milliseconds: a `header_timeout` under a second (or under a
/// millisecond, which would make it zero and the waiter spin while a request is in flight)
/// only makes the next head wake the waiter, as it did before rechecks.
const MIN_RECHECK_MS: u64 = 1000;

/// `target` before the waiter first looked: every hook wakes it.
const NO_TARGET: u64 = u64::MAX;

impl ConnTimer {
    pub fn new(header_timeout: Duration, idle_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            header_timeout,
            idle_timeout,
            in_flight: AtomicUsize::new(0),
            head_at: AtomicU64::new(0),
            idle_at: AtomicU64::new(0),
            target: AtomicU64::new(NO_TARGET),
            changed: Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Bytes were read from the socket.
    fn read(&self) {
        if self.in_flight.load(SeqCst) == 0 && self.head_at.load(SeqCst) == 0 {
            let now = self.now_ms();
            self.head_at.store(now + 1, SeqCst);
            // The waiter wakes before this head's deadline anyway unless it sleeps past it.
            if now + (self.header_timeout.as_millis() as u64) < self.target.load(SeqCst) {
                self.changed.notify_one();
            }
        }
    }

    /// A request reached the service; it is in flight until the returned guard is dropped
    /// (move it into the response body with [`Tracked`]). No wake-up: the waiter finds the
    /// deadline gone when it wakes.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, SeqCst);
        self.head_at.store(0, SeqCst);
        InFlight(self.clone())
    }

    /// The next deadline in milliseconds after `origin`, or `None` while a request is in flight.
    fn deadline_ms(&self) -> Option<(u64, Expired)> {
        if self.in_flight.load(SeqCst) > 0 {
            return None;
        }
        Some(match self.head_at.load(SeqCst) {
            0 => (self.idle_at.load(SeqCst) + self.idle_timeout.as_millis() as u64, Expired::Idle),
            at => (at - 1 + self.header_timeout.as_millis() as u64, Expired::Header),
        })
    }

    /// The next deadline, or `None` while a request is in flight.
    fn deadline(&self) -> Option<(Instant, Expired)> {
        self.deadline_ms().map(|(ms, why)| (self.origin + Duration::from_millis(ms), why))
    }

    /// When the waiter is to wake, in milliseconds after `origin`, at `now`: the deadline, but
    /// no later than a recheck `header_timeout` (at least [`MIN_RECHECK_MS`]) from now; a
    /// request in flight has no deadline. A next head's deadline then never falls before it.
    fn wake_ms(&self, now: u64) -> u64 {
        let recheck = now + (self.header_timeout.as_millis() as u64).max(MIN_RECHECK_MS);
        self.deadline_ms().map_or(recheck, |(ms, _)| ms.min(recheck))
    }

    /// Publishes the time the waiter is about to sleep towards and returns it. The state is
    /// read again after publishing: a hook that read the previous `target` (and so did not
    /// wake the waiter) changed the state before that second read, which then sees it.
    fn publish(&self) -> Instant {
        let now = self.now_ms();
        let mut due = self.wake_ms(now);
        loop {
            self.target.store(due, SeqCst);
            let again = self.wake_ms(now);
            if again == due {
                return self.origin + Duration::from_millis(due);
            }
            due = again;
        }
    }

    /// Resolves once a deadline has passed.
    pub async fn expired(&self) -> Expired {
        loop {
            let changed = self.changed.notified();
            let at = self.publish();
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(at) => {
                    if let Some((at, why)) = self.deadline()
                        && at <= Instant::now()
                    {
                        return why;
                    }
                }
            }
        }
    }
}

/// One request in flight; dropping it ends the request.
pub struct InFlight(Arc<ConnTimer>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let w = &self.0;
        if w.in_flight.fetch_sub(1, SeqCst) == 1 {
            let now = w.now_ms();
            w.idle_at.store(now, SeqCst);
            if now + (w.idle_timeout.as_millis() as u64) < w.target.load(SeqCst) {
                w.changed.notify_one();
            }
        }
    }
}

/// A response body that keeps its request in flight until it is done or dropped.
pub struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    pub fn new(body: B, in_flight: InFlight) -> Self {
        Self { body, _in_flight: in_flight }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, reporting reads to its [`ConnTimer`].
pub struct Timed<T> {
    io: T,
    timer: Arc<ConnTimer>,
}

impl<T> Timed<T> {
    pub fn new(io: T, timer: Arc<ConnTimer>) -> Self {
        Self { io, timer }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Timed<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.timer.read();
        }
        r
    }
}

crate::io::write_through!(Timed);

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(60);

    /// `got` is `want`, to the timer's millisecond.
    fn about(got: Duration, want: Duration) {
        assert!(got >= want && got <= want + Duration::from_millis(2), "{got:?} != {want:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_untouched_connection_expires_idle() {
        let w = ConnTimer::new(HEAD, IDLE);
        let start = Instant::now();
        assert_eq!(w.expired().await, Expired::Idle);
        about(start.elapsed(), IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_head_gets_header_timeout_from_its_first_byte() {
        let w = ConnTimer::new(HEAD, IDLE);
        tokio::time::advance(Duration::from_secs(5)).await;
        w.read();
        let start = Instant::now();
        assert_eq!(w.expired().await, Expired::Header);
        about(start.elapsed(), HEAD);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_expires_while_a_request_is_in_flight_and_idle_restarts_after() {
        let w = ConnTimer::new(HEAD, IDLE);
        w.read();
        let guard = w.begin();
        // Body bytes of the request in flight do not start a head.
        w.read();
        let waited = tokio::time::timeout(IDLE * 10, w.expired()).await;
        assert!(waited.is_err(), "expired while busy");
        let end = Instant::now();
        drop(guard);
        assert_eq!(w.expired().await, Expired::Idle);
        about(end.elapsed(), IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_begun_mid_wait_moves_the_deadline() {
        let w = ConnTimer::new(HEAD, IDLE);
        let waiter = tokio::spawn({
            let w = w.clone();
            async move { w.expired().await }
        });
        tokio::time::advance(Duration::from_secs(55)).await;
        w.read();
        let start = Instant::now();
        assert_eq!(waiter.await.unwrap(), Expired::Header);
        about(start.elapsed(), HEAD);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_wakes_its_waiter_about_once_per_header_timeout() {
        let w = ConnTimer::new(HEAD, IDLE);
        let polls = Arc::new(AtomicUsize::new(0));
        let waiter = tokio::spawn({
            let (w, polls) = (w.clone(), polls.clone());
            async move {
                let mut expired = std::pin::pin!(w.expired());
                std::future::poll_fn(|cx| {
                    polls.fetch_add(1, SeqCst);
                    expired.as_mut().poll(cx)
                })
                .await
            }
        });
        tokio::task::yield_now().await;
        // 1,000 requests 100 ms apart: 100 s, ten header timeouts.
        for _ in 0..1000 {
            w.read();
            drop(w.begin());
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        let polls = polls.load(SeqCst);
        assert!(polls <= 40, "the waiter was polled {polls} times for 1,000 requests");
        assert!(!waiter.is_finished(), "a busy connection expired");
        waiter.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_sub_millisecond_header_timeout_does_not_make_a_busy_waiter_spin() {
        let w = ConnTimer::new(Duration::from_micros(500), IDLE);
        let _in_flight = w.begin();
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = {
            let polls = polls.clone();
            let mut expired = Box::pin(w.expired());
            // A spinning waiter never lets paused time move: give up after 100 polls.
            std::future::poll_fn(move |cx| {
                if polls.fetch_add(1, SeqCst) >= 100 {
                    return Poll::Ready(None);
                }
                expired.as_mut().poll(cx).map(Some)
            })
        };
        let waited = tokio::time::timeout(Duration::from_secs(10), counted).await;
        let polls = polls.load(SeqCst);
        assert!(waited.is_err(), "the waiter returned {waited:?} after {polls} polls");
        assert!(polls <= 12, "the waiter was polled {polls} times in 10 s");
    }
}
