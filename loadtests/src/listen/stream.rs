//! One listener: its connection or stream, the listen request, and the notifications it
//! times until the run stops.

use super::*;

/// An acknowledged listen stream.
struct Stream {
    conn: Conn,
    body: hyper::body::Incoming,
    decoder: SseDecoder,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn listener(
    i: usize,
    addr: (std::net::SocketAddr, Via),
    auth: Option<http::HeaderValue>,
    op: Op,
    shared: Arc<Shared>,
    connect_limit: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    slow: bool,
) {
    let id = format!("\"listen-{i}\"");
    let setup = {
        // Held until acknowledged: bounds the listens being set up at once.
        let _permit = connect_limit.acquire().await.expect("never closed");
        let setup = tokio::time::timeout(Duration::from_secs(30), set_up(addr, auth, &op, &id, &shared))
            .await
            .unwrap_or_else(|_| {
                shared.fail("listen: timeout", "no acknowledgment within 30s");
                None
            });
        if setup.is_none() {
            shared.refused.fetch_add(1, Ordering::Relaxed);
        }
        shared.settled.add_permits(1);
        setup
    };
    let Some(Stream { conn, mut body, mut decoder }) = setup else {
        return;
    };
    if slow {
        // A client that stopped reading: its stream stays open, unread, until the end. It is
        // not among the listeners whose notifications are expected and timed.
        shared.acked.fetch_sub(1, Ordering::Relaxed);
        shared.slow.fetch_add(1, Ordering::Relaxed);
        let _ = stop.wait_for(|s| *s).await;
        drop((conn, body));
        return;
    }
    // Made once, not per frame: every listener shares the one stop channel, so a wait made
    // per frame would lock its waiter list twice for each notification.
    let mut stopped = std::pin::pin!(stop.wait_for(|s| *s));
    loop {
        let frame = tokio::select! {
            _ = &mut stopped => break,
            frame = body.frame() => frame,
        };
        let data = match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
            Some(Err(e)) => {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                shared.fail("listen: stream error", &e.to_string());
                break;
            }
            None => {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                shared.fail("listen: stream ended", "the server closed the stream");
                break;
            }
        };
        decoder.push(&data);
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => {
                    if !on_event(&event.data, &id, &shared, i % SHARDS) {
                        drop(conn);
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                    shared.fail("listen: event too large", &e.to_string());
                    return;
                }
            }
        }
    }
    drop(conn);
}

/// Handles one event on an acknowledged stream, recording into `shard`; false when the
/// stream is over.
fn on_event(data: &str, id: &str, shared: &Shared, shard: usize) -> bool {
    match wire::stream_message(data) {
        Ok(StreamMessage::Updated { subscription, .. }) => {
            let now = shared.since_base();
            if subscription.as_deref() != Some(id) {
                shared.wrong_subscription.fetch_add(1, Ordering::Relaxed);
            }
            let changed = shared.last_change_ns.load(Ordering::Relaxed);
            if changed == 0 {
                shared.unsolicited.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            shared.notifications.fetch_add(1, Ordering::Relaxed);
            let mut recorded = shared.recorded[shard].lock().expect("recorded");
            recorded.latency.record(now.saturating_sub(changed));
            let measure = shared.measure_ns.load(Ordering::Relaxed);
            if measure > 0 && now >= measure {
                let slot = ((now - measure) / TICK.as_nanos() as u64) as usize;
                let t = &mut recorded.timeline;
                if slot >= t.len() {
                    t.resize(slot + 1, 0);
                }
                t[slot] += 1;
            }
            true
        }
        Ok(StreamMessage::Ack { .. }) => {
            shared.fail("listen: second acknowledgment", data);
            true
        }
        Ok(StreamMessage::Other(_)) => true,
        Ok(StreamMessage::End(outcome)) => {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            let detail = match outcome {
                Outcome::Ok => "graceful end".to_owned(),
                Outcome::Failed { detail, .. } => detail,
            };
            shared.fail("listen: server ended the subscription", &detail);
            false
        }
        Err(e) => {
            shared.fail("listen: malformed message", &e);
            true
        }
    }
}

/// Connects, sends the listen, and reads up to the acknowledgment; `None` when refused.
async fn set_up(
    (addr, via): (std::net::SocketAddr, Via),
    auth: Option<http::HeaderValue>,
    op: &Op,
    id: &str,
    shared: &Shared,
) -> Option<Stream> {
    let opened = |c: Result<Conn, anyhow::Error>| {
        if c.is_ok() {
            shared.connections.fetch_add(1, Ordering::Relaxed);
        }
        c.map_err(|e| format!("{e:#}"))
    };
    let conn = match via {
        Via::Own(source) => opened(Conn::open_from(addr, source, CONNECT_TIMEOUT, auth, Protocol::Http1).await),
        Via::Shared(source, cell) => cell
            .get_or_init(|| async move {
                opened(Conn::open_from(addr, source, CONNECT_TIMEOUT, None, Protocol::Http2).await)
            })
            .await
            .as_ref()
            .map(|c| c.stream(auth).expect("an HTTP/2 connection gives streams"))
            .map_err(Clone::clone),
    };
    let mut conn = match conn {
        Ok(c) => c,
        Err(e) => {
            shared.fail("listen: connect", &e);
            return None;
        }
    };
    let resp = match conn.send_with_id(op, id).await {
        Ok(r) => r,
        Err(e) => {
            shared.fail("listen: connection", &format!("{e:#}"));
            return None;
        }
    };
    let status = resp.status();
    if !status.is_success() || !wire::is_sse(resp.headers().get(http::header::CONTENT_TYPE)) {
        let body = http_body_util::Limited::new(resp.into_body(), MAX_REFUSAL)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        match wire::classify(status, false, &body) {
            Outcome::Failed { kind, detail } => shared.fail(&format!("listen: {kind}"), &detail),
            Outcome::Ok => shared.fail("listen: answered without a stream", "a JSON result"),
        }
        return None;
    }
    let mut body = resp.into_body();
    let mut decoder = SseDecoder::new(MAX_EVENT);
    loop {
        let data = match body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
            Some(Err(e)) => {
                shared.fail("listen: stream error before acknowledgment", &e.to_string());
                return None;
            }
            None => {
                shared.fail("listen: stream ended before acknowledgment", "");
                return None;
            }
        };
        decoder.push(&data);
        while let Ok(Some(event)) = decoder.next_event() {
            match wire::stream_message(&event.data) {
                Ok(StreamMessage::Ack { subscription }) => {
                    if subscription.as_deref() != Some(id) {
                        shared.wrong_subscription.fetch_add(1, Ordering::Relaxed);
                    }
                    shared.acked.fetch_add(1, Ordering::Relaxed);
                    return Some(Stream { conn, body, decoder });
                }
                Ok(StreamMessage::End(outcome)) => {
                    let detail = match outcome {
                        Outcome::Ok => "ended at once".to_owned(),
                        Outcome::Failed { kind, detail } => format!("{kind}: {detail}"),
                    };
                    shared.fail("listen: refused in stream", &detail);
                    return None;
                }
                Ok(StreamMessage::Updated { .. }) => {
                    // The spec forbids notifications before the acknowledgment.
                    shared.fail("listen: notification before acknowledgment", &event.data);
                }
                Ok(StreamMessage::Other(_)) => {}
                Err(e) => shared.fail("listen: malformed message", &e),
            }
        }
    }
}
