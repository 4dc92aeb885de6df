//! The admin page in a real browser: headless Chromium (Debian's `chromium-headless-shell`,
//! installed by `.ci/run`) loads it from a running proxy, runs its script, and the numbers it
//! shows move after some requests; a screenshot of it is a real, non-empty PNG.

use std::path::Path;
use std::process::Stdio;

use serde_json::json;
use tokio::process::Command;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::{SampleHttp, SampleSpec};

/// The headless browser on this machine; fails with the fix when there is none.
fn browser() -> &'static str {
    for candidate in ["chromium-headless-shell", "chromium", "chromium-browser"] {
        if std::process::Command::new(candidate).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return candidate;
        }
    }
    panic!("no headless Chromium: `apt-get install chromium-headless-shell` (.ci/run does)");
}

/// Runs the browser on `url` with `args`, bounded in time; returns its stdout.
async fn run_browser(url: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(browser());
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=3000"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(DEADLINE * 3, cmd.output()).await.expect("the browser finishes").expect("it runs");
    assert!(out.status.success(), "the browser failed: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element with `id` in a dumped DOM.
fn element_text<'d>(dom: &'d str, id: &str) -> &'d str {
    let open = format!("id=\"{id}\">");
    let start = dom.find(&open).unwrap_or_else(|| panic!("no #{id} in the page")) + open.len();
    &dom[start..start + dom[start..].find('<').expect("element closes")]
}

/// A proxy with an admin listener in front of a sample upstream of three items, and the URL of
/// its admin page.
async fn proxy_and_page() -> (Proxy, SampleHttp, String) {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.admin.addr = "127.0.0.1:0".into();
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    let page = format!("http://{}/", p.app.admin_addr().unwrap());
    (p, up, page)
}

#[tokio::test]
async fn the_admin_page_shows_live_numbers_in_a_real_browser() {
    let (p, _up, page) = proxy_and_page().await;

    let before = run_browser(&page, &["--dump-dom"]).await;
    let total_before: u64 = element_text(&before, "total").replace(',', "").parse().expect("a number once loaded");
    assert_eq!(element_text(&before, "ready"), "ready");
    assert!(before.contains("<td>docs</td>") || before.contains("docs</td>"), "the upstream row is drawn");

    for _ in 0..5 {
        p.client.request("resources/read", json!({"uri": "docs://item/0"})).await.result();
    }
    let after = run_browser(&page, &["--dump-dom"]).await;
    let total_after: u64 = element_text(&after, "total").replace(',', "").parse().unwrap();
    assert!(total_after >= total_before + 5, "the page's request total moved: {total_before} -> {total_after}");
    assert_eq!(element_text(&after, "hitratio"), "80.0 %", "4 hits of 5 reads");

    let dir = tempfile::tempdir().unwrap();
    let shot = dir.path().join("admin.png");
    run_browser(&page, &["--window-size=1280,820", &format!("--screenshot={}", shot.display())]).await;
    assert_png(&shot);
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).expect("a screenshot was written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    // A blank 1280x820 page compresses to a few hundred bytes; a drawn one is far larger.
    assert!(bytes.len() > 10_000, "the screenshot holds a drawn page ({} bytes)", bytes.len());
}

/// A page that loads the admin page in a frame, waits for the Cache view to list `victim`,
/// clicks that row's Purge button, waits for the row to go, and writes what it saw (JSON) into
/// its own `#out`. Served from another loopback port, it is the admin page's site but not its
/// origin: the browser runs it with web security off so that it may reach into the frame. The
/// purge itself is the admin page's own request.
fn purge_harness(admin: &str, victim: &str) -> String {
    format!(
        r##"<!doctype html><html><body><pre id="out">waiting</pre>
<iframe id="f" src="{admin}" width="1280" height="1400"></iframe>
<script>
const victim = {victim:?};
const frame = document.getElementById("f");
const uris = () => {{
  const d = frame.contentDocument;
  return d ? [...d.querySelectorAll("#cache-hits tr[data-uri]")].map(r => r.dataset.uri) : [];
}};
const sleep = (ms) => new Promise(r => setTimeout(r, ms));
(async () => {{
  for (let i = 0; i < 200 && !uris().includes(victim); i++) await sleep(25);
  const before = uris();
  const row = [...frame.contentDocument.querySelectorAll("#cache-hits tr[data-uri]")].find(r => r.dataset.uri === victim);
  if (row) row.querySelector("button").click();
  for (let i = 0; i < 200 && uris().includes(victim); i++) await sleep(25);
  const said = frame.contentDocument.getElementById("purge-result").textContent;
  document.getElementById("out").textContent = JSON.stringify({{ before, after: uris(), said }});
}})();
</script></body></html>"##
    )
}

#[tokio::test]
async fn the_cache_view_lists_entries_and_its_purge_control_removes_one() {
    let (p, up, page) = proxy_and_page().await;
    for (uri, reads) in [("docs://item/0", 4), ("docs://item/1", 2), ("docs://item/2", 1)] {
        for _ in 0..reads {
            p.client.request("resources/read", json!({ "uri": uri })).await.result();
        }
    }
    p.client.list_all("resources/list", "resources").await;

    let dom = run_browser(&page, &["--dump-dom"]).await;
    for uri in ["docs://item/0", "docs://item/1", "docs://item/2"] {
        assert!(dom.contains(&format!("data-uri=\"{uri}\"")), "the Cache view lists {uri}");
    }
    let first = dom.find("data-uri=\"docs://item/0\"").unwrap();
    assert!(first < dom.find("data-uri=\"docs://item/1\"").unwrap(), "most hits first");
    assert!(dom.contains("<td>resources/list</td>"), "list pages are listed too");
    if std::env::var_os("RESMUX_SAVE_SCREENSHOTS").is_some() {
        let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/admin-cache.png");
        run_browser(&page, &["--window-size=1280,1300", &format!("--screenshot={}", shot.display())]).await;
        assert_png(&shot);
    }

    let dir = tempfile::tempdir().unwrap();
    let harness = serve_page(purge_harness(&page, "docs://item/1")).await;
    let profile = dir.path().join("profile");
    let out = run_browser(
        &format!("http://{harness}/"),
        &["--dump-dom", "--disable-web-security", &format!("--user-data-dir={}", profile.display())],
    )
    .await;
    let seen: serde_json::Value =
        serde_json::from_str(&html_unescape(element_text(&out, "out"))).expect("the harness finished");
    assert!(seen["before"].as_array().unwrap().contains(&json!("docs://item/1")), "{seen}");
    assert_eq!(seen["after"], json!(["docs://item/0", "docs://item/2"]), "the purged row is gone");
    assert_eq!(seen["said"], "purged 1 entry");
    let again = p.client.request("resources/read", json!({ "uri": "docs://item/1" })).await;
    assert_eq!(again.cache(), "miss", "the purge reached the proxy's cache");
    assert_eq!(up.sample.count("resources/read"), 4);
}

/// Undoes the entity escaping of text in a dumped DOM.
fn html_unescape(text: &str) -> String {
    text.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// Serves `html` to every request on a loopback port, for as long as the test runs.
async fn serve_page(html: String) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
        html.len()
    );
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                // The request head, bounded; what it asks does not matter.
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while head.len() < 16 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tokio::time::timeout(DEADLINE, conn.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let _ = conn.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}
