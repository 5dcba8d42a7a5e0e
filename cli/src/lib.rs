#![doc = include_str!("../README.md")]
// The README's code blocks are doc tests (the crate's front page on docs.rs and crates.io
// cannot rot), and no doc test may warn: an example that warns teaches the warning.
#![doc(test(attr(deny(warnings))))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod durable;
mod events;
mod replay;
mod run;
pub mod scenario_tools;
mod simulate;
mod telemetry;

pub use events::{HumanView, JsonEvents};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Exit status: the run finished (including a stop at `--max-turns`).
pub const EXIT_OK: i32 = 0;
/// Exit status: the run hard-failed (provider or host failure, attempts exhausted).
pub const EXIT_FAILED: i32 = 1;
/// Exit status: usage or configuration error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: canceled by a signal.
pub const EXIT_CANCELED: i32 = 130;

/// rebound: an LLM agent loop that never loses its footing.
#[derive(Debug, Parser)]
#[command(
    name = "rebound",
    version,
    about = "An LLM agent loop that never loses its footing: retry, compact, tool error results, or fail cleanly.",
    long_about = None
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Commands,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Commands {
    /// Run the agent once against a real provider.
    Run(Box<RunArgs>),
    /// Run the agent against a local fake provider through a scripted outage (offline).
    Demo(DemoArgs),
    /// Serve a fake Anthropic/OpenAI (Chat Completions and Responses)/Gemini/Bedrock provider
    /// that injects faults, for testing other agents.
    Serve(ServeArgs),
    /// Simulate runs of a scenario in virtual time and print outcome statistics.
    Sim(SimArgs),
    /// Replay a recorded trace and report the first divergence.
    Replay(ReplayArgs),
    /// Durable runs on Restate: every step journaled, so a crash loses nothing and repeats
    /// nothing.
    #[command(subcommand)]
    Durable(DurableCommand),
}

/// The subcommands of `rebound durable`.
#[derive(Debug, Subcommand)]
pub enum DurableCommand {
    /// Serve the agent as the Restate Virtual Object `Agent` (keyed by conversation id) on
    /// 127.0.0.1:PORT, for a Restate server to call; with the agent options of `run`.
    Serve(Box<DurableServeArgs>),
}

/// Options of `rebound durable serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct DurableServeArgs {
    /// Port on 127.0.0.1 (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 9080)]
    pub port: u16,
    /// Register the endpoint with the Restate server whose admin API is at this URL (e.g.
    /// `http://127.0.0.1:9070`) once it listens; when that fails, exit 2 naming the address.
    #[arg(long, value_name = "ADMIN_URL")]
    pub register: Option<String>,
    /// How the side channel (streamed text, retries, tool calls) is printed on stdout as
    /// runs go. It is not journaled: a step replayed after a crash is not printed again.
    #[arg(long, value_enum, default_value = "human")]
    pub events: EventsFormat,
    /// Seed of every run's retry jitter, to reproduce a run (default: the engine's, which
    /// differs between runs and is the same on every replay of one; shown in the `start`
    /// event of `--events json`, the reply and the trace header). Runs sharing a seed retry
    /// in lockstep: not for a fleet.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write each run's replayable trace (JSON Lines) into this directory, as
    /// `<conversation id>-<invocation id>.jsonl`, when the run ends (a run that crashed and
    /// resumed has one whole trace).
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<PathBuf>,
    /// Record message content (prompts, answers, tool inputs and outputs) in exported
    /// telemetry, as OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true does. Telemetry
    /// is exported as `rebound run` exports it, when OTEL_EXPORTER_OTLP_ENDPOINT is set (see
    /// docs/telemetry.md); a step replayed after a crash is not exported again.
    #[arg(long)]
    pub otel_capture_content: bool,
    /// The agent: provider, tools, retry policy, budget, compaction, request options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Which event view `run` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventsFormat {
    /// Streamed text and dim status lines.
    Human,
    /// One JSON object per line (schema in docs/cli.md).
    Json,
}

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions (and compatible servers).
    Openai,
    /// OpenAI Responses API (`/v1/responses`), stateless: reasoning items are passed back.
    OpenaiResponses,
    /// Google's Gemini API on AI Studio (`x-goog-api-key`, from GEMINI_API_KEY or
    /// GOOGLE_API_KEY).
    Gemini,
    /// Gemini on Vertex AI: a bearer token (VERTEX_ACCESS_TOKEN, or `--api-key-command
    /// 'gcloud auth print-access-token'`), the project and location from
    /// GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION (default `global`) unless
    /// `--base-url` gives the whole Vertex URL.
    Vertex,
    /// AWS Bedrock's Converse API: a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK), else every
    /// request signed (SigV4) with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
    /// AWS_SESSION_TOKEN; the region from AWS_REGION (or AWS_DEFAULT_REGION), the endpoint
    /// too unless `--base-url` gives it; a
    /// Bedrock model id in `--model` (e.g. `anthropic.claude-sonnet-4-5-20250929-v1:0` or an
    /// inference profile such as `us.anthropic.…`).
    Bedrock,
}

