//! Reading a tool's definition: running its file once and checking `name`, `description`,
//! `input_schema` and `run`.

use super::json::lua_to_json;
use super::{LuaLoadError, Script};
use crate::tools::schema::bounded;
use mlua::Value as LuaValue;
use rebound_core::ToolSpec;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

impl Script {
    /// Runs the file once and reads the tool's definition.
    pub(super) fn load_spec(&self) -> Result<ToolSpec, LuaLoadError> {
        let never = Arc::new(AtomicBool::new(false));
        let script_error = |message: String| LuaLoadError::Script {
            file: self.file.clone(),
            message,
        };
        let definition = |message: String| LuaLoadError::Definition {
            file: self.file.clone(),
            message,
        };
        let sandbox = self
            .sandbox(&never, None)
            .map_err(|e| script_error(e.to_string()))?;
        let table = match self.run_file(&sandbox) {
            Ok(table) => table,
            Err(message) => return Err(script_error(message)),
        };
        let table = table.map_err(definition)?;
        let name = match table.raw_get::<LuaValue>("name") {
            Ok(LuaValue::Nil) => Path::new(&self.shown)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Ok(LuaValue::String(s)) => s.to_string_lossy(),
            Ok(other) => {
                return Err(definition(format!(
                    "`name` must be a string, not a {}",
                    other.type_name()
                )))
            }
            Err(e) => return Err(definition(e.to_string())),
        };
        if !(1..=64).contains(&name.len())
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(definition(format!(
                "the tool name `{}` is not allowed: use 1 to 64 ASCII letters, digits, `_` or `-` \
                 (set `name`, or rename the file)",
                bounded(&name, 80)
            )));
        }
        let description = match table.raw_get::<LuaValue>("description") {
            Ok(LuaValue::String(s)) => s.to_string_lossy(),
            Ok(LuaValue::Nil) => {
                return Err(definition(
                    "`description` is missing: say what the tool does, for the model".into(),
                ))
            }
            Ok(other) => {
                return Err(definition(format!(
                    "`description` must be a string, not a {}",
                    other.type_name()
                )))
            }
            Err(e) => return Err(definition(e.to_string())),
        };
        let input_schema = match table.raw_get::<LuaValue>("input_schema") {
            Ok(LuaValue::Nil) => serde_json::json!({"type": "object"}),
            Ok(value @ LuaValue::Table(_)) => {
                let schema = lua_to_json(&value, "input_schema", 0).map_err(definition)?;
                if !schema.is_object() {
                    return Err(definition(
                        "`input_schema` must be a table with named fields (a JSON Schema object)"
                            .into(),
                    ));
                }
                if let Err(e) = crate::tools::schema::InputSchema::compile(&schema) {
                    return Err(definition(format!(
                        "`input_schema` is not a valid JSON Schema: {}",
                        bounded(&e, 300)
                    )));
                }
                schema
            }
            Ok(other) => {
                return Err(definition(format!(
                    "`input_schema` must be a table, not a {}",
                    other.type_name()
                )))
            }
            Err(e) => return Err(definition(e.to_string())),
        };
        match table.raw_get::<LuaValue>("run") {
            Ok(LuaValue::Function(_)) => {}
            Ok(LuaValue::Nil) => {
                return Err(definition(
                    "`run` is missing: add `run = function(input) … end`".into(),
                ))
            }
            Ok(other) => {
                return Err(definition(format!(
                    "`run` must be a function, not a {}",
                    other.type_name()
                )))
            }
            Err(e) => return Err(definition(e.to_string())),
        }
        Ok(ToolSpec {
            name,
            description,
            input_schema,
        })
    }
}
