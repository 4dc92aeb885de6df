//! A timeout that arms its timer only when it has to. `tokio::time::timeout` registers a timer
//! the first time its future is pending, and a request body is always pending once: hyper
//! hands a body over only after its reader first asks for it. That registration and its
//! removal cost about a thousand instructions on every request whose body was in the same
//! read as its head.
//!
//! [`lazy_timeout`] instead wakes its own task the first time the future is pending, and arms
//! the timer only if the future is still pending on the next poll. The deadline is still
//! counted from when it was made, so a body that never comes times out exactly as with
//! `tokio::time::timeout`; a body that was already read costs one extra poll at most, and
//! usually none (hyper polls the service again in the same turn of its loop).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// `future`, failing with [`Elapsed`] once `after` has passed since this call.
pub fn lazy_timeout<F: Future>(after: Duration, future: F) -> LazyTimeout<F> {
    LazyTimeout { future, deadline: Instant::now() + after, timer: Timer::Unarmed }
}

/// The deadline passed before the future was ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

enum Timer {
    /// Not yet pending.
    Unarmed,
    /// Pending once; this task was woken to look again before arming.
    Woken,
    Armed(Pin<Box<Sleep>>),
}

pin_project_lite::pin_project! {
    /// See [`lazy_timeout`].
    pub struct LazyTimeout<F> {
        #[pin]
        future: F,
        deadline: Instant,
        timer: Timer,
    }
}

impl<F: Future> Future for LazyTimeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        loop {
            match this.timer {
                Timer::Unarmed => {
                    *this.timer = Timer::Woken;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                // Boxed: the timer is rare, and inline it would grow every request's future.
                Timer::Woken => *this.timer = Timer::Armed(Box::pin(tokio::time::sleep_until(*this.deadline))),
                Timer::Armed(sleep) => return sleep.as_mut().poll(cx).map(|()| Err(Elapsed)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pending `pending_polls` times (waking itself each time), then ready.
    struct Ready {
        pending_polls: usize,
    }

    impl Future for Ready {
        type Output = u8;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u8> {
            if self.pending_polls == 0 {
                return Poll::Ready(7);
            }
            self.pending_polls -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn armed<F>(t: &LazyTimeout<F>) -> bool {
        matches!(t.timer, Timer::Armed(_))
    }

    async fn run(pending_polls: usize) -> (Result<u8, Elapsed>, bool) {
        let mut t = Box::pin(lazy_timeout(Duration::from_secs(1), Ready { pending_polls }));
        let out = t.as_mut().await;
        (out, armed(&t))
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_future_never_arms_the_timer() {
        assert_eq!(run(0).await, (Ok(7), false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_pending_once_is_looked_at_again_before_arming() {
        assert_eq!(run(1).await, (Ok(7), false), "ready on the poll its own wake-up caused");
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_pending_twice_arms_the_timer_and_is_still_served() {
        assert_eq!(run(5).await, (Ok(7), true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_that_never_completes_times_out_at_the_deadline_counted_from_the_start() {
        let start = Instant::now();
        let t = lazy_timeout(Duration::from_secs(3), std::future::pending::<()>());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(t.await, Err(Elapsed));
        assert_eq!(Instant::now() - start, Duration::from_secs(3));
    }
}