impl ProviderArg {
    /// Whether the target is Gemini on Vertex AI (a bearer token and a project's URL).
    #[must_use]
    pub fn is_vertex(self) -> bool {
        self == ProviderArg::Vertex
    }
}

impl From<ProviderArg> for rebound_core::ProviderKind {
    fn from(p: ProviderArg) -> Self {
        match p {
            ProviderArg::Anthropic => rebound_core::ProviderKind::Anthropic,
            ProviderArg::Openai => rebound_core::ProviderKind::OpenAi,
            ProviderArg::OpenaiResponses => rebound_core::ProviderKind::OpenAiResponses,
            ProviderArg::Gemini | ProviderArg::Vertex => rebound_core::ProviderKind::Gemini,
            ProviderArg::Bedrock => rebound_core::ProviderKind::Bedrock,
        }
    }
}

/// Options of `rebound run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The prompt: the user message that starts the run (not empty or only whitespace).
    pub prompt: String,
    /// Session file (a JSON Lines transcript): resumed if it exists, one line appended per
    /// message. A second run on the same file while this one runs is refused.
    #[arg(long)]
    pub session: Option<PathBuf>,
    /// Write a replayable trace (JSON Lines) here.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Event view.
    #[arg(long, value_enum, default_value = "human")]
    pub events: EventsFormat,
    /// Seed of the retry jitter, to reproduce a run (default: drawn from the operating
    /// system, shown in the `start` event of `--events json` and in the trace header).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Record message content (prompts, answers, tool inputs and outputs) in exported
    /// telemetry, as OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true does. Telemetry
    /// is exported when OTEL_EXPORTER_OTLP_ENDPOINT is set (see docs/telemetry.md).
    #[arg(long)]
    pub otel_capture_content: bool,
    /// The agent: provider, tools, retry policy, budget, compaction, request options.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// The agent's options, shared by `rebound run` and `rebound durable serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Which API to talk to.
    #[arg(long, value_enum, default_value = "anthropic")]
    pub provider: ProviderArg,
    /// Base URL (Anthropic: without /v1; OpenAI: with /v1, as the official SDKs; Gemini:
    /// with the API version, `…/v1beta`; Vertex AI: through `…/publishers/google`).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model id, or an alias such as @sonnet.
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the API key (default: ANTHROPIC_API_KEY,
    /// OPENAI_API_KEY, GEMINI_API_KEY then GOOGLE_API_KEY, VERTEX_ACCESS_TOKEN, or
    /// AWS_BEARER_TOKEN_BEDROCK).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// A command whose output is the key (run once, by `sh -c`, before the first request),
    /// e.g. `gcloud auth print-access-token` for Vertex AI. Wins over `--api-key-env`. For
    /// the first target only.
    #[arg(long, value_name = "COMMAND")]
    pub api_key_command: Option<String>,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Enable the built-in file tools (read, list, write) confined to this folder.
    #[arg(long)]
    pub tools_root: Option<PathBuf>,
    /// Attempts per request, counting the first.
    #[arg(long, default_value_t = 4)]
    pub max_attempts: u32,
    /// Delay before the first retry, in ms.
    #[arg(long, default_value_t = 500)]
    pub initial_delay_ms: u64,
    /// Upper bound of the backoff delay, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub max_delay_ms: u64,
    /// The longest delay a server may ask for (`retry-after`) that is waited out, in ms
    /// (default 10 minutes), counted down and cancellable with Ctrl-C. Above it the target
    /// is given up: the run moves to the next `--fallback`, or fails.
    #[arg(long, default_value_t = 600_000, value_name = "MS")]
    pub max_retry_after_ms: u64,
    /// With a `--fallback` still to try, a server delay longer than this (in ms) moves to it
    /// at once instead of waiting.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub fallback_after_ms: u64,
    /// Do not jitter backoff delays.
    #[arg(long)]
    pub no_jitter: bool,
    /// Stop after this many assistant messages.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Fallback target `PROVIDER:MODEL[@BASE_URL]` (repeatable; PROVIDER is `anthropic`,
    /// `openai`, `openai-responses`, `gemini`, `vertex` or `bedrock`), tried in order when the previous target's retries
    /// are spent or its quota is exhausted. Keys come from the provider's conventional
    /// variable. The request options (`--max-tokens` to `--user-id`) apply to it too, and one
    /// its API lacks stops the run before any request; `--header` and `--extra-body` do not.
    #[arg(long = "fallback", value_name = "PROVIDER:MODEL[@BASE_URL]")]
    pub fallbacks: Vec<String>,
    /// Load Lua tools (one `*.lua` file per tool) from this folder; their file access is
    /// confined to `--tools-root` (or this folder when no root is given).
    #[arg(long)]
    pub lua_tools: Option<PathBuf>,
    /// Add the tools of an MCP server started with this command line (stdio transport;
    /// repeatable), e.g. `--mcp 'python3 server.py'`. The server gets a minimal environment
    /// (HOME, PATH, USER, LANG, TERM, TMPDIR and a few more, like Codex's MCP servers) plus
    /// what `--mcp-env` gives it: no API key.
    #[arg(long = "mcp", value_name = "COMMAND")]
    pub mcp: Vec<String>,
    /// Give the `--mcp` server before this option a variable (repeatable): `VAR` forwards
    /// rebound's own VAR (when set), `VAR=VALUE` sets it, e.g.
    /// `--mcp 'github-mcp-server stdio' --mcp-env GITHUB_TOKEN`. Each server gets only the
    /// variables that follow its `--mcp`.
    #[arg(long = "mcp-env", value_name = "VAR[=VALUE]")]
    pub mcp_env: Vec<String>,
    /// For each `--mcp-env`, the `--mcp` it follows: the index of that server in `mcp`, or
    /// `None` when it comes before every `--mcp`. Filled by [`main`] from the positions of
    /// the options on the command line.
    #[arg(skip)]
    pub mcp_env_server: Vec<Option<usize>>,
    /// Share a retry budget (token bucket) between retries: charged retries wait, bounded,
    /// for a token and fail when none comes. `local`: a budget of this process;
    /// `redis://HOST:PORT/NAME`: one budget for every process naming it (a fleet on many
    /// machines), with this process falling back to a local budget while Redis fails. A
    /// Redis password is best given in `REBOUND_REDIS_PASSWORD`, not in the URL, where any
    /// process on the machine can read it.
    #[arg(long, value_name = "local|redis://HOST:PORT/NAME", value_parser = BudgetParser)]
    pub budget: Option<rebound_effects::budget::BudgetLocation>,
    /// The same as `--budget local`.
    #[arg(long, conflicts_with = "budget")]
    pub retry_budget: bool,
    /// With `--budget`: tokens the budget holds at most and starts with (one token pays for
    /// one retry on the policy's own backoff).
    #[arg(long, default_value_t = 10.0, value_name = "TOKENS")]
    pub budget_tokens: f64,
    /// With `--budget`: tokens the budget earns per second whatever happens.
    #[arg(long, default_value_t = 0.5, value_name = "TOKENS")]
    pub budget_refill: f64,
    /// With `--budget`: how long a retry may wait for a token, in ms, before it gives up.
    #[arg(long, default_value_t = 15_000, value_name = "MS")]
    pub budget_max_wait_ms: u64,
    /// With `--budget redis://…`: the longest one call to Redis may take once connected, in
    /// ms; past it this process decides with a local budget for a while.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub budget_timeout_ms: u64,
    /// With `--budget redis://…`: the longest opening a connection to Redis may take
    /// (connecting, the password, loading the budget's script), in ms: at start, and after
    /// a connection broke. A fleet started at once on a busy machine connects slowly.
    #[arg(long, default_value_t = 1_000, value_name = "MS")]
    pub budget_connect_timeout_ms: u64,
    /// How to compact a conversation that overflows (or nearly fills) the context window:
    /// `summary` asks the model for a summary of the older turns (and elides when that
    /// fails); `elide` cuts old payloads and turns without asking.
    #[arg(long, value_enum, default_value = "summary")]
    pub compact: CompactArg,
    /// The model's context window in tokens, overriding the built-in table (used to compact
    /// before the provider refuses: at 85 % of it).
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
    /// Output token limit per response (Anthropic `max_tokens`, OpenAI
    /// `max_completion_tokens` or `max_output_tokens`; default 8192).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature (Anthropic: 0 to 1; OpenAI: 0 to 2).
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Nucleus sampling: the probability mass sampled from, 0 to 1.
    #[arg(long, value_name = "P")]
    pub top_p: Option<f64>,
    /// A text that ends the response when generated (repeatable; Chat Completions takes at
    /// most 4, the Responses API none).
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Which tool the model may or must call: `auto`, `any` (some tool), `none`, or
    /// `tool:NAME`.
    #[arg(long, value_name = "auto|any|none|tool:NAME", value_parser = parse_tool_choice)]
    pub tool_choice: Option<rebound_core::wire::ToolChoice>,
    /// Ask for at most one tool call per response.
    #[arg(long)]
    pub no_parallel_tool_calls: bool,
    /// How much an OpenAI reasoning model reasons: none, minimal, low, medium, high, xhigh
    /// or max (for Anthropic, give --thinking-budget).
    #[arg(long, value_name = "LEVEL", value_parser = parse_effort)]
    pub reasoning_effort: Option<rebound_core::wire::ReasoningEffort>,
    /// Anthropic extended thinking: the tokens Claude may think with (at least 1024, below
    /// --max-tokens; for OpenAI, give --reasoning-effort).
    #[arg(long, value_name = "TOKENS")]
    pub thinking_budget: Option<u32>,
    /// An opaque id of the end user (a hash), for the provider's abuse detection
    /// (Anthropic `metadata.user_id`, OpenAI `safety_identifier`).
    #[arg(long, value_name = "ID")]
    pub user_id: Option<String>,
    /// The tool-call ids the first target's server takes: `nine` for exactly nine letters
    /// and digits (Mistral's API and chat templates; recognised by itself at
    /// `*.mistral.ai`), `standard` for OpenAI's (at most 40 characters). Ids are rewritten
    /// in each request only; sessions keep the originals. Default: recognised from the URL.
    #[arg(long, value_enum, value_name = "standard|nine")]
    pub tool_ids: Option<ToolIdsArg>,
    /// A header for every request to the first target, e.g. `--header 'anthropic-beta:
    /// context-1m-2025-08-07'` (repeatable). Values are never printed; the API key's header
    /// and the content type cannot be replaced. Not sent to `--fallback` targets, which may
    /// be other hosts.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// A JSON object merged into the body of every request to the first target, one
    /// top-level key at a time (`{"top_k": 40}`), or `@FILE` to read it from a file. Keys
    /// rebound sets (model, messages, tools, stream, and those of the options above) are
    /// refused.
    #[arg(long, value_name = "JSON|@FILE")]
    pub extra_body: Option<String>,
}

