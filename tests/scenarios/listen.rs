//! The subscription hub end to end (DESIGN §5): downstream `subscriptions/listen` over SSE,
//! shared upstream listens, fan-out, resync after upstream faults, limits, shutdown.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

pub(crate) async fn proxy_with(tweak: impl FnOnce(&mut Config)) -> (Proxy, SampleHttp) {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.hub.linger = Duration::from_millis(50);
    tweak(&mut cfg);
    // With API keys on (see `api_keys`), the first key's holder probes.
    let probe = cfg.auth.api_key.first().map(|k| k.principal.clone());
    let p = Proxy::start(cfg).await;
    // Listens are honoured for what the upstream declared: wait until it is discovered.
    let client = match &probe {
        Some(name) => p.client.as_principal(name),
        None => p.client.clone(),
    };
    eventually("upstream discovered", || {
        let client = client.clone();
        async move {
            let caps = client.request("server/discover", json!({})).await.result()["capabilities"].clone();
            caps["resources"].is_object().then_some(())
        }
    })
    .await;
    (p, up)
}

pub(crate) fn sub_id(m: &Value) -> Value {
    m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone()
}

#[tokio::test]
async fn the_acknowledgment_comes_first_and_names_the_honoured_subset() {
    let (p, _up) = proxy_with(|_| {}).await;
    let mut l = p
        .client
        .listen(
            json!("L1"),
            json!({"resourceSubscriptions": ["docs://status", "docs://item/0"], "resourcesListChanged": true,
                   "toolsListChanged": true}),
        )
        .await
        .expect("a stream");
    assert_eq!(l.status, 200);
    assert_eq!(l.headers.get("x-accel-buffering").unwrap(), "no");
    let ack = l.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(sub_id(&ack), "L1");
    // The sample declares resources.subscribe and resources.listChanged, not tools.listChanged.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourcesListChanged": true, "resourceSubscriptions": ["docs://item/0", "docs://status"]})
    );
}

#[tokio::test]
async fn notifications_carry_the_listen_id_with_its_json_type() {
    let (p, up) = proxy_with(|_| {}).await;
    let mut by_string =
        p.client.listen(json!("s-9"), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    let mut by_number = p.client.listen(json!(9), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    assert_eq!(sub_id(&by_string.next().await), "s-9");
    assert_eq!(sub_id(&by_number.next().await), 9);
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    let a = by_string.next().await;
    let b = by_number.next().await;
    assert_eq!((a["method"].as_str(), sub_id(&a)), (Some("notifications/resources/updated"), json!("s-9")));
    assert_eq!((b["params"]["uri"].as_str(), sub_id(&b)), (Some("docs://status"), json!(9)));
}

#[tokio::test]
async fn each_listener_gets_only_what_it_asked_for() {
    let (p, up) = proxy_with(|_| {}).await;
    let mut uris = p.client.listen(json!(1), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    let mut lists = p.client.listen(json!(2), json!({"resourcesListChanged": true})).await.unwrap();
    uris.next().await;
    lists.next().await;
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    up.sample.change_list();
    assert_eq!(uris.next().await["method"], "notifications/resources/updated");
    assert_eq!(lists.next().await["method"], "notifications/resources/list_changed");
    // Each negative check ends on a later positive event, never on a timeout. A pending list
    // change is written before pending URIs, so had the URI listener been given the list change
    // it would come before this update.
    up.sample.bump();
    assert_eq!(uris.next().await["method"], "notifications/resources/updated", "no list_changed for a URI listener");
    // Had the list listener been given an update, it would come before the first of these list
    // changes, or with it and so before the second.
    for _ in 0..2 {
        up.sample.change_list();
        let m = lists.next().await;
        assert_eq!(m["method"], "notifications/resources/list_changed", "no updated for a list listener: {m}");
    }
}

#[tokio::test]
async fn uris_are_namespaced_both_ways() {
    let docs = sample_http(SampleSpec::docs()).await;
    let notes = sample_http(SampleSpec::notes()).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &docs.url()), UpstreamConfig::http("notes", &notes.url())]);
    cfg.hub.linger = Duration::from_millis(50);
    let p = Proxy::start(cfg).await;
    let client = p.client.clone();
    eventually("both discovered", || {
        let client = client.clone();
        async move { client.request("server/discover", json!({})).await.result()["ttlMs"].as_u64().filter(|t| *t > 0) }
    })
    .await;
    let mut l = p
        .client
        .listen(
            json!(1),
            json!({"resourceSubscriptions": ["docs+docs://status", "notes+notes://ideas", "nobody+x://y"]}),
        )
        .await
        .unwrap();
    let ack = l.next().await;
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["docs+docs://status", "notes+notes://ideas"])
    );
    upstream_listens(&docs, vec![vec!["docs://status"]]).await;
    upstream_listens(&notes, vec![vec!["notes://ideas"]]).await;
    docs.sample.bump();
    assert_eq!(l.next().await["params"]["uri"], "docs+docs://status");
    notes.sample.touch("notes://ideas");
    assert_eq!(l.next().await["params"]["uri"], "notes+notes://ideas");
}

