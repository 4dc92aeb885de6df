//! `resmux-load bench` over each transport it offers: HTTP/2 with prior knowledge, and https
//! with ALPN choosing HTTP/2 or HTTP/1.1 (a throwaway CA made here with rcgen), each against
//! the sample server on 127.0.0.1, whose own counters the report must match.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use resmux::sample::{Sample, SampleHttp, SampleSpec};
use resmux::tls::{ALPN_H2, ALPN_HTTP1};
use resmux_load::bench::{self, BenchArgs};

fn args(list: &[&str]) -> BenchArgs {
    BenchArgs::from_argv(std::iter::once("bench").chain(list.iter().copied())).expect("valid flags")
}

/// Runs the bench and checks every count against the server's.
async fn reconciled(a: &BenchArgs, up: &SampleHttp) -> bench::output::EndpointReport {
    let mut r = bench::run(a, a.validate().unwrap()).await.expect("bench runs");
    let e = r.endpoints.remove(0);
    let (sent, ok, _) = e.measured.totals();
    assert!(sent > 0 && ok == sent, "{:?}", e.measured.failures);
    for (method, n) in &e.sent_by_method {
        assert_eq!(up.sample.count(method), *n, "{method}");
    }
    assert_eq!(up.sample.total(), e.sent_by_method.values().sum::<u64>());
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge() {
    let up = SampleHttp::start(Sample::new(SampleSpec::generated("h2", 5)), ([127, 0, 0, 1], 0).into()).await.unwrap();
    let a = args(&[&up.url(), "--http", "2", "--mix", "read=3,list=1", "--duration", "500ms", "-c", "4", "--quiet"]);
    let e = reconciled(&a, &up).await;
    assert_eq!(e.http, Some("HTTP/2"));
    up.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_alpn_and_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    ca.distinguished_name.push(DnType::CommonName, "bench test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&leaf_key, &ca).unwrap();
    let path = |name: &str, pem: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    let (ca_pem, cert, key) =
        (path("ca.pem", ca.pem()), path("cert.pem", leaf.pem()), path("key.pem", leaf_key.serialize_pem()));
    let config = resmux::tls::server_config(&cert, &key, None, &[ALPN_H2, ALPN_HTTP1]).unwrap();
    let start = || {
        SampleHttp::start_tls(
            Sample::new(SampleSpec::generated("tls", 5)),
            ([127, 0, 0, 1], 0).into(),
            Arc::new(config.clone()),
        )
    };
    let ca_file = ca_pem.to_str().unwrap();

    let up = start().await.unwrap();
    assert!(up.url().starts_with("https://localhost:"));
    let a = args(&[&up.url(), "--ca-file", ca_file, "--duration", "500ms", "-c", "2", "--quiet"]);
    assert_eq!(reconciled(&a, &up).await.http, Some("HTTP/2"), "ALPN offers h2 first");
    up.stop();

    let up = start().await.unwrap();
    let a = args(&[&up.url(), "--ca-file", ca_file, "--http", "1.1", "--duration", "500ms", "-c", "2", "--quiet"]);
    assert_eq!(reconciled(&a, &up).await.http, Some("HTTP/1.1"));

    // Without the private CA the server is not trusted: a clear error, no report.
    let a = args(&[&up.url(), "--duration", "500ms", "--quiet"]);
    let err = bench::run(&a, a.validate().unwrap()).await.expect_err("an untrusted certificate fails");
    assert!(format!("{err:#}").contains("TLS"), "{err:#}");
    up.stop();
}
