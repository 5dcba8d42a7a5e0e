//! One call of a tool: a fresh sandbox, the file, then `run(input)`; and the texts the model
//! reads when any of it fails.

use super::json::json_to_lua;
use super::sandbox::{Sandbox, MAX_PRINTED};
use super::Script;
use crate::tools::schema::bounded;
use crate::tools::ToolError;
use mlua::chunk::ChunkMode;
use mlua::{MultiValue, Table, Value as LuaValue};
use rebound_core::ToolOutput;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

impl Script {
    /// One call: a fresh state, the file, then `run(input)`. Runs on a blocking thread.
    pub(super) fn call(
        &self,
        input: &Value,
        stop: &Arc<AtomicBool>,
        handle: Option<tokio::runtime::Handle>,
    ) -> Result<ToolOutput, ToolError> {
        let sandbox = self
            .sandbox(stop, handle)
            .map_err(|e| ToolError::model(format!("{}: cannot start Lua: {e}", self.shown)))?;
        let table = match self.run_file(&sandbox) {
            Ok(Ok(table)) => table,
            Ok(Err(message)) => return Err(self.model_error(&sandbox, message)),
            Err(message) => return Err(self.model_error(&sandbox, message)),
        };
        let run = match table.raw_get::<LuaValue>("run") {
            Ok(LuaValue::Function(f)) => f,
            _ => {
                return Err(self.model_error(
                    &sandbox,
                    format!(
                        "{}: the file no longer defines a `run` function",
                        self.shown
                    ),
                ))
            }
        };
        let line = run.info().line_defined.unwrap_or(0);
        let arg = match json_to_lua(&sandbox.lua, input, 0) {
            Ok(arg) => arg,
            Err(e) => {
                return Err(self.model_error(
                    &sandbox,
                    format!("{}: the input cannot be given to Lua: {e}", self.shown),
                ))
            }
        };
        let returned = run.call::<MultiValue>(arg);
        if let Some(message) = sandbox.abort.borrow_mut().message.take() {
            return Err(self.model_error(&sandbox, message));
        }
        let values = match returned {
            Ok(values) => values.into_vec(),
            Err(e) => {
                let message = self.lua_error_text(&e);
                return Err(self.model_error(&sandbox, message));
            }
        };
        let at = format!("{}:{line}", self.shown);
        match self.output(values, &at) {
            Ok(output) => Ok(output),
            Err(message) => Err(self.model_error(&sandbox, message)),
        }
    }

    /// Runs the file's chunk. `Err` is a Lua failure (text for the model or the loader);
    /// `Ok(Err)` says the file did not return a table.
    pub(super) fn run_file(&self, sandbox: &Sandbox) -> Result<Result<Table, String>, String> {
        let returned = sandbox
            .lua
            .load(&self.source[..])
            .set_name(format!("@{}", self.shown))
            .set_mode(ChunkMode::Text)
            .call::<LuaValue>(());
        if let Some(message) = sandbox.abort.borrow_mut().message.take() {
            return Err(message);
        }
        match returned {
            Ok(LuaValue::Table(table)) => Ok(Ok(table)),
            Ok(other) => Ok(Err(format!(
                "the file returned a {} instead of a table; end it with \
                 `return {{ name = …, description = …, input_schema = {{…}}, run = function(input) … end }}`",
                other.type_name()
            ))),
            Err(e) => Err(self.lua_error_text(&e)),
        }
    }

    /// A model-readable text for a Lua error: the message with its `file:line`, and the
    /// lines of the file on the way there.
    fn lua_error_text(&self, error: &mlua::Error) -> String {
        match root_cause(error) {
            mlua::Error::MemoryError(_) => format!(
                "{}: the script ran out of memory (the limit is {} MiB)",
                self.shown,
                self.limits.memory_bytes / (1024 * 1024)
            ),
            mlua::Error::SyntaxError { message, .. } => {
                format!("syntax error: {}", bounded(message, 1000))
            }
            mlua::Error::RuntimeError(message) => self.with_trace(message),
            other => self.with_trace(&other.to_string()),
        }
    }

    /// Keeps the first line of `message` and the traceback lines in this file.
    fn with_trace(&self, message: &str) -> String {
        let mut lines = message.lines();
        let first = lines.next().unwrap_or_default().trim();
        let trace: Vec<&str> = lines
            .map(str::trim)
            .filter(|l| l.starts_with(&format!("{}:", self.shown)))
            .take(5)
            .collect();
        let mut text = bounded(first, 1000);
        if !text.starts_with(&format!("{}:", self.shown)) {
            text = format!("{}: {text}", self.shown);
        }
        if !trace.is_empty() {
            let _ = write!(text, " (traceback: {})", trace.join("; "));
        }
        text
    }

    /// Adds what the script printed to a failure's message.
    fn model_error(&self, sandbox: &Sandbox, message: String) -> ToolError {
        let printed = sandbox.printed.borrow();
        let printed = printed.trim_end();
        if printed.is_empty() {
            ToolError::model(message)
        } else {
            ToolError::model(format!(
                "{message}\n(the script printed: {})",
                bounded(printed, MAX_PRINTED)
            ))
        }
    }
}

fn root_cause(error: &mlua::Error) -> &mlua::Error {
    match error {
        mlua::Error::CallbackError { cause, .. } => root_cause(cause),
        mlua::Error::WithContext { cause, .. } => root_cause(cause),
        other => other,
    }
}
