//! Resource URIs as the spec means them, with sample upstreams (several, so namespacing is
//! on): `https://` URIs pass through unprefixed everywhere and route to the upstream that
//! listed them; every resource URI a client sends is validated before any upstream sees it.
//! (tests/scenarios/uris_peers.rs does the same with the official SDK peers.)

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::{SampleHttp, SampleSpec};

pub const DOCS_PAGE: &str = "https://docs.example.com/guide";
const NOTES_PAGE: &str = "https://notes.example.com/n";
const SHARED_PAGE: &str = "https://shared.example.com/x";

pub fn web(name: &str, pages: &[&str]) -> SampleSpec {
    SampleSpec { web: pages.iter().map(|p| p.to_string()).collect(), tick: None, ..SampleSpec::generated(name, 2) }
}

struct Two {
    cfg: Config,
    p: Proxy,
    docs: SampleHttp,
    notes: SampleHttp,
}

async fn two(tune: impl FnOnce(&mut Config)) -> Two {
    let docs = sample_http(web("docs", &[DOCS_PAGE, SHARED_PAGE])).await;
    let notes = sample_http(web("notes", &[NOTES_PAGE, SHARED_PAGE])).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &docs.url()), UpstreamConfig::http("notes", &notes.url())]);
    tune(&mut cfg);
    let p = Proxy::start(cfg.clone()).await;
    discovered(&p.client).await;
    Two { cfg, p, docs, notes }
}

fn uris(items: &[Value], key: &str) -> Vec<String> {
    items.iter().map(|i| i[key].as_str().expect("a URI").to_owned()).collect()
}

/// Asserts a -32602 with `data.uri` == `uri` whose message contains `says`.
pub fn refused(ex: &Exchange, uri: &str, says: &str) {
    let v = ex.json();
    assert_eq!(ex.error_code(), -32602, "{v}");
    assert_eq!(v["error"]["data"]["uri"], uri, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "message {message:?} should say {says:?}");
}

#[tokio::test]
async fn https_uris_are_listed_read_and_linked_unprefixed_and_read_from_their_lister() {
    let t = two(|_| {}).await;
    let (items, _) = t.p.client.list_all("resources/list", "resources").await;
    let listed = uris(&items, "uri");
    for page in [DOCS_PAGE, NOTES_PAGE, SHARED_PAGE] {
        assert!(listed.iter().any(|u| u == page), "{page} unprefixed in {listed:?}");
    }
    assert!(listed.contains(&"docs+docs://item/0".to_owned()), "other URIs are still namespaced: {listed:?}");
    let (templates, _) = t.p.client.list_all("resources/templates/list", "resourceTemplates").await;
    let templates = uris(&templates, "uriTemplate");
    assert!(templates.contains(&format!("{DOCS_PAGE}/{{page}}")), "{templates:?}");
    assert!(templates.contains(&"notes+notes://{path}".to_owned()), "{templates:?}");

    // A read goes to the upstream that listed the URI, and its contents keep it as it is.
    let (docs_reads, notes_reads) = (t.docs.sample.count("resources/read"), t.notes.sample.count("resources/read"));
    let ex = t.p.client.request("resources/read", json!({"uri": NOTES_PAGE})).await;
    assert_eq!(ex.result()["contents"][0]["uri"], NOTES_PAGE);
    assert!(ex.text().contains("as notes lists it"), "{}", ex.text());
    assert_eq!(t.notes.sample.count("resources/read"), notes_reads + 1);
    let ex = t.p.client.request("resources/read", json!({"uri": DOCS_PAGE})).await;
    assert!(ex.text().contains("as docs lists it"), "{}", ex.text());
    assert_eq!(t.docs.sample.count("resources/read"), docs_reads + 1);

    // Tool results: the upstream's own URI is namespaced, the web page's is not.
    let r = t.p.client.request("tools/call", json!({"name": "docs__link", "arguments": {}})).await.result();
    assert_eq!(r["content"][0]["uri"], "docs+docs://item/0");
    assert_eq!(r["content"][2]["type"], "resource_link");
    assert_eq!(r["content"][2]["uri"], DOCS_PAGE);

    // Completion of the passthrough template goes to the upstream that listed it.
    let r =
        t.p.client
            .request(
                "completion/complete",
                json!({"ref": {"type": "ref/resource", "uri": format!("{DOCS_PAGE}/{{page}}")},
                   "argument": {"name": "page", "value": "ho"}}),
            )
            .await
            .result();
    assert_eq!(r["completion"]["values"], json!(["home"]));
    assert_eq!(t.notes.sample.count("completion/complete"), 0);
}

