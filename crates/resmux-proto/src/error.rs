//! Errors of every layer, and the one mapping from an error to the JSON-RPC error object and
//! HTTP status that the spec's table prescribes (reference §1.3, §2.1).

use std::sync::Arc;
use std::time::Duration;

/// A failure's cause, kept whole so that logs and the JSON-RPC error's `data` can read its
/// chain. Shared, because an error is cloned to every caller a single flight served.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// Which side of the proxy a failure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client sent something the proxy cannot serve.
    Downstream,
    /// An upstream server failed or misbehaved.
    Upstream,
    /// The proxy itself failed.
    Internal,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Downstream => "downstream",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }
}

/// What went wrong, in the proxy's words, and the error underneath when there was one: the
/// cause is kept whole (its type and chain), not flattened into the text.
#[derive(Debug, Clone)]
pub struct Reason {
    context: std::borrow::Cow<'static, str>,
    cause: Option<Cause>,
}

impl Reason {
    /// A reason with no underlying error.
    pub fn new(context: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Reason { context: context.into(), cause: None }
    }

    /// `context`, caused by `cause`.
    pub fn caused_by(
        context: impl Into<std::borrow::Cow<'static, str>>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Reason { context: context.into(), cause: Some(Arc::new(cause)) }
    }

    /// Just `cause`: the error says it all.
    pub fn of(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Reason { context: "".into(), cause: Some(Arc::new(cause)) }
    }

    /// Just `cause`, already boxed (a body's error, say).
    pub fn of_boxed(cause: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Reason { context: "".into(), cause: Some(Arc::from(cause)) }
    }
}

/// The context, then the cause's whole chain.
impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&*self.context, &self.cause) {
            (context, None) => f.write_str(context),
            ("", Some(cause)) => f.write_str(&chain(cause.as_ref())),
            (context, Some(cause)) => write!(f, "{context}: {}", chain(cause.as_ref())),
        }
    }
}

impl std::error::Error for Reason {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|c| c as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for Reason {
    fn from(context: String) -> Self {
        Reason::new(context)
    }
}

impl From<&str> for Reason {
    fn from(context: &str) -> Self {
        Reason::new(context.to_owned())
    }
}

/// A request the proxy refuses because of what the downstream client sent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DownstreamError {
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid request: {0}")]
    InvalidRequest(String),
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    #[error("Invalid params: {0}")]
    MissingMeta(String),
    #[error("Invalid params: {0}")]
    InvalidParams(String),
    #[error("Resource not found")]
    ResourceNotFound { uri: String },
    /// A resource URI (or URI template) that is not one: never sent upstream.
    #[error("Invalid params: invalid resource URI: {problem}")]
    InvalidUri {
        uri: String,
        #[source]
        problem: Cause,
    },
    /// A passthrough URI (`https://`) that several upstreams listed.
    #[error("Resource URI is ambiguous: more than one upstream lists it")]
    AmbiguousUri { uri: String },
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    #[error("Unsupported protocol version")]
    UnsupportedVersion { requested: String, supported: Vec<String> },
    #[error("Request body exceeds {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The request body did not arrive completely within `[listen] body_timeout`.
    #[error("Request body not received within {after:?}")]
    BodyTimeout { after: Duration },
    #[error("Origin not allowed")]
    OriginNotAllowed,
    #[error("Host not allowed")]
    HostNotAllowed,
    #[error("Method not allowed; the MCP endpoint accepts POST only")]
    HttpMethodNotAllowed,
    #[error("Unsupported media type; send application/json")]
    UnsupportedMediaType,
    #[error("Limit reached: {0}")]
    LimitReached(String),
    /// A legacy request names a session this proxy does not accept (forged, ended or evicted):
    /// the legacy transport's 404, which tells the client to initialize again.
    #[error("Session not found; send initialize to start a new session")]
    SessionNotFound,
    /// A second legacy standalone stream for one session.
    #[error("Conflict: only one SSE stream is allowed per session")]
    StreamConflict,
    /// The request's `Accept` header excludes every type the answer could take.
    #[error("Not acceptable: {0}")]
    NotAcceptable(String),
}

/// An upstream that could not produce an answer. (An upstream that answers with a JSON-RPC
/// error is not an `UpstreamError`: its error is relayed as an answer.) It always names its
/// upstream: no transport can build one without it.
#[derive(Debug, Clone)]
pub struct UpstreamError {
    pub upstream: Arc<str>,
    pub kind: UpstreamErrorKind,
}

