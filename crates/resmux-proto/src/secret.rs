//! Secrets in the config (credentials, cursor and bus keys): named by an environment variable
//! or a file rather than written inline, and read when the config is built.

use std::path::PathBuf;

use serde::Deserialize;

/// Why a secret cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("environment variable `{var}` is not set")]
    Env {
        var: String,
        #[source]
        source: std::env::VarError,
    },
    #[error("cannot read `{}`", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("set exactly one of `env`, `file` or `value`")]
    Ambiguous,
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
    pub fn resolve(&self) -> Result<String, SecretError> {
        match (&self.env, &self.file, &self.value) {
            (Some(var), None, None) => {
                std::env::var(var).map_err(|source| SecretError::Env { var: var.clone(), source })
            }
            (None, Some(path), None) => std::fs::read_to_string(path)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|source| SecretError::File { path: path.clone(), source }),
            (None, None, Some(v)) => Ok(v.clone()),
            _ => Err(SecretError::Ambiguous),
        }
    }
}