#[tokio::test]
async fn many_listeners_share_one_upstream_subscription_that_follows_the_union() {
    let (p, up) = proxy_with(|_| {}).await;
    let mut status = Vec::new();
    for i in 0..50 {
        let mut l = p.client.listen(json!(i), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
        l.next().await;
        status.push(l);
    }
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    assert_eq!(up.sample.listens_open(), 1);
    let opened = up.sample.listens_total();
    // Another URI joins the union: one new upstream listen replaces the old.
    let mut other = p.client.listen(json!("o"), json!({"resourceSubscriptions": ["docs://item/1"]})).await.unwrap();
    other.next().await;
    upstream_listens(&up, vec![vec!["docs://item/1", "docs://status"]]).await;
    assert_eq!(up.sample.listens_total(), opened + 1);
    // Every listener hears a change, from the one upstream subscription.
    up.sample.bump();
    for l in &mut status {
        assert_eq!(l.next().await["params"]["uri"], "docs://status");
    }
    // When they leave, the union shrinks (after the linger) and the URI is unsubscribed.
    drop(status);
    upstream_listens(&up, vec![vec!["docs://item/1"]]).await;
    drop(other);
    upstream_listens(&up, vec![vec![]]).await;
    eventually("no listener left in the hub", || {
        let n = p.app.hub().listener_count();
        async move { (n == 0).then_some(()) }
    })
    .await;
}

/// A client's HTTP/2 connection (prior knowledge) to `p`.
async fn h2_connection(p: &Proxy) -> hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let tcp = tokio::net::TcpStream::connect(p.app.local_addr()).await.expect("connect");
    // Without it, each request's DATA frame waits for the ACK of its HEADERS (Nagle).
    tcp.set_nodelay(true).expect("TCP_NODELAY");
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.expect("h2 handshake");
    tokio::spawn(conn);
    sender
}

/// A `subscriptions/listen` request with id `id` for `filter`, to `p`.
pub(crate) fn listen_request(
    p: &Proxy,
    id: Value,
    filter: &Value,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                      "params": {"notifications": filter, "_meta": meta()}});
    http::Request::post(format!("http://{}/mcp", p.app.local_addr()))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap()
}

/// Listen `i` on `docs://status`, as a stream of `sender`'s connection, acknowledged.
async fn h2_listen(
    p: &Proxy,
    sender: &hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    i: usize,
) -> Listening {
    let req = listen_request(p, json!(i), &json!({"resourceSubscriptions": ["docs://status"]}));
    let resp = tokio::time::timeout(DEADLINE, sender.clone().send_request(req))
        .await
        .unwrap_or_else(|_| panic!("listen {i} got no stream in time"))
        .expect("h2 exchange");
    assert_eq!(resp.status(), 200, "listen {i}");
    let mut l = Listening::from_response(resp);
    assert_eq!(sub_id(&l.next().await), i, "listen {i} acknowledged");
    l
}

