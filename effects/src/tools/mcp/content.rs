//! What a `tools/call` result becomes: result parts, notes for content the model cannot be
//! shown, or an error result.

use rebound_core::{MediaSource, ToolFailure, ToolOutput, ToolResultPart};
use serde_json::Value;

/// Maps a `tools/call` result (in its wire shape) to an output or an error result.
pub(super) fn call_result(result: rmcp::model::CallToolResult) -> Result<ToolOutput, ToolFailure> {
    let wire = serde_json::to_value(&result).unwrap_or(Value::Null);
    let is_error = wire["isError"].as_bool().unwrap_or(false);
    let mut parts = Vec::new();
    if let Some(items) = wire["content"].as_array() {
        for item in items {
            parts.push(content_part(item));
        }
    }
    if parts.is_empty() {
        match wire.get("structuredContent") {
            Some(structured) => parts.push(ToolResultPart::text(structured.to_string())),
            None if !is_error => parts.push(ToolResultPart::text("(the tool returned no content)")),
            None => {}
        }
    }
    if is_error {
        let text: Vec<&str> = parts.iter().filter_map(ToolResultPart::as_text).collect();
        let text = text.join("\n");
        return Err(ToolFailure::model(if text.is_empty() {
            "the tool reported an error without a message".to_owned()
        } else {
            text
        }));
    }
    Ok(ToolOutput { parts })
}

/// One MCP content item as a result part (or a note for kinds the model cannot be shown).
fn content_part(item: &Value) -> ToolResultPart {
    let text = |key: &str| item[key].as_str().unwrap_or_default().to_owned();
    match item["type"].as_str() {
        Some("text") => ToolResultPart::text(text("text")),
        Some("image") => ToolResultPart::Image {
            source: MediaSource::Base64 {
                media_type: text("mimeType"),
                data: text("data"),
            },
        },
        Some("resource") => {
            let resource = &item["resource"];
            let uri = resource["uri"].as_str().unwrap_or("?");
            match resource["text"].as_str() {
                Some(body) => ToolResultPart::text(format!("[resource {uri}]\n{body}")),
                None => ToolResultPart::text(format!(
                    "[the tool returned the binary resource {uri} ({}), which is not shown]",
                    resource["mimeType"].as_str().unwrap_or("unknown type")
                )),
            }
        }
        Some("resource_link") => ToolResultPart::text(format!(
            "[the tool linked to the resource {}, which is not fetched]",
            item["uri"].as_str().unwrap_or("?")
        )),
        Some(kind) => ToolResultPart::text(format!(
            "[the tool returned {kind} content{}, which is not shown]",
            item["mimeType"]
                .as_str()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        )),
        None => {
            ToolResultPart::text("[the tool returned content without a type, which is not shown]")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_kinds_map_to_parts_or_notes() {
        let image = content_part(
            &serde_json::json!({"type": "image", "data": "AAA=", "mimeType": "image/png"}),
        );
        assert_eq!(
            image,
            ToolResultPart::Image {
                source: MediaSource::Base64 {
                    media_type: "image/png".into(),
                    data: "AAA=".into()
                }
            }
        );
        let audio = content_part(
            &serde_json::json!({"type": "audio", "data": "AAA=", "mimeType": "audio/wav"}),
        );
        assert_eq!(
            audio,
            ToolResultPart::text(
                "[the tool returned audio content (audio/wav), which is not shown]"
            )
        );
    }
}