/// Parses `--tool-choice`.
fn parse_tool_choice(s: &str) -> Result<rebound_core::wire::ToolChoice, String> {
    s.parse()
        .map_err(|e: rebound_core::wire::UnknownToolChoice| e.to_string())
}

/// Parses `--reasoning-effort`.
fn parse_effort(s: &str) -> Result<rebound_core::wire::ReasoningEffort, String> {
    s.parse()
        .map_err(|e: rebound_core::wire::UnknownEffort| e.to_string())
}

/// Parses `--budget` without ever repeating a password: clap's own error for a value its
/// parser refuses quotes the raw value, URL credentials included.
#[derive(Clone, Copy, Debug)]
struct BudgetParser;

impl clap::builder::TypedValueParser for BudgetParser {
    type Value = rebound_effects::budget::BudgetLocation;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let refuse = |message: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let Some(raw) = value.to_str() else {
            return Err(refuse(
                "invalid value for '--budget': not UTF-8\n".to_owned(),
            ));
        };
        raw.parse().map_err(|e| {
            refuse(format!(
                "invalid value '{}' for '--budget': {e}\n",
                rebound_effects::budget::redact(raw)
            ))
        })
    }
}

/// `--tool-ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolIdsArg {
    /// OpenAI's: any characters, at most 40.
    Standard,
    /// Exactly nine letters and digits.
    Nine,
}