/// An HTTP/2 front (a gateway multiplexing many listeners onto few connections) holds as many
/// listen streams on one connection as `http2_max_concurrent_streams` allows: here more than
/// hyper's default of 200, which would leave the 201st listen waiting for a free stream.
#[tokio::test]
async fn http2_listens_past_the_default_stream_limit_share_one_connection() {
    const LISTENS: usize = 250;
    let (p, up) = proxy_with(|c| {
        c.listen.http2 = true;
        c.listen.http2_max_concurrent_streams = LISTENS as u32;
    })
    .await;
    let sender = h2_connection(&p).await;
    let mut streams = Vec::new();
    for i in 0..LISTENS {
        streams.push(h2_listen(&p, &sender, i).await);
    }
    assert_eq!(p.app.hub().listener_connections(), 1, "the streams of one connection share its key");
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    for (i, l) in streams.iter_mut().enumerate() {
        let m = l.next_method("notifications/resources/updated").await;
        assert_eq!(sub_id(&m), i, "listen {i} notified");
    }
}

/// The hub groups a topic's listeners by the connection they arrived on, so that an HTTP/2
/// connection writes its streams' frames together: streams of one connection share its key,
/// and another connection, over HTTP/2 or HTTP/1.1, has its own.
#[tokio::test]
async fn listens_are_told_apart_by_the_connection_they_arrived_on() {
    let (p, up) = proxy_with(|c| c.listen.http2 = true).await;
    let (a, b) = (h2_connection(&p).await, h2_connection(&p).await);
    let mut streams = Vec::new();
    for i in 0..6 {
        // Joining interleaved, as their clients' listens come.
        streams.push(h2_listen(&p, if i % 2 == 0 { &a } else { &b }, i).await);
    }
    let mut own = p.client.listen(json!(6), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    own.next().await;
    assert_eq!(p.app.hub().listener_count(), 7);
    assert_eq!(p.app.hub().listener_connections(), 3, "two HTTP/2 connections and one HTTP/1.1");
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    for (i, l) in streams.iter_mut().chain([&mut own]).enumerate() {
        let m = l.next_method("notifications/resources/updated").await;
        assert_eq!(sub_id(&m), i, "listen {i} notified");
    }
}

#[tokio::test]
async fn an_upstream_restart_resynchronises_listeners_and_the_cache() {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let addr = up.addr;
    let sample = up.sample.clone();
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.hub.reconnect_max = Duration::from_millis(200);
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    let mut l = p
        .client
        .listen(json!(1), json!({"resourceSubscriptions": ["docs://item/2"], "resourcesListChanged": true}))
        .await
        .unwrap();
    l.next().await;
    upstream_listens(&up, vec![vec!["docs://item/2"]]).await;
    assert_eq!(p.client.request("resources/read", json!({"uri": "docs://item/2"})).await.cache(), "miss");
    assert_eq!(p.client.request("resources/read", json!({"uri": "docs://item/2"})).await.cache(), "hit");

    up.stop_and_wait().await;
    let restarted = SampleHttp::start(sample, addr).await.expect("same port again");
    // After it comes back: changes during the gap are unknown, so everything is announced.
    let mut got = [l.next().await, l.next().await];
    got.sort_by_key(|m| m["method"].as_str().unwrap().to_owned());
    assert_eq!(got[0]["method"], "notifications/resources/list_changed");
    assert_eq!(
        (got[1]["method"].as_str(), got[1]["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some("docs://item/2"))
    );
    // And the cache forgot what it held from before the gap.
    assert_eq!(p.client.request("resources/read", json!({"uri": "docs://item/2"})).await.cache(), "miss");
    restarted.stop();
}

#[tokio::test]
async fn graceful_and_cancelled_upstream_ends_are_both_recovered() {
    let (p, up) = proxy_with(|c| c.hub.reconnect_max = Duration::from_millis(100)).await;
    let mut l = p.client.listen(json!(1), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    l.next().await;
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    for graceful in [true, false] {
        let before = up.sample.listens_total();
        up.sample.end_listens(graceful);
        // The proxy re-listens and tells the listener its URI may have changed.
        assert_eq!(l.next().await["params"]["uri"], "docs://status");
        let sample = up.sample.clone();
        eventually("re-listened", || {
            let n = sample.listens_total();
            async move { (n > before).then_some(()) }
        })
        .await;
        upstream_listens(&up, vec![vec!["docs://status"]]).await;
    }
    up.sample.bump();
    assert_eq!(l.next().await["params"]["uri"], "docs://status");
}

#[tokio::test]
async fn updates_and_list_changes_invalidate_the_cache() {
    let (p, up) = proxy_with(|_| {}).await;
    let read = || p.client.request("resources/read", json!({"uri": "docs://status"}));
    let first = read().await;
    assert_eq!(first.cache(), "miss");
    assert_eq!(read().await.cache(), "hit");
    // The cache's standing upstream listen covers list changes; reads are invalidated when a
    // listener (here) subscribes the URI.
    let mut l = p.client.listen(json!(1), json!({"resourceSubscriptions": ["docs://status"]})).await.unwrap();
    l.next().await;
    upstream_listens(&up, vec![vec!["docs://status"]]).await;
    up.sample.bump();
    l.next().await;
    let after = read().await;
    assert_eq!(after.cache(), "miss");
    assert_ne!(after.text(), first.text());

    assert_eq!(p.client.request("resources/list", json!({})).await.cache(), "miss");
    assert_eq!(p.client.request("resources/list", json!({})).await.cache(), "hit");
    up.sample.change_list();
    let client = p.client.clone();
    eventually("list_changed evicts the cached pages", || {
        let client = client.clone();
        async move { (client.request("resources/list", json!({})).await.cache() == "miss").then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn limits_give_clear_errors() {
    let (p, _up) = proxy_with(|c| {
        c.hub.max_uris_per_listen = 2;
        c.hub.max_listens_per_principal = 2;
        // Principals are told apart only when they authenticate.
        api_keys(c, &["alice", "bob", "carol"]);
    })
    .await;
    let err = p
        .client
        .as_principal("carol")
        .listen(json!(1), json!({"resourceSubscriptions": ["a://1", "a://2", "a://3"]}))
        .await
        .err()
        .unwrap();
    assert_eq!((err.status.as_u16(), err.error_code()), (400, -32602));
    let alice = p.client.as_principal("alice");
    let _a = alice.listen(json!(1), json!({"resourcesListChanged": true})).await.unwrap();
    let _b = alice.listen(json!(2), json!({"resourcesListChanged": true})).await.unwrap();
    let err = alice.listen(json!(3), json!({"resourcesListChanged": true})).await.err().unwrap();
    assert_eq!(err.status, 429);
    assert!(err.json()["error"]["message"].as_str().unwrap().contains("per principal"));
    // Another principal is not affected.
    assert!(p.client.as_principal("bob").listen(json!(1), json!({"resourcesListChanged": true})).await.is_ok());
    let err = p.client.as_principal("carol").listen(json!(1), json!("not an object")).await.err().unwrap();
    assert_eq!(err.error_code(), -32602);
}

#[tokio::test]
async fn shutdown_ends_each_listen_with_a_result() {
    let (p, _up) = proxy_with(|_| {}).await;
    let mut l = p.client.listen(json!("bye"), json!({"resourcesListChanged": true})).await.unwrap();
    l.next().await;
    let shutdown = tokio::spawn(p.app.shutdown());
    let last = l.next().await;
    assert_eq!(last["id"], "bye");
    assert_eq!(last["result"]["resultType"], "complete");
    assert_eq!(last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "bye");
    assert!(l.next_within(Duration::from_secs(5)).await.is_none(), "the stream ends after the result");
    shutdown.await.unwrap();
}
