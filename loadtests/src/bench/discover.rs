//! Building the workload from what the server offers: the protocol probe (`server/discover`,
//! falling back to the legacy `initialize` handshake as the spec's dual-era client does),
//! every page of `resources/list`, and the tool to call. Every request made here is counted
//! in the `discovery` phase, so a server's counters reconcile with the report.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use resmux::jsonrpc::code;
use resmux::mcp::method as m;
use resmux::upstream::ParamHeader;
use serde_json::Value;

use super::args::{BenchArgs, Secrets};
use super::counts::{Phase, Sent};
use super::endpoint::{Endpoint, Era, exchange, json_string};
use super::reply::Kind;
use crate::conn::Conn;

/// The legacy revision offered first in `initialize` (the server may answer an older one).
const LEGACY_OFFER: &str = "2025-11-25";

/// What the load draws from.
#[derive(Debug, Clone)]
pub struct Workload {
    pub era: Era,
    /// `serverInfo` as the server reported it.
    pub server_info: Option<Value>,
    pub capabilities: Value,
    /// Listed URIs in listing order (the Zipf ranks), at most `--max-uris`.
    pub uris: Vec<String>,
    /// Resources listed and pages walked.
    pub listed: u64,
    pub pages: u64,
    /// `tools/call` params (`{"name":…,"arguments":…}`) and the tool's header annotations.
    pub call: Option<(String, Arc<[ParamHeader]>)>,
    pub tool: Option<String>,
    pub notes: Vec<String>,
}

impl Workload {
    /// `resources/read` params for listed URI `i`.
    pub fn read_params(&self, i: usize) -> String {
        format!(r#"{{"uri":{}}}"#, json_string(&self.uris[i]))
    }
}

/// One connection and the counts of the requests made on it.
struct Session<'a> {
    ep: &'a Endpoint,
    conn: Option<Conn>,
    phase: &'a mut Phase,
    secrets: &'a Secrets,
    timeout: Duration,
    next_id: u64,
    started: tokio::time::Instant,
}

impl Session<'_> {
    /// Sends one request (`id` none: a notification), counted; returns the answer and, when
    /// successful, its result.
    async fn call(
        &mut self,
        era: &Era,
        method: &'static str,
        params: &str,
        notify: bool,
    ) -> Result<(Sent, Option<Value>)> {
        if self.conn.as_ref().is_none_or(Conn::is_closed) {
            match self.ep.connect().await {
                Ok(c) => self.conn = Some(c),
                Err(e) => {
                    self.phase.connect_failed(&format!("{e:#}"), self.secrets);
                    return Err(e).context(format!("connecting to {}", self.ep.url));
                }
            }
        }
        self.next_id += 1;
        let id = (!notify).then_some(self.next_id);
        let req = self.ep.request(era, method, params, id, &Arc::from(Vec::new()));
        let conn = self.conn.as_mut().context("connected above")?;
        let t0 = tokio::time::Instant::now();
        let (sent, whole) = exchange(conn, req, self.timeout).await;
        let took = t0.elapsed();
        // A notification has no response: its 2xx (202 Accepted) is its success.
        let sent = match sent {
            Sent::Answered(mut r) if notify && r.kind == Kind::NoResponse && (200..300).contains(&r.status) => {
                r.kind = Kind::Complete;
                r.detail.clear();
                Sent::Answered(r)
            }
            other => other,
        };
        if !matches!(sent, Sent::Answered(_)) {
            self.conn = None;
        }
        self.phase.record(method, &sent, (took, took), self.started.elapsed(), self.secrets);
        let result = match (&sent, &whole) {
            (Sent::Answered(r), Some((parts, body))) if r.is_ok() => super::reply::result_value(parts, body),
            _ => None,
        };
        Ok((sent, result))
    }
}

