//! Tools written in Lua: one `.lua` file per tool, run in a sandboxed Lua 5.4.
//!
//! A tool file returns a table with the tool's `name` (optional: the file name without
//! `.lua`), its `description`, its `input_schema` (a Lua table written like the JSON Schema
//! it stands for; optional: any object) and its `run` function:
//!
//! ```lua
//! -- tools/add.lua
//! return {
//!   name = "add",
//!   description = "Adds two integers.",
//!   input_schema = {
//!     type = "object",
//!     properties = { a = { type = "integer" }, b = { type = "integer" } },
//!     required = { "a", "b" },
//!   },
//!   run = function(input)
//!     if input.a < 0 then
//!       return nil, "`a` must not be negative"   -- an error result the model reads
//!     end
//!     return tostring(input.a + input.b)          -- a text result
//!   end,
//! }
//! ```
//!
//! ```no_run
//! use rebound_effects::tools::{files::Root, lua, ToolSet};
//!
//! let root = Root::new(".")?;
//! let tools = ToolSet::builder().tools(lua::load_dir("tools", &root)?).build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What `run` receives and returns
//!
//! `run(input)` gets the call's input (already checked against the schema) as Lua values:
//! objects and arrays become tables (arrays indexed from 1), JSON `null` becomes `nil`.
//! It returns one of:
//!
//! | `run` returns | the tool result |
//! |---|---|
//! | a string (or a number) | one text part |
//! | a list of parts: strings, `{type = "text", text = …}` or `{type = "image", media_type = "image/png", data = <base64>}` | those parts |
//! | `nil, "message"` | an error result with that message |
//! | anything else | an error result saying what shape was expected, naming the file and the line of `run` |
//!
//! `error("message")` works too: the error result reads `add.lua:7: message`, with the file
//! and line where the error was raised. In a schema table, an empty table is an object (`{}`);
//! leave out an empty `required` rather than writing `required = {}`.
//!
//! # Limits and sandbox
//!
//! Each call runs the file afresh in a new Lua state on a blocking thread (no state survives
//! between calls, a busy script never stalls the async runtime), under [`LuaLimits`]: a time
//! limit checked every 1,000 VM instructions and a memory limit. A script that runs too long,
//! that the run cancels, or that the [`ToolSet`](super::ToolSet) times out is stopped at its
//! next check — and `pcall`, `xpcall` and `coroutine.resume` cannot catch that stop. Every
//! failure — a runtime error, a wrong return shape, the time limit, the memory limit — becomes
//! an error result the model reads; none crashes or hangs the agent.
//!
//! Scripts get the base library (without `dofile`, `loadfile`, and with `load` limited to
//! source text), `string` (without `string.dump`), `table`, `math`, `utf8`, `coroutine`, and
//! `os.time`, `os.clock`, `os.date`, `os.difftime`. Not there: `io`, `os.execute`,
//! `os.getenv`, `os.remove` and the rest of `os`, `require` and `package` (no modules, native
//! or not), `debug`. File access goes through `fs`, confined to the tools root the same way
//! as the [`files`](super::files) tools:
//!
//! - `fs.read(path [, offset])` returns the text `read` would show, or `nil, message`;
//! - `fs.list([path])` returns the listing `list` would show, or `nil, message`.
//!
//! `setmetatable` refuses metatables with `__gc` (Lua runs finalizers with hooks off, so a
//! looping finalizer could not be stopped). `print` is kept; what a script prints is shown only with its error results, to help debug it.
//!
//! Not covered by the time limit: one long call into a C library function, such as a
//! pathological `string.find` pattern on a long string (the memory limit still applies).

use super::files::{ListTool, ReadTool, Root};
use super::schema::bounded;
use super::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use mlua::chunk::ChunkMode;
use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue};
use rebound_core::{HostFailureKind, MediaSource, ToolOutput, ToolResultPart, ToolSpec};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long and how big a Lua tool call may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LuaLimits {
    /// A call (or the loading of a file) that runs longer is stopped with an error result.
    /// Default 10 s.
    pub time: Duration,
    /// The Lua state may hold at most this many bytes; past it, allocation fails with an
    /// error result. Default 64 MiB.
    pub memory_bytes: usize,
}