impl From<ToolIdsArg> for rebound_core::wire::ToolIdForm {
    fn from(a: ToolIdsArg) -> Self {
        match a {
            ToolIdsArg::Standard => rebound_core::wire::ToolIdForm::Standard,
            ToolIdsArg::Nine => rebound_core::wire::ToolIdForm::NineAlphanumeric,
        }
    }
}

/// `--compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompactArg {
    /// A summary written by the model; elision when it fails.
    Summary,
    /// Elision only.
    Elide,
}

impl From<CompactArg> for rebound_core::CompactionMethod {
    fn from(a: CompactArg) -> Self {
        match a {
            CompactArg::Summary => rebound_core::CompactionMethod::Summary,
            CompactArg::Elide => rebound_core::CompactionMethod::Elide,
        }
    }
}

/// Options of `rebound demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// A built-in scenario name or a scenario JSON file.
    #[arg(long, default_value = "demo")]
    pub scenario: String,
    /// Event view.
    #[arg(long, value_enum, default_value = "human")]
    pub events: EventsFormat,
    /// Which wire format the fake provider speaks.
    #[arg(long, value_enum, default_value = "anthropic")]
    pub provider: ProviderArg,
    /// Seed of the scenario's random faults and of the jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Record message content (prompts, answers, tool inputs and outputs) in exported
    /// telemetry, as OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true does.
    #[arg(long)]
    pub otel_capture_content: bool,
}

