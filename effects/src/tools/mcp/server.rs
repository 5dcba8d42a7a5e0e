//! A server process: spawning it, the `initialize` handshake and the tool listing, the tail
//! of its stderr, and killing its process group.

use super::{McpConfig, McpError};
use crate::tools::schema::bounded;
use crate::tools::set::human_duration;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::task::JoinHandle;

/// A running server process and the MCP session on its stdio.
pub(super) struct Server {
    pub(super) service: RunningService<RoleClient, ()>,
    pub(super) child: Child,
    pub(super) stderr: Stderr,
}

impl Server {
    /// Kills the server's process group (the server and whatever it started) at once.
    pub(super) fn kill(&mut self) {
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

    pub(super) fn is_usable(&mut self) -> bool {
        !self.service.is_closed() && self.exit_status().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A server's stderr: read to its end by a task of its own (servers log there; the pipe must
/// not fill up), keeping the last few KiB.
pub(super) struct Stderr {
    tail: Arc<StdMutex<StderrTail>>,
    reader: Option<JoinHandle<()>>,
}

impl Stderr {
    fn read(pipe: Option<ChildStderr>) -> Stderr {
        let tail = Arc::new(StdMutex::new(StderrTail::default()));
        let reader = pipe.map(|pipe| {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut tail) = tail.lock() {
                        tail.push(line);
                    }
                }
            })
        });
        Stderr { tail, reader }
    }

    /// The tail as read so far.
    pub(super) fn text(&self) -> String {
        self.tail.lock().map(|t| t.text()).unwrap_or_default()
    }

    /// The tail with the server's last words: once its process has ended, waits for the
    /// reader to reach the pipe's end (at once, unless a process the server started still
    /// holds the pipe), at most `within`. An exit is seen before the lines written just
    /// before it are read; without this wait, "exited" would come without its reason.
    pub(super) async fn last_words(&mut self, within: Duration) -> String {
        if let Some(reader) = self.reader.as_mut() {
            if tokio::time::timeout(within, reader).await.is_ok() {
                self.reader = None;
            }
        }
        self.text()
    }
}

/// How long a server that ended gets to be reaped, and then for its stderr to be read to the
/// end: its exit status and last words go into the error the calls get.
pub(super) const LAST_WORDS: Duration = Duration::from_millis(500);

/// The last few KiB a server wrote to stderr.
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

/// A tool as the server lists it.
pub(super) struct Listed {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) input_schema: Value,
}

/// Spawns the server, does the handshake and lists its tools.
pub(super) async fn start(
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
    let mut stderr = Stderr::read(child.stderr.take());
    let protocol = |stage, message: String, stderr: String| McpError::Protocol {
        command: command.to_owned(),
        stage,
        message,
        stderr,
    };
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(protocol(
            "start",
            "its stdin or stdout could not be piped".into(),
            stderr.text(),
        ));
    };
    let handshake = "complete the `initialize` handshake";
    let service = match tokio::time::timeout(config.start_timeout, ().serve((stdout, stdin))).await
    {
        Ok(Ok(service)) => service,
        Ok(Err(e)) => {
            // The server most likely died: its exit and then its last words.
            if tokio::time::timeout(LAST_WORDS, child.wait()).await.is_ok() {
                stderr.last_words(LAST_WORDS).await;
            }
            return Err(protocol(
                handshake,
                bounded(&e.to_string(), 500),
                stderr.text(),
            ));
        }
        Err(_) => {
            return Err(protocol(
                handshake,
                format!("no answer within {}", human_duration(config.start_timeout)),
                stderr.text(),
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
        stderr,
    };
    let listing = "list its tools";
    let tools =
        match tokio::time::timeout(config.start_timeout, server.service.peer().list_all_tools())
            .await
        {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                server.kill();
                let _ = tokio::time::timeout(LAST_WORDS, server.child.wait()).await;
                let stderr = server.stderr.last_words(LAST_WORDS).await;
                return Err(protocol(listing, bounded(&e.to_string(), 500), stderr));
            }
            Err(_) => {
                server.kill();
                return Err(protocol(
                    listing,
                    format!("no answer within {}", human_duration(config.start_timeout)),
                    server.stderr.text(),
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