/// What went wrong with an upstream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamErrorKind {
    #[error("did not answer within {after:?}")]
    Timeout { after: Duration },
    #[error("is unavailable: {reason}")]
    Unavailable {
        #[source]
        reason: Reason,
    },
    /// TLS with the upstream failed: the handshake, its certificate (or ours), or an alert.
    #[error("TLS failed: {reason}")]
    Tls {
        #[source]
        reason: Reason,
    },
    #[error("connection failed mid-request: {reason}")]
    Disconnected {
        #[source]
        reason: Reason,
    },
    #[error("broke the protocol: {reason}")]
    Protocol {
        #[source]
        reason: Reason,
    },
    /// A message the proxy cannot use, with what was wrong with it.
    #[error("broke the protocol: {0}")]
    Malformed(#[source] Cause),
    #[error("answered HTTP {status}")]
    Status { status: u16 },
    #[error("sent a message over {limit} bytes")]
    TooLarge { limit: usize },
    #[error("no longer knows the proxy's session")]
    SessionLost,
    /// No credential for the upstream: its token endpoint failed, or token exchange for a
    /// caller with no token of its own.
    #[error("has no credential: {source}")]
    Credential {
        #[source]
        source: Cause,
        /// Whether a later attempt may get one (the token endpoint was unreachable, say).
        transient: bool,
    },
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            UpstreamErrorKind::Credential { source, .. } => {
                write!(f, "no credential for upstream `{}`: {source}", self.upstream)
            }
            kind => write!(f, "upstream `{}` {kind}", self.upstream),
        }
    }
}

impl std::error::Error for UpstreamError {
    /// The kind's own cause (a credential error), so that chains read as before.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}

impl UpstreamErrorKind {
    /// A message the proxy cannot use, with what was wrong with it.
    pub fn malformed(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        UpstreamErrorKind::Malformed(Arc::new(e))
    }
}

impl UpstreamError {
    pub fn new(upstream: impl Into<Arc<str>>, kind: UpstreamErrorKind) -> Self {
        Self { upstream: upstream.into(), kind }
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// Whether the request may be retried on a fresh connection: the request may not have
    /// reached the upstream (refused connection, process down, dropped connection).
    pub fn is_retryable(&self) -> bool {
        use UpstreamErrorKind as K;
        matches!(self.kind, K::Unavailable { .. } | K::Disconnected { .. } | K::SessionLost)
            || matches!(self.kind, K::Status { status } if status >= 500)
    }
}

/// Any failure of a downstream request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Downstream(#[from] DownstreamError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("internal error: {0}")]
    Internal(#[source] Reason),
}

impl Error {
    /// Which side failed.
    pub fn side(&self) -> Side {
        match self {
            Error::Downstream(_) => Side::Downstream,
            Error::Upstream(_) => Side::Upstream,
            Error::Internal(_) => Side::Internal,
        }
    }

    /// Whether the client may safely retry the same request.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Downstream(_) => false,
            Error::Upstream(e) => {
                e.is_retryable()
                    || matches!(e.kind, UpstreamErrorKind::Timeout { .. })
                    || matches!(e.kind, UpstreamErrorKind::Credential { transient: true, .. })
            }
            Error::Internal(_) => true,
        }
    }
}

/// `err` and each of its causes, joined with `: `.
///
/// A cause whose text the chain already holds is not repeated: errors that print their own
/// cause (as [`Reason`] and many library errors do) would otherwise read twice.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_keeps_its_cause_and_reads_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let kind = UpstreamErrorKind::Unavailable { reason: Reason::caused_by("connect", io) };
        let err = UpstreamError::new("docs", kind);
        let cause = std::error::Error::source(&err).and_then(std::error::Error::source);
        assert!(cause.is_some_and(|c| c.downcast_ref::<std::io::Error>().is_some()), "the io::Error is kept");
        assert_eq!(chain(&err), "upstream `docs` is unavailable: connect: connection refused");
    }

    #[test]
    fn only_upstream_failures_are_retryable() {
        let up = UpstreamError::new("a", UpstreamErrorKind::Unavailable { reason: "refused".into() });
        assert!(Error::from(up).is_retryable());
        assert!(!Error::from(DownstreamError::Parse("x".into())).is_retryable());
        let proto = UpstreamError::new("a", UpstreamErrorKind::Protocol { reason: "x".into() });
        assert!(!Error::from(proto).is_retryable());
    }
}
