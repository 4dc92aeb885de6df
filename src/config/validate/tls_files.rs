//! TLS files wherever the config names them (an upstream's, the Redis link's): each file on
//! its own, so that every broken one is reported at once, then the certificate and key
//! together.

use std::path::Path;

use crate::tls::{ClientTls, TlsError, client_config, load_certs, load_key};

/// The keys that name a CA file, a client certificate and its key, in that order.
pub(super) type TlsKeys = [&'static str; 3];

/// The problems of the files named by `keys`, each under its key.
pub(super) fn check_tls_files(
    keys: TlsKeys,
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Vec<(&'static str, String)> {
    let [ca_key, cert_key, key_key] = keys;
    let mut errors = Vec::new();
    let chain = |e: TlsError| crate::error::chain(&e);
    if let Some(ca) = ca
        && let Err(e) = client_config(ClientTls { ca_file: Some(ca), identity: None })
    {
        errors.push((ca_key, chain(e)));
    }
    match (cert.map(|p| (p, load_certs(p))), key.map(|p| (p, load_key(p)))) {
        (Some((cert, Ok(_))), Some((key, Ok(_)))) => {
            if let Err(e) = client_config(ClientTls { ca_file: None, identity: Some((cert, key)) }) {
                errors.push((cert_key, chain(e)));
            }
        }
        (cert, key) => {
            if let Some((_, Err(e))) = cert {
                errors.push((cert_key, chain(e)));
            }
            if let Some((_, Err(e))) = key {
                errors.push((key_key, chain(e)));
            }
        }
    }
    errors
}
