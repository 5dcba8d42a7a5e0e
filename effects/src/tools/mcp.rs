//! MCP servers as a tool source: the Model Context Protocol over a child process's stdio.
//!
//! [`McpSource::spawn`] starts a server from a command line, does the `initialize` handshake
//! and lists the server's tools; the source then offers them to a
//! [`ToolSet`](super::ToolSet) and runs each batch of calls to them as concurrent
//! `tools/call` requests. The protocol is spoken by the official Rust SDK (`rmcp`); spawning,
//! watching and killing the process is done here.
//!
//! ```no_run
//! use rebound_effects::tools::{mcp::McpSource, ToolSet};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let everything = McpSource::spawn("npx -y @modelcontextprotocol/server-everything").await?;
//! let tools = ToolSet::builder().source(everything).build()?;
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
//! use rebound_effects::tools::mcp::{McpConfig, McpSource};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = McpConfig::default()
//!     .with_env_var("GITHUB_TOKEN") // forwarded from rebound's environment, if set
//!     .with_env("LOG_LEVEL", "debug"); // set to this value
//! let github = McpSource::spawn_with("github-mcp-server stdio", config).await?;
//! # Ok(()) }
//! ```
//!
//! Content: `text` becomes a text part, `image` an image part (checked by the
//! [`media`](super::media) rules like every image), an embedded text resource becomes text;
//! other kinds (audio, binary resources, resource links) become a note saying what was left
//! out. With no content, a `structuredContent` value is shown as JSON text.

use super::schema::bounded;
use super::set::human_duration;
use super::{ToolContext, ToolSource};
use async_trait::async_trait;
use futures_util::stream::{FuturesUnordered, StreamExt};
use rebound_core::{
    BatchOutcome, CallOutcome, HostFailure, HostFailureKind, MediaSource, ToolCall, ToolFailure,
    ToolOutput, ToolResultPart, ToolSpec,
};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The variables an MCP server gets from rebound's environment without being named (those that
/// are set): the list Codex starts its MCP servers with, `DEFAULT_ENV_VARS` in
/// [`codex-rs/rmcp-client/src/utils.rs`](https://github.com/openai/codex/blob/main/codex-rs/rmcp-client/src/utils.rs),
/// and on Windows its `WINDOWS_CORE_ENV_VARS` (`codex-rs/protocol/src/shell_environment.rs`),
/// which a Windows program needs to start at all.
///
/// Nothing here holds a secret. Anything else a server needs (an API token, `HTTPS_PROXY`,
/// `SSL_CERT_FILE`, `PYTHONPATH`, …) must be named with [`McpConfig::with_env_var`] or set with
/// [`McpConfig::with_env`].
#[cfg(not(windows))]
pub const DEFAULT_ENV_VARS: &[&str] = &[
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "USER",
    "__CF_USER_TEXT_ENCODING",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "TZ",
];

/// The variables an MCP server gets from rebound's environment without being named (those that
/// are set): the list Codex starts its MCP servers with on Windows, `WINDOWS_CORE_ENV_VARS` in
/// [`codex-rs/protocol/src/shell_environment.rs`](https://github.com/openai/codex/blob/main/codex-rs/protocol/src/shell_environment.rs)
/// (used by `DEFAULT_ENV_VARS` in `codex-rs/rmcp-client/src/utils.rs`).
///
/// Nothing here holds a secret. Anything else a server needs must be named with
/// [`McpConfig::with_env_var`] or set with [`McpConfig::with_env`].
#[cfg(windows)]
pub const DEFAULT_ENV_VARS: &[&str] = &[
    "PATH",
    "PATHEXT",
    "SHELL",
    "COMSPEC",
    "SYSTEMROOT",
    "WINDIR",
    "SYSTEMDRIVE",
    "USERNAME",
    "USERDOMAIN",
    "USERPROFILE",
    "HOMEDRIVE",
    "HOMEPATH",
    "PROGRAMFILES",
    "PROGRAMFILES(X86)",
    "PROGRAMW6432",
    "PROGRAMDATA",
    "LOCALAPPDATA",
    "APPDATA",
    "TEMP",
    "TMP",
    "TMPDIR",
    "POWERSHELL",
    "PWSH",
];

/// Where a variable of an MCP server's environment comes from (see [`McpConfig::env`]).
#[derive(Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// rebound's own value, when it has one; when it has none the server does not get the
    /// variable.
    Forward,
    /// This value.
    Set(OsString),
}

