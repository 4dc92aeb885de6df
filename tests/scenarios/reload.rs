//! Hot reload (issue 12, item 5): added upstreams start, removed ones drain (their listeners
//! are told, their upstream listen ends), changed ones are replaced make-before-break with no
//! failed request, untouched ones keep their cache entries, listens and legacy sessions; an
//! invalid config is refused with every error and the old one keeps serving; SIGHUP, a change
//! to the file and `resmux reload` each reload a `resmux serve` process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;
use resmux::config::{Config, UpstreamConfig};
use resmux::sample::SampleSpec;

fn uris(items: &[Value]) -> Vec<String> {
    items.iter().map(|i| i["uri"].as_str().unwrap_or_default().to_owned()).collect()
}

fn slot_of(p: &Proxy, name: &str) -> usize {
    p.app.router().upstreams().iter().find(|u| u.name() == name).expect("running").slot() as usize
}

fn with_upstreams(base: &Config, upstreams: Vec<UpstreamConfig>) -> Config {
    let mut c = base.clone();
    c.upstreams = upstreams;
    c
}

#[tokio::test]
async fn added_upstreams_join_removed_ones_drain_and_untouched_ones_keep_cache_listens_and_sessions() {
    let docs = sample_http(SampleSpec { tick: None, ..SampleSpec::docs() }).await;
    let gone = sample_http(SampleSpec { tick: None, ..SampleSpec::generated("gone", 3) }).await;
    let old = sample_http(SampleSpec { legacy: true, tick: None, ..SampleSpec::notes() }).await;
    let extra = sample_http(SampleSpec::generated("extra", 2)).await;
    let base = config(vec![
        UpstreamConfig::http("docs", &docs.url()),
        UpstreamConfig::http("gone", &gone.url()),
        UpstreamConfig::http("old", &old.url()),
    ]);
    let p = Proxy::start(base.clone()).await;
    eventually("every upstream is discovered", || {
        let ups = p.app.router().upstreams();
        async move { ups.iter().all(|u| u.info().is_some()).then_some(()) }
    })
    .await;

    // A cached read, a listener of a docs URI, a listener of the lists, the legacy session.
    let read = || p.client.request("resources/read", json!({"uri": "docs+docs://getting-started"}));
    assert_eq!(read().await.cache(), "miss");
    assert_eq!(read().await.cache(), "hit");
    let mut on_docs =
        p.client.listen(json!("docs"), json!({"resourceSubscriptions": ["docs+docs://status"]})).await.unwrap();
    assert_eq!(on_docs.next().await["method"], "notifications/subscriptions/acknowledged");
    let mut on_lists = p.client.listen(json!("lists"), json!({"resourcesListChanged": true})).await.unwrap();
    assert_eq!(on_lists.next().await["method"], "notifications/subscriptions/acknowledged");
    eventually("docs listens for the listener's URI", || {
        let subs = docs.sample.active_subscriptions();
        async move { (subs.len() == 1 && subs[0].iter().any(|u| u == "docs://status")).then_some(()) }
    })
    .await;
    eventually("gone's list listen is open", || {
        let open = gone.sample.listens_open();
        async move { (open == 1).then_some(()) }
    })
    .await;
    let (docs_reads, docs_listens, docs_slot) =
        (docs.sample.count("resources/read"), docs.sample.listens_total(), slot_of(&p, "docs"));
    let hub_opened = p.app.hub().upstream_listens_opened(docs_slot);
    let old_inits = old.sample.initializations();
    assert!(old_inits >= 1);

    // Reload: `gone` removed, `extra` added, `docs` and `old` untouched.
    let next = with_upstreams(
        &base,
        vec![
            UpstreamConfig::http("docs", &docs.url()),
            UpstreamConfig::http("old", &old.url()),
            UpstreamConfig::http("extra", &extra.url()),
        ],
    );
    let report = p.app.reloader().apply(next).await.expect("the reload is applied");
    assert_eq!(report.added, ["extra"]);
    assert_eq!(report.removed, ["gone"]);
    assert!(report.changed.is_empty(), "{report:?}");
    assert_eq!(report.unchanged, ["docs", "old"]);
    assert!(report.not_ready.is_empty(), "{report:?}");

    // The list listener hears the merged list changed; the listen for `gone` ends upstream.
    let changed = on_lists.next_method("notifications/resources/list_changed").await;
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "lists", "{changed}");
    eventually("the removed upstream's listen ends", || {
        let open = gone.sample.listens_open();
        async move { (open == 0).then_some(()) }
    })
    .await;
    // Merged lists: `extra` in, `gone` out.
    let (items, _) = p.client.list_all("resources/list", "resources").await;
    let listed = uris(&items);
    assert!(listed.iter().any(|u| u.starts_with("extra+")), "{listed:?}");
    assert!(!listed.iter().any(|u| u.starts_with("gone+")), "{listed:?}");
    assert!(listed.iter().any(|u| u.starts_with("docs+")), "{listed:?}");

    // The untouched upstream: same slot, its cached read still a hit with no upstream request,
    // its upstream listen not reopened, and the legacy upstream's session not re-initialized.
    assert_eq!(slot_of(&p, "docs"), docs_slot);
    assert_eq!(read().await.cache(), "hit");
    assert_eq!(docs.sample.count("resources/read"), docs_reads);
    assert_eq!(docs.sample.listens_total(), docs_listens, "docs' upstream listen was not reopened");
    assert_eq!(p.app.hub().upstream_listens_opened(docs_slot), hub_opened);
    let r = p.client.request("tools/call", json!({"name": "old__echo", "arguments": {"text": "still"}})).await;
    assert_eq!(r.result()["content"][0]["text"], "still");
    assert_eq!(old.sample.initializations(), old_inits, "the legacy session survived the reload");

    // The docs listener heard nothing spurious: its next message is a real change.
    docs.sample.touch("docs://status");
    let m = on_docs.next().await;
    assert_eq!(
        (m["method"].as_str(), m["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some("docs+docs://status")),
        "{m}"
    );

    // The removed upstream's slot is drained and reused by a later add.
    eventually("the removed upstream's slot is free again", || {
        let p = &p;
        let next = with_upstreams(
            &base,
            vec![
                UpstreamConfig::http("docs", &docs.url()),
                UpstreamConfig::http("old", &old.url()),
                UpstreamConfig::http("extra", &extra.url()),
                UpstreamConfig::http("gone", &gone.url()),
            ],
        );
        async move { p.app.reloader().apply(next).await.ok() }
    })
    .await;
    p.app.shutdown().await;
}

#[tokio::test]
async fn a_changed_upstream_is_replaced_make_before_break_with_no_failed_request() {
    let before = sample_http(SampleSpec { tick: None, ..SampleSpec::docs() }).await;
    let after = sample_http(SampleSpec { tick: None, ..SampleSpec::docs() }).await;
    let notes = sample_http(SampleSpec::notes()).await;
    let base = config(vec![UpstreamConfig::http("docs", &before.url()), UpstreamConfig::http("notes", &notes.url())]);
    let p = Proxy::start(base.clone()).await;
    discovered(&p.client).await;
    let mut listener =
        p.client.listen(json!("L"), json!({"resourceSubscriptions": ["docs+docs://status"]})).await.unwrap();
    assert_eq!(listener.next().await["method"], "notifications/subscriptions/acknowledged");
    upstream_listens(&before, vec![vec!["docs://status"]]).await;

    // Clients call the upstream without pause while it is replaced.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (client, stop, ok, failed) = (p.client.clone(), stop.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let text = format!("{w}-{n}");
                    let r =
                        client.request("tools/call", json!({"name": "docs__echo", "arguments": {"text": text}})).await;
                    let good = r.status == 200 && r.json()["result"]["content"][0]["text"] == text.as_str();
                    if good { &ok } else { &failed }.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    eventually("requests flow", || {
        let n = ok.load(Ordering::Relaxed);
        async move { (n >= 20).then_some(()) }
    })
    .await;
    let mut changed = UpstreamConfig::http("docs", &after.url());
    changed.timeout = Duration::from_secs(20);
    let next = with_upstreams(&base, vec![changed, UpstreamConfig::http("notes", &notes.url())]);
    let report = p.app.reloader().apply(next).await.expect("the reload is applied");
    assert_eq!(
        (report.changed.as_slice(), report.unchanged.as_slice()),
        (&["docs".to_owned()][..], &["notes".to_owned()][..])
    );
    assert!(report.not_ready.is_empty(), "the replacement was discovered and listening before the swap: {report:?}");
    // The new upstream's listen was open before the swap (make-before-break).
    assert_eq!(after.sample.active_subscriptions(), vec![vec!["docs://status".to_owned()]]);
    let at_swap = ok.load(Ordering::Relaxed);
    eventually("requests flow to the replacement", || {
        let n = after.sample.count("tools/call");
        async move { (n >= 20).then_some(()) }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "replace under load: {ok} requests succeeded ({at_swap} before the swap), {failed} failed; swap took {} µs",
        report.swap_micros
    );
    assert_eq!(failed, 0, "no request fails across the swap ({ok} succeeded)");
    // The old upstream drained: its listen ended; the listener moved to the new one.
    upstream_listens(&before, vec![]).await;
    let m = listener.next_method("notifications/resources/updated").await;
    assert_eq!(m["params"]["uri"], "docs+docs://status", "the moved listener is told to re-read: {m}");
    after.sample.touch("docs://status");
    let m = listener.next_method("notifications/resources/updated").await;
    assert_eq!(m["params"]["uri"], "docs+docs://status");
    p.app.shutdown().await;
}

#[tokio::test]
async fn an_invalid_config_is_refused_with_every_error_and_the_old_one_keeps_serving() {
    let docs = sample_http(SampleSpec::docs()).await;
    let base = config(vec![UpstreamConfig::http("docs", &docs.url())]);
    let p = Proxy::start(base.clone()).await;
    discovered(&p.client).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("resmux.toml");
    p.app.reloader().set_path(&file);
    std::fs::write(
        &file,
        format!(
            "[[upstream]]\nname = \"docs\"\nurl = \"{}\"\nbogus = 1\n\n[[upstream]]\nname = \"two\"\n\n[[upstream]]\nname = \"x\"\nurl = \"{}\"\ntimeout = \"soon\"\n",
            docs.url(),
            docs.url()
        ),
    )
    .unwrap();
    let refused = p.app.reloader().reload_file().await.expect_err("an invalid config is refused");
    let problems = refused.problems();
    assert!(problems.len() >= 2, "every error is reported: {problems:?}");
    assert!(problems.iter().any(|e| e.contains("upstream[0]")), "{problems:?}");
    assert!(problems.iter().any(|e| e.contains("upstream[2]")), "{problems:?}");
    // A valid file that changes a section a reload cannot apply is refused too.
    std::fs::write(
        &file,
        format!("[listen]\naddr = \"127.0.0.1:1\"\n[[upstream]]\nname = \"docs\"\nurl = \"{}\"\n", docs.url()),
    )
    .unwrap();
    let refused = p.app.reloader().reload_file().await.expect_err("a [listen] change needs a restart");
    assert!(refused.problems().iter().any(|e| e.contains("[listen] changed")), "{:?}", refused.problems());
    // The old config keeps serving.
    let r = p.client.request("resources/read", json!({"uri": "docs://getting-started"})).await;
    assert!(r.result()["contents"][0]["text"].is_string());
    assert_eq!(p.app.router().upstreams().len(), 1);
    p.app.shutdown().await;
}

/// A `resmux serve` process with its admin listener, reloaded from outside.
struct Serve {
    child: std::process::Child,
    admin: std::net::SocketAddr,
    file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn serve_file(listen: std::net::SocketAddr, admin: std::net::SocketAddr, upstreams: &[(&str, String)]) -> String {
    let mut text =
        format!("[listen]\naddr = \"{listen}\"\n[admin]\naddr = \"{admin}\"\n[reload]\npoll_interval = \"100ms\"\n");
    for (name, url) in upstreams {
        text.push_str(&format!("[[upstream]]\nname = \"{name}\"\nurl = \"{url}\"\n"));
    }
    text
}

async fn reloads(s: &Serve, outcome: &str) -> f64 {
    let metrics = McpClient::new(&format!("http://{}/metrics", s.admin)).raw("GET", &[], Vec::new()).await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text");
    (scrape.samples.iter())
        .find(|s| s.metric == "resmux_config_reloads_total" && s.labels.get("outcome") == Some(outcome))
        .map_or(0.0, |s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

async fn names(s: &Serve) -> Vec<String> {
    let ups = McpClient::new(&format!("http://{}/admin/upstreams", s.admin)).raw("GET", &[], Vec::new()).await;
    let v: Value = serde_json::from_slice(&ups.body).unwrap_or(Value::Null);
    let list = v.as_array().or_else(|| v["upstreams"].as_array()).cloned().unwrap_or_default();
    list.iter().filter_map(|u| u["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn sighup_a_file_change_and_resmux_reload_each_reload_a_serve_process() {
    let a = sample_http(SampleSpec::generated("a", 2)).await;
    let b = sample_http(SampleSpec::generated("b", 2)).await;
    let c = sample_http(SampleSpec::generated("c", 2)).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("resmux.toml");
    let (listen, admin) = (free_addr(), free_addr());
    std::fs::write(&file, serve_file(listen, admin, &[("a", a.url())])).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_resmux"))
        .args(["serve", "-c"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve starts");
    let s = Serve { child, admin, file, _dir: dir };
    eventually("the admin listener accepts", || {
        let up = std::net::TcpStream::connect(admin).is_ok();
        async move { up.then_some(()) }
    })
    .await;
    eventually("serve answers with upstream a", || {
        let s = &s;
        async move { (names(s).await == ["a"]).then_some(()) }
    })
    .await;

    // 1. A change to the file (polled every 100 ms).
    std::fs::write(&s.file, serve_file(listen, admin, &[("a", a.url()), ("b", b.url())])).unwrap();
    eventually("the file change added b", || {
        let s = &s;
        async move { (names(s).await == ["a", "b"]).then_some(()) }
    })
    .await;
    assert!(reloads(&s, "applied").await >= 1.0);

    // 2. SIGHUP (the watch is off for this step: a file whose only change is [reload] is refused,
    // so write the new upstreams and signal at once; whichever trigger wins, one applies it).
    std::fs::write(&s.file, serve_file(listen, admin, &[("a", a.url()), ("b", b.url()), ("c", c.url())])).unwrap();
    let status = std::process::Command::new("kill").args(["-HUP", &s.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    eventually("SIGHUP (or the watch) added c", || {
        let s = &s;
        async move { (names(s).await == ["a", "b", "c"]).then_some(()) }
    })
    .await;
    let applied = reloads(&s, "applied").await;
    assert!(applied >= 2.0, "{applied}");
    // SIGHUP with the file as it is: a reload that changes nothing.
    let unchanged = reloads(&s, "unchanged").await;
    let status = std::process::Command::new("kill").args(["-HUP", &s.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    eventually("SIGHUP reloaded (nothing changed)", || {
        let s = &s;
        async move { (reloads(s, "unchanged").await > unchanged).then_some(()) }
    })
    .await;

    // 3. `resmux reload`: prints the result; refuses an invalid file with its errors, exit 1.
    let bin = env!("CARGO_BIN_EXE_resmux");
    let admin_url = format!("http://{admin}");
    let out = std::process::Command::new(bin).args(["reload", "--admin", &admin_url]).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{printed}{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.contains("unchanged") && printed.contains("a, b, c"), "{printed}");
    let rejected = reloads(&s, "rejected").await;
    // An invalid file: the CLI reports every error; the watch refuses it too and keeps the old.
    std::fs::write(&s.file, format!("{}[[upstream]]\nname = \"Bad\"\n", serve_file(listen, admin, &[("a", a.url())])))
        .unwrap();
    let out = std::process::Command::new(bin).args(["reload", "--admin", &admin_url]).output().unwrap();
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{errors}");
    assert!(errors.contains("reload refused") && errors.contains("upstream[1]"), "{errors}");
    assert!(reloads(&s, "rejected").await > rejected);
    assert_eq!(names(&s).await, ["a", "b", "c"], "the running config stays");
    // The proxy still serves.
    let mcp = McpClient::new(&format!("http://{listen}/mcp"));
    let (items, _) = mcp.list_all("resources/list", "resources").await;
    let listed = uris(&items);
    for prefix in ["a+", "b+", "c+"] {
        assert!(listed.iter().any(|u| u.starts_with(prefix)), "{prefix} in {listed:?}");
    }
}
