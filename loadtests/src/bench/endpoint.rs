//! One endpoint the bench drives: its URL, how to connect (TCP, TLS with ALPN, HTTP/1.1 or
//! HTTP/2), and the requests of either protocol era with the headers a conforming client
//! sends (the mirrored headers come from the proxy's own [`Headers`], so they match exactly
//! what a strict 2026-07-28 server checks).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use resmux::upstream::{Headers, ParamHeader};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use super::counts::Sent;
use super::reply;
use crate::conn::{Conn, Protocol};
use crate::wire::META;

/// Which HTTP version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpChoice {
    /// HTTP/1.1 on http, whatever ALPN settles on https.
    Auto,
    Http1,
    Http2,
}

impl HttpChoice {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Self::Auto,
            "1.1" | "1" => Self::Http1,
            "2" => Self::Http2,
            other => bail!("--http `{other}`: expected auto, 1.1 or 2"),
        })
    }
}

/// The protocol era of an endpoint, as the probe found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    Modern,
    /// A 2025-xx server: the negotiated version and its session, if it keeps one.
    Legacy {
        version: String,
        session: Option<String>,
    },
}

impl Era {
    pub fn label(&self) -> String {
        match self {
            Era::Modern => resmux::mcp::MODERN_VERSION.to_owned(),
            Era::Legacy { version, .. } => format!("{version} (legacy)"),
        }
    }
}

/// A parsed endpoint URL and its connection settings.
pub struct Endpoint {
    /// The URL as given (it may not carry credentials: they belong in headers).
    pub url: String,
    host: String,
    port: u16,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Path and query, as an HTTP/1.1 request line carries them.
    path: Uri,
    /// The whole URL, as HTTP/2 sends it (`:scheme`, `:authority`, `:path`).
    absolute: Uri,
    authority: HeaderValue,
    http: HttpChoice,
    /// The user's headers, on every request.
    headers: HeaderMap,
    timeout: Duration,
    /// The HTTP version the first connection settled on (`HTTP/1.1`, `HTTP/2`).
    negotiated: std::sync::OnceLock<&'static str>,
}

impl Endpoint {
    /// Parses `url`; `ca_file` adds trusted CAs for https.
    pub fn parse(
        url: &str,
        http: HttpChoice,
        ca_file: Option<&Path>,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Self> {
        let absolute = Uri::try_from(url).with_context(|| format!("`{url}` is not a URL"))?;
        let authority = absolute.authority().with_context(|| format!("`{url}` has no host"))?.clone();
        if authority.as_str().contains('@') {
            bail!("the URL carries credentials: pass them with --header or --bearer-env instead");
        }
        let tls = match absolute.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => bail!("`{url}`: only http:// and https:// endpoints are supported"),
        };
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        let tls = if tls {
            let mut config = resmux::tls::client_config(resmux::tls::ClientTls { ca_file, identity: None })
                .context("building the TLS client configuration")?;
            config.alpn_protocols = match http {
                HttpChoice::Auto => vec![resmux::tls::ALPN_H2.to_vec(), resmux::tls::ALPN_HTTP1.to_vec()],
                HttpChoice::Http1 => vec![resmux::tls::ALPN_HTTP1.to_vec()],
                HttpChoice::Http2 => vec![resmux::tls::ALPN_H2.to_vec()],
            };
            let name =
                ServerName::try_from(host.clone()).with_context(|| format!("`{host}` is not a TLS server name"))?;
            Some((Arc::new(config), name))
        } else {
            None
        };
        let path = absolute.path_and_query().map_or("/", |p| p.as_str());
        Ok(Self {
            url: url.to_owned(),
            host,
            port,
            tls,
            path: Uri::try_from(path).context("the URL's path")?,
            authority: HeaderValue::from_str(authority.as_str()).context("the URL's host")?,
            absolute,
            http,
            headers,
            timeout,
            negotiated: std::sync::OnceLock::new(),
        })
    }

    /// Whether the endpoint is on this machine (the bench's own tests stay on loopback).
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The HTTP version in use, once a connection has been made.
    pub fn http_version(&self) -> Option<&'static str> {
        self.negotiated.get().copied()
    }

    fn note(&self, protocol: Protocol) -> Protocol {
        let _ = self.negotiated.set(if protocol == Protocol::Http2 { "HTTP/2" } else { "HTTP/1.1" });
        protocol
    }

    /// A new connection, within the request timeout.
    pub async fn connect(&self) -> Result<Conn> {
        tokio::time::timeout(self.timeout, self.connect_now())
            .await
            .with_context(|| format!("connecting to {} timed out", self.url))?
    }

    async fn connect_now(&self) -> Result<Conn> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("connecting to {}:{}", self.host, self.port))?;
        tcp.set_nodelay(true)?;
        let (host, uri) = (self.authority.clone(), self.absolute.clone());
        match &self.tls {
            None => {
                let protocol =
                    self.note(if self.http == HttpChoice::Http2 { Protocol::Http2 } else { Protocol::Http1 });
                Conn::handshake(TokioIo::new(tcp), protocol, uri, host, None).await
            }
            Some((config, name)) => {
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .context("TLS handshake")?;
                let h2 = tls.get_ref().1.alpn_protocol() == Some(resmux::tls::ALPN_H2);
                if self.http == HttpChoice::Http2 && !h2 {
                    bail!("the server did not agree to HTTP/2 (ALPN)");
                }
                let protocol = self.note(if h2 { Protocol::Http2 } else { Protocol::Http1 });
                Conn::handshake(TokioIo::new(tls), protocol, uri, host, None).await
            }
        }
    }

    /// A JSON-RPC request (`id` set) or notification (`id` none) of `method` with `params`
    /// (a JSON object, without `_meta`), in `era`'s shape. `annotations` are the called tool's
    /// `x-mcp-header` parameters.
    pub fn request(
        &self,
        era: &Era,
        method: &str,
        params: &str,
        id: Option<u64>,
        annotations: &Arc<[ParamHeader]>,
    ) -> Request<Full<Bytes>> {
        let params = match era {
            Era::Modern => with_meta(params),
            Era::Legacy { .. } => params.to_owned(),
        };
        let body = match id {
            Some(id) => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#),
            None => format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#),
        };
        let mut headers = self.headers.clone();
        headers.insert(HOST, self.authority.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        match era {
            Era::Modern => Headers::modern(method, params.as_bytes(), |_| annotations.clone()).apply(&mut headers),
            Era::Legacy { version, session } => {
                Headers::Legacy { version, session: session.as_deref() }.apply(&mut headers)
            }
        }
        let mut req = Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.path.clone();
        *req.headers_mut() = headers;
        req
    }
}

