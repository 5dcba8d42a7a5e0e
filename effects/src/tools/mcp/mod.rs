//! MCP servers as a tool source: the Model Context Protocol over a child process's stdio.
//!
//! [`McpSource::spawn`] starts a server from a command line, does the `initialize` handshake
//! and lists the server's tools; the source then offers them to a
//! [`ToolSet`](super::ToolSet) and runs each batch of calls to them as concurrent
//! `tools/call` requests. The protocol is spoken by the official Rust SDK (`rmcp`); spawning,
//! watching and killing the process is done here.
//!
//! ```no_run
//! use rebound_core::MachineConfig;
//! use rebound_effects::runner::Runner;
//! use rebound_effects::tools::{mcp::McpSource, ToolSet};
//! use std::sync::Arc;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let everything = McpSource::spawn("npx -y @modelcontextprotocol/server-everything").await?;
//! let tools = ToolSet::builder().source(everything).build()?;
//! let _runner = Runner::new(MachineConfig::default(), vec![]).tools(Arc::new(tools));
//! # Ok(()) }
//! ```
//!
//! # Failures, and where they go
//!
//! | what happened | outcome |
//! |---|---|
//! | the result has `isError: true` | that call's error result, with the result's text |
//! | a JSON-RPC error for one call (unknown tool, invalid params) | that call's error result, with the server's message and code |
//! | the server exits, crashes or closes its output mid-batch | every call of the batch without an answer yet gets an error result saying so (with the exit status and the end of the server's stderr); the server is restarted on the next batch |
//! | no answer within [`McpConfig::call_timeout`] | the same, saying it timed out; the server is killed and restarted on the next batch |
//! | the server cannot be restarted | the whole batch fails with an error result saying why |
//! | the run is canceled, or the [`ToolSet`](super::ToolSet) gives up on the batch | the server's process group is killed; it is restarted on the next batch |
//!
//! Tool names the model could not use (longer than 64 characters, or with characters other
//! than ASCII letters, digits, `_` and `-`) are offered with each bad character replaced by
//! `_` (and a numeric suffix if two names would clash); calls go out under the server's own
//! name.
//!
//! # Environment
//!
//! A server is someone else's program: it gets a minimal environment, not rebound's. It sees
//! the variables of [`DEFAULT_ENV_VARS`] that are set (`HOME`, `PATH`, `USER`, `LANG`,
//! `TERM`, `TMPDIR`, …: what a program needs to find itself, its files and its locale), plus
//! what [`McpConfig::with_env_var`] forwards and [`McpConfig::with_env`] sets. Provider API keys,
//! tokens, proxies and everything else stay out unless named:
//!
//! ```no_run
//! use rebound_effects::tools::{mcp::{McpConfig, McpSource}, ToolSet};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = McpConfig::default()
//!     .with_env_var("GITHUB_TOKEN") // forwarded from rebound's environment, if set
//!     .with_env("LOG_LEVEL", "debug"); // set to this value
//! let github = McpSource::spawn_with("github-mcp-server stdio", config).await?;
//! let _tools = ToolSet::builder().source(github).build()?;
//! # Ok(()) }
//! ```
//!
//! Content: `text` becomes a text part, `image` an image part (checked by the
//! [`media`](super::media) rules like every image), an embedded text resource becomes text;
//! other kinds (audio, binary resources, resource links) become a note saying what was left
//! out. With no content, a `structuredContent` value is shown as JSON text.

mod batch;
mod command_line;
mod config;
mod content;
mod server;
mod tool_names;

pub use config::{EnvValue, McpConfig, DEFAULT_ENV_VARS};

use command_line::split_command_line;
use rebound_core::{BatchOutcome, ToolFailure, ToolSpec};
use server::{start, Server};
use std::collections::BTreeMap;
use std::fmt;
use tool_names::allowed_name;

