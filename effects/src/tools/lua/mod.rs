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
//! use rebound_core::MachineConfig;
//! use rebound_effects::runner::Runner;
//! use rebound_effects::tools::{files::Root, lua, ToolSet};
//! use std::sync::Arc;
//!
//! let root = Root::new(".")?;
//! let tools = ToolSet::builder().tools(lua::load_dir("tools", &root)?).build()?;
//! let _runner = Runner::new(MachineConfig::default(), vec![]).tools(Arc::new(tools));
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

mod definition;
mod json;
mod output;
mod run;
mod sandbox;

use crate::tools::files::Root;
use crate::tools::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use rebound_core::{HostFailureKind, ToolOutput, ToolSpec};
use serde_json::Value;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
#[non_exhaustive]
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
