//! What `run` returned, as a tool output: text, a list of parts, or an error message for
//! the model.

use super::json::{json_kind, lua_to_json};
use super::Script;
use crate::tools::schema::bounded;
use mlua::Value as LuaValue;
use rebound_core::{MediaSource, ToolOutput, ToolResultPart};
use serde_json::Value;

impl Script {
    /// Maps what `run` returned to an output, or a message for the model.
    pub(super) fn output(&self, mut values: Vec<LuaValue>, at: &str) -> Result<ToolOutput, String> {
        let second = if values.len() > 1 {
            values.swap_remove(1)
        } else {
            LuaValue::Nil
        };
        let first = values.into_iter().next().unwrap_or(LuaValue::Nil);
        let expected = "return a string, a list of parts (strings, {type = \"text\", text = …} or \
                        {type = \"image\", media_type = …, data = <base64>}), or nil and an \
                        error message";
        match first {
            LuaValue::Nil => match second {
                LuaValue::Nil => Err(format!("{at}: `run` returned nothing; {expected}")),
                message => Err(format!("{at}: {}", display_value(&message))),
            },
            LuaValue::String(s) => Ok(ToolOutput::text(s.to_string_lossy())),
            LuaValue::Integer(_) | LuaValue::Number(_) => {
                Ok(ToolOutput::text(display_value(&first)))
            }
            LuaValue::Table(_) => {
                let json = lua_to_json(&first, "the result", 0)
                    .map_err(|e| format!("{at}: `run` returned a table that {e}; {expected}"))?;
                parts(&json)
                    .map(|parts| ToolOutput { parts })
                    .map_err(|e| format!("{at}: `run` returned a wrong shape: {e}; {expected}"))
            }
            other => Err(format!(
                "{at}: `run` returned a {}; {expected}",
                other.type_name()
            )),
        }
    }
}

/// How a script's value reads in a message.
pub(super) fn display_value(value: &LuaValue) -> String {
    match value {
        LuaValue::Nil => "nil".into(),
        LuaValue::Boolean(b) => b.to_string(),
        LuaValue::Integer(i) => i.to_string(),
        LuaValue::Number(n) => n.to_string(),
        LuaValue::String(s) => s.to_string_lossy(),
        other => format!("({})", other.type_name()),
    }
}

/// Tool result parts from the JSON form of what `run` returned: a list of parts.
fn parts(json: &Value) -> Result<Vec<ToolResultPart>, String> {
    let Value::Array(items) = json else {
        return Err("a table with named fields, not a list of parts".into());
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let n = i + 1;
            match item {
                Value::String(text) => Ok(ToolResultPart::text(text.clone())),
                Value::Object(part) => match part.get("type").and_then(Value::as_str) {
                    Some("text") => match part.get("text") {
                        Some(Value::String(text)) => Ok(ToolResultPart::text(text.clone())),
                        _ => Err(format!("part {n} is a text part without a string `text`")),
                    },
                    Some("image") => {
                        let field = |key: &str| {
                            part.get(key).and_then(Value::as_str).ok_or_else(|| {
                                format!("part {n} is an image part without a string `{key}`")
                            })
                        };
                        Ok(ToolResultPart::Image {
                            source: MediaSource::Base64 {
                                media_type: field("media_type")?.to_owned(),
                                data: field("data")?.to_owned(),
                            },
                        })
                    }
                    Some(other) => Err(format!(
                        "part {n} has the unknown type `{}` (use \"text\" or \"image\")",
                        bounded(other, 40)
                    )),
                    None => Err(format!("part {n} has no `type`")),
                },
                other => Err(format!("part {n} is a {}", json_kind(other))),
            }
        })
        .collect()
}
