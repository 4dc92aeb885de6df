//! A timeout that makes its timer only when it has to. `tokio::time::timeout` builds a tokio
//! `Sleep` when it is called (it looks up the runtime's timer and sets up a timer entry) and
//! tears it down when dropped, even when the future was ready at its first poll and the timer
//! was never registered: about 200 instructions per request around the body read on hyper's
//! path, and about 550 around the lean path's response writes (callgrind, `resmux-load
//! instructions --keep`), where the write nearly always completes at once.
//!
//! [`lazy_timeout`] keeps only the deadline until the future has been pending once. Then it
//! wakes its own task, and makes and arms the timer only if the future is still pending on the
//! next poll. The deadline is still counted from when it was made, so a body that never comes
//! (or a client that never reads) times out exactly as with `tokio::time::timeout`; a future
//! pending once and then ready costs one extra poll at most.

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
