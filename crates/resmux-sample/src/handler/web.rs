//! The sample's web resources ([`SampleSpec::web`]): `https://` URIs the client could fetch
//! itself, which a proxy must pass through unprefixed and route back to this server.

use serde_json::{Value, json};

use crate::content::{Doc, SampleSpec};

/// Their `resources/list` items.
pub(super) fn resources(spec: &SampleSpec) -> impl Iterator<Item = Value> + '_ {
    spec.web.iter().map(|uri| json!({"uri": uri, "name": uri, "mimeType": "text/html"}))
}

/// The template of the pages next to the first one, `{first}/{page}`.
pub(super) fn template(spec: &SampleSpec) -> Option<Value> {
    let first = spec.web.first()?;
    let template = format!("{}/{{page}}", first.trim_end_matches('/'));
    Some(json!({"uriTemplate": template, "name": "web-page", "mimeType": "text/html"}))
}

/// The text of `uri`, when it is one of them: it names the server, so a test sees who served it.
pub(super) fn text(spec: &SampleSpec, uri: &str) -> Option<(String, &'static str)> {
    let text = spec.web.iter().any(|w| w == uri).then(|| format!("the web page {uri}, as {} lists it", spec.name));
    text.map(|t| (t, "text/html"))
}

/// The `link` tool's result: a link to `first` and `first` embedded, then a link to the first
/// web page, if any.
pub(super) fn link_result(spec: &SampleSpec, first: &Doc) -> Value {
    let uri = spec.uri(&first.path);
    let mut content = vec![
        json!({"type": "resource_link", "uri": uri, "name": first.path, "mimeType": first.mime}),
        json!({"type": "resource", "resource": {"uri": uri, "mimeType": first.mime, "text": first.text}}),
    ];
    if let Some(web) = spec.web.first() {
        content.push(json!({"type": "resource_link", "uri": web, "name": "web page", "mimeType": "text/html"}));
    }
    json!({ "content": content })
}

/// Completions of the template's `{page}`.
pub(super) fn pages(prefix: &str) -> Vec<String> {
    ["about", "home"].iter().filter(|p| p.starts_with(prefix)).map(|p| p.to_string()).collect()
}
