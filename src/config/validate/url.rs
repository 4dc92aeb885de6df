//! URL checks shared by the upstream and `[auth]` rules.

/// Why a configured URL or URI is refused.
#[derive(Debug, thiserror::Error)]
pub enum BadUrl {
    #[error("`{text}` is not a {what}: {source}")]
    Unparsable {
        text: String,
        what: &'static str,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("`{0}` must be an absolute http(s) URI")]
    NotAbsolute(String),
    #[error("`{0}` must not have a fragment")]
    Fragment(String),
    #[error("`{0}` must be an http:// or https:// URL")]
    NotHttp(String),
    #[error("`{0}` has no host")]
    NoHost(String),
}

/// Checks a resource URI: absolute http(s), no fragment.
pub(super) fn canonical_resource(r: &str) -> Result<(), BadUrl> {
    let uri: http::Uri = r.parse().map_err(|source| BadUrl::Unparsable { text: r.to_owned(), what: "URI", source })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(BadUrl::NotAbsolute(r.to_owned()));
    }
    if r.contains('#') {
        return Err(BadUrl::Fragment(r.to_owned()));
    }
    Ok(())
}

/// Checks a URL the proxy fetches: http(s), with a host.
pub(super) fn check_url(url: &str) -> Result<(), BadUrl> {
    let uri: http::Uri =
        url.parse().map_err(|source| BadUrl::Unparsable { text: url.to_owned(), what: "URL", source })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(BadUrl::NotHttp(url.to_owned())),
    }
    if uri.host().is_none() {
        return Err(BadUrl::NoHost(url.to_owned()));
    }
    Ok(())
}
