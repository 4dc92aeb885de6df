//! Configuration: inert serde data with documented defaults. `load()` parses a TOML file and
//! reports every error it can find at once, each with its location; [`Config::validate`]
//! checks the cross-field rules. `app::build` turns a valid config into running parts.

mod admin;
mod auth;
mod hub;
mod listen;
mod load;
mod proxy;
mod reload;
mod trust;
mod upstream;
mod validate;
pub use validate::forbidden_header;

use serde::Deserialize;

pub use admin::AdminConfig;
pub use auth::{
    ASYMMETRIC_ALGORITHMS, AllowRule, ApiKeyConfig, AuthConfig, AuthMode, AuthModes, JwtConfig, MetadataConfig,
};
pub use hub::HubConfig;
pub use listen::{ListenConfig, ListenTls};
pub use load::{ConfigError, ConfigErrors, load, load_without_secrets, parse};
pub use proxy::{LogConfig, LogFormat, ProxyConfig, TelemetryConfig};
pub use reload::ReloadConfig;
pub use resmux_cache::CacheConfig;
pub use resmux_cluster::{ClusterConfig, RedisTarget};
pub use upstream::{
    CacheScopeDefault, ClientAuth, Credential, DEFAULT_MAX_CACHED_TOKENS, OAuthClient, OnError, ProxyRequests,
    PublicPolicy, SecretError, SecretSource, Transport, TrustPublic, UpstreamConfig,
};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where and how the downstream HTTP endpoint listens.
    #[serde(default)]
    pub listen: ListenConfig,
    /// Downstream authentication.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Proxy-wide settings: identity, cursor key.
    #[serde(default)]
    pub proxy: ProxyConfig,
    /// The result cache.
    #[serde(default)]
    pub cache: CacheConfig,
    /// The subscription hub.
    #[serde(default)]
    pub hub: HubConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// The operations listener.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Replicas sharing state through Redis.
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// Trace export.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Applying a changed config file without a restart.
    #[serde(default)]
    pub reload: ReloadConfig,
    /// The upstream MCP servers, in priority order (first wins on a name conflict).
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<UpstreamConfig>,
}
