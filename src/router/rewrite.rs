//! Rewriting upstream results into the proxy's namespace (DESIGN §2: complete or it is a bug).
//! Hot paths (reads, list items) rewrite raw JSON field by field; the rare tool and prompt
//! results are walked as values.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use super::namespace::Namespace;
use crate::jsonrpc::{JsonError, RawJson, RawObject, RpcError};

/// Why an upstream result could not be put into the proxy's namespace: it is not of the
/// shape it must have (the upstream's side).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unrewritable {
    #[error(transparent)]
    Json(Arc<serde_json::Error>),
    #[error(transparent)]
    Object(#[from] JsonError),
    #[error(transparent)]
    Utf8(#[from] std::string::FromUtf8Error),
    #[error("list item without `{0}`")]
    MissingKey(&'static str),
}

impl From<serde_json::Error> for Unrewritable {
    fn from(e: serde_json::Error) -> Self {
        Unrewritable::Json(Arc::new(e))
    }
}

/// Which field of a list item carries its identity, and how it is namespaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Uri(&'static str),
    Name(&'static str),
}

fn out_of(field: Field, ns: &Namespace, index: usize, value: &str) -> String {
    match field {
        Field::Uri(_) => ns.uri_out(index, value).into_owned(),
        Field::Name(_) => ns.name_out(index, value).into_owned(),
    }
}

fn key_of(field: Field) -> &'static str {
    match field {
        Field::Uri(k) | Field::Name(k) => k,
    }
}

/// Appends the items of an upstream list array to `out` (comma-separated, no brackets),
/// namespacing each item's identity field. Returns how many items were appended.
pub fn list_items<'a>(
    array: impl Into<RawJson<'a>>,
    field: Field,
    ns: &Namespace,
    index: usize,
    out: &mut Vec<u8>,
) -> Result<usize, Unrewritable> {
    let items: Vec<&RawValue> = serde_json::from_str(array.into().get())?;
    let key = key_of(field);
    for item in &items {
        if !out.is_empty() {
            out.push(b',');
        }
        if ns.prefix(index).is_none() {
            out.extend_from_slice(item.get().as_bytes());
            continue;
        }
        let mut obj = RawObject::parse(*item)?;
        let value = obj.get_str(key).ok_or(Unrewritable::MissingKey(key))?;
        let renamed = out_of(field, ns, index, &value);
        obj.set_string(key, &renamed);
        obj.write_to(out);
    }
    Ok(items.len())
}

/// What of a `resources/read` result is namespaced: `contents[].uri`. The one statement of
/// the rule, for the buffered path ([`read_object`]) and the streaming one
/// ([`crate::router::Relay`]).
pub const READ_LIST: &str = "contents";
pub const READ_ITEM_KEY: &str = "uri";

/// Namespaces `contents[].uri` of a parsed `resources/read` result. Returns whether anything
/// changed.
pub fn read_object(obj: &mut RawObject<'_>, ns: &Namespace, index: usize) -> Result<bool, Unrewritable> {
    if ns.prefix(index).is_none() {
        return Ok(false);
    }
    let Some(contents) = obj.get(READ_LIST) else {
        return Ok(false); // input_required and other shapes carry no contents
    };
    let mut items = Vec::with_capacity(contents.get().len() + 64);
    list_items(contents, Field::Uri(READ_ITEM_KEY), ns, index, &mut items)?;
    let mut array = Vec::with_capacity(items.len() + 2);
    array.push(b'[');
    array.extend_from_slice(&items);
    array.push(b']');
    let text = String::from_utf8(array)?;
    let raw = serde_json::value::RawValue::from_string(text)?;
    obj.set(READ_LIST, std::borrow::Cow::Owned(raw));
    Ok(true)
}

