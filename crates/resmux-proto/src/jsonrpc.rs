//! The codec: the one place JSON-RPC messages are parsed and written.
//!
//! Incoming messages are decoded into a borrowed [`Incoming`] envelope in one pass of the
//! codec's own reader; payloads stay raw ([`RawJson`], checked text) unless a caller needs to
//! look inside them (a request's `params` and `_meta` are read as objects in the same pass),
//! and [`RawObject`] lets a caller
//! rewrite a few top-level fields of an object without touching the rest. Outgoing messages
//! are assembled from raw pieces (`id` spliced in), never re-serialized.

mod encode;
mod error_map;
mod incoming;
mod inline;
mod lex;
mod lexeme;
mod raw_object;
mod reply;
mod rpc_error;
pub mod scan;

pub use encode::{
    Head, Spliced, concat, encode_error, encode_notification, encode_request, encode_result, encode_result_pieces,
};
pub use incoming::{DEFAULT_MAX_DEPTH, Incoming, Kind, MAX_DEPTH_LIMIT, MessageError, RequestId};
pub use lex::JsonError;
pub use lexeme::write_json_string;
pub use raw_object::{RawJson, RawObject, raw_str};
pub use reply::{Malformed, Reply};
pub use rpc_error::{RpcError, code};

/// Parses any JSON text into a borrowed raw value, checking it is well-formed.
pub fn parse_raw(text: &str) -> Result<&serde_json::value::RawValue, serde_json::Error> {
    serde_json::from_str(text)
}
