//! The outbound HTTP client: one pooled hyper-util client type, used by upstream transports,
//! the token endpoint, the JWKS fetch and the OTLP exporter. A leaf: it knows HTTP and TLS,
//! nothing of MCP, so every layer that talks HTTP outward can use it without depending on
//! the upstream layer.

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::tls::{self, ClientTls, TlsError};

/// A pooled HTTP client: plain `http` and, through rustls, `https`. `TCP_NODELAY` is set:
/// without it Nagle's algorithm adds ~40 ms to each keep-alive request/response pair on
/// loopback. One shared client (system roots only) serves every upstream without TLS settings
/// of its own; an upstream with `tls_ca_file` or a client certificate gets its own.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Builds the shared client.
pub fn client() -> HttpClient {
    build(tls::client_config(ClientTls::default()).expect("the default TLS configuration needs no files"))
}

/// Builds a client of its own for an upstream with TLS settings.
pub fn tls_client(settings: ClientTls<'_>) -> Result<HttpClient, TlsError> {
    Ok(build(tls::client_config(settings)?))
}

fn build(tls: rustls::ClientConfig) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(10)));
    // The TLS connector sees the scheme; the TCP connector below it must accept `https`.
    connector.enforce_http(false);
    // ALPN offers http/1.1 only, as on plain http. Not h2: h2 flattens I/O errors to text, so
    // a TLS alert arriving mid-request (a server refusing our client certificate after a TLS
    // 1.3 handshake) could no longer be told apart from a dropped connection.
    let https =
        HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(connector);
    Client::builder(TokioExecutor::new()).pool_idle_timeout(std::time::Duration::from_secs(60)).build(https)
}
