//! A future polled only when it has been woken. The lean path races reading a request against
//! the listener's shutdown (a cancellation token's wait). `select!` polls every branch at every
//! wake-up of the task, and a connection's task wakes twice or more per request, for its
//! socket; polling the wait takes the token's lock. [`Quiet`] hands its future a waker of its
//! own and polls it only after that waker fired: at a wake-up that was the socket's, looking
//! at it costs one atomic swap. (The connection's timer does the same with a flag of its own,
//! [`crate::conn_timer::Expiry`], which needs no box.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// See the module documentation.
pub struct Quiet<F> {
    future: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    /// Whether the future's waker fired since it was last polled (set at the start, so the
    /// first poll registers its wakers).
    woken: AtomicBool,
    /// The task to wake for it.
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> Quiet<F> {
    /// `future`, boxed: it is polled rarely, so it need not sit in its parent's state.
    pub fn new(future: F) -> Self {
        let flag = Arc::new(Flag { woken: AtomicBool::new(true), task: AtomicWaker::new() });
        Self { future: Box::pin(future), waker: Waker::from(flag.clone()), flag }
    }
}

impl<F> Quiet<F> {
    /// Whether the future may be ready: true before its first poll and after its waker fired
    /// (one atomic load). False means it is still pending, with no poll and no lock.
    pub fn woken(&self) -> bool {
        self.flag.woken.load(Ordering::Acquire)
    }
}

impl<F: Future> Future for Quiet<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        // Registered before the poll: a wake-up during it (or after) reaches this task, and
        // sets `woken` again for the next poll.
        self.flag.task.register(cx.waker());
        let this = &mut *self;
        this.future.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[tokio::test]
    async fn it_is_polled_at_the_start_and_after_its_own_wake_ups_only() {
        let polls = AtomicUsize::new(0);
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        // Counts its polls; pending until `tx` sends.
        let counted = std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut rx).poll(cx)
        });
        let mut quiet = std::pin::pin!(Quiet::new(counted));
        let noise = Arc::new(Noise(AtomicUsize::new(0)));
        let waker = Waker::from(noise.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(quiet.woken(), "not polled yet: it may be ready");
        assert!(quiet.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // Wake-ups of the task that are not its own do not reach it.
        for _ in 0..5 {
            assert!(quiet.as_mut().poll(&mut cx).is_pending());
            assert!(!quiet.woken());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // Its own wake-up wakes the task, and the next poll reaches it.
        tx.send(()).unwrap();
        assert_eq!(noise.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert!(quiet.woken(), "its waker fired");
        assert!(quiet.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    struct Noise(AtomicUsize);

    impl Wake for Noise {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_inside_fires_through_it() {
        let start = tokio::time::Instant::now();
        Quiet::new(tokio::time::sleep(Duration::from_secs(5))).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