/// Values are not shown: a value set for a server is often a token.
impl fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvValue::Forward => f.write_str("Forward"),
            EnvValue::Set(_) => f.write_str("Set(***)"),
        }
    }
}

/// How an [`McpSource`] starts its server and waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpConfig {
    /// The calls of a batch that have no answer this long after the batch started get a
    /// timeout error result, and the server is killed (and restarted on the next batch).
    /// Default 60 s.
    pub call_timeout: Duration,
    /// Starting the server (spawn, `initialize`, `tools/list`) may take this long. Default 30 s.
    pub start_timeout: Duration,
    /// The server's environment besides the set variables of [`DEFAULT_ENV_VARS`]: variable
    /// name → where its value comes from. An entry here wins over the default list (so
    /// `with_env("PATH", …)` replaces `PATH`). Default empty: the server sees only the default
    /// list. Fill it with [`McpConfig::with_env_var`] and [`McpConfig::with_env`].
    pub env: BTreeMap<String, EnvValue>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            call_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(30),
            env: BTreeMap::new(),
        }
    }
}

impl McpConfig {
    /// Sets [`McpConfig::call_timeout`].
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets [`McpConfig::start_timeout`].
    #[must_use]
    pub fn with_start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Forwards rebound's variable `name` to the server, when rebound has it (read each time
    /// the server is started). This is how a server gets a token it needs: provider API keys
    /// and other secrets reach a server only this way.
    ///
    /// ```
    /// use rebound_effects::tools::mcp::McpConfig;
    ///
    /// let config = McpConfig::default().with_env_var("GITHUB_TOKEN");
    /// let env = config.environment_from(|name| (name == "GITHUB_TOKEN").then(|| "ghp_x".into()));
    /// assert_eq!(env, [("GITHUB_TOKEN".into(), "ghp_x".into())]);
    /// ```
    #[must_use]
    pub fn with_env_var(mut self, name: impl Into<String>) -> Self {
        self.env.insert(name.into(), EnvValue::Forward);
        self
    }

    /// Sets the server's variable `name` to `value` (whatever rebound's own value is).
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<OsString>) -> Self {
        self.env.insert(name.into(), EnvValue::Set(value.into()));
        self
    }

    /// The environment a server started now gets: the variables of [`DEFAULT_ENV_VARS`] and
    /// of [`McpConfig::env`] that have a value, sorted by name.
    #[must_use]
    pub fn environment(&self) -> Vec<(OsString, OsString)> {
        self.environment_from(|name| std::env::var_os(name))
    }

    /// [`McpConfig::environment`] with rebound's environment given as a lookup function (for
    /// tests and previews).
    #[must_use]
    pub fn environment_from(
        &self,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Vec<(OsString, OsString)> {
        let mut env: BTreeMap<&str, OsString> = BTreeMap::new();
        for name in DEFAULT_ENV_VARS {
            if let Some(value) = lookup(name) {
                env.insert(name, value);
            }
        }
        for (name, source) in &self.env {
            let value = match source {
                EnvValue::Forward => lookup(name),
                EnvValue::Set(value) => Some(value.clone()),
            };
            match value {
                Some(value) => env.insert(name, value),
                // Named but unset: the server must not see rebound's default either.
                None => env.remove(name.as_str()),
            };
        }
        env.into_iter()
            .map(|(name, value)| (OsString::from(name), value))
            .collect()
    }

    /// The first variable name a process environment cannot hold, if any.
    fn bad_env_name(&self) -> Option<&str> {
        self.env
            .keys()
            .map(String::as_str)
            .find(|name| name.is_empty() || name.contains(['=', '\0']))
    }
}

/// Why an MCP server could not be started. Each variant names the command line.
#[derive(Debug, thiserror::Error)]
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

fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {stderr}")
    }
}

/// An MCP server (stdio transport) as a [`ToolSource`].
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

/// A running server process and the MCP session on its stdio.
struct Server {
    service: RunningService<RoleClient, ()>,
    child: Child,
    stderr: Arc<StdMutex<StderrTail>>,
}

impl Server {
    /// Kills the server's process group (the server and whatever it started) at once.
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.child.id().and_then(|id| i32::try_from(id).ok()) {
            // SAFETY: `kill` is async-signal-safe and takes plain integers; a negative pid
            // names the process group the child leads (it was spawned with `process_group(0)`).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.start_kill();
    }

