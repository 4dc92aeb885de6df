use super::*;

const HEAD: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_secs(60);

/// `got` is `want`, to the timer's millisecond.
fn about(got: Duration, want: Duration) {
    assert!(got >= want && got <= want + Duration::from_millis(2), "{got:?} != {want:?}");
}

/// `w` expires as `kind`, `after` from now.
async fn expires(w: &Arc<ConnTimer>, kind: Expired, after: Duration) {
    let start = Instant::now();
    assert_eq!(w.expired().await, kind);
    about(start.elapsed(), after);
}

#[tokio::test(start_paused = true)]
async fn an_untouched_connection_expires_idle() {
    let w = ConnTimer::new(HEAD, IDLE);
    expires(&w, Expired::Idle, IDLE).await;
}

#[tokio::test(start_paused = true)]
async fn a_started_head_gets_header_timeout_from_its_first_byte() {
    let w = ConnTimer::new(HEAD, IDLE);
    tokio::time::advance(Duration::from_secs(5)).await;
    w.read();
    expires(&w, Expired::Header, HEAD).await;
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

/// Counts its wake-ups.
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A stream held long (an HTTP/1.1 listen) keeps no timer and is not woken for rechecks
/// while it is open; its end wakes the waiter, which then counts the idle time from it.
#[tokio::test(start_paused = true)]
async fn a_stream_held_long_keeps_no_timer_and_its_end_starts_the_idle_time() {
    let w = ConnTimer::new(HEAD, IDLE);
    let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let mut expiry = Box::pin(w.expired());
    assert!(expiry.as_mut().poll(&mut cx).is_pending());
    assert!(expiry.sleep.is_some(), "an idle connection's waiter keeps a timer");
    let stream = w.begin();
    stream.held_long();
    assert_eq!(wakes.0.load(SeqCst), 1, "held long: the waiter looks again");
    assert!(expiry.as_mut().poll(&mut cx).is_pending());
    assert!(expiry.sleep.is_none(), "the waiter still holds a timer while a stream is held long");
    // Ten header timeouts: no recheck.
    tokio::time::advance(HEAD * 10).await;
    assert_eq!(wakes.0.load(SeqCst), 1, "the waiter was woken while a stream was held long");
    let end = Instant::now();
    drop(stream);
    assert_eq!(wakes.0.load(SeqCst), 2, "the stream's end did not wake the waiter");
    assert_eq!(expiry.await, Expired::Idle);
    about(end.elapsed(), IDLE);
}

#[tokio::test(start_paused = true)]
async fn the_end_of_the_drain_ends_the_wait() {
    let w = ConnTimer::new(HEAD, IDLE);
    let _stream = w.begin();
    let waiter = tokio::spawn({
        let w = w.clone();
        async move { w.expired().await }
    });
    tokio::time::advance(Duration::from_secs(1)).await;
    w.drain_ended();
    assert_eq!(waiter.await.unwrap(), Expired::Drained);
}