/// Namespaces resource URIs inside content blocks of a `tools/call` or `prompts/get` result:
/// `resource_link.uri` and embedded `resource.uri`.
pub fn content_result(result: &Bytes, ns: &Namespace, index: usize) -> Result<Bytes, Unrewritable> {
    if ns.prefix(index).is_none() {
        return Ok(result.clone());
    }
    let mut v: Value = serde_json::from_slice(result)?;
    let mut changed = false;
    let mut fix = |block: &mut Value| changed |= rewrite_block(block, ns, index);
    if let Some(Value::Array(blocks)) = v.get_mut("content") {
        blocks.iter_mut().for_each(&mut fix);
    }
    if let Some(Value::Array(messages)) = v.get_mut("messages") {
        for m in messages {
            match m.get_mut("content") {
                Some(Value::Array(blocks)) => blocks.iter_mut().for_each(&mut fix),
                Some(block) => fix(block),
                None => {}
            }
        }
    }
    if !changed {
        return Ok(result.clone());
    }
    Ok(serde_json::to_vec(&v).map(Bytes::from)?)
}

fn rewrite_block(block: &mut Value, ns: &Namespace, index: usize) -> bool {
    let target = match block.get("type").and_then(Value::as_str) {
        Some("resource_link") => Some(block),
        Some("resource") => block.get_mut("resource"),
        _ => None,
    };
    let Some(obj) = target.and_then(Value::as_object_mut) else {
        return false;
    };
    let Some(Value::String(uri)) = obj.get_mut("uri") else {
        return false;
    };
    *uri = ns.uri_out(index, uri).into_owned();
    true
}

/// Namespaces `data.uri` of a relayed error.
pub fn error(mut err: RpcError, ns: &Namespace, index: usize) -> RpcError {
    if let Some(Value::String(uri)) = err.data.as_mut().and_then(|d| d.get_mut("uri")) {
        *uri = ns.uri_out(index, uri).into_owned();
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::namespace::Namespace;

    fn ns() -> Namespace {
        Namespace::new(&[("docs".into(), true), ("fs".into(), true)])
    }

    #[test]
    fn read_contents_are_prefixed_and_payload_untouched() {
        let r = r#"{"resultType":"complete","contents":[{"uri":"file:///a","text":"\u00e9"},{"uri":"file:///b","blob":"AA=="}],"ttlMs":5}"#;
        let mut obj = RawObject::parse_str(r).unwrap();
        assert!(read_object(&mut obj, &ns(), 1).unwrap());
        let out = obj.to_vec();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"resultType":"complete","contents":[{"uri":"fs+file:///a","text":"\u00e9"},{"uri":"fs+file:///b","blob":"AA=="}],"ttlMs":5}"#
        );
    }

    #[test]
    fn list_items_by_field() {
        let raw = crate::jsonrpc::parse_raw(r#"[{"name":"echo","x":1},{"name":"add"}]"#).unwrap();
        let mut out = Vec::new();
        assert_eq!(list_items(raw, Field::Name("name"), &ns(), 0, &mut out).unwrap(), 2);
        assert_eq!(std::str::from_utf8(&out).unwrap(), r#"{"name":"docs__echo","x":1},{"name":"docs__add"}"#);
    }

    #[test]
    fn content_blocks_and_prompt_messages() {
        let r = Bytes::from_static(br#"{"content":[{"type":"text","text":"hi"},{"type":"resource_link","uri":"file:///a","name":"a"},{"type":"resource","resource":{"uri":"file:///b","text":"b"}}]}"#);
        let v: Value = serde_json::from_slice(&content_result(&r, &ns(), 0).unwrap()).unwrap();
        assert_eq!(v["content"][1]["uri"], "docs+file:///a");
        assert_eq!(v["content"][2]["resource"]["uri"], "docs+file:///b");
        let p = Bytes::from_static(
            br#"{"messages":[{"role":"user","content":{"type":"resource_link","uri":"x:y","name":"y"}}]}"#,
        );
        let v: Value = serde_json::from_slice(&content_result(&p, &ns(), 1).unwrap()).unwrap();
        assert_eq!(v["messages"][0]["content"]["uri"], "fs+x:y");
    }

    #[test]
    fn error_data_uri() {
        let e = RpcError::new(-32602, "nf").with_data(serde_json::json!({"uri": "file:///x"}));
        assert_eq!(error(e, &ns(), 0).data.unwrap()["uri"], "docs+file:///x");
    }
}