    /// How the process ended, if it has.
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn is_usable(&mut self) -> bool {
        !self.service.is_closed() && self.exit_status().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last few KiB a server wrote to stderr (servers log there; the pipe must not fill up).
#[derive(Default)]
struct StderrTail {
    lines: VecDeque<String>,
    bytes: usize,
}

const STDERR_TAIL_BYTES: usize = 2048;

impl StderrTail {
    fn push(&mut self, line: String) {
        let line = bounded(&line, 500);
        self.bytes += line.len();
        self.lines.push_back(line);
        while self.bytes > STDERR_TAIL_BYTES {
            match self.lines.pop_front() {
                Some(old) => self.bytes -= old.len(),
                None => break,
            }
        }
    }

    fn text(&self) -> String {
        let lines: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        lines.join(" | ")
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

/// A tool as the server lists it.
struct Listed {
    name: String,
    description: String,
    input_schema: Value,
}

/// Spawns the server, does the handshake and lists its tools.
async fn start(
    command: &str,
    argv: &[String],
    config: &McpConfig,
) -> Result<(Server, Vec<Listed>, Option<String>), McpError> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .envs(config.environment())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|source| McpError::Spawn {
        command: command.to_owned(),
        source,
    })?;
    let stderr = Arc::new(StdMutex::new(StderrTail::default()));
    if let Some(pipe) = child.stderr.take() {
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut tail) = tail.lock() {
                    tail.push(line);
                }
            }
        });
    }
    let tail_text =
        |stderr: &Arc<StdMutex<StderrTail>>| stderr.lock().map(|t| t.text()).unwrap_or_default();
    let protocol =
        |stage, message: String, stderr: &Arc<StdMutex<StderrTail>>| McpError::Protocol {
            command: command.to_owned(),
            stage,
            message,
            stderr: tail_text(stderr),
        };
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(protocol(
            "start",
            "its stdin or stdout could not be piped".into(),
            &stderr,
        ));
    };
    let handshake = "complete the `initialize` handshake";
    let service = match tokio::time::timeout(config.start_timeout, ().serve((stdout, stdin))).await
    {
        Ok(Ok(service)) => service,
        Ok(Err(e)) => {
            // Let the stderr reader catch up with what the dying server said.
            let _ = tokio::time::timeout(Duration::from_millis(300), child.wait()).await;
            return Err(protocol(handshake, bounded(&e.to_string(), 500), &stderr));
        }
        Err(_) => {
            return Err(protocol(
                handshake,
                format!("no answer within {}", human_duration(config.start_timeout)),
                &stderr,
            ))
        }
    };
    let server_name = service
        .peer_info()
        .and_then(|info| serde_json::to_value(&*info).ok())
        .and_then(|info| info["serverInfo"]["name"].as_str().map(str::to_owned))
        .filter(|name| !name.is_empty());
    let mut server = Server {
        service,
        child,
        stderr: stderr.clone(),
    };
    let listing = "list its tools";
    let tools =
        match tokio::time::timeout(config.start_timeout, server.service.peer().list_all_tools())
            .await
        {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                server.kill();
                return Err(protocol(listing, bounded(&e.to_string(), 500), &stderr));
            }
            Err(_) => {
                server.kill();
                return Err(protocol(
                    listing,
                    format!("no answer within {}", human_duration(config.start_timeout)),
                    &stderr,
                ));
            }
        };
    let mut listed = Vec::new();
    for tool in tools {
        // Read the wire shape (name, description, inputSchema): stable across SDK versions.
        let tool = serde_json::to_value(&tool).unwrap_or(Value::Null);
        let Some(name) = tool["name"].as_str() else {
            continue;
        };
        let input_schema = match &tool["inputSchema"] {
            schema @ Value::Object(_) => schema.clone(),
            _ => serde_json::json!({"type": "object"}),
        };
        listed.push(Listed {
            name: name.to_owned(),
            description: tool["description"].as_str().unwrap_or_default().to_owned(),
            input_schema,
        });
    }
    Ok((server, listed, server_name))
}

/// `name` if providers accept it, else a close name they accept that is not taken yet.
fn allowed_name(name: &str, taken: &BTreeMap<String, String>) -> String {
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if base.is_empty() {
        base.push_str("tool");
    }
    if !taken.contains_key(&base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = 64 - suffix.len();
            let stem: String = base.chars().take(keep).collect();
            format!("{stem}{suffix}")
        })
        .find(|candidate| !taken.contains_key(candidate))
        .unwrap_or(base)
}

