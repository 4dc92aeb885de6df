//! `resources/read` answers past the cache's `max_entry_bytes`: relayed from the upstream to
//! the client as they arrive, through the streaming pass of [`crate::jsonrpc::scan`], which
//! applies the same rewrite as the buffered path ([`super::rewrite::READ_LIST`], the legacy
//! result defaults of [`crate::upstream::legacy::result_defaults`]). Never cached; memory
//! per relay is one piece of input and its output, whatever the result's size.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::Routing;
use super::rewrite::{READ_ITEM_KEY, READ_LIST};
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::jsonrpc::scan::{ReadScan, ScanError, ScanSpec, Utf8Check};
use crate::jsonrpc::{DEFAULT_MAX_DEPTH, RpcError};
use crate::mcp::method as m;
use crate::telemetry::metrics::RelayMeter;
use crate::upstream::LargeBody;

/// Input fed to the pass at a time: bounds the output piece a relay holds.
const PIECE: usize = 64 << 10;

/// A read result on its way from the upstream to the client.
pub struct Relay {
    body: LargeBody,
    scan: ReadScan,
    utf8: Utf8Check,
    /// Input received and not fed yet.
    input: Bytes,
    /// Upstream bytes so far, and their bound (`max_relay_bytes`).
    read: u64,
    max_relay: u64,
    /// The result's first output, read before the client's response head.
    first: Option<Bytes>,
    /// The most a client that cannot take a stream (stdio, progress, legacy) is sent whole.
    max_message: usize,
    meter: RelayMeter,
    ended: bool,
}

/// How a large answer began.
pub enum Began {
    /// A JSON-RPC error after all (captured whole, bounded): answered like any other.
    Error(RpcError),
    /// A result, to be relayed (boxed: its state is large beside an error).
    Result(Box<Relay>),
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("upstream", self.body.upstream()).field("read", &self.read).finish()
    }
}

impl Routing {
    /// Starts relaying a large answer of upstream `index`: reads until the result's first
    /// bytes (or the whole of an error), so that a message broken from its start is still
    /// answered with a clean error.
    pub(super) async fn relay(&self, index: usize, body: LargeBody) -> Result<Began, UpstreamError> {
        let upstream = &self.0.upstreams[index];
        let config = upstream.config();
        let uri_out = self.0.ns.prefix(index).is_some().then(|| {
            let ns = self.0.ns.clone();
            Box::new(move |uri: &str| ns.uri_out(index, uri).into_owned()) as crate::jsonrpc::scan::UriOut
        });
        let defaults =
            if body.legacy { crate::upstream::legacy::result_defaults(m::RESOURCES_READ, config) } else { Vec::new() };
        let spec = ScanSpec {
            up_id: body.up_id.clone(),
            list: READ_LIST,
            item_key: READ_ITEM_KEY,
            uri_out,
            defaults,
            capture_limit: config.max_message_bytes,
            max_depth: DEFAULT_MAX_DEPTH,
        };
        let mut relay = Box::new(Relay {
            body,
            scan: ReadScan::new(spec),
            utf8: Utf8Check::default(),
            input: Bytes::new(),
            read: 0,
            max_relay: config.max_relay_bytes,
            first: None,
            max_message: config.max_message_bytes,
            meter: upstream.meter().relay.clone(),
            ended: false,
        });
        match relay.step().await {
            Ok(Some(first)) => {
                relay.first = Some(first);
                Ok(Began::Result(relay))
            }
            Ok(None) => {
                relay.ended = true;
                let raw = relay.scan.error().ok_or_else(|| relay.failed(ScanError::NoOutcome))?;
                let e =
                    serde_json::from_slice(raw).map_err(|e| relay.protocol(format!("malformed error object: {e}")))?;
                Ok(Began::Error(e))
            }
            Err(e) => {
                relay.ended = true;
                Err(e)
            }
        }
    }
}

impl Relay {
    fn name(&self) -> &str {
        self.body.upstream()
    }

