//! Slow listeners (DESIGN §5): a listener whose client stops reading delays no one else and
//! loses no change, and a change right after the acknowledgment is delivered.

use std::time::Duration;

use serde_json::{Value, json};

use crate::listen::{listen_request, proxy_with, sub_id};
use crate::support::*;
use resmux::sample::SampleHttp;

/// A listen whose client stops reading: a tiny receive buffer, and a body nobody polls.
async fn stalled_listen(p: &Proxy, id: &str, filter: &Value) -> hyper::Response<hyper::body::Incoming> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(p.app.local_addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let resp = sender.send_request(listen_request(p, json!(id), filter)).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp
}

/// Floods `uris` with changes, far more than socket buffers hold, pacing the upstream so that
/// its own bounded event channel drops nothing.
async fn flood(up: &SampleHttp, uris: &[String], rounds: usize) {
    for round in 0..rounds {
        for uri in uris {
            up.sample.touch(uri);
        }
        if round % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The fast listener's delivery latency with `stalled` listeners that have stopped reading:
/// after a flood that fills their buffers, the median time from a change upstream to its
/// arrival at the fast listener. Also returns the proxy and the stalled streams.
async fn fast_latency(stalled: usize) -> (Duration, Proxy, SampleHttp, Vec<hyper::Response<hyper::body::Incoming>>) {
    const MARKER: &str = "docs://status";
    let (p, up) = proxy_with(|_| {}).await;
    let uris: Vec<String> = (0..5).map(|i| format!("docs://item/{i}")).collect();
    let mut subscribed = uris.clone();
    subscribed.push(MARKER.to_owned());
    let filter = json!({"resourceSubscriptions": subscribed});
    let mut slow = Vec::new();
    for i in 0..stalled {
        slow.push(stalled_listen(&p, &format!("slow-{i}"), &filter).await);
    }
    let mut fast = p.client.listen(json!("fast"), filter.clone()).await.unwrap();
    fast.next().await;
    let mut sorted = subscribed.clone();
    sorted.sort();
    upstream_listens(&up, vec![sorted.iter().map(String::as_str).collect()]).await;

    flood(&up, &uris, 4000).await;
    // Drain the flood: the marker's change comes after all of it.
    up.sample.touch(MARKER);
    while fast.next().await["params"]["uri"] != MARKER {}

    // Each probe: one change upstream, timed until the fast listener has it, while the
    // stalled listeners' writers are blocked and every change is queued for them too.
    let mut samples = Vec::new();
    for _ in 0..30 {
        let start = tokio::time::Instant::now();
        up.sample.touch(MARKER);
        let m = fast.next().await;
        samples.push(start.elapsed());
        assert_eq!((m["params"]["uri"].as_str(), sub_id(&m)), (Some(MARKER), json!("fast")));
    }
    samples.sort();
    (samples[samples.len() / 2], p, up, slow)
}

/// Clients that stop reading delay no one: the fast listener's delivery latency while several
/// stall stays within a generous multiple of its latency with none; and a stalled listener
/// loses no change: when it reads again it learns of every URI that changed, coalesced.
#[tokio::test]
async fn a_slow_listener_delays_no_one_and_loses_no_change() {
    let (baseline, _p0, _up0, _) = fast_latency(0).await;
    let (with_stalled, _p, _up, slow) = fast_latency(3).await;
    // Ratio bound, floored at the timer's resolution: a fan-out that waited on a stalled
    // writer would take as long as the stall itself (the whole test), not a small multiple.
    let bound = baseline.max(Duration::from_millis(2)) * 20;
    assert!(with_stalled <= bound, "fast listener median {with_stalled:?} with stalled ones vs {baseline:?} without");

    use http_body_util::BodyExt;
    let uris: Vec<String> = (0..5).map(|i| format!("docs://item/{i}")).collect();
    let mut body = slow.into_iter().next().unwrap().into_body();
    let mut decoder = resmux::upstream::sse::SseDecoder::new(1 << 20);
    let mut learned = std::collections::HashSet::new();
    let mut received = 0usize;
    while !uris.iter().all(|u| learned.contains(u)) {
        let frame = tokio::time::timeout(DEADLINE, body.frame()).await.expect("slow stream delivers").unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            decoder.push(&data);
        }
        while let Some(event) = decoder.next_event().unwrap() {
            let m: Value = serde_json::from_str(&event.data).unwrap();
            if m["method"] == "notifications/resources/updated" {
                received += 1;
                learned.insert(m["params"]["uri"].as_str().unwrap().to_owned());
            }
        }
    }
    assert!(received < 4000 * uris.len(), "the stalled listener's changes were coalesced ({received})");
}

/// The acknowledgment waits until the upstream carries the subscription: a change made the
/// moment the client sees the acknowledgment still reaches it.
#[tokio::test]
async fn a_change_right_after_the_acknowledgment_is_delivered() {
    let (p, up) = proxy_with(|_| {}).await;
    for round in 0..5 {
        let uri = format!("docs://item/{round}");
        let mut l = p.client.listen(json!(round), json!({"resourceSubscriptions": [uri]})).await.unwrap();
        assert_eq!(l.next().await["method"], "notifications/subscriptions/acknowledged");
        up.sample.touch(&uri);
        let update = l.next().await;
        assert_eq!(update["params"]["uri"], uri.as_str(), "round {round}");
    }
}
