//! The downstream side: the Streamable HTTP endpoint clients connect to.

mod http;
mod listener;
mod origin;
pub mod validate;

pub use http::Endpoint;
pub use listener::serve;
