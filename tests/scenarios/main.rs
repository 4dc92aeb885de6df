//! Scenario tests: the real proxy and real upstreams on 127.0.0.1:0, driven over the wire.
//! One test binary (modules below) keeps link time down.

mod support;

mod abuse;
mod admin_page;
mod auth;
mod cache;
mod cluster;
mod cluster_fence;
mod cluster_fleet;
mod cluster_interest;
mod cluster_reload;
mod cluster_sharded;
mod cluster_spread;
mod credentials;
mod hostile;
mod interop;
mod isolation;
mod jwt_issuer;
mod large;
mod lean;
mod lean_connections;
mod legacy;
mod legacy_sdk;
mod legacy_upstream;
mod limits;
mod listen;
mod listen_slow;
mod merge;
mod namespace;
mod ops;
mod purge;
mod purge_cluster;
mod redis_cluster;
mod reload;
mod rmcp_interop;
mod stdio;
mod stdio_downstream;
mod tls;
mod trust;
mod ts_v2_client;
mod upstream_edges;
mod uri_checks;
mod uris;
mod uris_peers;
mod wire;