/// Options of `rebound serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// A built-in scenario name or a scenario JSON file (default: a healthy model).
    #[arg(long)]
    pub scenario: Option<String>,
    /// Seed of the scenario's random faults.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// One script for every request, whoever sends it (with one clock, from the server's
    /// first request), instead of one per conversation: for a fleet of identical agents that
    /// should meet the scenario's faults between them.
    #[arg(long)]
    pub shared_script: bool,
    /// When a scenario's clock (the `now` of its outage windows) starts: `first-request`, at
    /// the first request of each conversation (with `--shared-script`, the server's first);
    /// `server-start`, when the server started, one clock for every conversation.
    #[arg(long, value_enum, default_value = "first-request", value_name = "WHEN")]
    pub clock: ClockArg,
    /// Print each request in full on stderr after its log line: every header (the values of
    /// those that may hold a credential replaced by `<redacted>`) and the body as received,
    /// up to `--log-body-bytes`.
    #[arg(long)]
    pub log_requests: bool,
    /// With `--log-requests`: the most bytes of each request body printed (the body's full
    /// size is printed too).
    #[arg(
        long,
        default_value_t = 16_384,
        value_name = "BYTES",
        requires = "log_requests"
    )]
    pub log_body_bytes: usize,
}

/// `rebound serve --clock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClockArg {
    /// At the first request of the script that plays the scenario.
    FirstRequest,
    /// When the server started.
    ServerStart,
}

