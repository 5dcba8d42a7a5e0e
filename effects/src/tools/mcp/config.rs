//! How a server is started: its timeouts and its environment.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

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

/// How an [`McpSource`](super::McpSource) starts its server and waits for it.
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
    pub(super) fn bad_env_name(&self) -> Option<&str> {
        self.env
            .keys()
            .map(String::as_str)
            .find(|name| name.is_empty() || name.contains(['=', '\0']))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