/// Why a discovery request failed, for the error message.
fn describe(sent: &Sent, secrets: &Secrets) -> String {
    match sent {
        Sent::Answered(r) => match r.kind {
            Kind::Rpc(c) => format!("HTTP {} with JSON-RPC error {c}: {}", r.status, secrets.redact(&r.detail)),
            _ => format!("HTTP {}: {}", r.status, secrets.redact(&r.detail)),
        },
        Sent::Timeout => "no answer within the timeout".into(),
        Sent::Broken(e) | Sent::NotSent(e) => format!("connection failed: {}", secrets.redact(e)),
    }
}

/// Probes `ep`, walks its resources and picks its tool; the requests are counted in `phase`.
pub async fn discover(ep: &Endpoint, args: &BenchArgs, phase: &mut Phase, secrets: &Secrets) -> Result<Workload> {
    let mut s = Session {
        ep,
        conn: None,
        phase,
        secrets,
        timeout: args.timeout,
        next_id: 0,
        started: tokio::time::Instant::now(),
    };
    let (probe, result) = s.call(&Era::Modern, m::DISCOVER, "{}", false).await?;
    let modern_error = matches!(&probe, Sent::Answered(r)
        if matches!(r.kind, Kind::Rpc(c) if [code::HEADER_MISMATCH, code::MISSING_CLIENT_CAPABILITY, code::UNSUPPORTED_PROTOCOL_VERSION].contains(&c)));
    let (era, info) = match result {
        Some(result) => (Era::Modern, result),
        None if modern_error => {
            bail!("{} is a 2026-07-28 server that refused the probe: {}", ep.url, describe(&probe, secrets))
        }
        // Any other answer, or none: a legacy server (the spec's fallback).
        None => initialize(&mut s).await?,
    };
    let capabilities = info.get("capabilities").cloned().unwrap_or(Value::Null);
    let server_info = match era {
        Era::Modern => info.pointer("/_meta").and_then(|m| m.get(resmux::mcp::META_SERVER_INFO)).cloned(),
        Era::Legacy { .. } => info.get("serverInfo").cloned(),
    };
    let mut wl = Workload {
        era,
        server_info,
        capabilities,
        uris: Vec::new(),
        listed: 0,
        pages: 0,
        call: None,
        tool: None,
        notes: Vec::new(),
    };
    if args.mix.read > 0 || args.listeners > 0 {
        walk_resources(&mut s, &mut wl, args).await?;
        if wl.uris.is_empty() {
            bail!("{} lists no resources: nothing to read (use --mix without `read`, and no --listeners)", ep.url);
        }
    }
    if args.mix.call > 0 {
        pick_tool(&mut s, &mut wl, args).await?;
    }
    Ok(wl)
}

/// The legacy handshake: `initialize`, then `notifications/initialized`.
async fn initialize(s: &mut Session<'_>) -> Result<(Era, Value)> {
    let offer = Era::Legacy { version: LEGACY_OFFER.into(), session: None };
    let params = serde_json::json!({
        "protocolVersion": LEGACY_OFFER,
        "capabilities": {},
        "clientInfo": {"name": "resmux-load", "version": env!("CARGO_PKG_VERSION")},
    })
    .to_string();
    let (sent, result) = s.call(&offer, resmux::mcp::legacy_method::INITIALIZE, &params, false).await?;
    let Some(result) = result else {
        bail!("{} answered neither server/discover nor initialize: {}", s.ep.url, describe(&sent, s.secrets));
    };
    let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
    if !resmux::upstream::legacy::VERSIONS.contains(&version.as_str()) {
        bail!("{} negotiated protocol version `{version}`, which resmux-load does not speak", s.ep.url);
    }
    let session = match &sent {
        Sent::Answered(r) => r.session.clone(),
        _ => None,
    };
    let era = Era::Legacy { version, session };
    let (sent, _) = s.call(&era, resmux::mcp::legacy_method::INITIALIZED, "{}", true).await?;
    if let Sent::Answered(r) = &sent
        && !(200..300).contains(&r.status)
    {
        bail!("{} refused notifications/initialized: HTTP {}", s.ep.url, r.status);
    }
    Ok((era, result))
}