impl From<ClockArg> for rebound_sim::fake::ScenarioClock {
    fn from(c: ClockArg) -> Self {
        match c {
            ClockArg::FirstRequest => rebound_sim::fake::ScenarioClock::FirstRequest,
            ClockArg::ServerStart => rebound_sim::fake::ScenarioClock::ServerStart,
        }
    }
}

/// Options of `rebound sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// A built-in scenario name or a scenario JSON file.
    #[arg(long, required_unless_present = "compare")]
    pub scenario: Option<String>,
    /// Run the outage experiment instead: rebound against models of the official SDKs'
    /// (Anthropic's, OpenAI's, Google's python-genai, the AWS SDKs' standard and adaptive
    /// modes), Vercel AI's, Codex CLI's and Gemini CLI's retry policies and of deployed retry
    /// budgets, 1,000 agents per outage model.
    #[arg(long, conflicts_with = "scenario")]
    pub compare: bool,
    /// Seed of the first run (run i uses seed + i); default 0. With `--compare`, the
    /// experiment's seed; default 1, the seed of the tables in docs/outages.md.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Number of runs.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Write the trace of the first run here.
    #[arg(long)]
    pub trace_out: Option<PathBuf>,
    /// Write SVG charts into this directory (created if missing): with `--compare`, per
    /// outage model the requests per second of every policy and success against requests
    /// per completed turn; with `--scenario`, the runs' time to completion and attempts.
    #[arg(long, value_name = "DIR")]
    pub charts: Option<PathBuf>,
}

/// Options of `rebound replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The trace file (JSON Lines).
    pub trace: PathBuf,
}

/// Parses the arguments, runs the command, and returns the process exit code.
#[must_use]
pub fn main() -> i32 {
    let cli = match parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    match cli.command {
        Commands::Sim(args) => simulate::sim(&args),
        Commands::Replay(args) => replay::replay(&args),
        command => {
            // Telemetry export, when the OTEL_* environment asks for it, for the commands
            // that run an agent; set up and flushed outside the async runtime.
            let export = match command {
                Commands::Run(_) | Commands::Demo(_) | Commands::Durable(_) => {
                    telemetry::install_from_env()
                }
                _ => None,
            };
            let code = run_async(command);
            if let Some(export) = export {
                export.shutdown();
            }
            code
        }
    }
}

/// Runs a command that needs tokio.
fn run_async(command: Commands) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rebound: could not start the async runtime: {e}");
            return EXIT_FAILED;
        }
    };
    runtime.block_on(async move {
        match command {
            Commands::Run(args) => run::run(*args).await,
            Commands::Demo(args) => run::demo(args).await,
            Commands::Serve(args) => run::serve(args).await,
            Commands::Durable(DurableCommand::Serve(args)) => durable::serve(*args).await,
            Commands::Sim(_) | Commands::Replay(_) => unreachable!("handled above"),
        }
    })
}

/// The built-in scenarios, what each plays and which tools its model calls, for the help of
/// `rebound serve` and `rebound demo`.
fn scenarios_help() -> String {
    let mut help = String::from("Built-in scenarios (--scenario NAME):\n");
    for name in rebound_sim::Scenario::builtin_names() {
        let Some(scenario) = rebound_sim::Scenario::builtin(name) else {
            continue;
        };
        let mut called: Vec<&str> = scenario
            .turns
            .iter()
            .flat_map(|turn| std::iter::once(&turn.answer).chain(&turn.when_last_tool_error))
            .flat_map(|answer| answer.tool_calls.iter().map(|c| c.name.as_str()))
            .collect();
        called.sort_unstable();
        called.dedup();
        let calls = if called.is_empty() {
            "no tool calls".to_owned()
        } else {
            format!("its model calls {}", called.join(", "))
        };
        help.push_str(&format!(
            "  {name:<18} {} ({calls})\n",
            scenario.description
        ));
    }
    help
}

