//! What interop tests ask of the sample server over HTTP: a record of every request it
//! received (its JSON-RPC method, its protocol headers and its params), and failures injected
//! into the next requests of a method.

use std::collections::HashMap;
use std::sync::Mutex;

use http::HeaderMap;
use serde_json::Value;

use resmux_proto::mcp;

/// One HTTP request as the sample server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET` or `DELETE`.
    pub http_method: String,
    /// The JSON-RPC method (`None` for GET, DELETE and responses).
    pub method: Option<String>,
    /// The protocol headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Session-Id` and every `Mcp-Param-*`) and the credential headers (`Authorization`,
    /// `Cookie`, and any `X-*`) and W3C `traceparent`, lowercased names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// `params` as sent (`Null` when absent or unreadable).
    pub params: Value,
}

impl Recorded {
    /// A recorded header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The recorded `Mcp-Param-*` headers.
    pub fn param_headers(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .filter(|(k, _)| k.starts_with(mcp::H_PARAM_PREFIX))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// How an injected failure fails a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Answer this HTTP status with an empty body (e.g. 502, 503).
    Status(u16),
    /// Close the connection without answering.
    Close,
    /// Answer a JSON-RPC error with `code` (to the request's id) under HTTP `status`, as a
    /// server that rate-limits (429) or refuses (403) would.
    Error { status: u16, code: i64 },
}

/// The recorded requests and the pending failures.
#[derive(Default)]
pub(super) struct Recorder {
    requests: Mutex<Vec<Recorded>>,
    /// Method → (requests still to fail, how).
    failures: Mutex<HashMap<String, (u32, Failure)>>,
}

impl Recorder {
    pub(super) fn record(&self, http_method: &str, headers: &HeaderMap, method: Option<&str>, params: Value) {
        let headers = headers
            .iter()
            .filter(|(k, _)| {
                let k = k.as_str();
                k == mcp::H_PROTOCOL_VERSION
                    || k == mcp::H_METHOD
                    || k == mcp::H_NAME
                    || k == mcp::H_SESSION_ID
                    || k.starts_with(mcp::H_PARAM_PREFIX)
                    || k == "authorization"
                    || k == "cookie"
                    || k == "traceparent"
                    || k.starts_with("x-")
            })
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        self.requests.lock().expect("recorded").push(Recorded {
            http_method: http_method.to_owned(),
            method: method.map(str::to_owned),
            headers,
            params,
        });
    }

    /// Every request recorded so far, oldest first.
    pub(super) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("recorded").clone()
    }

    pub(super) fn clear(&self) {
        self.requests.lock().expect("recorded").clear();
    }

    /// Fails the next `n` requests for `method` the way `how` says (`n = 0` cancels).
    pub(super) fn fail_next(&self, method: &str, n: u32, how: Failure) {
        let mut failures = self.failures.lock().expect("failures");
        if n == 0 {
            failures.remove(method);
        } else {
            failures.insert(method.to_owned(), (n, how));
        }
    }

    /// The failure for this request of `method`, if one is pending.
    pub(super) fn take_failure(&self, method: &str) -> Option<Failure> {
        let mut failures = self.failures.lock().expect("failures");
        let (left, how) = failures.get_mut(method)?;
        let how = *how;
        *left -= 1;
        if *left == 0 {
            failures.remove(method);
        }
        Some(how)
    }
}