/// Splits a command line into words: whitespace separates, `'…'` is literal, `"…"` allows
/// `\"` and `\\`, and `\` outside quotes escapes the next character.
fn split_command_line(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a `'` quote is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("a `\"` quote is not closed".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("a `\"` quote is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("it ends with a lone `\\`".into()),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Why a batch could not finish on this server.
enum Broken {
    TimedOut,
    Gone(String),
}

#[async_trait]
impl ToolSource for McpSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn specs(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    async fn run_batch(&self, calls: Vec<ToolCall>, ctx: ToolContext) -> BatchOutcome {
        let mut slot = self.server.lock().await;
        if !slot.as_mut().is_some_and(Server::is_usable) {
            if let Some(mut old) = slot.take() {
                old.kill();
            }
            let started = tokio::select! {
                biased;
                () = ctx.cancel().cancelled() => return canceled(),
                started = start(&self.command, &self.argv, &self.config) => started,
            };
            match started {
                Ok((server, _, _)) => *slot = Some(server),
                Err(e) => return self.restart_failed(&e),
            }
        }
        // If this future is dropped mid-batch (the ToolSet's timeout, a cancel), the calls
        // in flight are abandoned: kill the server so nothing of theirs lingers.
        let mut guard = KillUnlessDone {
            slot: &mut slot,
            done: false,
        };
        let Some(server) = guard.slot.as_mut() else {
            return self.restart_failed(&McpError::EmptyCommand);
        };
        let peer = server.service.peer().clone();

        let mut results: Vec<Option<Result<ToolOutput, ToolFailure>>> = vec![None; calls.len()];
        let mut pending = FuturesUnordered::new();
        for (index, call) in calls.iter().enumerate() {
            let original = self
                .originals
                .get(&call.name)
                .cloned()
                .unwrap_or_else(|| call.name.clone());
            let arguments = match &call.input {
                Value::Object(map) => Some(map.clone()),
                Value::Null => None,
                _ => {
                    results[index] =
                        Some(Err(ToolFailure::model("the input must be a JSON object")));
                    continue;
                }
            };
            let mut params = CallToolRequestParams::new(original);
            params.arguments = arguments;
            let peer = peer.clone();
            pending.push(async move { (index, peer.call_tool(params).await) });
        }

        let deadline = tokio::time::sleep(self.config.call_timeout);
        tokio::pin!(deadline);
        let mut broken = None;
        while !pending.is_empty() {
            tokio::select! {
                biased;
                () = ctx.cancel().cancelled() => {
                    // The guard kills the server.
                    return canceled();
                }
                next = pending.next() => match next {
                    Some((index, Ok(result))) => results[index] = Some(call_result(result)),
                    Some((index, Err(ServiceError::McpError(error)))) => {
                        results[index] = Some(Err(ToolFailure::model(format!(
                            "the MCP server refused the call: {} (JSON-RPC error {})",
                            bounded(&error.message, 1000),
                            error.code.0
                        ))));
                    }
                    Some((index, Err(ServiceError::UnexpectedResponse))) => {
                        results[index] = Some(Err(ToolFailure::model(
                            "the MCP server answered with something other than a tool result \
                             (it may have asked for user input, which rebound does not support)",
                        )));
                    }
                    Some((_, Err(error))) => {
                        broken = Some(Broken::Gone(error.to_string()));
                        break;
                    }
                    None => break,
                },
                () = &mut deadline => {
                    broken = Some(Broken::TimedOut);
                    break;
                }
            }
        }
        drop(pending);

        if let Some(broken) = broken {
            let message = match broken {
                Broken::TimedOut => format!(
                    "the MCP server `{}` did not answer within {}; it was stopped and will be \
                     restarted for the next tool calls",
                    bounded(&self.command, 200),
                    human_duration(self.config.call_timeout)
                ),
                Broken::Gone(error) => {
                    // Give the process a moment to be reaped, for its exit status and last words.
                    let status =
                        tokio::time::timeout(Duration::from_millis(500), server.child.wait())
                            .await
                            .ok()
                            .and_then(Result::ok);
                    let how = match status {
                        Some(status) => format!("exited ({status})"),
                        None => format!("stopped answering ({error})"),
                    };
                    let stderr = server.stderr.lock().map(|t| t.text()).unwrap_or_default();
                    format!(
                        "the MCP server `{}` {how} before answering this call{}; it will be \
                         restarted for the next tool calls",
                        bounded(&self.command, 200),
                        stderr_note(&stderr)
                    )
                }
            };
            for result in &mut results {
                if result.is_none() {
                    *result = Some(Err(ToolFailure::model(message.clone())));
                }
            }
            // Leave `done` false: the guard kills the server and empties the slot.
        } else {
            guard.done = true;
        }
        drop(guard);

        BatchOutcome::PerCall(
            calls
                .into_iter()
                .zip(results)
                .map(|(call, result)| CallOutcome {
                    tool_use_id: call.id,
                    result: result.unwrap_or_else(|| {
                        Err(ToolFailure::model("the MCP server gave no answer"))
                    }),
                })
                .collect(),
        )
    }
}

/// Kills and forgets the server when a batch ends without finishing cleanly.
struct KillUnlessDone<'a> {
    slot: &'a mut Option<Server>,
    done: bool,
}

impl Drop for KillUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Some(mut server) = self.slot.take() {
                server.kill();
            }
        }
    }
}

