//! One downstream HTTP exchange: transport checks (path, method, Host, Origin, size), then the
//! codec and validation, then the router; the answer goes back as `application/json` with
//! `resmux-cache` and `age` headers.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};

use super::body::{Body as RespBody, full};

use super::origin::OriginPolicy;
use super::validate::{self, Body, Rejected};
use crate::auth::Authenticator;
use crate::config::ListenConfig;
use crate::error::{DownstreamError, Error};
use crate::hub::Hub;
use crate::jsonrpc::{Incoming, RequestId, encode_error, encode_result};
use crate::router::{Answer, Call, Router};

/// Response header naming how the cache took part.
pub const H_CACHE: &str = "resmux-cache";

/// The endpoint: a cheap handle shared by every connection.
#[derive(Clone)]
pub struct Endpoint(Arc<Inner>);

struct Inner {
    router: Router,
    hub: Hub,
    auth: Authenticator,
    path: String,
    max_body: usize,
    policy: OriginPolicy,
}

type Resp = Response<RespBody>;

impl Endpoint {
    pub fn new(router: Router, hub: Hub, auth: Authenticator, listen: &ListenConfig) -> Self {
        Self(Arc::new(Inner {
            router,
            hub,
            auth,
            path: listen.path.clone(),
            max_body: listen.max_body_bytes,
            policy: OriginPolicy::new(&listen.allowed_origins, &listen.allowed_hosts, listen.addr),
        }))
    }

    /// Serves one HTTP request.
    pub async fn serve<B>(&self, req: Request<B>) -> Resp
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.uri().path() != self.0.path {
            return plain(StatusCode::NOT_FOUND, "not found");
        }
        let authority = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| req.headers().get(HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
        if let Some(host) = authority
            && !self.0.policy.host_allowed(&host)
        {
            return error_response(None, DownstreamError::HostNotAllowed.into());
        }
        if let Some(origin) = req.headers().get(ORIGIN)
            && !origin.to_str().is_ok_and(|o| self.0.policy.origin_allowed(o))
        {
            return error_response(None, DownstreamError::OriginNotAllowed.into());
        }
        if req.method() != Method::POST {
            let mut resp = error_response(None, DownstreamError::HttpMethodNotAllowed.into());
            resp.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
            return resp;
        }
        if let Some(ct) = req.headers().get(CONTENT_TYPE)
            && !ct.to_str().is_ok_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"))
        {
            return error_response(None, DownstreamError::UnsupportedMediaType.into());
        }
        let declared =
            req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        let too_large = || error_response(None, DownstreamError::BodyTooLarge { limit: self.0.max_body }.into());
        if declared.is_some_and(|n| n > self.0.max_body as u64) {
            return too_large();
        }
        let (parts, body) = req.into_parts();
        let body = match Limited::new(body, self.0.max_body).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("cannot read body: {e}")),
        };
        let principal = self.0.auth.principal(parts.headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes()));
        let Ok(text) = std::str::from_utf8(&body) else {
            return error_response(None, DownstreamError::Parse("body is not UTF-8".into()).into());
        };
        let msg = match Incoming::parse(text) {
            Ok(m) => m,
            Err(e) => return rejected(validate::message_error(e)),
        };
        let checked = match validate::check(&parts.headers, &msg) {
            Ok(Body::Notification) => return empty(StatusCode::ACCEPTED),
            Ok(Body::Request(c)) => c,
            Err(r) => return rejected(r),
        };
        if checked.method == crate::mcp::method::LISTEN {
            return super::listen::open(&self.0.hub, &checked.id, &checked.params, &principal)
                .unwrap_or_else(|e| error_response(Some(&checked.id), e));
        }
        let call = Call { method: checked.method, params: checked.params, meta: checked.meta, principal: &principal };
        match self.0.router.handle(&call).await {
            Ok(answer) => answer_response(&checked.id, answer),
            Err(e) => {
                if e.side() != crate::error::Side::Downstream {
                    tracing::warn!(method = checked.method, error = %e, "request failed");
                }
                error_response(Some(&checked.id), e)
            }
        }
    }
}

fn answer_response(id: &RequestId, answer: Answer) -> Resp {
    let body = match &answer.outcome {
        Ok(result) => encode_result(id, result),
        Err(err) => encode_error(Some(id), err),
    };
    let mut resp = json(StatusCode::OK, body);
    let h = resp.headers_mut();
    h.insert(H_CACHE, HeaderValue::from_static(answer.cache.as_str()));
    if let Some(age) = answer.age {
        h.insert(http::header::AGE, HeaderValue::from(age));
    }
    resp
}

fn rejected(r: Rejected) -> Resp {
    error_response(r.id.as_ref(), r.error.into())
}

fn error_response(id: Option<&RequestId>, e: Error) -> Resp {
    let (status, err) = e.to_jsonrpc();
    json(status, encode_error(id, &err))
}

fn json(status: StatusCode, body: Bytes) -> Resp {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn plain(status: StatusCode, text: &str) -> Resp {
    let mut resp = Response::new(full(Bytes::from(text.to_owned())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

fn empty(status: StatusCode) -> Resp {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}
