//! The admin page in a real browser: headless Chromium (Debian's `chromium-headless-shell`,
//! installed by `.ci/run`) loads it from a running proxy, runs its script, and the numbers it
//! shows move after some requests; a screenshot of it is a real, non-empty PNG.

use std::path::Path;
use std::process::Stdio;

use serde_json::json;
use tokio::process::Command;

use crate::support::*;
use resmux::config::UpstreamConfig;
use resmux::sample::SampleSpec;

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

#[tokio::test]
async fn the_admin_page_shows_live_numbers_in_a_real_browser() {
    let up = sample_http(SampleSpec::generated("docs", 3)).await;
    let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
    cfg.admin.addr = "127.0.0.1:0".into();
    let p = Proxy::start(cfg).await;
    discovered(&p.client).await;
    let page = format!("http://{}/", p.app.admin_addr().unwrap());

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
