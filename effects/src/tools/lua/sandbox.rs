//! The sandbox a script runs in: a Lua state with only the safe libraries, `fs` confined to
//! the tools root, `print` collected, and the time, stop and memory limits armed.

use super::output::display_value;
use super::Script;
use crate::tools::files::{ListTool, ReadTool};
use crate::tools::{Tool, ToolContext};
use mlua::chunk::ChunkMode;
use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue};
use rebound_core::ToolResultPart;
use serde_json::Value;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Why a script was stopped from outside, with where it was.
#[derive(Default)]
pub(super) struct Abort {
    pub(super) message: Option<String>,
}

/// A sandboxed Lua state with the file's chunk loaded and its limits armed.
pub(super) struct Sandbox {
    pub(super) lua: Lua,
    pub(super) abort: Rc<RefCell<Abort>>,
    pub(super) printed: Rc<RefCell<String>>,
}

/// What `print` may collect.
pub(super) const MAX_PRINTED: usize = 2000;

impl Script {
    /// A new state with the sandbox in place and the limits armed.
    pub(super) fn sandbox(
        &self,
        stop: &Arc<AtomicBool>,
        handle: Option<tokio::runtime::Handle>,
    ) -> mlua::Result<Sandbox> {
        let lua = Lua::new_with(
            StdLib::COROUTINE
                | StdLib::TABLE
                | StdLib::STRING
                | StdLib::UTF8
                | StdLib::MATH
                | StdLib::OS,
            LuaOptions::new(),
        )?;
        let globals = lua.globals();
        for name in ["dofile", "loadfile", "require", "package", "debug", "io"] {
            globals.raw_set(name, LuaValue::Nil)?;
        }
        let os: Table = globals.raw_get("os")?;
        let safe_os = lua.create_table()?;
        for name in ["time", "clock", "date", "difftime"] {
            safe_os.raw_set(name, os.raw_get::<LuaValue>(name)?)?;
        }
        globals.raw_set("os", safe_os)?;
        let string: Table = globals.raw_get("string")?;
        string.raw_set("dump", LuaValue::Nil)?;

        let printed = Rc::new(RefCell::new(String::new()));
        let sink = printed.clone();
        globals.raw_set(
            "print",
            lua.create_function(move |_, args: MultiValue| {
                let mut out = sink.borrow_mut();
                if out.len() < MAX_PRINTED {
                    let line: Vec<String> = args.iter().map(display_value).collect();
                    let _ = writeln!(out, "{}", line.join("\t"));
                }
                Ok(())
            })?,
        )?;

        let fs = lua.create_table()?;
        let root = self.root.clone();
        let read_handle = handle.clone();
        fs.raw_set(
            "read",
            lua.create_function(move |_, (path, offset): (String, Option<u64>)| {
                let mut input = serde_json::json!({ "path": path });
                if let Some(offset) = offset {
                    input["offset"] = offset.into();
                }
                Ok(run_file_tool(
                    &read_handle,
                    ReadTool::new(root.clone()),
                    input,
                ))
            })?,
        )?;
        let root = self.root.clone();
        fs.raw_set(
            "list",
            lua.create_function(move |_, path: Option<String>| {
                let input = serde_json::json!({ "path": path.unwrap_or_else(|| ".".into()) });
                Ok(run_file_tool(&handle, ListTool::new(root.clone()), input))
            })?,
        )?;
        globals.raw_set("fs", fs)?;

        // `pcall`, `xpcall` and `coroutine.resume`/`close` must not swallow a stop: `check`
        // raises it again. `load` takes source text only (no bytecode).
        let abort = Rc::new(RefCell::new(Abort::default()));
        let stopped = abort.clone();
        let check = lua.create_function(move |_, ()| match &stopped.borrow().message {
            Some(message) => Err::<(), _>(mlua::Error::RuntimeError(message.clone())),
            None => Ok(()),
        })?;
        lua.load(PRELUDE)
            .set_name("=rebound prelude")
            .set_mode(ChunkMode::Text)
            .call::<()>(check)?;

        lua.set_memory_limit(self.limits.memory_bytes)?;
        let started = Instant::now();
        let limit = self.limits.time;
        let stop_flag = stop.clone();
        let abort_hook = abort.clone();
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(1000),
            move |_, debug| {
                let mut abort = abort_hook.borrow_mut();
                if abort.message.is_none() {
                    let why = if stop_flag.load(Ordering::Relaxed) {
                        Some("the call was stopped (timed out or canceled)".to_owned())
                    } else if started.elapsed() > limit {
                        Some(format!(
                            "the script was stopped after {} (the time limit); does it loop forever?",
                            crate::tools::set::human_duration(limit)
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        let source = debug.source();
                        let at = match (source.short_src, debug.current_line()) {
                            (Some(src), Some(line)) => format!("{src}:{line}: "),
                            _ => String::new(),
                        };
                        abort.message = Some(format!("{at}{why}"));
                    }
                }
                match &abort.message {
                    Some(message) => Err(mlua::Error::RuntimeError(message.clone())),
                    None => Ok(mlua::VmState::Continue),
                }
            },
        )?;
        Ok(Sandbox {
            lua,
            abort,
            printed,
        })
    }
}

const PRELUDE: &str = r##"
local check = ...
local pcall_, xpcall_, resume_, close_ = pcall, xpcall, coroutine.resume, coroutine.close
local load_, select_ = load, select
local function pass(...)
  check()
  return ...
end
pcall = function(...) return pass(pcall_(...)) end
xpcall = function(...) return pass(xpcall_(...)) end
coroutine.resume = function(...) return pass(resume_(...)) end
coroutine.close = function(...) return pass(close_(...)) end
-- Lua runs finalizers with hooks off, so a `__gc` that loops could never be stopped.
local setmetatable_, rawget_, type_, error_ = setmetatable, rawget, type, error
setmetatable = function(t, mt)
  if type_(mt) == "table" and rawget_(mt, "__gc") ~= nil then
    error_("`__gc` metamethods are not allowed in tool scripts", 2)
  end
  return setmetatable_(t, mt)
end
load = function(chunk, name, _mode, ...)
  if select_("#", ...) > 0 then
    return load_(chunk, name, "t", ...)
  end
  return load_(chunk, name, "t")
end
"##;

/// Runs a file tool from a script: its text, or `nil, message`.
fn run_file_tool(
    handle: &Option<tokio::runtime::Handle>,
    tool: impl Tool,
    input: Value,
) -> (Option<String>, Option<String>) {
    let Some(handle) = handle else {
        return (
            None,
            Some("`fs` is available only while the tool runs, not while its file loads".into()),
        );
    };
    match handle.block_on(tool.invoke(input, ToolContext::default())) {
        Ok(output) => {
            let text: Vec<&str> = output
                .parts
                .iter()
                .filter_map(ToolResultPart::as_text)
                .collect();
            (Some(text.join("")), None)
        }
        Err(e) => (None, Some(e.to_string())),
    }
}