fn canceled() -> BatchOutcome {
    BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure::new(
        HostFailureKind::Canceled,
        "the MCP tool batch was canceled",
    )))
}

/// Maps a `tools/call` result (in its wire shape) to an output or an error result.
fn call_result(result: rmcp::model::CallToolResult) -> Result<ToolOutput, ToolFailure> {
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
        let text: Vec<&str> = parts
            .iter()
            .filter_map(|p| match p {
                ToolResultPart::Text { text } => Some(text.as_str()),
                ToolResultPart::Image { .. } => None,
            })
            .collect();
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
    fn command_lines_split_like_a_shell() {
        assert_eq!(
            split_command_line(r#"npx -y  "@scope/server x" 'a b' c\ d "q\"t""#).unwrap(),
            ["npx", "-y", "@scope/server x", "a b", "c d", "q\"t"]
        );
        assert_eq!(split_command_line("  ").unwrap(), Vec::<String>::new());
        assert_eq!(split_command_line("a ''").unwrap(), ["a", ""]);
        assert!(split_command_line("a 'b").is_err());
        assert!(split_command_line("a \\").is_err());
    }

    /// rebound's environment in these tests: every name has a value.
    fn everything_set(name: &str) -> Option<OsString> {
        Some(format!("value of {name}").into())
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().map(|(n, _)| n.to_str().unwrap()).collect()
    }

    #[test]
    fn a_server_environment_holds_only_the_default_list_and_what_is_named() {
        let env = McpConfig::default().environment_from(everything_set);
        let mut expected: Vec<&str> = DEFAULT_ENV_VARS.to_vec();
        expected.sort_unstable();
        assert_eq!(names(&env), expected);
        assert!(!names(&env).iter().any(|n| n.contains("API_KEY")));

        let config = McpConfig::default()
            .with_env_var("ANTHROPIC_API_KEY")
            .with_env("MODE", "test")
            .with_env("PATH", "/opt/bin");
        let env = config.environment_from(everything_set);
        let get = |name: &str| {
            env.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.to_str().unwrap())
        };
        assert_eq!(get("ANTHROPIC_API_KEY"), Some("value of ANTHROPIC_API_KEY"));
        assert_eq!(get("MODE"), Some("test"));
        assert_eq!(
            get("PATH"),
            Some("/opt/bin"),
            "a set value wins over the default"
        );
        assert_eq!(get("OPENAI_API_KEY"), None);
        assert_eq!(env.len(), DEFAULT_ENV_VARS.len() + 2);
    }

    #[test]
    fn a_named_variable_rebound_does_not_have_is_left_out() {
        let config = McpConfig::default().with_env_var("HOME").with_env_var("X");
        let env = config.environment_from(|name| (name == "PATH").then(|| "/bin".into()));
        assert_eq!(env, [("PATH".into(), "/bin".into())]);
    }

    #[test]
    fn set_values_are_not_shown_in_debug_output() {
        let config = McpConfig::default().with_env("TOKEN", "secret-value");
        let debug = format!("{config:?}");
        assert!(
            debug.contains("TOKEN") && !debug.contains("secret-value"),
            "{debug}"
        );
    }

    #[test]
    fn names_are_mapped_to_the_allowed_set_without_clashes() {
        let mut taken = BTreeMap::new();
        assert_eq!(allowed_name("read_file", &taken), "read_file");
        assert_eq!(allowed_name("fs.read", &taken), "fs_read");
        taken.insert("fs_read".to_owned(), "fs.read".to_owned());
        assert_eq!(allowed_name("fs/read", &taken), "fs_read_2");
        assert_eq!(allowed_name(&"x".repeat(80), &taken).len(), 64);
        assert_eq!(allowed_name("", &taken), "tool");
    }

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