impl Endpoint {
    /// A plain JSON POST of `body` (the trigger: no MCP headers).
    pub fn post_json(&self, body: &'static str) -> Request<Full<Bytes>> {
        let mut headers = self.headers.clone();
        headers.insert(HOST, self.authority.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let mut req = Request::new(Full::new(Bytes::from_static(body.as_bytes())));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.path.clone();
        *req.headers_mut() = headers;
        req
    }
}

/// Sends `req` on `conn` and reads the whole answer within `timeout`. A broken connection or a
/// timeout leaves `conn` unusable: the caller opens another.
pub async fn exchange(
    conn: &mut Conn,
    req: Request<Full<Bytes>>,
    timeout: Duration,
) -> (Sent, Option<(http::response::Parts, Bytes)>) {
    let answer = async { crate::conn::read_whole(conn.send(req).await?).await };
    match tokio::time::timeout(timeout, answer).await {
        Err(_) => (Sent::Timeout, None),
        // hyper cancels a request it never wrote (the connection closed first).
        Ok(Err(e)) if e.chain().any(|c| c.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_canceled)) => {
            (Sent::NotSent(format!("{e:#}")), None)
        }
        Ok(Err(e)) => (Sent::Broken(format!("{e:#}")), None),
        Ok(Ok((parts, body))) => (Sent::Answered(reply::classify(&parts, &body)), Some((parts, body))),
    }
}

/// A params object with the 2026-07-28 `_meta` (version, capabilities, client) added.
fn with_meta(params: &str) -> String {
    let t = params.trim();
    let inner = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(t).trim();
    if inner.is_empty() { format!("{{{META}}}") } else { format!("{{{inner},{META}}}") }
}

/// JSON text of a string.
pub fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::parse(url, HttpChoice::Auto, None, HeaderMap::new(), Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn modern_and_legacy_requests_carry_their_era_headers() {
        let ep = endpoint("http://127.0.0.1:9/x/mcp?k=1");
        let none: Arc<[ParamHeader]> = Arc::from(Vec::new());
        let uri = json_string("file:///a b");
        let req = ep.request(&Era::Modern, "resources/read", &format!(r#"{{"uri":{uri}}}"#), Some(7), &none);
        assert_eq!(req.uri(), "/x/mcp?k=1");
        let h = req.headers();
        assert_eq!(h["mcp-protocol-version"], "2026-07-28");
        assert_eq!(h["mcp-method"], "resources/read");
        assert!(h.contains_key("mcp-name"));
        assert_eq!(h["host"], "127.0.0.1:9");
        let legacy = Era::Legacy { version: "2025-06-18".into(), session: Some("s-1".into()) };
        let req = ep.request(&legacy, "tools/list", "{}", Some(8), &none);
        let h = req.headers();
        assert_eq!(h["mcp-protocol-version"], "2025-06-18");
        assert_eq!(h["mcp-session-id"], "s-1");
        assert!(!h.contains_key("mcp-method"));
    }

    #[test]
    fn meta_is_merged_into_params() {
        let v: serde_json::Value = serde_json::from_str(&with_meta("{}")).unwrap();
        assert_eq!(v["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        let v: serde_json::Value = serde_json::from_str(&with_meta(r#"{"name":"t","arguments":{"a":{}}}"#)).unwrap();
        assert_eq!(v["arguments"]["a"], serde_json::json!({}));
        assert!(v["_meta"].is_object());
    }

    #[test]
    fn urls_are_checked() {
        let ep = endpoint("https://example.com/mcp");
        assert_eq!((ep.port, ep.tls.is_some(), ep.is_loopback()), (443, true, false));
        assert!(endpoint("http://[::1]:8/").is_loopback());
        let bad = |u: &str| Endpoint::parse(u, HttpChoice::Auto, None, HeaderMap::new(), Duration::from_secs(1));
        assert!(bad("ftp://x/").is_err());
        assert!(bad("http://user:pw@x/").is_err());
        assert!(bad("not a url").is_err());
    }
}