impl Default for LuaLimits {
    fn default() -> Self {
        LuaLimits {
            time: Duration::from_secs(10),
            memory_bytes: 64 * 1024 * 1024,
        }
    }
}

impl LuaLimits {
    /// Sets [`LuaLimits::time`].
    #[must_use]
    pub fn with_time(mut self, time: Duration) -> Self {
        self.time = time;
        self
    }

    /// Sets [`LuaLimits::memory_bytes`].
    #[must_use]
    pub fn with_memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self
    }
}

/// Why Lua tool files could not be loaded. Each variant names the folder or file.
#[derive(Debug, thiserror::Error)]
pub enum LuaLoadError {
    /// The folder cannot be listed.
    #[error("Lua tools folder `{dir}` cannot be read: {source}")]
    ReadDir {
        /// The folder.
        dir: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The folder has no `.lua` files.
    #[error("Lua tools folder `{dir}` has no `.lua` files: put one file per tool there")]
    NoTools {
        /// The folder.
        dir: PathBuf,
    },
    /// A file cannot be read.
    #[error("Lua tool file `{file}` cannot be read: {source}")]
    ReadFile {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Running the file failed: a syntax error, a runtime error, a limit (the message has
    /// the line).
    #[error("Lua tool file `{file}` failed to load: {message}")]
    Script {
        /// The file.
        file: PathBuf,
        /// Lua's message, with the line.
        message: String,
    },
    /// The file ran but does not define a tool: not a table, or a missing or wrong field.
    #[error("Lua tool file `{file}` does not define a valid tool: {message}")]
    Definition {
        /// The file.
        file: PathBuf,
        /// What is missing or wrong, and what to write instead.
        message: String,
    },
    /// Two files define a tool with the same name.
    #[error("Lua tool name `{name}` is defined twice, in `{first}` and in `{second}`: rename one")]
    DuplicateName {
        /// The name.
        name: String,
        /// The first file.
        first: PathBuf,
        /// The second file.
        second: PathBuf,
    },
}

/// Loads every `*.lua` file directly in `dir` (not in subfolders), in name order, as one tool
/// each, with the default [`LuaLimits`]; their `fs` helpers are confined to `root`.
///
/// This runs each file once (blocking, bounded by the limits) to read its definition: call it
/// at startup, or inside `spawn_blocking`.
pub fn load_dir(dir: impl AsRef<Path>, root: &Root) -> Result<Vec<Arc<dyn Tool>>, LuaLoadError> {
    load_dir_with(dir, root, LuaLimits::default())
}

/// [`load_dir`] with other limits.
pub fn load_dir_with(
    dir: impl AsRef<Path>,
    root: &Root,
    limits: LuaLimits,
) -> Result<Vec<Arc<dyn Tool>>, LuaLoadError> {
    let dir = dir.as_ref();
    let read_dir = |source| LuaLoadError::ReadDir {
        dir: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir)? {
        let path = entry.map_err(read_dir)?.path();
        if path.extension().is_some_and(|e| e == "lua") && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(LuaLoadError::NoTools {
            dir: dir.to_owned(),
        });
    }
    files.sort();
    let mut tools: Vec<LuaTool> = Vec::new();
    for file in files {
        let tool = LuaTool::load_file_with(&file, root, limits)?;
        if let Some(first) = tools.iter().find(|t| t.spec.name == tool.spec.name) {
            return Err(LuaLoadError::DuplicateName {
                name: tool.spec.name.clone(),
                first: first.script.file.clone(),
                second: file,
            });
        }
        tools.push(tool);
    }
    Ok(tools
        .into_iter()
        .map(|t| Arc::new(t) as Arc<dyn Tool>)
        .collect())
}

/// One tool defined by a Lua file. See the [module docs](self) for the file's shape.
#[derive(Debug, Clone)]
pub struct LuaTool {
    spec: ToolSpec,
    script: Arc<Script>,
}

/// What a call needs to run the file afresh.
#[derive(Debug)]
struct Script {
    /// The file, for load errors.
    file: PathBuf,
    /// The chunk name Lua shows in messages: the file name.
    shown: String,
    source: Vec<u8>,
    root: Root,
    limits: LuaLimits,
}

impl LuaTool {
    /// Loads the tool defined in `file` with the default [`LuaLimits`]; its `fs` helpers are
    /// confined to `root`. Blocking, like [`load_dir`].
    pub fn load_file(file: impl AsRef<Path>, root: &Root) -> Result<Self, LuaLoadError> {
        Self::load_file_with(file, root, LuaLimits::default())
    }

    /// [`LuaTool::load_file`] with other limits.
    pub fn load_file_with(
        file: impl AsRef<Path>,
        root: &Root,
        limits: LuaLimits,
    ) -> Result<Self, LuaLoadError> {
        let file = file.as_ref();
        let source = std::fs::read(file).map_err(|source| LuaLoadError::ReadFile {
            file: file.to_owned(),
            source,
        })?;
        let shown = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let script = Script {
            file: file.to_owned(),
            shown,
            source,
            root: root.clone(),
            limits,
        };
        let spec = script.load_spec()?;
        Ok(LuaTool {
            spec,
            script: Arc::new(script),
        })
    }

    /// The file the tool was loaded from.
    #[must_use]
    pub fn file(&self) -> &Path {
        &self.script.file
    }
}

#[async_trait]
impl Tool for LuaTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn invoke(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let stop = Arc::new(AtomicBool::new(false));
        // However this call ends (done, timed out, canceled), the script stops at its next check.
        let _stop_on_drop = StopOnDrop(stop.clone());
        let script = self.script.clone();
        let handle = tokio::runtime::Handle::current();
        let task = tokio::task::spawn_blocking(move || script.call(&input, &stop, Some(handle)));
        tokio::select! {
            joined = task => match joined {
                Ok(result) => result,
                Err(e) if e.is_panic() => Err(ToolError::model(format!(
                    "{}: the Lua runtime crashed; this is a bug in rebound, not in your input",
                    self.script.shown
                ))),
                Err(_) => Err(ToolError::host(
                    HostFailureKind::Canceled,
                    "the Lua tool's thread was stopped",
                )),
            },
            () = ctx.cancel().cancelled() => Err(ToolError::host(
                HostFailureKind::Canceled,
                format!("the Lua tool `{}` was canceled", self.spec.name),
            )),
        }
    }
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Why a script was stopped from outside, with where it was.
#[derive(Default)]
struct Abort {
    message: Option<String>,
}

/// A sandboxed Lua state with the file's chunk loaded and its limits armed.
struct Sandbox {
    lua: Lua,
    abort: Rc<RefCell<Abort>>,
    printed: Rc<RefCell<String>>,
}

/// What `print` may collect.
const MAX_PRINTED: usize = 2000;
/// Nesting beyond this is refused when converting between Lua and JSON (also stops cycles).
const MAX_DEPTH: usize = 64;

impl Script {
    /// Runs the file once and reads the tool's definition.
    fn load_spec(&self) -> Result<ToolSpec, LuaLoadError> {
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
                if let Err(e) = jsonschema::validator_for(&schema) {
                    return Err(definition(format!(
                        "`input_schema` is not a valid JSON Schema: {}",
                        bounded(&e.to_string(), 300)
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

    /// One call: a fresh state, the file, then `run(input)`. Runs on a blocking thread.
    fn call(
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

    /// A new state with the sandbox in place and the limits armed.
    fn sandbox(
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
                            super::set::human_duration(limit)
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

    /// Runs the file's chunk. `Err` is a Lua failure (text for the model or the loader);
    /// `Ok(Err)` says the file did not return a table.
    fn run_file(&self, sandbox: &Sandbox) -> Result<Result<Table, String>, String> {
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

    /// Maps what `run` returned to an output, or a message for the model.
    fn output(&self, mut values: Vec<LuaValue>, at: &str) -> Result<ToolOutput, String> {
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

fn root_cause(error: &mlua::Error) -> &mlua::Error {
    match error {
        mlua::Error::CallbackError { cause, .. } => root_cause(cause),
        mlua::Error::WithContext { cause, .. } => root_cause(cause),
        other => other,
    }
}

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
                .filter_map(|p| match p {
                    ToolResultPart::Text { text } => Some(text.as_str()),
                    ToolResultPart::Image { .. } => None,
                })
                .collect();
            (Some(text.join("")), None)
        }
        Err(e) => (None, Some(e.to_string())),
    }
}

/// How a script's value reads in a message.
fn display_value(value: &LuaValue) -> String {
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

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "table with named fields",
    }
}

/// A JSON value as a Lua value: objects and arrays become tables, `null` becomes `nil`.
fn json_to_lua(lua: &Lua, value: &Value, depth: usize) -> mlua::Result<LuaValue> {
    if depth > MAX_DEPTH {
        return Err(mlua::Error::RuntimeError(format!(
            "the input is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    Ok(match value {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => LuaValue::Integer(i),
            None => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, json_to_lua(lua, item, depth + 1)?)?;
            }
            LuaValue::Table(table)
        }
        Value::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (key, item) in fields {
                table.raw_set(key.as_str(), json_to_lua(lua, item, depth + 1)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// A Lua value as JSON. Tables whose keys are exactly 1..n become arrays, tables with string
/// keys (and the empty table) become objects; anything else is refused with where it is.
fn lua_to_json(value: &LuaValue, at: &str, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "is nested more than {MAX_DEPTH} levels deep at `{at}` (or refers to itself)"
        ));
    }
    match value {
        LuaValue::Nil => Ok(Value::Null),
        LuaValue::Boolean(b) => Ok(Value::Bool(*b)),
        LuaValue::Integer(i) => Ok(Value::from(*i)),
        LuaValue::Number(n) => Number::from_f64(*n)
            .map(Value::Number)
            .ok_or_else(|| format!("has a number that JSON cannot hold ({n}) at `{at}`")),
        LuaValue::String(s) => match s.to_str() {
            Ok(s) => Ok(Value::String(s.to_string())),
            Err(_) => Err(format!("has a string that is not UTF-8 text at `{at}`")),
        },
        LuaValue::Table(table) => {
            let mut named = Map::new();
            let mut indexed: Vec<(i64, Value)> = Vec::new();
            for pair in table.clone().pairs::<LuaValue, LuaValue>() {
                let (key, item) = pair.map_err(|e| format!("cannot be read at `{at}`: {e}"))?;
                match key {
                    LuaValue::String(key) => {
                        let key = key
                            .to_str()
                            .map_err(|_| format!("has a key that is not UTF-8 text at `{at}`"))?
                            .to_string();
                        let inner = format!("{at}.{key}");
                        named.insert(key, lua_to_json(&item, &inner, depth + 1)?);
                    }
                    LuaValue::Integer(i) => {
                        let inner = format!("{at}[{i}]");
                        indexed.push((i, lua_to_json(&item, &inner, depth + 1)?));
                    }
                    other => {
                        return Err(format!(
                            "has a {} key at `{at}` (use string keys or a list)",
                            other.type_name()
                        ))
                    }
                }
            }
            if indexed.is_empty() {
                return Ok(Value::Object(named));
            }
            if !named.is_empty() {
                return Err(format!("mixes list items and named fields at `{at}`"));
            }
            indexed.sort_by_key(|(i, _)| *i);
            if indexed
                .iter()
                .enumerate()
                .any(|(n, (i, _))| *i != n as i64 + 1)
            {
                return Err(format!(
                    "has a list with holes or keys other than 1, 2, 3, … at `{at}`"
                ));
            }
            Ok(Value::Array(indexed.into_iter().map(|(_, v)| v).collect()))
        }
        other => Err(format!(
            "has a {} at `{at}`, which JSON cannot hold",
            other.type_name()
        )),
    }
}
