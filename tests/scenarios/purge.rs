//! Operator purges on one replica (`POST /admin/cache/purge`, `resmux cache purge`): by URI as
//! clients see it, by URI prefix, by upstream (its lists too); what was purged is fetched from
//! the upstream again; bad bodies get a 400 with the reason; the admin listener's Host and
//! Origin rules guard it; the Cache view lists entries with their hits.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::{SampleHttp, SampleSpec};

fn admin(p: &Proxy, path: &str) -> McpClient {
    McpClient::new(&format!("http://{}{path}", p.app.admin_addr().expect("the admin listener is on")))
}

async fn purge_raw(p: &Proxy, headers: &[(&str, String)], body: &str) -> Exchange {
    admin(p, "/admin/cache/purge").raw("POST", headers, body.as_bytes().to_vec()).await
}

/// Purges with `body`; returns the count it answered.
async fn purge(p: &Proxy, body: Value) -> u64 {
    let answer = purge_raw(p, &[], &body.to_string()).await;
    assert_eq!(answer.status, 200, "{body}: {}", String::from_utf8_lossy(&answer.body));
    answer.json()["purged"].as_u64().expect("a count")
}

async fn read(p: &Proxy, uri: &str) -> String {
    let answer = p.client.request("resources/read", json!({ "uri": uri })).await;
    answer.result();
    answer.cache().to_owned()
}

/// Two prefixed upstreams (`docs`, `more`), an admin listener, bodies up to 512 bytes.
async fn two_upstreams() -> (Proxy, SampleHttp, SampleHttp) {
    let docs = sample_http(SampleSpec::generated("docs", 5)).await;
    let more = sample_http(SampleSpec::generated("more", 3)).await;
    let p =
        with_admin(vec![UpstreamConfig::http("docs", &docs.url()), UpstreamConfig::http("more", &more.url())]).await;
    (p, docs, more)
}

/// A discovered proxy of `upstreams` with an admin listener that reads bodies up to 512 bytes.
async fn with_admin(upstreams: Vec<UpstreamConfig>) -> Proxy {
    let mut cfg = config(upstreams);
    cfg.admin.addr = "127.0.0.1:0".into();
    cfg.admin.max_body_bytes = 512;
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    p
}

#[tokio::test]
async fn purges_by_uri_prefix_and_upstream_remove_what_they_name_and_the_next_read_misses() {
    let (p, docs, more) = two_upstreams().await;
    for uri in ["docs+docs://item/0", "docs+docs://item/1", "more+more://item/0"] {
        assert_eq!(read(&p, uri).await, "miss");
        assert_eq!(read(&p, uri).await, "hit");
    }
    p.client.list_all("resources/list", "resources").await;
    let lists = more.sample.count("resources/list");
    assert_eq!(docs.sample.count("resources/read"), 2);

    // By URI, as clients see it: that read only.
    assert_eq!(purge(&p, json!({"uri": "docs+docs://item/0"})).await, 1);
    assert_eq!(read(&p, "docs+docs://item/1").await, "hit");
    assert_eq!(read(&p, "docs+docs://item/0").await, "miss", "fetched again");
    assert_eq!(docs.sample.count("resources/read"), 3, "the purged read reached the upstream again");
    assert_eq!(purge(&p, json!({"uri": "docs+docs://item/4"})).await, 0, "nothing cached there");

    // By prefix: both docs reads, not the other upstream's.
    assert_eq!(purge(&p, json!({"uri_prefix": "docs+docs://item/"})).await, 2);
    assert_eq!(read(&p, "more+more://item/0").await, "hit");
    assert_eq!(read(&p, "docs+docs://item/1").await, "miss");
    assert_eq!(docs.sample.count("resources/read"), 4);

    // By upstream: its read and its list page.
    assert_eq!(purge(&p, json!({"upstream": "more"})).await, 2);
    assert_eq!(read(&p, "more+more://item/0").await, "miss");
    assert_eq!(more.sample.count("resources/read"), 2);
    p.client.list_all("resources/list", "resources").await;
    assert_eq!(more.sample.count("resources/list"), lists + 1, "the purged list page was fetched again");
    assert_eq!(read(&p, "docs+docs://item/1").await, "hit", "the other upstream kept its entries");

    let metrics = admin(&p, "/metrics").raw("GET", &[], Vec::new()).await.body;
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        r#"resmux_cache_purges_total{by="uri"} 2"#,
        r#"resmux_cache_purged_total{by="uri"} 1"#,
        r#"resmux_cache_purged_total{by="uri_prefix"} 2"#,
        r#"resmux_cache_purged_total{by="upstream"} 2"#,
    ] {
        assert!(metrics.contains(line), "no `{line}` in the metrics");
    }
}

