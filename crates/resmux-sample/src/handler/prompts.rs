//! The sample's prompt (`summarize`, over any document it serves) and argument completion.

use serde_json::{Value, json};

use super::{Handled, Sample, not_found, web};
use resmux_proto::jsonrpc::{RawObject, RpcError, code};

impl Sample {
    pub(super) fn prompts(&self) -> Vec<Value> {
        vec![json!({"name": "summarize", "description": "Summarize a document",
                    "arguments": [{"name": "uri", "required": true}]})]
    }

    pub(super) fn prompt(&self, params: &RawObject<'_>) -> Handled {
        if params.get_str("name").as_deref() != Some("summarize") {
            return Handled::Error(RpcError::new(code::INVALID_PARAMS, "Unknown prompt"));
        }
        let args: Value = params.get("arguments").and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(json!({}));
        let uri = args["uri"].as_str().unwrap_or_default().to_owned();
        let Some((text, mime)) = self.text_of(&uri) else {
            return Handled::Error(not_found(&uri));
        };
        Handled::Result(self.finish(
            json!({"description": "Summarize a document", "messages": [
                {"role": "user", "content": {"type": "text", "text": "Summarize this document in three bullet points."}},
                {"role": "user", "content": {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "text": text}}}
            ]}),
            false,
        ))
    }

    pub(super) fn complete(&self, params: &RawObject<'_>) -> Handled {
        let arg: Value = params.get("argument").and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(json!({}));
        let prefix = arg["value"].as_str().unwrap_or("");
        let values: Vec<String> = match arg["name"].as_str() {
            Some("path") => self.0.docs.iter().map(|d| d.path.clone()).filter(|p| p.starts_with(prefix)).collect(),
            Some("page") => web::pages(prefix),
            Some("uri") => self.0.by_uri.keys().filter(|u| u.starts_with(prefix)).cloned().collect(),
            _ => Vec::new(),
        };
        let total = values.len();
        let mut values = values;
        values.sort();
        values.truncate(100);
        Handled::Result(
            self.finish(json!({"completion": {"values": values, "total": total, "hasMore": total > 100}}), false),
        )
    }
}