/// How `rebound serve` plays a scenario per conversation, and what it writes on stderr, field
/// by field, for its help.
const SERVE_HELP: &str = "\
Conversations: each conversation plays the scenario from its start (its own script
position, random draws seeded with --seed plus its number, and clock), so tests can run one
after another, or together, against one server. A request belongs to the conversation its
x-rebound-conversation header names, else to the one whose first message opens with the
same text (a conversation rebound compacts with this server's summary keeps its script).
The same first request again is a retry until its conversation is answered, then a new
conversation (runs of one prompt at the same time are told apart only by the header).
--shared-script plays one script for every request instead (a fleet of
identical agents). A scenario's clock (its outage windows) starts at its script's first
request: each conversation's own (--shared-script: the server's first); --clock
server-start reads every window on one clock started with the server.

The request log (stderr): one line per request, written once the server has decided
what to do with it, e.g.
  #3 +1520ms POST /v1/messages [anthropic] conversation 1 at 20ms -> fault: {\"status\":529,\"type\":\"http\"} (req_fake_000004)
  #3             the request's place in the log, from 0
  +1520ms        when its head arrived, in ms since the server started
  POST /v1/...   the method and the path (never the query, where some APIs take a key)
  [anthropic]    the API of the path: anthropic, openai, openai-responses, gemini or bedrock (none for an
                 unknown path)
  conversation 1 at 20ms
                 the conversation (from 0, in order of first request) and its scenario
                 clock, for a request the script played (not for one refused before it)
  -> ...         what the server did:
                   answered turn N         the scenario's answer N (N = the number of
                                           turns: the final \"Done.\")
                   (after a tool error)    that turn's when_last_tool_error answer
                   answered a summary request
                   fault: {...}            the scripted or random fault, as scenario JSON
                   context overflow (B bytes > L)   over the context limit
                   rejected STATUS: why    refused before the script (key, headers, body,
                                           route, size): the script does not move
                   stalled Nms, then ...   silence played first (stall, slow_drip)
  (req_fake_...) the request id its response carries (request-id, x-request-id)
With --log-requests, each line is followed by the request's headers, one a line (the value
of any that may hold a credential replaced by <redacted>: x-api-key, authorization,
api-key, x-goog-api-key, cookie, and any whose name contains key, token, secret, password,
auth, cookie, credential or signature), then the body's size and its first
--log-body-bytes bytes (16384 by default) as received, all indented by four spaces.
";

/// Parses a command line (program name first), including what depends on the order of the
/// options: which `--mcp` each `--mcp-env` follows.
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Cli::command()
        .mut_subcommand("serve", |serve| {
            serve.after_help(format!("{SERVE_HELP}\n{}", scenarios_help()))
        })
        .mut_subcommand("demo", |demo| demo.after_help(scenarios_help()))
        .try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    match (&mut cli.command, matches.subcommand()) {
        (Commands::Run(args), Some(("run", run))) => {
            args.agent.mcp_env_server = servers_of_mcp_env(run);
        }
        (Commands::Durable(DurableCommand::Serve(args)), Some(("durable", durable))) => {
            if let Some(("serve", serve)) = durable.subcommand() {
                args.agent.mcp_env_server = servers_of_mcp_env(serve);
            }
        }
        _ => {}
    }
    Ok(cli)
}

/// For each `--mcp-env` value, the index of the last `--mcp` before it.
fn servers_of_mcp_env(run: &clap::ArgMatches) -> Vec<Option<usize>> {
    let servers: Vec<usize> = run
        .indices_of("mcp")
        .map(Iterator::collect)
        .unwrap_or_default();
    run.indices_of("mcp_env")
        .map(|envs| {
            envs.map(|at| servers.iter().rposition(|&server| server < at))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a scenario: a built-in name, or a JSON file.
pub fn load_scenario(name_or_path: &str) -> Result<rebound_sim::Scenario, String> {
    if let Some(s) = rebound_sim::Scenario::builtin(name_or_path) {
        return Ok(s);
    }
    let path = std::path::Path::new(name_or_path);
    if !path.exists() {
        return Err(format!(
            "no built-in scenario or file named `{name_or_path}`; built-ins: {}",
            rebound_sim::Scenario::builtin_names().join(", ")
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read scenario {}: {e}", path.display()))?;
    rebound_sim::Scenario::from_json(&text)
        .map_err(|e| format!("bad scenario {}: {e}", path.display()))
}
