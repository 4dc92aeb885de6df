//! `[[upstream]]`: one MCP server the proxy fronts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::AllowRule;

/// One upstream server. Exactly one of `url` and `command` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name; also the namespace prefix (`{name}+{uri}`, `{name}__{tool}`). Lowercase
    /// ASCII letters, digits and `-`, starting with a letter, at most 63 characters.
    pub name: String,
    /// Streamable HTTP endpoint, e.g. `http://127.0.0.1:9001/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// Program and arguments of a stdio server, started and supervised by the proxy.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Extra environment for `command`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory for `command`. Default: the proxy's.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Whether names and URIs get this upstream's prefix when several upstreams are configured.
    /// Default true. Unprefixed names that collide are resolved first-in-config-wins.
    #[serde(default = "yes")]
    pub prefix: bool,
    /// Deadline for one upstream request, connection included. Default 30 s.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Most requests in flight to this upstream at once; further requests wait (within their
    /// timeout). Default 64.
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// What a merged list does when this upstream fails: skip it (`fail_open`, the default) or
    /// fail the whole list (`fail_closed`).
    #[serde(default)]
    pub on_error: OnError,
    /// Headers sent on every request to this upstream (credentials). The downstream
    /// `Authorization` header is never forwarded.
    #[serde(default)]
    pub headers: BTreeMap<String, SecretSource>,
    /// Largest accepted upstream message (response body, SSE event or stdio line). Default
    /// 16 MiB.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: usize,
    /// TTL used when a result carries no `ttlMs` (legacy or non-conformant servers). Default 0:
    /// such results are not cached.
    #[serde(default, with = "humantime_serde")]
    pub default_ttl: Duration,
    /// Scope assumed when a result carries no `cacheScope`. Default `private`.
    #[serde(default)]
    pub default_scope: CacheScopeDefault,
    /// Whether this upstream's results may be cached. Default true.
    #[serde(default = "yes")]
    pub cache: bool,
    /// Protocol era: `auto` (the default: probe with `server/discover`, fall back to the
    /// legacy `initialize`), or a pinned version: `2026-07-28`, `2025-11-25`, `2025-06-18`,
    /// `2025-03-26`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Longest wait between restarts of a crashed stdio server (backoff doubles from 100 ms up
    /// to this). Default 30 s.
    #[serde(default = "default_restart_max", with = "humantime_serde")]
    pub restart_backoff_max: Duration,
    /// `https` only: a PEM file of CA certificates trusted for this upstream in addition to
    /// the system roots (a private CA). Default: none.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// `https` only: a PEM certificate chain presented when the upstream asks for a client
    /// certificate (mutual TLS). Set together with `tls_client_key`. Default: none.
    #[serde(default)]
    pub tls_client_cert: Option<PathBuf>,
    /// `https` only: the PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls_client_cert`.
    #[serde(default)]
    pub tls_client_key: Option<PathBuf>,
    /// Who may reach what on this upstream (`[[upstream.allow]]`, see [`AllowRule`]). Default
    /// none: every caller that authenticated may use all of it.
    #[serde(default)]
    pub allow: Vec<AllowRule>,
}

/// Where an upstream lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Http { url: String },
    Stdio { command: Vec<String> },
}

impl UpstreamConfig {
    /// The transport, once `validate()` has checked exactly one is set.
    pub fn transport(&self) -> Transport {
        match (&self.url, &self.command) {
            (Some(url), _) => Transport::Http { url: url.clone() },
            (None, Some(command)) => Transport::Stdio { command: command.clone() },
            (None, None) => Transport::Stdio { command: Vec::new() },
        }
    }

    /// A config for an HTTP upstream with every default (tests, demo).
    pub fn http(name: &str, url: &str) -> Self {
        Self::with_defaults(name, Some(url.to_owned()), None)
    }

    /// A config for a stdio upstream with every default (tests, demo).
    pub fn stdio(name: &str, command: Vec<String>) -> Self {
        Self::with_defaults(name, None, Some(command))
    }

    fn with_defaults(name: &str, url: Option<String>, command: Option<Vec<String>>) -> Self {
        Self {
            name: name.to_owned(),
            url,
            command,
            env: BTreeMap::new(),
            cwd: None,
            prefix: true,
            timeout: default_timeout(),
            max_in_flight: default_in_flight(),
            on_error: OnError::default(),
            headers: BTreeMap::new(),
            max_message_bytes: default_max_message(),
            default_ttl: Duration::ZERO,
            default_scope: CacheScopeDefault::default(),
            cache: true,
            protocol: default_protocol(),
            restart_backoff_max: default_restart_max(),
            tls_ca_file: None,
            tls_client_cert: None,
            tls_client_key: None,
            allow: Vec::new(),
        }
    }

    /// This upstream's own TLS settings, when it has any (otherwise it shares the default
    /// client). A lone `tls_client_cert` or `tls_client_key` is left out: `validate()`
    /// rejects it.
    pub fn tls(&self) -> Option<crate::tls::ClientTls<'_>> {
        let identity = match (&self.tls_client_cert, &self.tls_client_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            _ => None,
        };
        let ca_file = self.tls_ca_file.as_deref();
        (ca_file.is_some() || identity.is_some()).then_some(crate::tls::ClientTls { ca_file, identity })
    }
}

/// Failure policy for merged lists.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    #[default]
    FailOpen,
    FailClosed,
}

/// Scope assumed for results without `cacheScope`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CacheScopeDefault {
    #[default]
    Private,
    Public,
}

/// A secret value: from an environment variable, a file, or (discouraged) inline.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    /// Name of an environment variable holding the value.
    #[serde(default)]
    pub env: Option<String>,
    /// Path of a file holding the value (trailing newline trimmed).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// The value itself. Avoid for real credentials: config files get copied around.
    #[serde(default)]
    pub value: Option<String>,
}

impl SecretSource {
    /// Reads the secret.
    pub fn resolve(&self) -> Result<String, String> {
        match (&self.env, &self.file, &self.value) {
            (Some(var), None, None) => {
                std::env::var(var).map_err(|_| format!("environment variable `{var}` is not set"))
            }
            (None, Some(path), None) => std::fs::read_to_string(path)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|e| format!("cannot read `{}`: {e}", path.display())),
            (None, None, Some(v)) => Ok(v.clone()),
            _ => Err("set exactly one of `env`, `file` or `value`".into()),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_in_flight() -> usize {
    64
}
fn default_max_message() -> usize {
    16 << 20
}
fn default_protocol() -> String {
    "auto".into()
}
fn default_restart_max() -> Duration {
    Duration::from_secs(30)
}