/// Why an MCP server could not be started. Each variant names the command line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The command line is empty.
    #[error("the MCP server command line is empty: give a program and its arguments")]
    EmptyCommand,
    /// The command line cannot be split into words (an unclosed quote, a trailing `\`).
    #[error("the MCP server command line `{command}` cannot be read: {message}")]
    CommandLine {
        /// The command line.
        command: String,
        /// What is wrong with it.
        message: String,
    },
    /// A variable name given for the server's environment is empty or holds `=` or NUL.
    #[error("the MCP server `{command}` cannot be given the variable `{name}`: a variable name must not be empty or contain `=` or NUL")]
    EnvName {
        /// The command line.
        command: String,
        /// The bad name.
        name: String,
    },
    /// The program could not be started (not found, not executable).
    #[error("the MCP server `{command}` could not be started: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server started but the handshake or the tool listing failed or timed out.
    #[error("the MCP server `{command}` did not {stage}: {message}{}", stderr_note(.stderr))]
    Protocol {
        /// The command line.
        command: String,
        /// What we were waiting for: "complete the `initialize` handshake", "list its tools".
        stage: &'static str,
        /// What went wrong.
        message: String,
        /// The last lines the server wrote to stderr.
        stderr: String,
    },
}

pub(super) fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {stderr}")
    }
}

/// An MCP server (stdio transport) as a [`ToolSource`](super::ToolSource).
///
/// Built with [`McpSource::spawn`]; the server runs until the source is dropped. Batches run
/// one after another; the calls inside a batch run concurrently. See the
/// [module docs](self) for how failures are answered.
pub struct McpSource {
    name: String,
    command: String,
    argv: Vec<String>,
    config: McpConfig,
    specs: Vec<ToolSpec>,
    /// Our tool name → the server's tool name.
    originals: BTreeMap<String, String>,
    server: tokio::sync::Mutex<Option<Server>>,
}

impl fmt::Debug for McpSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpSource")
            .field("name", &self.name)
            .field("command", &self.command)
            .field(
                "tools",
                &self
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl McpSource {
    /// Starts the server `command_line` (a program and its arguments, split like a shell
    /// does: quotes and `\` escapes, no variables or globs), with the default [`McpConfig`].
    ///
    /// Must be awaited inside a tokio runtime. The server gets a minimal environment (see
    /// [`DEFAULT_ENV_VARS`]; none of rebound's other variables, so no API key) and rebound's
    /// current folder, and runs in its own process group, which is killed when the source is
    /// dropped, a batch is canceled or the server stops answering.
    pub async fn spawn(command_line: &str) -> Result<Self, McpError> {
        Self::spawn_with(command_line, McpConfig::default()).await
    }

    /// [`McpSource::spawn`] with another configuration.
    pub async fn spawn_with(command_line: &str, config: McpConfig) -> Result<Self, McpError> {
        let argv = split_command_line(command_line).map_err(|message| McpError::CommandLine {
            command: command_line.to_owned(),
            message,
        })?;
        if argv.is_empty() {
            return Err(McpError::EmptyCommand);
        }
        let command = command_line.trim().to_owned();
        if let Some(name) = config.bad_env_name() {
            return Err(McpError::EnvName {
                command,
                name: name.to_owned(),
            });
        }
        let (server, tools, server_name) = start(&command, &argv, &config).await?;
        let mut specs = Vec::new();
        let mut originals = BTreeMap::new();
        for tool in tools {
            let name = allowed_name(&tool.name, &originals);
            originals.insert(name.clone(), tool.name);
            specs.push(ToolSpec {
                name,
                description: tool.description,
                input_schema: tool.input_schema,
            });
        }
        let program = std::path::Path::new(&argv[0])
            .file_name()
            .map_or_else(|| argv[0].clone(), |n| n.to_string_lossy().into_owned());
        Ok(McpSource {
            name: format!("mcp:{}", server_name.unwrap_or(program)),
            command,
            argv,
            config,
            specs,
            originals,
            server: tokio::sync::Mutex::new(Some(server)),
        })
    }

    /// The command line the server was started with.
    #[must_use]
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The server's own name for a tool this source offers under `name`.
    #[must_use]
    pub fn original_name(&self, name: &str) -> Option<&str> {
        self.originals.get(name).map(String::as_str)
    }

    /// The process id of the running server, if one is running (for diagnostics and tests).
    pub async fn pid(&self) -> Option<u32> {
        self.server.lock().await.as_ref().and_then(|s| s.child.id())
    }

    /// Kills the running server, if any; the next batch starts a new one.
    pub async fn kill(&self) {
        if let Some(mut server) = self.server.lock().await.take() {
            server.kill();
        }
    }

    fn restart_failed(&self, error: &McpError) -> BatchOutcome {
        BatchOutcome::WholeBatch(ToolFailure::model(format!(
            "tool source `{}` is unavailable: {error}",
            self.name
        )))
    }
}
