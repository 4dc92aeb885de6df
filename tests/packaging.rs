//! Packaging, checked as far as this machine allows (it runs no container daemon and has no
//! Helm): the Dockerfile's shape, the Kubernetes manifests and the Helm values parsed, the
//! configs they carry validated by `resmux check`, the binary served under the image's
//! non-root user with its probe command, and every metric the Grafana dashboard queries
//! present in a real scrape.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use yaml_rust2::{Yaml, YamlLoader};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn resmux() -> Command {
    Command::new(env!("CARGO_BIN_EXE_resmux"))
}

/// `resmux check` on config `text` (secrets may be unset: they are warnings).
fn check_config_text(what: &str, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resmux.toml");
    std::fs::write(&path, text).unwrap();
    let out = resmux().args(["check", "-c"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
}

fn docs(path: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_unprivileged_with_a_health_check() {
    let text = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");
    assert!(froms[1].contains("slim"), "a small runtime image");
    assert!(text.lines().any(|l| l.starts_with("USER 10001")), "a non-root user");
    let health = text.lines().skip_while(|l| !l.starts_with("HEALTHCHECK")).nth(1).expect("HEALTHCHECK");
    assert!(health.contains("\"health\"") && health.contains("/healthz"), "{health}");
    for copied in text.lines().filter_map(|l| l.strip_prefix("COPY ")).filter(|l| !l.starts_with("--from")) {
        let src = copied.split_whitespace().next().unwrap();
        assert!(repo(src).exists(), "COPY {src}: no such path");
    }
    // The image's default config (config/sidecar.toml at /etc/resmux/resmux.toml) validates.
    check_config_text("config/sidecar.toml", &std::fs::read_to_string(repo("config/sidecar.toml")).unwrap());
}

#[test]
fn the_kubernetes_manifests_parse_and_their_configs_validate() {
    for file in ["deploy/kubernetes/gateway.yaml", "deploy/kubernetes/sidecar.yaml", "deploy/kubernetes/cluster.yaml"] {
        let docs = docs(file);
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().expect("kind")).collect();
        for want in ["ConfigMap", "Secret", "Deployment"] {
            assert!(kinds.contains(&want), "{file}: no {want} in {kinds:?}");
        }
        for d in &docs {
            assert!(d["apiVersion"].as_str().is_some() && d["metadata"]["name"].as_str().is_some(), "{file}");
        }
        let config = docs.iter().find(|d| d["kind"].as_str() == Some("ConfigMap")).unwrap();
        let toml_text = config["data"]["resmux.toml"].as_str().expect("resmux.toml in the ConfigMap");
        check_config_text(file, toml_text);
        let parsed: toml::Table = toml_text.parse().unwrap();
        let admin_port: i64 =
            parsed["admin"]["addr"].as_str().unwrap().rsplit(':').next().unwrap().parse().expect("an admin port");
        let deploy = docs.iter().find(|d| d["kind"].as_str() == Some("Deployment")).unwrap();
        let containers = deploy["spec"]["template"]["spec"]["containers"].as_vec().unwrap();
        let proxy = containers.iter().find(|c| c["name"].as_str() == Some("resmux")).expect("a resmux container");
        let ports = proxy["ports"].as_vec().unwrap();
        let admin = ports.iter().find(|p| p["name"].as_str() == Some("admin")).expect("an admin port");
        assert_eq!(admin["containerPort"].as_i64(), Some(admin_port), "{file}: probes reach [admin] addr");
        assert_eq!(proxy["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"));
        assert_eq!(proxy["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"));
        let non_root = proxy["securityContext"]["runAsNonRoot"]
            .as_bool()
            .or(deploy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"].as_bool());
        assert_eq!(non_root, Some(true), "{file}: runs as non-root");
    }
}

/// YAML (the chart's values) to TOML (resmux's config), as Helm's `toToml` renders it.
fn to_toml(y: &Yaml) -> toml::Value {
    match y {
        Yaml::String(s) => toml::Value::String(s.clone()),
        Yaml::Integer(i) => toml::Value::Integer(*i),
        Yaml::Real(r) => toml::Value::Float(r.parse().unwrap()),
        Yaml::Boolean(b) => toml::Value::Boolean(*b),
        Yaml::Array(a) => toml::Value::Array(a.iter().map(to_toml).collect()),
        Yaml::Hash(h) => toml::Value::Table(
            h.iter().map(|(k, v)| (k.as_str().expect("string keys").to_owned(), to_toml(v))).collect(),
        ),
        other => panic!("no TOML for {other:?}"),
    }
}

#[test]
fn the_helm_chart_values_map_to_a_valid_config() {
    let chart = &docs("deploy/helm/resmux/Chart.yaml")[0];
    assert_eq!(chart["apiVersion"].as_str(), Some("v2"));
    let values = &docs("deploy/helm/resmux/values.yaml")[0];
    let config = toml::to_string(&to_toml(&values["config"])).unwrap();
    check_config_text("values.yaml `config`", &config);
    for template in ["configmap.yaml", "deployment.yaml", "service.yaml", "secret.yaml"] {
        let text = std::fs::read_to_string(repo(&format!("deploy/helm/resmux/templates/{template}"))).unwrap();
        assert_eq!(text.matches("{{").count(), text.matches("}}").count(), "{template}: balanced actions");
    }
    let configmap = std::fs::read_to_string(repo("deploy/helm/resmux/templates/configmap.yaml")).unwrap();
    assert!(configmap.contains(".Values.config | toToml"), "the config comes from the values");
}

/// A child process killed on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_binary_serves_under_the_images_non_root_user_and_answers_its_probe() {
    // An unprivileged copy of the binary and a config, as the image lays them out.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("resmux");
    std::fs::copy(env!("CARGO_BIN_EXE_resmux"), &bin).unwrap();
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = dir.path().join("resmux.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddr = \"127.0.0.1:0\"\n[admin]\naddr = \"{admin}\"\n[[upstream]]\nname = \"notes\"\n\
             command = [\"{}\", \"sample-upstream\", \"--profile\", \"notes\"]\n",
            bin.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(dir.path(), perms).unwrap();
    let root = running_as_root();
    let mut serve = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=10001", "--regid=10001", "--clear-groups"]).arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let _proxy = Child(
        serve.args(["serve", "-c"]).arg(&config).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("serve"),
    );
    let url = format!("http://{admin}/healthz");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let probe = Command::new(&bin).args(["health", "--url", &url]).output().unwrap();
        if probe.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "no healthy answer: {}", String::from_utf8_lossy(&probe.stderr));
        std::thread::sleep(Duration::from_millis(100)); // a probe's retry interval, not a wait for a condition
    }
    let refused = Command::new(&bin).args(["health", "--url", "http://127.0.0.1:9/healthz"]).output().unwrap();
    assert!(!refused.status.success(), "the probe fails when nothing answers");
}