#[tokio::test]
async fn an_https_uri_no_upstream_or_several_listed_is_refused_without_asking_any() {
    let t = two(|_| {}).await;
    t.p.client.list_all("resources/list", "resources").await;
    let reads = || t.docs.sample.count("resources/read") + t.notes.sample.count("resources/read");
    let before = reads();
    let nobody = "https://nobody.example.com/";
    refused(&t.p.client.request("resources/read", json!({"uri": nobody})).await, nobody, "Resource not found");
    let ex = t.p.client.request("resources/read", json!({"uri": SHARED_PAGE})).await;
    refused(&ex, SHARED_PAGE, "ambiguous");
    assert_eq!(reads(), before, "no upstream was asked");
    // Before any list, the proxy knows no lister of any https URI.
    let fresh = two(|_| {}).await;
    let ex = fresh.p.client.request("resources/read", json!({"uri": DOCS_PAGE})).await;
    refused(&ex, DOCS_PAGE, "Resource not found");
}

#[tokio::test]
async fn a_relayed_large_read_keeps_https_uris_and_namespaces_the_rest() {
    // Every read is past max_entry_bytes: it goes the streaming relay.
    let t = two(|c| c.cache.max_entry_bytes = 16).await;
    t.p.client.list_all("resources/list", "resources").await;
    let ex = t.p.client.request("resources/read", json!({"uri": DOCS_PAGE})).await;
    assert_eq!(ex.cache(), "bypass", "relayed, not cached");
    assert_eq!(ex.result()["contents"][0]["uri"], DOCS_PAGE);
    assert!(ex.text().contains("as docs lists it"));
    let ex = t.p.client.request("resources/read", json!({"uri": "notes+notes://item/1"})).await;
    assert_eq!(ex.cache(), "bypass");
    assert_eq!(ex.result()["contents"][0]["uri"], "notes+notes://item/1");
}

#[tokio::test]
async fn a_listen_on_an_https_uri_watches_its_lister_and_hears_it_unprefixed() {
    let t = two(|_| {}).await;
    t.p.client.list_all("resources/list", "resources").await;
    let mut l =
        t.p.client
            .listen(json!("w"), json!({"resourceSubscriptions": [DOCS_PAGE, SHARED_PAGE, "https://nobody.example/"]}))
            .await
            .expect("a stream");
    let ack = l.next().await;
    // The ambiguous and the unlisted ones are left out, like URIs no upstream can watch.
    assert_eq!(ack["params"]["notifications"], json!({"resourceSubscriptions": [DOCS_PAGE]}), "{ack}");
    upstream_subscribed(&t.docs, &[DOCS_PAGE]).await;
    t.docs.sample.touch(DOCS_PAGE);
    let updated = l.next_method("notifications/resources/updated").await;
    assert_eq!(updated["params"]["uri"], DOCS_PAGE);
}

#[tokio::test]
async fn a_reload_that_removes_the_lister_forgets_its_uris() {
    let t = two(|_| {}).await;
    t.p.client.list_all("resources/list", "resources").await;
    assert_eq!(t.p.client.request("resources/read", json!({"uri": NOTES_PAGE})).await.status, 200);
    let third = sample_http(web("third", &[])).await;
    let mut next = t.cfg.clone();
    next.upstreams = vec![UpstreamConfig::http("docs", &t.docs.url()), UpstreamConfig::http("third", &third.url())];
    let report = t.p.app.reloader().apply(next).await.expect("the reload is applied");
    assert_eq!(report.removed, ["notes"]);
    let ex = t.p.client.request("resources/read", json!({"uri": NOTES_PAGE})).await;
    refused(&ex, NOTES_PAGE, "Resource not found");
    // What the kept upstream listed is still known: it is the one lister of the shared page now.
    let ex = t.p.client.request("resources/read", json!({"uri": SHARED_PAGE})).await;
    assert!(ex.text().contains("as docs lists it"), "{}", ex.json());
}

#[tokio::test]
async fn a_replica_that_adopts_a_list_page_from_the_shared_tier_routes_its_https_uris() {
    let redis = crate::cluster::Redis::start().await;
    let docs = sample_http(web("docs", &[DOCS_PAGE])).await;
    let notes = sample_http(web("notes", &[NOTES_PAGE])).await;
    let replica = || {
        let mut c =
            config(vec![UpstreamConfig::http("docs", &docs.url()), UpstreamConfig::http("notes", &notes.url())]);
        c.cluster.redis_url = Some(redis.url());
        let secret = crate::cluster_fleet::SECRET.into();
        c.proxy.cursor_secret = Some(resmux::config::SecretSource { value: Some(secret), ..Default::default() });
        Proxy::start(c)
    };
    let (a, b) = (replica().await, replica().await);
    discovered(&a.client).await;
    discovered(&b.client).await;
    a.client.list_all("resources/list", "resources").await;
    let fetched = docs.sample.count("resources/list");
    let (items, _) = b.client.list_all("resources/list", "resources").await;
    assert!(items.iter().any(|i| i["uri"] == DOCS_PAGE));
    assert_eq!(docs.sample.count("resources/list"), fetched, "replica B adopted replica A's pages");
    let ex = b.client.request("resources/read", json!({"uri": DOCS_PAGE})).await;
    assert!(ex.text().contains("as docs lists it"), "{}", ex.json());
}
