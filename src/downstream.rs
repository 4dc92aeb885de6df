//! The downstream side: the Streamable HTTP endpoint clients connect to.

mod body;
mod http;
mod listen;
mod listener;
mod origin;
pub mod validate;

pub use http::Endpoint;
pub use listener::serve;
