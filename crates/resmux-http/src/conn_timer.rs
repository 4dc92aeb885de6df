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
//! finds the deadline moved and sleeps again, instead of being woken (and polled) twice by
//! every request. The price is that wake-up on quiet connections too: an idle one wakes
//! `idle_timeout / header_timeout` times before it is closed (6 with the defaults). A stream
//! that may be open for hours ([`InFlight::held_long`], an HTTP/1.1 listen) has no deadline
//! and no recheck: its waiter keeps no timer until it ends, so an idle listener's connection
//! holds none.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Which deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// A request head did not finish within `header_timeout` of its first byte.
    Header,
    /// Nothing in flight and nothing begun for `idle_timeout`.
    Idle,
    /// The listener's drain ran out with the connection still open.
    Drained,
}

/// The activity of one connection.
pub struct ConnTimer {
    origin: Instant,
    /// `header_timeout` and `idle_timeout` in milliseconds, as they are used (and 16 bytes
    /// smaller than two `Duration`s, in every connection).
    header_ms: u64,
    idle_ms: u64,
    /// Requests whose response has not ended (HTTP/1: at most one).
    in_flight: AtomicUsize,
    /// Milliseconds after `origin`, plus one, of the first byte of the head being read; 0: none.
    head_at: AtomicU64,
    /// Milliseconds after `origin` since which nothing has been in flight.
    idle_at: AtomicU64,
    /// Milliseconds after `origin` of the time [`ConnTimer::expired`] sleeps towards (a deadline,
    /// or a recheck while a request is in flight); [`NO_TARGET`] before it first looked, or
    /// while it keeps no timer.
    target: AtomicU64,
    /// Set (with the waiter's task woken) for the waiter to look again: by a hook, by its
    /// timer, or at the end of the drain.
    changed: AtomicBool,
    /// The request in flight is a stream that may be open for hours ([`InFlight::held_long`]).
    long: AtomicBool,
    /// The listener's drain ran out: the connection is to be dropped.
    drained: AtomicBool,
    /// The waiter's task.
    task: AtomicWaker,
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
            header_ms: header_timeout.as_millis() as u64,
            idle_ms: idle_timeout.as_millis() as u64,
            in_flight: AtomicUsize::new(0),
            head_at: AtomicU64::new(0),
            idle_at: AtomicU64::new(0),
            target: AtomicU64::new(NO_TARGET),
            changed: AtomicBool::new(true),
            long: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            task: AtomicWaker::new(),
        })
    }

    /// Has the waiter look again.
    fn look_again(&self) {
        self.changed.store(true, SeqCst);
        self.task.wake();
    }

    /// The listener's drain ran out: [`ConnTimer::expired`] resolves with [`Expired::Drained`].
    pub fn drain_ended(&self) {
        self.drained.store(true, SeqCst);
        self.look_again();
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
            if now + (self.header_ms) < self.target.load(SeqCst) {
                self.look_again();
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
            0 => (self.idle_at.load(SeqCst) + self.idle_ms, Expired::Idle),
            at => (at - 1 + self.header_ms, Expired::Header),
        })
    }

    /// The next deadline, or `None` while a request is in flight.
    fn deadline(&self) -> Option<(Instant, Expired)> {
        self.deadline_ms().map(|(ms, why)| (self.origin + Duration::from_millis(ms), why))
    }

    /// When the waiter is to wake, in milliseconds after `origin`, at `now`: the deadline, but
    /// no later than a recheck `header_timeout` (at least [`MIN_RECHECK_MS`]) from now; a
    /// request in flight has no deadline. A next head's deadline then never falls before it.
    /// `None` (no timer) while a stream held long is in flight: its end wakes the waiter.
    fn wake_ms(&self, now: u64) -> Option<u64> {
        let deadline = self.deadline_ms();
        if deadline.is_none() && self.long.load(SeqCst) {
            return None;
        }
        let recheck = now + (self.header_ms).max(MIN_RECHECK_MS);
        Some(deadline.map_or(recheck, |(ms, _)| ms.min(recheck)))
    }

    /// Publishes the time the waiter is about to sleep towards and returns it. The state is
    /// read again after publishing: a hook that read the previous `target` (and so did not
    /// wake the waiter) changed the state before that second read, which then sees it.
    fn publish(&self) -> Option<Instant> {
        let now = self.now_ms();
        let mut due = self.wake_ms(now);
        loop {
            self.target.store(due.unwrap_or(NO_TARGET), SeqCst);
            let again = self.wake_ms(now);
            if again == due {
                return due.map(|ms| self.origin + Duration::from_millis(ms));
            }
            due = again;
        }
    }

    /// Resolves once a deadline has passed, or the drain has run out.
    pub fn expired(self: &Arc<Self>) -> Expiry {
        Expiry { timer: self.clone(), sleep: None, looked: false }
    }
}

/// Wakes the waiter's task for a look (the waiter's timer calls it).
impl Wake for ConnTimer {
    fn wake(self: Arc<Self>) {
        self.look_again();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.look_again();
    }
}

/// See [`ConnTimer::expired`]. It is polled with the connection, at every wake-up of its
/// socket, and looks at the timer only when the timer asked it to (`changed`); its own timer
/// is made only when there is a time to wake at, and dropped while a stream held long is in
/// flight, so that an idle listener's connection keeps no timer at all.
pub struct Expiry {
    timer: Arc<ConnTimer>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether it has looked at all (a new waiter looks at once).
    looked: bool,
}

impl Future for Expiry {
    type Output = Expired;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Expired> {
        let this = &mut *self;
        let timer = &this.timer;
        if !timer.changed.swap(false, SeqCst) && this.looked {
            return Poll::Pending;
        }
        this.looked = true;
        // Registered before the state is read: a change after that read wakes this task.
        timer.task.register(cx.waker());
        if timer.drained.load(SeqCst) {
            return Poll::Ready(Expired::Drained);
        }
        // The timer wakes through `changed` too.
        let waker = Waker::from(timer.clone());
        let mut look = Context::from_waker(&waker);
        loop {
            let Some(at) = timer.publish() else {
                this.sleep = None;
                return Poll::Pending;
            };
            let sleep = match &mut this.sleep {
                Some(sleep) => {
                    if sleep.deadline() != at {
                        sleep.as_mut().reset(at);
                    }
                    sleep
                }
                None => this.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            if sleep.as_mut().poll(&mut look).is_pending() {
                return Poll::Pending;
            }
            // The time came: a deadline passed, or it moved (and the next `at` is later).
            if let Some((at, why)) = timer.deadline()
                && at <= Instant::now()
            {
                return Poll::Ready(why);
            }
        }
    }
}

/// One request in flight; dropping it ends the request.
pub struct InFlight(Arc<ConnTimer>);

impl InFlight {
    /// The request's answer is a stream that may be open for hours (an HTTP/1.1 listen): until
    /// it ends the waiter keeps no timer (not even its rechecks), and its end wakes it. Only
    /// for a connection with this one request in flight.
    pub fn held_long(&self) {
        self.0.long.store(true, SeqCst);
        self.0.look_again();
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let w = &self.0;
        if w.in_flight.fetch_sub(1, SeqCst) == 1 {
            let now = w.now_ms();
            w.idle_at.store(now, SeqCst);
            w.long.store(false, SeqCst);
            // `target` is `NO_TARGET` while the waiter keeps no timer: a stream's end wakes it.
            if now + (w.idle_ms) < w.target.load(SeqCst) {
                w.look_again();
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
mod tests;