/// Whether this test runs as root (then the server is started as uid 10001, as in the image).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo("deploy/grafana/resmux-dashboard.json")).unwrap()).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("resmux_") {
                let name: String = expr[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                names.insert(name);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let text = rt.block_on(async {
        let mut cfg = resmux::config::Config::default();
        cfg.listen.addr = "127.0.0.1:0".parse().unwrap();
        cfg.admin.addr = "127.0.0.1:0".into();
        cfg.upstreams = vec![resmux::config::UpstreamConfig::stdio(
            "notes",
            vec![env!("CARGO_BIN_EXE_resmux").into(), "sample-upstream".into(), "--profile".into(), "notes".into()],
        )];
        let app = resmux::app::App::start(cfg).await.unwrap();
        // One request, so that the per-request families have a series.
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let mut conn = tokio::net::TcpStream::connect(app.local_addr()).await.unwrap();
        let req = format!(
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             mcp-protocol-version: 2026-07-28\r\nmcp-method: server/discover\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{call}",
            call.len()
        );
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        conn.write_all(req.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer)).await.unwrap().unwrap();
        let text = app.admin().metrics_text();
        app.shutdown().await;
        text
    });
    // A family shows in a scrape once it has a series; those that get theirs on a rare event
    // (a skipped page) must at least be registered under that name.
    let source = std::fs::read_to_string(repo("src/telemetry/metrics.rs")).unwrap();
    for name in names {
        let base = name.trim_end_matches("_bucket").trim_end_matches("_total");
        let registered = source.contains(&format!("\"{}\"", base.trim_start_matches("resmux_")));
        assert!(
            text.contains(&format!("# TYPE {base} ")) || registered,
            "the dashboard queries {name}, which is not exported"
        );
    }
}
