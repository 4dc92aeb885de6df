//! Every file in `config/` parses and validates, and `resmux check` reports every error at once
//! with its location.

use std::process::Command;

#[test]
fn every_shipped_config_file_is_valid() {
    // The reference file names an environment variable for a credential; it is set per child.
    let mut seen = 0;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = Command::new(env!("CARGO_BIN_EXE_resmux"))
                .args(["check", "--require-secrets", "-c"])
                .arg(&path)
                .env("DOCS_TOKEN", "Bearer example")
                .env("TICKETS_TOKEN", "Bearer example")
                .env("RESMUX_CURSOR_SECRET", "an example secret of enough length")
                .env("RESMUX_REMOTE_SECRET", "example")
                .output()
                .unwrap();
            assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
            seen += 1;
        }
    }
    assert!(seen >= 2);
}

/// The README's config for the common case is one a newcomer can copy: `resmux check` accepts it.
#[test]
fn the_readmes_config_is_valid() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme.find("```toml\n").expect("a toml block in the README") + "```toml\n".len();
    let block = &readme[start..start + readme[start..].find("```").expect("the block ends")];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("readme.toml");
    std::fs::write(&path, block).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_resmux")).args(["check", "-c"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{block}\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn check_warns_about_missing_secrets_and_require_secrets_refuses_them() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/resmux.toml");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_resmux"))
            .arg("check")
            .args(extra)
            .args(["-c", path])
            .env_remove("DOCS_TOKEN")
            .output()
            .unwrap()
    };
    let lenient = run(&[]);
    let stderr = String::from_utf8_lossy(&lenient.stderr);
    assert!(lenient.status.success(), "a CI job without secrets can check structure: {stderr}");
    assert!(stderr.contains("warning") && stderr.contains("DOCS_TOKEN"), "{stderr}");
    let strict = run(&["--require-secrets"]);
    assert!(!strict.status.success());
    assert!(String::from_utf8_lossy(&strict.stderr).contains("DOCS_TOKEN"));
}

#[test]
fn check_reports_every_error_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
bogus = 1

[listen]
addr = "not an address"

[[upstream]]
name = "Docs"
url = "http://127.0.0.1:1/mcp"

[[upstream]]
name = "two"
url = "http://x/mcp"
command = ["x"]
timeout = "0s"

[[upstream]]
name = "three"
colour = "blue"
"#,
    )
    .unwrap();
    let out = check(&path);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    // Decoding errors of independent sections are all reported...
    assert!(text.contains(":2: bogus: unknown key"), "{text}");
    assert!(text.contains(":4: listen:"), "{text}");
    assert!(text.contains("upstream[2]") && text.contains("colour"), "{text}");

    // ...and once the file decodes, every rule violation at once, with lines.
    std::fs::write(
        &path,
        r#"
[[upstream]]
name = "Docs"
url = "http://127.0.0.1:1/mcp"

[[upstream]]
name = "two"
url = "http://x/mcp"
command = ["x"]
timeout = "0s"
"#,
    )
    .unwrap();
    let out = check(&path);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("3 errors"), "{text}");
    assert!(text.contains(":3: upstream[0].name"), "{text}");
    assert!(text.contains(":8: upstream[1].url: set either"), "{text}");
    assert!(text.contains(":10: upstream[1].timeout: must be positive"), "{text}");
}

#[test]
fn syntax_errors_point_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[listen]\naddr = \n").unwrap();
    let out = check(&path);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(":2:"));
}

/// Runs `resmux check -c path`.
fn check(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_resmux")).args(["check", "-c"]).arg(path).output().unwrap()
}

/// A self-signed certificate for `name` and its key, written to `dir` as `cert.pem`, `key.pem`.
fn self_signed(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap().self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

#[test]
fn tls_keys_parse_and_their_files_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = self_signed(dir.path(), "localhost");
    let path = dir.path().join("tls.toml");
    let file = |cert: &std::path::Path, key: &std::path::Path| {
        format!(
            r#"
[listen.tls]
cert = "{cert}"
key = "{key}"

[[upstream]]
name = "remote"
url = "https://localhost:8443/mcp"
tls_ca_file = "{cert}"
tls_client_cert = "{cert}"
tls_client_key = "{key}"
"#,
            cert = cert.display(),
            key = key.display()
        )
    };
    std::fs::write(&path, file(&cert_path, &key_path)).unwrap();
    let out = check(&path);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The certificate given as the key, and a missing CA file: each reported.
    let missing = dir.path().join("missing.pem");
    std::fs::write(
        &path,
        file(&cert_path, &cert_path).replacen(&cert_path.display().to_string(), &missing.display().to_string(), 1),
    )
    .unwrap();
    let out = check(&path);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("listen.tls.cert") && text.contains("missing.pem"), "{text}");
    assert!(text.contains("listen.tls.key") && text.contains("no private key"), "{text}");
    assert!(text.contains("upstream[0].tls_client_key"), "{text}");
}

#[test]
fn check_reports_the_redis_tls_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = self_signed(dir.path(), "redis.internal");
    let path = dir.path().join("redis-tls.toml");
    let run = |redis: &str, tls: &str| {
        let text = format!(
            "[proxy]\ncursor_secret = {{ value = \"0123456789abcdef0123456789abcdef\" }}\n\n[cluster]\n{redis}\n{tls}\n\n\
             [[upstream]]\nname = \"docs\"\nurl = \"http://127.0.0.1:1/mcp\"\n"
        );
        std::fs::write(&path, text).unwrap();
        let out = check(&path);
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ca, cert, key) = (cert_path.display(), cert_path.display(), key_path.display());
    let all = format!("tls_ca_file = \"{ca}\"\ntls_cert_file = \"{cert}\"\ntls_key_file = \"{key}\"");

    for redis in ["redis_url = \"rediss://redis.internal:6380\"", "redis_nodes = [\"rediss://10.0.0.1:7000\"]"] {
        let (ok, text) = run(redis, &all);
        assert!(ok, "{redis}: {text}");
    }

    let (ok, text) = run("redis_url = \"rediss://redis.internal:6380\"", &format!("tls_cert_file = \"{cert}\""));
    assert!(!ok);
    assert!(text.contains("cluster.tls_key_file: required with `tls_cert_file`"), "{text}");

    let (ok, text) = run("redis_url = \"redis://redis.internal:6379\"", &all);
    assert!(!ok);
    for key in ["cluster.tls_ca_file", "cluster.tls_cert_file", "cluster.tls_key_file"] {
        assert!(text.contains(&format!("{key}: applies only to a rediss:// (TLS) Redis")), "{key}: {text}");
    }
    let (ok, text) = run("redis_nodes = [\"redis://10.0.0.1:7000\"]", &format!("tls_ca_file = \"{ca}\""));
    assert!(!ok && text.contains("`redis_nodes` is not rediss://"), "{text}");

    // Unreadable files, and a certificate where the key should be: each named with its key.
    let missing = dir.path().join("missing-ca.pem");
    let broken =
        format!("tls_ca_file = \"{}\"\ntls_cert_file = \"{cert}\"\ntls_key_file = \"{cert}\"", missing.display());
    let (ok, text) = run("redis_url = \"rediss://redis.internal:6380\"", &broken);
    assert!(!ok);
    assert!(text.contains("cluster.tls_ca_file") && text.contains("missing-ca.pem"), "{text}");
    assert!(text.contains("cluster.tls_key_file") && text.contains("no private key"), "{text}");
}
