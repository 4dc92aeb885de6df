//! TLS on both sides (DESIGN §6): https upstreams trusted through `tls_ca_file`, refused
//! without it, mutual TLS with `tls_client_cert`/`tls_client_key`, and the TLS listener. Every
//! key and certificate is made here with rcgen: a test CA, a server certificate for
//! `localhost`/127.0.0.1 and client certificates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;

use crate::support::*;
use resmux::config::{ListenTls, UpstreamConfig};
use resmux::sample::{Sample, SampleHttp, SampleSpec};
use resmux::tls::{self, ALPN_H2, ALPN_HTTP1};

/// PEM files of a throwaway PKI in a temporary directory (the TLS Redis of
/// `cluster_tls.rs` uses it too).
pub(crate) struct Pki {
    _dir: tempfile::TempDir,
    pub(crate) ca: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
    /// A client certificate from another CA, which the upstream does not trust.
    stranger_cert: PathBuf,
    stranger_key: PathBuf,
    /// That other CA, which signed neither the server's certificate nor the client's.
    pub(crate) stranger_ca: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A leaf certificate and its key, signed by `issuer`, as PEM.
fn leaf(issuer: &CertifiedIssuer<'_, KeyPair>, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        let test_ca = ca("resmux test CA");
        let (server_cert, server_key) =
            leaf(&test_ca, &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
        let (client_cert, client_key) = leaf(&test_ca, &["resmux-client"], ExtendedKeyUsagePurpose::ClientAuth);
        let other_ca = ca("another CA");
        let (stranger_cert, stranger_key) = leaf(&other_ca, &["stranger"], ExtendedKeyUsagePurpose::ClientAuth);
        Self {
            ca: write("ca.pem", &test_ca.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
            stranger_cert: write("stranger.pem", &stranger_cert),
            stranger_key: write("stranger.key", &stranger_key),
            stranger_ca: write("stranger-ca.pem", &other_ca.pem()),
            _dir: dir,
        }
    }

    /// A sample upstream serving HTTPS with the server certificate; with `client_ca`, it
    /// requires a client certificate signed by that CA.
    async fn upstream(&self, client_ca: Option<&Path>) -> SampleHttp {
        let config =
            tls::server_config(&self.server_cert, &self.server_key, client_ca, &[ALPN_H2, ALPN_HTTP1]).unwrap();
        let sample = Sample::new(SampleSpec::generated("docs", 5));
        SampleHttp::start_tls(sample, "127.0.0.1:0".parse().unwrap(), Arc::new(config)).await.expect("bind")
    }
}

/// discover, read and tools/call through the proxy, each asserted.
async fn works_through(p: &Proxy, up: &SampleHttp) {
    discovered(&p.client).await;
    let read = p.client.request("resources/read", json!({"uri": "docs://item/1"})).await;
    assert_eq!(read.status, 200);
    assert!(!read.text().is_empty());
    assert_eq!(up.sample.count("resources/read"), 1);
    let call = p.client.request("tools/call", json!({"name": "echo", "arguments": {"text": "over tls"}})).await;
    assert_eq!(call.result()["content"][0]["text"], "over tls");
}

/// The gateway error of a read that could not get through TLS.
async fn tls_failure(p: &Proxy) -> serde_json::Value {
    let ex = p.client.request("resources/read", json!({"uri": "docs://item/1"})).await;
    assert_eq!(ex.status, 502, "{}", String::from_utf8_lossy(&ex.body));
    let err = ex.json()["error"].clone();
    assert_eq!(err["code"], -32603);
    assert_eq!(err["data"]["side"], "upstream");
    assert_eq!(err["data"]["upstream"], "docs");
    assert_eq!(err["data"]["retryable"], false, "a certificate problem does not go away on retry: {err}");
    assert!(err["data"]["tls"].is_string(), "the error names TLS: {err}");
    assert!(err["message"].as_str().unwrap().contains("TLS"), "{err}");
    err
}

fn quick(mut up: UpstreamConfig) -> UpstreamConfig {
    up.timeout = std::time::Duration::from_secs(5);
    up
}

#[tokio::test]
async fn an_https_upstream_trusted_through_its_ca_file_works() {
    let pki = Pki::new();
    let up = pki.upstream(None).await;
    assert!(up.url().starts_with("https://localhost:"));
    let mut cfg = UpstreamConfig::http("docs", &up.url());
    cfg.tls_ca_file = Some(pki.ca.clone());
    let p = Proxy::start(config(vec![cfg])).await;
    works_through(&p, &up).await;
    // A second read is a cache hit: the TLS upstream is not asked again.
    let again = p.client.request("resources/read", json!({"uri": "docs://item/1"})).await;
    assert_eq!(again.cache(), "hit");
    assert_eq!(up.sample.count("resources/read"), 1);
    p.app.shutdown().await;
    up.stop();
}

#[tokio::test]
async fn without_the_ca_the_upstream_certificate_is_refused_with_a_tls_error() {
    let pki = Pki::new();
    let up = pki.upstream(None).await;
    let p = Proxy::start(config(vec![quick(UpstreamConfig::http("docs", &up.url()))])).await;
    let err = tls_failure(&p).await;
    let reason = err["data"]["tls"].as_str().unwrap().to_ascii_lowercase();
    assert!(reason.contains("certificate"), "the reason says what was wrong: {reason}");
    assert_eq!(up.sample.count("resources/read"), 0);
    p.app.shutdown().await;
    up.stop();
}

#[tokio::test]
async fn mutual_tls_needs_the_configured_client_certificate() {
    let pki = Pki::new();
    let up = pki.upstream(Some(&pki.ca)).await;
    // With the client certificate: everything works.
    let mut with = UpstreamConfig::http("docs", &up.url());
    with.tls_ca_file = Some(pki.ca.clone());
    with.tls_client_cert = Some(pki.client_cert.clone());
    with.tls_client_key = Some(pki.client_key.clone());
    let p = Proxy::start(config(vec![with])).await;
    works_through(&p, &up).await;
    p.app.shutdown().await;
    // Without one, or with one from a CA the upstream does not trust: refused, as TLS.
    let mut without = quick(UpstreamConfig::http("docs", &up.url()));
    without.tls_ca_file = Some(pki.ca.clone());
    let mut stranger = without.clone();
    stranger.tls_client_cert = Some(pki.stranger_cert.clone());
    stranger.tls_client_key = Some(pki.stranger_key.clone());
    for cfg in [without, stranger] {
        let p = Proxy::start(config(vec![cfg])).await;
        tls_failure(&p).await;
        p.app.shutdown().await;
    }
    assert_eq!(up.sample.count("resources/read"), 1, "only the authenticated proxy got through");
    up.stop();
}

#[tokio::test]
async fn the_tls_listener_serves_the_endpoint_over_https() {
    let pki = Pki::new();
    let up = sample_http(SampleSpec::generated("docs", 5)).await;
    let trusting = || {
        let ca = Some(pki.ca.as_path());
        tls::client_config(tls::ClientTls { ca_file: ca, identity: None }).unwrap()
    };
    for http2 in [false, true] {
        let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
        cfg.listen.tls = Some(ListenTls { cert: pki.server_cert.clone(), key: pki.server_key.clone() });
        cfg.listen.http2 = http2;
        let app = resmux::app::App::start(cfg).await.expect("proxy starts");
        let port = app.local_addr().port();
        let client = McpClient::with_tls(&format!("https://localhost:{port}/mcp"), trusting());
        discovered(&client).await;
        let read = client.request("resources/read", json!({"uri": "docs://item/2"})).await;
        assert_eq!(read.status, 200);
        assert!(!read.text().is_empty());
        // A browser page served from https://localhost is a loopback origin.
        let headers = [
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", "server/discover".to_owned()),
            ("origin", format!("https://localhost:{port}")),
        ];
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}});
        let ex = client.raw("POST", &headers, body.to_string().into_bytes()).await;
        assert_eq!(ex.status, 200, "{}", String::from_utf8_lossy(&ex.body));
        // Clear text on the TLS port gets no HTTP answer.
        let plain = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<http_body_util::Full<bytes::Bytes>>();
        let req = http::Request::post(format!("http://127.0.0.1:{port}/mcp"))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
            .unwrap();
        let answer = tokio::time::timeout(DEADLINE, plain.request(req)).await.expect("bounded");
        assert!(answer.is_err(), "clear text is not served on the TLS listener");
        app.shutdown().await;
    }
    up.stop();
}

#[tokio::test]
async fn the_tls_listener_negotiates_h2_only_when_enabled() {
    let pki = Pki::new();
    let up = sample_http(SampleSpec::generated("docs", 1)).await;
    for http2 in [false, true] {
        let mut cfg = config(vec![UpstreamConfig::http("docs", &up.url())]);
        cfg.listen.tls = Some(ListenTls { cert: pki.server_cert.clone(), key: pki.server_key.clone() });
        cfg.listen.http2 = http2;
        let app = resmux::app::App::start(cfg).await.expect("proxy starts");
        let mut client_tls =
            tls::client_config(tls::ClientTls { ca_file: Some(&pki.ca), identity: None }).expect("client config");
        client_tls.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_tls));
        let tcp = tokio::net::TcpStream::connect(app.local_addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = tokio::time::timeout(DEADLINE, connector.connect(name, tcp)).await.expect("bounded").unwrap();
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let want = if http2 { ALPN_H2 } else { ALPN_HTTP1 };
        assert_eq!(alpn.as_deref(), Some(want), "http2 = {http2}");
        drop(stream);
        app.shutdown().await;
    }
    up.stop();
}
