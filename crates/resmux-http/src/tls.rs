//! TLS through rustls, with the `ring` provider, on both sides: client configurations for
//! `https` upstreams (system roots, an optional extra CA file, an optional client certificate)
//! and server configurations for the optional TLS listener (and the sample server in tests).
//!
//! The system roots are Mozilla's, compiled in through `webpki-roots`, rather than read from
//! the host's store with `rustls-native-certs`: they cost no file I/O at start-up (so the
//! shared client carries them even when no upstream is https), they are the same on every
//! host, and they work in minimal container images that ship no `/etc/ssl/certs`. A private
//! or corporate CA is added per upstream with `tls_ca_file`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// ALPN protocol ids.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read PEM file `{}`", path.display())]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("`{}` holds no certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("`{}` holds no private key", path.display())]
    NoKey { path: PathBuf },
    #[error("`{}`: a CA certificate was rejected", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the certificate and key do not make a usable identity")]
    Identity(#[source] rustls::Error),
    #[error("cannot build the client-certificate verifier")]
    ClientVerifier(#[source] rustls::server::VerifierBuilderError),
}

/// The one crypto provider used everywhere (explicit, so no process-wide default is needed).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem { path: path.to_owned(), source };
    let certs = CertificateDer::pem_file_iter(path).map_err(pem)?.collect::<Result<Vec<_>, _>>().map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    match PrivateKeyDer::from_pem_file(path) {
        Ok(key) => Ok(key),
        Err(rustls::pki_types::pem::Error::NoItemsFound) => Err(TlsError::NoKey { path: path.to_owned() }),
        Err(source) => Err(TlsError::Pem { path: path.to_owned(), source }),
    }
}

/// A root store of the CA certificates in `path`.
fn roots_from(path: &Path, roots: &mut RootCertStore) -> Result<(), TlsError> {
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|source| TlsError::BadCa { path: path.to_owned(), source })?;
    }
    Ok(())
}

/// What an upstream's TLS client needs beyond the defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientTls<'a> {
    /// Extra trusted CA certificates (PEM), added to the system roots.
    pub ca_file: Option<&'a Path>,
    /// Client certificate chain and key (PEM) for mutual TLS.
    pub identity: Option<(&'a Path, &'a Path)>,
}

/// A client configuration trusting the system roots plus `tls.ca_file`, presenting
/// `tls.identity` when the server asks for a client certificate. ALPN is left to the
/// connector.
pub fn client_config(tls: ClientTls<'_>) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(ca) = tls.ca_file {
        roots_from(ca, &mut roots)?;
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots);
    match tls.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?).map_err(TlsError::Identity)
        }
    }
}

/// A server configuration presenting `cert`/`key`, offering `alpn` in preference order, and,
/// with `client_ca`, requiring a client certificate signed by one of its CAs.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots_from(ca, &mut roots)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(TlsError::ClientVerifier)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(load_certs(cert)?, load_key(key)?).map_err(TlsError::Identity)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// The rustls error somewhere in `err`'s source chain, if any: a failed handshake, a rejected
/// certificate, or an alert from the peer. (`std::io::Error` hides its inner error from
/// `source()`, so each link is also looked into.)
pub fn find_tls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())
            && let Some(tls) = find_tls_error(inner)
        {
            return Some(tls);
        }
        next = e.source();
    }
    None
}