/// Walks every page of `resources/list`, keeping at most `--max-uris` URIs.
async fn walk_resources(s: &mut Session<'_>, wl: &mut Workload, args: &BenchArgs) -> Result<()> {
    let mut cursor: Option<String> = None;
    loop {
        if wl.pages as usize >= args.max_pages {
            wl.notes.push(format!("resources/list: stopped after {} pages (--max-pages)", wl.pages));
            return Ok(());
        }
        let params =
            cursor.as_deref().map_or_else(|| "{}".to_owned(), |c| format!(r#"{{"cursor":{}}}"#, json_string(c)));
        let era = wl.era.clone();
        let (sent, result) = s.call(&era, m::RESOURCES_LIST, &params, false).await?;
        let Some(result) = result else {
            bail!("{}: resources/list page {} failed: {}", s.ep.url, wl.pages + 1, describe(&sent, s.secrets));
        };
        wl.pages += 1;
        for r in result.get("resources").and_then(Value::as_array).into_iter().flatten() {
            if let Some(uri) = r.get("uri").and_then(Value::as_str) {
                wl.listed += 1;
                if wl.uris.len() < args.max_uris {
                    wl.uris.push(uri.to_owned());
                }
            }
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() && cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
            _ => break,
        }
    }
    if wl.listed > wl.uris.len() as u64 {
        wl.notes.push(format!("{} resources listed; the first {} are read (--max-uris)", wl.listed, wl.uris.len()));
    }
    Ok(())
}

/// Whether a tool's input schema requires no argument.
fn needs_no_arguments(tool: &Value) -> bool {
    tool.pointer("/inputSchema/required").and_then(Value::as_array).is_none_or(Vec::is_empty)
}

/// Lists the tools (every page) and picks `--tool` or the first that needs no arguments.
async fn pick_tool(s: &mut Session<'_>, wl: &mut Workload, args: &BenchArgs) -> Result<()> {
    let mut cursor: Option<String> = None;
    let mut chosen: Option<Value> = None;
    for page in 0..args.max_pages {
        let params =
            cursor.as_deref().map_or_else(|| "{}".to_owned(), |c| format!(r#"{{"cursor":{}}}"#, json_string(c)));
        let era = wl.era.clone();
        let (sent, result) = s.call(&era, m::TOOLS_LIST, &params, false).await?;
        let Some(result) = result else {
            if args.tool.is_some() {
                wl.notes.push(format!("tools/list failed ({}); calling --tool as given", describe(&sent, s.secrets)));
                break;
            }
            bail!("{}: tools/list page {} failed: {}", s.ep.url, page + 1, describe(&sent, s.secrets));
        };
        let tools = result.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
        chosen = tools.into_iter().find(|t| match &args.tool {
            Some(name) => t.get("name").and_then(Value::as_str) == Some(name),
            None => needs_no_arguments(t),
        });
        match result.get("nextCursor").and_then(Value::as_str) {
            _ if chosen.is_some() => break,
            Some(next) if !next.is_empty() && cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
            _ => break,
        }
    }
    let name = match (&args.tool, &chosen) {
        (Some(name), _) => name.clone(),
        (None, Some(t)) => t.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
        (None, None) => {
            bail!("{} lists no tool that takes no arguments: name one with --tool NAME --args JSON", s.ep.url)
        }
    };
    if args.tool.is_some() && chosen.is_none() {
        wl.notes.push(format!("tool `{name}` is not listed; it is called anyway"));
    }
    let annotations: Arc<[ParamHeader]> =
        chosen.as_ref().and_then(|t| t.get("inputSchema")).map_or_else(Vec::new, ParamHeader::collect).into();
    let arguments = args.args.clone().unwrap_or_else(|| "{}".to_owned());
    wl.call = Some((format!(r#"{{"name":{},"arguments":{arguments}}}"#, json_string(&name)), annotations));
    wl.tool = Some(name);
    Ok(())
}
