//! `rediss://`: the TLS every Redis client of the tier is built with. `tls_ca_file` names the
//! CAs trusted for the Redis server(s), in place of the Mozilla roots compiled in;
//! `tls_cert_file`/`tls_key_file` the client certificate that Redis asks for with
//! `tls-auth-clients yes` (its default). The files are read once, when the tier is set up: a
//! reload cannot change `[cluster]`, so new certificates take a restart.

use std::path::Path;

use redis::{ClientTlsConfig, TlsCertificates};

use crate::ClusterSetupError;
use crate::config::{ClusterConfig, RedisTarget};

/// The certificates `config` names, read now; `None` when it names none (a `rediss://` Redis
/// is then checked against the Mozilla roots, and no client certificate is offered).
pub(crate) fn certificates(config: &ClusterConfig) -> Result<Option<TlsCertificates>, ClusterSetupError> {
    let read = |key: &'static str, path: &Path| {
        std::fs::read(path).map_err(|source| ClusterSetupError::TlsFile { key, path: path.to_owned(), source })
    };
    let root_cert = config.tls_ca_file.as_deref().map(|p| read("tls_ca_file", p)).transpose()?;
    let client_tls = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => {
            Some(ClientTlsConfig { client_cert: read("tls_cert_file", cert)?, client_key: read("tls_key_file", key)? })
        }
        (None, None) => None,
        _ => return Err(ClusterSetupError::TlsPair),
    };
    Ok((root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates { client_tls, root_cert }))
}

/// Readies TLS for `target`: the certificates are refused on a plain `redis://` Redis (its
/// URL may come from a secret, so `resmux check` cannot always tell), and a `rediss://` one
/// gets the process's rustls provider as the default (see [`install_provider`]).
pub(crate) fn prepare(target: &RedisTarget, certs: Option<&TlsCertificates>) -> Result<(), ClusterSetupError> {
    if !target.is_tls() {
        return if certs.is_some() { Err(ClusterSetupError::TlsNeedsRediss) } else { Ok(()) };
    }
    install_provider();
    Ok(())
}

/// The redis crate makes its rustls configuration with `ClientConfig::builder()`, which takes
/// the process-wide default provider, and panics when there is none to take (none installed
/// and not exactly one compiled in). The process's provider is `ring`: installed as the
/// default here, unless another already is (which then serves as well).
pub(crate) fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error means another thread installed one meanwhile: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(edit: impl FnOnce(&mut ClusterConfig)) -> ClusterConfig {
        let mut c = ClusterConfig::default();
        edit(&mut c);
        c
    }

    #[test]
    fn an_unreadable_file_is_named_with_its_key() {
        let c = config(|c| c.tls_ca_file = Some("/nonexistent/redis-ca.pem".into()));
        let err = certificates(&c).unwrap_err();
        assert!(matches!(err, ClusterSetupError::TlsFile { key: "tls_ca_file", .. }), "{err:?}");
        let text = resmux_proto::error::chain(&err);
        assert!(text.contains("cluster.tls_ca_file") && text.contains("/nonexistent/redis-ca.pem"), "{text}");
        assert!(std::error::Error::source(&err).is_some(), "the I/O error is kept as the cause");
    }

    #[test]
    fn certificates_on_a_plain_redis_are_refused_at_setup() {
        let certs = TlsCertificates { client_tls: None, root_cert: Some(Vec::new()) };
        let plain = RedisTarget::Standalone("redis://10.0.0.1:6379".into());
        assert!(matches!(prepare(&plain, Some(&certs)), Err(ClusterSetupError::TlsNeedsRediss)));
        assert!(prepare(&plain, None).is_ok());
        let nodes = RedisTarget::Cluster(vec!["redis://10.0.0.1:7000".into()]);
        assert!(matches!(prepare(&nodes, Some(&certs)), Err(ClusterSetupError::TlsNeedsRediss)));
    }

    /// Without this, a rediss:// connection in a process where no default provider is
    /// installed would leave the choice to the features rustls was compiled with, and panic
    /// as soon as a second provider is compiled in by any dependency.
    #[tokio::test]
    async fn a_rediss_target_installs_the_process_provider_and_connecting_does_not_panic() {
        let tls = RedisTarget::Standalone("rediss://127.0.0.1:1".into());
        prepare(&tls, None).unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        // Port 1 refuses: the rustls configuration is made before the TCP connection, so this
        // runs the redis crate's `ClientConfig::builder()`; it must fail as a connection error.
        let client = redis::Client::open("rediss://127.0.0.1:1").unwrap();
        let Err(err) = client.get_multiplexed_async_connection().await else { panic!("nothing listens on port 1") };
        assert!(err.is_io_error() || err.is_connection_refusal(), "{err}");
    }
}