    fn protocol(&self, reason: String) -> UpstreamError {
        UpstreamError::new(self.name(), UpstreamErrorKind::Protocol { reason: reason.into() })
    }

    fn failed(&self, e: ScanError) -> UpstreamError {
        self.protocol(format!("read result: {e}"))
    }

    /// The next output of the pass: `None` once the message is complete and the body ended.
    async fn step(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        let mut out = Vec::new();
        loop {
            if self.input.is_empty() {
                match self.body.next().await? {
                    Some(data) => {
                        self.read += data.len() as u64;
                        if self.read > self.max_relay {
                            let limit = usize::try_from(self.max_relay).unwrap_or(usize::MAX);
                            return Err(UpstreamError::new(self.name(), UpstreamErrorKind::TooLarge { limit }));
                        }
                        self.input = data;
                    }
                    None => {
                        self.utf8.finish().and_then(|_| self.scan.finish()).map_err(|e| self.failed(e))?;
                        return Ok((!out.is_empty()).then(|| Bytes::from(out)));
                    }
                }
            }
            let piece = self.input.split_to(self.input.len().min(PIECE));
            self.utf8.push(&piece).and_then(|_| self.scan.feed(&piece, &mut out)).map_err(|e| self.failed(e))?;
            if !out.is_empty() {
                return Ok(Some(Bytes::from(out)));
            }
        }
    }

    /// The result's next bytes; `None` at its end. An error cuts the relay: it is logged and
    /// counted, and the client's response must be aborted (it is incomplete).
    pub async fn next(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        if self.ended {
            return None;
        }
        let step = match self.first.take() {
            Some(first) => Ok(Some(first)),
            None => self.step().await,
        };
        match step {
            Ok(Some(piece)) => {
                self.meter.bytes(piece.len() as u64);
                Some(Ok(piece))
            }
            Ok(None) => {
                self.ended = true;
                self.meter.ended(true);
                tracing::debug!(upstream = %self.name(), bytes = self.read, "large read relayed");
                None
            }
            Err(e) => {
                self.ended = true;
                self.meter.ended(false);
                tracing::warn!(upstream = %self.name(), bytes = self.read, error = %e, "large read cut mid-way");
                Some(Err(e))
            }
        }
    }

    /// The whole result, for a client that cannot take it as a stream: bounded by the
    /// upstream's `max_message_bytes`, as every buffered message.
    pub async fn collect(mut self: Box<Self>) -> Result<Bytes, UpstreamError> {
        let mut out = Vec::new();
        while let Some(piece) = self.next().await {
            let piece = piece?;
            if out.len() + piece.len() > self.max_message {
                let limit = self.max_message;
                self.ended = true;
                return Err(UpstreamError::new(self.name(), UpstreamErrorKind::TooLarge { limit }));
            }
            out.extend_from_slice(&piece);
        }
        Ok(Bytes::from(out))
    }

    /// The result as a stream of pieces (see [`Relay::next`]).
    pub fn into_stream(self: Box<Self>) -> impl futures_util::Stream<Item = Result<Bytes, UpstreamError>> + Send {
        futures_util::stream::unfold(self, |mut relay| async move { relay.next().await.map(|piece| (piece, relay)) })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if !self.ended {
            self.meter.ended(false);
            tracing::debug!(upstream = %self.name(), bytes = self.read, "large read dropped before its end (client gone)");
        }
    }
}

/// A relay that one caller takes: the leader of a flight shares its outcome with the callers
/// that joined it, but a stream can be read once; the others fetch their own.
#[derive(Clone, Default)]
pub(super) struct RelaySlot(Arc<Mutex<Option<Box<Relay>>>>);

impl RelaySlot {
    pub(super) fn new(relay: Box<Relay>) -> Self {
        Self(Arc::new(Mutex::new(Some(relay))))
    }

    pub(super) fn take(&self) -> Option<Box<Relay>> {
        self.0.lock().expect("relay slot lock").take()
    }
}

impl std::fmt::Debug for RelaySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelaySlot")
    }
}