#[tokio::test]
async fn bad_purge_bodies_get_400_with_the_reason_and_foreign_hosts_and_origins_are_refused() {
    let (p, docs, _more) = two_upstreams().await;
    assert_eq!(read(&p, "docs+docs://item/0").await, "miss");
    let long = format!(r#"{{"uri":"{}"}}"#, "x".repeat(600));
    for (body, reason) in [
        ("uri=docs", "not JSON"),
        (r#"["docs"]"#, "JSON object"),
        (r#"{"url":"docs+docs://item/0"}"#, "unknown key `url`"),
        (r#"{"uri":"docs+docs://item/0","upstream":"docs"}"#, "exactly one"),
        ("{}", "exactly one"),
        (r#"{"upstream":7}"#, "`upstream` must be a string"),
        (r#"{"upstream":"nope"}"#, "no upstream is named `nope`"),
        (r#"{"uri":"git+x://y"}"#, "in no upstream's namespace"),
        (&long, "max_body_bytes"),
    ] {
        let answer = purge_raw(&p, &[], body).await;
        assert_eq!(answer.status, 400, "{body}");
        let error = answer.json()["error"].as_str().expect("a reason").to_owned();
        assert!(error.contains(reason), "{body}: `{error}` does not say `{reason}`");
    }
    let body = r#"{"upstream":"docs"}"#;
    let evil_host = purge_raw(&p, &[("host", "evil.example".into())], body).await;
    assert_eq!(evil_host.status, 403);
    let evil_origin = purge_raw(&p, &[("origin", "https://evil.example".into())], body).await;
    assert_eq!(evil_origin.status, 405);
    assert!(String::from_utf8_lossy(&evil_origin.body).contains("foreign Origin"));
    let get = admin(&p, "/admin/cache/purge").raw("GET", &[], Vec::new()).await;
    assert_eq!(get.status, 405, "a GET never purges");
    assert_eq!(read(&p, "docs+docs://item/0").await, "hit", "no refused request purged anything");
    assert_eq!(docs.sample.count("resources/read"), 1);
    // The admin page's own origin (loopback) may purge.
    let page_origin = format!("http://{}", p.app.admin_addr().unwrap());
    assert_eq!(purge_raw(&p, &[("origin", page_origin)], body).await.status, 200);
}

#[tokio::test]
async fn the_cache_view_lists_entries_by_hits_and_bytes_with_client_uris_and_no_identities() {
    let (p, _docs, _more) = two_upstreams().await;
    for _ in 0..4 {
        read(&p, "docs+docs://item/2").await;
    }
    read(&p, "more+more://item/1").await;
    p.client.list_all("resources/list", "resources").await;
    let view = admin(&p, "/admin/cache").raw("GET", &[], Vec::new()).await.json();
    assert_eq!(view["top"], 20);
    let top = &view["by_hits"][0];
    assert_eq!(
        (&top["upstream"], &top["uri"], &top["hits"]),
        (&json!("docs"), &json!("docs+docs://item/2"), &json!(3))
    );
    assert_eq!(top["method"], "resources/read");
    assert_eq!(top["scope"], "public");
    assert!(top["ttl_ms"].as_u64().unwrap() > 50_000 && top["bytes"].as_u64().unwrap() > 0);
    let rows = view["by_bytes"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["uri"] == "more+more://item/1"));
    assert!(rows.iter().any(|r| r["method"] == "resources/list" && r["list"] == "resources" && r["uri"].is_null()));
    assert_eq!(view["entries"].as_u64(), Some(rows.len() as u64));
}

#[tokio::test]
async fn resmux_cache_purge_prints_the_count() {
    let (p, docs, _more) = two_upstreams().await;
    read(&p, "docs+docs://item/0").await;
    read(&p, "docs+docs://item/3").await;
    let admin_url = format!("http://{}", p.app.admin_addr().unwrap());
    let run = |args: Vec<&str>| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_resmux"));
        cmd.args(["cache", "purge", "--admin", &admin_url]).args(args).kill_on_drop(true);
        async move { tokio::time::timeout(DEADLINE, cmd.output()).await.expect("it finishes").expect("it runs") }
    };
    let out = run(vec!["--uri-prefix", "docs+docs://item/"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "purged 2 entries");
    assert_eq!(read(&p, "docs+docs://item/3").await, "miss");
    assert_eq!(docs.sample.count("resources/read"), 3);
    let out = run(vec!["--upstream", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no upstream is named `nope`"));
    let out = run(vec!["--uri", "a", "--upstream", "docs"]).await;
    assert!(!out.status.success(), "two selectors are refused by the command line");
}

#[tokio::test]
async fn a_read_in_flight_during_a_purge_is_answered_but_not_cached() {
    let mut spec = SampleSpec::generated("docs", 3);
    spec.delay = Duration::from_secs(1);
    let up = sample_http(spec).await;
    let p = with_admin(vec![UpstreamConfig::http("docs", &up.url())]).await;
    let client = p.client.clone();
    let slow = tokio::spawn(async move { client.request("resources/read", json!({"uri": "docs://item/0"})).await });
    eventually("the read reached the upstream", || {
        let sample = up.sample.clone();
        async move { (sample.count("resources/read") == 1).then_some(()) }
    })
    .await;
    assert_eq!(purge(&p, json!({"uri": "docs://item/0"})).await, 0, "nothing was cached yet");
    let answered = slow.await.unwrap();
    answered.result();
    assert_eq!(answered.cache(), "miss");
    assert_eq!(read(&p, "docs://item/0").await, "miss", "the fill that raced the purge was not stored");
    assert_eq!(up.sample.count("resources/read"), 2);
    assert_eq!(read(&p, "docs://item/0").await, "hit", "a fill after the purge is cached");
}
