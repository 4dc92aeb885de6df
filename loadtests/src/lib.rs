//! resmux-load: the load generator of resmux.
//!
//! ```text
//!  scenario.toml ─► run ─► for each side: target (sample upstreams in-process
//!                                          + proxy child process | ceiling server)
//!                          listeners (SSE, timed) + clients (keep-alive, closed loop)
//!                          ─► report (JSON, Markdown) ─► plot (SVG)
//! ```
//!
//! Modules, in the order a run uses them:
//! - [`scenario`]: the scenario file format and its limits.
//! - [`target`]: what one side runs against and how it names resources; [`proxy`] starts
//!   the proxy, [`ceiling`] the bare server, [`placement`] whether they are child
//!   processes, [`servers`] the runtime in-process servers run on.
//! - [`wire`]: MCP 2026-07-28 requests and answers; [`conn`]: one keep-alive connection.
//! - [`requests`]: the closed-loop request load; [`zipf`]: which key a read picks.
//! - [`listen`]: `subscriptions/listen` streams and notification timing.
//! - [`histogram`]: latency percentiles; [`procfs`]: memory and CPU from `/proc`.
//! - [`run`]: one scenario, side by side; [`report`] and [`plot`]: what it writes.
//! - [`cluster`]: the cluster scenario, several replicas with and without a shared Redis.
//! - [`sim`]: many replicas simulated in one process, each the real cluster tier, against a
//!   Redis Cluster ([`rcluster`], also the `cluster-sharded` scenario's).
//! - [`external`]: servers for outside generators (wrk, oha), `loadtests/external/`.
//! - [`instructions`]: instructions per cached read under callgrind, the CI regression gate.
//! - [`bench`]: `resmux-load bench URL`, the load tester for any MCP endpoint (not started
//!   by the generator), alone or against a second one.

#![forbid(unsafe_code)]

pub mod bench;
pub mod ceiling;
pub mod cluster;
pub mod conn;
pub mod external;
pub mod histogram;
pub mod instructions;
pub mod listen;
pub mod measure;
pub mod placement;
pub mod plot;
pub mod procfs;
pub mod proxy;
pub mod rcluster;
pub mod report;
pub mod requests;
pub mod run;
pub mod scenario;
pub mod servers;
pub mod sim;
pub mod sweep;
pub mod target;
pub mod wire;
pub mod zipf;
