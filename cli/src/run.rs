//! `rebound run`, `rebound demo` and `rebound serve`: the commands that need tokio.

use super::{
    AgentArgs, DemoArgs, EventsFormat, HumanView, JsonEvents, RunArgs, ServeArgs, EXIT_CANCELED,
    EXIT_FAILED, EXIT_OK, EXIT_USAGE,
};
use crate::events::counted;
use crate::scenario_tools::ScenarioTools;
use rebound_core::{
    BudgetConfig, BudgetUse, MachineConfig, ProviderKind, RetryConfig, RunError, TargetSpec,
};
use rebound_effects::budget::{
    BudgetEvent, BudgetLocation, BudgetStore, RedisBudget, RedisOptions, SharedBudget,
};
use rebound_effects::config::ConfigError;
use rebound_effects::provider::{
    aws, ApiKey, Auth, ExtraHeaders, HttpProvider, HttpProviderConfig, Provider, RequestOptions,
};
use rebound_effects::receiver::Receiver;
use rebound_effects::runner::{CancelHandle, RunInput, RunSummary, Runner, TraceRecorder};
use rebound_effects::session::SessionStore;
use rebound_effects::telemetry::Telemetry;
use rebound_effects::tools::mcp::McpConfig;
use rebound_effects::tools::{files, ToolSet};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use std::sync::Arc;

/// Model aliases accepted as `@name`, and (the first of each provider) the default models:
/// the providers' current models (Anthropic's models overview, December 2026: Sonnet 4.5
/// was retired on 2026-11-30). The one place to move them forward.
const ALIASES: &[(&str, &str)] = &[
    ("sonnet", "claude-sonnet-4-6"),
    ("opus", "claude-opus-4-7"),
    ("haiku", "claude-haiku-4-5"),
    ("gpt", "gpt-4o"),
    ("gpt-mini", "gpt-4o-mini"),
    ("gpt-5", "gpt-5"),
    ("gemini", "gemini-2.5-pro"),
    ("gemini-flash", "gemini-2.5-flash"),
];

/// One target of the fallback chain as given on the command line.
#[derive(Debug, Clone)]
struct TargetArg {
    provider: ProviderKind,
    model: String,
    base_url: Option<String>,
    key_env: Option<String>,
    /// A command printing the key (`--api-key-command`).
    key_command: Option<String>,
    /// Gemini on Vertex AI: a bearer token, and a project's URL.
    vertex: bool,
}

fn default_model(provider: ProviderKind) -> &'static str {
    let alias = match provider {
        ProviderKind::Anthropic => "sonnet",
        ProviderKind::OpenAi => "gpt",
        ProviderKind::OpenAiResponses => "gpt-5",
        ProviderKind::Gemini => "gemini-flash",
        // The CLI offers only the kinds above (`--provider`).
        _ => return "",
    };
    ALIASES
        .iter()
        .find(|(name, _)| *name == alias)
        .map_or("", |(_, model)| model)
}

/// The variables a target's key is looked for in, in order.
fn default_key_envs(provider: ProviderKind, vertex: bool) -> &'static [&'static str] {
    match provider {
        ProviderKind::Anthropic => &["ANTHROPIC_API_KEY"],
        ProviderKind::Gemini if vertex => &["VERTEX_ACCESS_TOKEN"],
        // A Bedrock API key, as the AWS SDKs read it.
        ProviderKind::Bedrock => &["AWS_BEARER_TOKEN_BEDROCK"],
        // As Google's SDKs read them.
        ProviderKind::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        // OpenAI's APIs; the CLI offers no other kind (`--provider`).
        _ => &["OPENAI_API_KEY"],
    }
}

/// The key `command` prints (its standard output, trimmed), run by `sh -c`.
fn key_from_command(command: &str) -> Result<ApiKey, ConfigError> {
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| ConfigError::Invalid(format!("--api-key-command could not run: {e}")))?;
    if !output.status.success() {
        return Err(ConfigError::Invalid(format!(
            "--api-key-command failed ({})",
            output.status
        )));
    }
    // The output is the key: never quoted in an error.
    let key = String::from_utf8(output.stdout).map_err(|_| {
        ConfigError::Invalid("--api-key-command printed something that is not text".to_owned())
    })?;
    Ok(ApiKey::new(key.trim()))
}

/// Bedrock's endpoint in the region AWS_REGION (else AWS_DEFAULT_REGION) names, as the AWS
/// SDKs read them ([`aws::aws_region_from_env`]).
fn bedrock_url_from_env() -> Result<String, ConfigError> {
    let region = aws::aws_region_from_env().map_err(|e| {
        ConfigError::Invalid(format!(
            "--provider bedrock needs AWS_REGION (or AWS_DEFAULT_REGION), or the endpoint in \
             --base-url: {e}"
        ))
    })?;
    Ok(rebound_effects::provider::bedrock_base_url(&region))
}

/// The Vertex AI base URL from GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION (`global`
/// when unset), as Google's SDKs read them.
fn vertex_url_from_env() -> Result<String, ConfigError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let project = var("GOOGLE_CLOUD_PROJECT").ok_or_else(|| {
        ConfigError::Invalid(
            "--provider vertex needs GOOGLE_CLOUD_PROJECT (and GOOGLE_CLOUD_LOCATION, default \
             global), or the whole URL in --base-url"
                .to_owned(),
        )
    })?;
    let location = var("GOOGLE_CLOUD_LOCATION").unwrap_or_else(|| "global".to_owned());
    Ok(rebound_effects::provider::vertex_base_url(
        project.trim(),
        location.trim(),
    ))
}

/// Resolves `@alias` model names; other names pass through verbatim.
fn resolve_model(model: &str) -> Result<String, ConfigError> {
    let model = model.trim();
    if model.is_empty() {
        return Err(ConfigError::EmptyModel);
    }
    match model.strip_prefix('@') {
        None => Ok(model.to_owned()),
        Some(alias) => ALIASES
            .iter()
            .find(|(a, _)| *a == alias)
            .map(|(_, m)| (*m).to_owned())
            .ok_or_else(|| ConfigError::UnknownModelAlias {
                alias: model.to_owned(),
                known: ALIASES
                    .iter()
                    .map(|(a, _)| format!("@{a}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
    }
}

/// Parses `PROVIDER:MODEL[@BASE_URL]`.
fn parse_fallback(spec: &str) -> Result<TargetArg, ConfigError> {
    let bad = || {
        ConfigError::Invalid(format!(
            "bad --fallback `{spec}`: expected PROVIDER:MODEL[@BASE_URL], e.g. openai:gpt-4o"
        ))
    };
    let (provider, rest) = spec.split_once(':').ok_or_else(bad)?;
    let (provider, vertex) = match provider {
        "anthropic" => (ProviderKind::Anthropic, false),
        "openai" => (ProviderKind::OpenAi, false),
        "openai-responses" => (ProviderKind::OpenAiResponses, false),
        "gemini" => (ProviderKind::Gemini, false),
        "vertex" => (ProviderKind::Gemini, true),
        "bedrock" => (ProviderKind::Bedrock, false),
        _ => return Err(bad()),
    };
    // A model never contains '@' except as an alias prefix; a base URL always has "://".
    let (model, base_url) = match rest.find("@http") {
        Some(at) => (&rest[..at], Some(rest[at + 1..].to_owned())),
        None => (rest, None),
    };
    Ok(TargetArg {
        provider,
        model: model.to_owned(),
        base_url,
        key_env: None,
        key_command: None,
        vertex,
    })
}

/// What `run`'s options say about each request: for every target, and (headers, extra body)
/// for the first only.
#[derive(Debug, Clone, Default)]
struct RequestSettings {
    max_tokens: Option<u32>,
    /// Every target's options.
    options: RequestOptions,
    /// The first target's `--extra-body`, merged into its options.
    extra_body: serde_json::Map<String, serde_json::Value>,
    /// The first target's `--header`s.
    headers: ExtraHeaders,
    /// The first target's `--tool-ids`.
    tool_ids: Option<rebound_core::wire::ToolIdForm>,
}

impl RequestSettings {
    /// The settings of `--max-tokens`, `--temperature`, …, `--header` and `--extra-body`; a
    /// message for the person at the terminal (never a header's value) when one is invalid.
    fn from_args(args: &AgentArgs) -> Result<Self, String> {
        let mut options = RequestOptions::new();
        options.temperature = args.temperature;
        options.top_p = args.top_p;
        options.stop_sequences.clone_from(&args.stop);
        options.tool_choice.clone_from(&args.tool_choice);
        options.parallel_tool_calls = args.no_parallel_tool_calls.then_some(false);
        options.reasoning_effort = args.reasoning_effort;
        options.thinking_budget = args.thinking_budget;
        options.user_id.clone_from(&args.user_id);
        let mut headers = ExtraHeaders::new();
        for line in &args.headers {
            headers
                .insert_line(line)
                .map_err(|e| format!("--header: {e}"))?;
        }
        let extra_body = match &args.extra_body {
            None => serde_json::Map::new(),
            Some(text) => extra_body(text)?,
        };
        Ok(RequestSettings {
            max_tokens: args.max_tokens,
            options,
            extra_body,
            headers,
            tool_ids: args.tool_ids.map(Into::into),
        })
    }
}

/// `--extra-body`: a JSON object, or `@FILE` holding one. Errors say where, never what.
fn extra_body(arg: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let (text, origin) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| format!("--extra-body: cannot read {path}: {e}"))?,
            format!("--extra-body {path}"),
        ),
        None => (arg.to_owned(), "--extra-body".to_owned()),
    };
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!(
            "{origin}: expected a JSON object, e.g. '{{\"top_k\": 40}}'"
        )),
        // serde's message gives the line and column, not the text.
        Err(e) => Err(format!("{origin}: not valid JSON: {e}")),
    }
}

fn build_provider(
    target: &TargetArg,
    system: Option<&str>,
    key: Option<ApiKey>,
    settings: &RequestSettings,
    first: bool,
) -> Result<HttpProvider, ConfigError> {
    // Bedrock without a key named: an API key if the environment holds one, else SigV4 with
    // the standard AWS variables, as the AWS SDKs choose.
    let mut sigv4 = None;
    let bedrock_env = target.provider == ProviderKind::Bedrock
        && key.is_none()
        && target.key_command.is_none()
        && target.key_env.is_none();
    let key = match (key, &target.key_command) {
        (Some(k), _) => k,
        (None, Some(command)) => key_from_command(command)?,
        (None, None) if bedrock_env => match aws::BedrockAuth::from_env() {
            Ok(aws::BedrockAuth::BearerToken(token)) => token,
            Ok(aws::BedrockAuth::SigV4 {
                credentials,
                region,
            }) => {
                // The key names the identity only: the access key id, never a secret.
                let id = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_default();
                sigv4 = Some(Auth::AwsSigV4 {
                    credentials,
                    region,
                });
                ApiKey::new(id)
            }
            Err(e) => {
                return Err(ConfigError::Invalid(format!(
                    "--provider bedrock needs AWS_BEARER_TOKEN_BEDROCK, or AWS credentials \
                     and a region: {e}"
                )))
            }
            // A credential a later version adds: this CLI does not send it.
            Ok(_) => {
                return Err(ConfigError::Invalid(
                    "--provider bedrock: the environment's AWS credential is not one this \
                     version sends"
                        .to_owned(),
                ))
            }
        },
        (None, None) => {
            let vars: Vec<String> = match &target.key_env {
                Some(var) => vec![var.clone()],
                None => default_key_envs(target.provider, target.vertex)
                    .iter()
                    .map(|v| (*v).to_owned())
                    .collect(),
            };
            match vars.iter().find_map(|var| std::env::var(var).ok()) {
                Some(v) => ApiKey::new(v),
                None => {
                    return Err(ConfigError::MissingApiKey {
                        var: vars.join(" or "),
                    })
                }
            }
        }
    };
    let mut config = HttpProviderConfig::new(target.provider, resolve_model(&target.model)?, key);
    match &target.base_url {
        Some(url) => config.base_url.clone_from(url),
        None if target.vertex => config.base_url = vertex_url_from_env()?,
        None if target.provider == ProviderKind::Bedrock => {
            config.base_url = bedrock_url_from_env()?;
        }
        None => {}
    }
    if target.vertex {
        config = config.with_auth(Auth::Bearer);
    }
    if let Some(auth) = sigv4 {
        config = config.with_auth(auth);
    }
    config.system = system.map(str::to_owned);
    if let Some(tokens) = settings.max_tokens {
        config.max_tokens = tokens;
    }
    let mut options = settings.options.clone();
    if first {
        options.extra_body.clone_from(&settings.extra_body);
        config.headers = settings.headers.clone();
        if let Some(form) = settings.tool_ids {
            config = config.with_tool_ids(form);
        }
    }
    config.options = options;
    HttpProvider::new(config)
}

pub(crate) fn receiver_for(events: EventsFormat) -> Box<dyn Receiver> {
    match events {
        EventsFormat::Human => Box::new(HumanView::default()),
        EventsFormat::Json => Box::new(JsonEvents::default()),
    }
}

/// What the run's telemetry records: content only when asked for, by the flag or by the
/// conventions' environment variable.
pub(crate) fn telemetry_options(capture_content: bool) -> Telemetry {
    Telemetry::new()
        .agent_name("rebound")
        .capture_content(capture_content || crate::telemetry::capture_content_from_env())
}

/// The first SIGINT/SIGTERM cancels the run cleanly (telemetry is flushed on the way out);
/// a second one exits at once.
fn cancel_on_signals(cancel: CancelHandle) {
    tokio::spawn(async move {
        wait_for_signal().await;
        cancel.cancel();
        wait_for_signal().await;
        std::process::exit(EXIT_CANCELED);
    });
}

pub(crate) async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn exit_code(result: &Result<RunSummary, RunError>) -> i32 {
    match result {
        Ok(_) => EXIT_OK,
        Err(RunError::Canceled) => EXIT_CANCELED,
        Err(RunError::EmptyUserMessage) => EXIT_USAGE,
        Err(_) => EXIT_FAILED,
    }
}

pub(crate) fn usage_error(error: impl std::fmt::Display) -> i32 {
    eprintln!("rebound: {error}");
    EXIT_USAGE
}

/// The tool set of `run`: built-in file tools, Lua tools and MCP servers, as asked for.
async fn build_tools(args: &AgentArgs) -> Result<Option<ToolSet>, String> {
    let mut builder = ToolSet::builder();
    let mut any = false;
    let root = match (&args.tools_root, &args.lua_tools) {
        (Some(root), _) | (None, Some(root)) => Some(
            files::Root::new(root).map_err(|e| format!("--tools-root {}: {e}", root.display()))?,
        ),
        (None, None) => None,
    };
    if let Some(dir) = &args.tools_root {
        let tools =
            files::tools(dir).map_err(|e| format!("--tools-root {}: {e}", dir.display()))?;
        builder = builder.tools(tools);
        any = true;
    }
    if let (Some(dir), Some(root)) = (&args.lua_tools, &root) {
        let dir = dir.clone();
        let root = root.clone();
        let tools =
            tokio::task::spawn_blocking(move || rebound_effects::tools::lua::load_dir(&dir, &root))
                .await
                .map_err(|e| format!("--lua-tools: {e}"))?
                .map_err(|e| format!("--lua-tools: {e}"))?;
        builder = builder.tools(tools);
        any = true;
    }
    for (command, config) in args.mcp.iter().zip(mcp_configs(args)?) {
        let source = rebound_effects::tools::mcp::McpSource::spawn_with(command, config)
            .await
            .map_err(|e| format!("--mcp: {e}"))?;
        builder = builder.source(source);
        any = true;
    }
    if !any {
        return Ok(None);
    }
    builder.build().map(Some).map_err(|e| e.to_string())
}

/// One configuration per `--mcp`, holding the variables of the `--mcp-env` options after it.
fn mcp_configs(args: &AgentArgs) -> Result<Vec<McpConfig>, String> {
    let mut configs = vec![McpConfig::default(); args.mcp.len()];
    for (at, spec) in args.mcp_env.iter().enumerate() {
        let Some(config) = args
            .mcp_env_server
            .get(at)
            .copied()
            .flatten()
            .and_then(|server| configs.get_mut(server))
        else {
            return Err(format!(
                "--mcp-env {} comes before any --mcp: put it after the --mcp it is for",
                spec.split('=').next().unwrap_or_default()
            ));
        };
        let (name, value) = match spec.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (spec.as_str(), None),
        };
        if name.is_empty() {
            return Err("--mcp-env needs a variable name: VAR or VAR=VALUE".into());
        }
        *config = match value {
            Some(value) => config.clone().with_env(name, value),
            None => config.clone().with_env_var(name),
        };
    }
    Ok(configs)
}

/// The agent `run` and `durable serve` build from [`AgentArgs`]: the machine's
/// configuration, one provider per target, the tools, the budget.
pub(crate) struct Agent {
    pub(crate) config: MachineConfig,
    pub(crate) providers: Vec<Box<dyn Provider>>,
    pub(crate) tools: Option<ToolSet>,
    pub(crate) budget: Option<Arc<dyn BudgetStore>>,
    /// The budget when it is in Redis, to check before the first run.
    pub(crate) redis: Option<RedisBudget>,
}

impl Agent {
    /// Builds the agent of `args`; `Err` is the exit code, after a message on stderr.
    pub(crate) async fn build(args: &AgentArgs, events: EventsFormat) -> Result<Agent, i32> {
        let provider: ProviderKind = args.provider.into();
        let mut targets = vec![TargetArg {
            provider,
            model: args
                .model
                .clone()
                .unwrap_or_else(|| default_model(provider).to_owned()),
            base_url: args.base_url.clone(),
            key_env: args.api_key_env.clone(),
            key_command: args.api_key_command.clone(),
            vertex: args.provider.is_vertex(),
        }];
        for spec in &args.fallbacks {
            targets.push(parse_fallback(spec).map_err(usage_error)?);
        }
        let settings = RequestSettings::from_args(args).map_err(usage_error)?;
        let mut providers: Vec<Box<dyn Provider>> = Vec::new();
        let mut specs = Vec::new();
        for (at, target) in targets.iter().enumerate() {
            match build_provider(target, args.system.as_deref(), None, &settings, at == 0) {
                Ok(p) => providers.push(Box::new(p)),
                // Which target: the first is the one the other options named.
                Err(e) if at > 0 => {
                    return Err(usage_error(format!(
                        "--fallback {}: {e}",
                        args.fallbacks[at - 1]
                    )))
                }
                Err(e) => return Err(usage_error(e)),
            }
            let mut spec = TargetSpec::new(
                target.provider,
                resolve_model(&target.model).unwrap_or_default(),
            );
            if let Some(tokens) = args.context_window {
                spec.context_window = Some(tokens);
            }
            specs.push(spec);
        }
        let mut config = MachineConfig::default()
            .with_retry(
                RetryConfig::default()
                    .with_max_attempts(args.max_attempts)
                    .with_initial_delay_ms(args.initial_delay_ms)
                    .with_max_delay_ms(args.max_delay_ms)
                    .with_max_retry_after_ms(args.max_retry_after_ms)
                    .with_fallback_after_ms(args.fallback_after_ms)
                    .with_jitter(!args.no_jitter),
            )
            .with_targets(specs)
            .with_compact_with(args.compact.into());
        config.max_turns = args.max_turns;
        if budget_location(args).is_some() {
            config = config.with_retry_budget(BudgetUse::new(args.budget_max_wait_ms));
        }
        let budget_config = BudgetConfig::default()
            .with_capacity(args.budget_tokens)
            .with_initial(args.budget_tokens)
            .with_refill_per_sec(args.budget_refill);
        let (budget, redis): (Option<Arc<dyn BudgetStore>>, _) = match budget_location(args) {
            None => (None, None),
            Some(BudgetLocation::Local) => (Some(Arc::new(SharedBudget::new(budget_config))), None),
            Some(BudgetLocation::Redis(url)) => {
                // A password in the URL is visible to every process on the machine (`ps`);
                // one in the environment is not.
                let url = match std::env::var(REDIS_PASSWORD_ENV) {
                    Ok(password) => url.with_password(&password),
                    Err(_) => url,
                };
                let options = RedisOptions::default()
                    .with_on_event(budget_event_hook(events))
                    .with_call_timeout(std::time::Duration::from_millis(
                        args.budget_timeout_ms.max(1),
                    ))
                    .with_connect_timeout(std::time::Duration::from_millis(
                        args.budget_connect_timeout_ms.max(1),
                    ));
                match RedisBudget::new(&url, budget_config, options) {
                    Ok(budget) => (Some(Arc::new(budget.clone())), Some(budget)),
                    Err(e) => return Err(usage_error(format!("--budget {url}: {e}"))),
                }
            }
        };
        let tools = build_tools(args).await.map_err(usage_error)?;
        Ok(Agent {
            config,
            providers,
            tools,
            budget,
            redis,
        })
    }

    /// With a budget in Redis: checks it (bounded). A Redis that does not answer is reported
    /// and the agent goes on with a local budget; one that can never keep the budget (a
    /// Cluster, a Sentinel, a Redis before 5) or whose budget has other settings is an
    /// error, rather than a local budget throughout.
    pub(crate) async fn check_budget(redis: Option<&RedisBudget>) -> Result<(), i32> {
        if let Some(budget) = redis {
            if let Err(e) = budget.check().await {
                if e.is_permanent() {
                    return Err(usage_error(format!("--budget {}: {e}", budget.url())));
                }
            }
        }
        Ok(())
    }
}

/// `rebound run`.
pub async fn run(args: RunArgs) -> i32 {
    if args.prompt.trim().is_empty() {
        // The providers refuse an empty message; nothing is sent, no session is touched.
        return usage_error(
            "the prompt is empty: give the message that starts the run, e.g. \
             `rebound run \"Why does the test fail?\"`",
        );
    }
    let agent = match Agent::build(&args.agent, args.events).await {
        Ok(agent) => agent,
        Err(code) => return code,
    };
    let redis = agent.redis.clone();
    let mut runner = Runner::new(agent.config, agent.providers)
        .telemetry(telemetry_options(args.otel_capture_content));
    if let Some(seed) = args.seed {
        runner = runner.seed(seed);
    }
    if let Some(budget) = agent.budget.clone() {
        runner = runner.budget(budget);
    }
    if let Some(set) = agent.tools {
        runner = runner.tools(Arc::new(set));
    }
    if let Some(path) = &args.session {
        match SessionStore::open(path.clone()).await {
            Ok((store, conversation)) => {
                if let Some(kind) = store.network_filesystem() {
                    eprintln!(
                        "warning: session file {} is on a network filesystem ({kind}): its lock \
                         may not keep a second run from writing to it at the same time",
                        path.display()
                    );
                }
                runner = runner.conversation(conversation).persist(store);
            }
            Err(e) => return usage_error(e),
        }
    }
    if let Some(path) = &args.trace {
        match rebound_effects::private_file::create(path) {
            Ok(f) => runner = runner.trace(TraceRecorder::new(f)),
            Err(e) => return usage_error(format!("cannot create trace {}: {e}", path.display())),
        }
    }
    runner = runner.receiver_boxed(receiver_for(args.events));
    if let Err(code) = Agent::check_budget(redis.as_ref()).await {
        return code;
    }
    cancel_on_signals(runner.canceler());
    let result = runner.run(RunInput::text(args.prompt)).await;
    exit_code(&result)
}

/// The environment variable holding the Redis password of `--budget redis://…`, used when
/// the URL has no credentials.
const REDIS_PASSWORD_ENV: &str = "REBOUND_REDIS_PASSWORD";

/// `--budget`, or `local` for `--retry-budget`.
fn budget_location(args: &AgentArgs) -> Option<BudgetLocation> {
    match (&args.budget, args.retry_budget) {
        (Some(location), _) => Some(location.clone()),
        (None, true) => Some(BudgetLocation::Local),
        (None, false) => None,
    }
}

/// Tells people (a line on stderr) and, with `--events json`, programs (a `budget_fallback`
/// or `budget_restored` event on stdout) that the budget moved between Redis and this
/// process.
fn budget_event_hook(events: EventsFormat) -> rebound_effects::budget::BudgetEventHook {
    Arc::new(move |event: &BudgetEvent| {
        eprintln!("rebound: {event}");
        if events == EventsFormat::Json {
            // Best effort: a closed stdout fails the run at its next event anyway.
            let _ = JsonEvents::default().budget(event);
        }
    })
}

/// `rebound demo`: the fake provider on loopback, the real runner over HTTP, a scripted
/// outage, and a summary of what rebound did about it.
pub async fn demo(args: DemoArgs) -> i32 {
    let scenario = match super::load_scenario(&args.scenario) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let provider: ProviderKind = args.provider.into();
    let server = match FakeServer::start(FakeServerConfig::new(scenario.clone(), args.seed)).await {
        Ok(s) => s,
        Err(e) => return usage_error(format!("cannot start the fake provider: {e}")),
    };
    let human = args.events == EventsFormat::Human;
    if human {
        eprintln!(
            "rebound demo: scenario `{}` — {}\nfake {provider} provider at {} (offline, no API key)\n",
            scenario.name,
            scenario.description,
            server.base_url_for(provider)
        );
    }
    let mut http = HttpProviderConfig::new(provider, "rebound-demo", ApiKey::new("demo-key"));
    http.base_url = server.base_url_for(provider);
    let http = match HttpProvider::new(http) {
        Ok(p) => p,
        Err(e) => return usage_error(e),
    };
    // The demo's script compacts by elision, without a context window; a stalled fake stream
    // is given up after 10 s, not the default 90.
    let config = MachineConfig::default()
        .with_targets(vec![
            TargetSpec::new(provider, "rebound-demo").with_context_window(None)
        ])
        .with_compact_with(rebound_core::CompactionMethod::Elide)
        .with_stream(rebound_core::StreamDeadlines::new(10_000, 600_000));
    let scenario = Arc::new(scenario);
    let mut runner = Runner::new(config, vec![Box::new(http)])
        .telemetry(telemetry_options(args.otel_capture_content))
        .seed(args.seed)
        .tools(Arc::new(ScenarioTools::new(Arc::clone(&scenario), 1.0)))
        .receiver_boxed(receiver_for(args.events));
    if let Some(history) = scenario.initial_conversation() {
        runner = runner.conversation(history);
    }
    cancel_on_signals(runner.canceler());
    let started = std::time::Instant::now();
    let result = runner
        .run(RunInput::User(vec![rebound_core::ContentBlock::text(
            scenario.user_message.clone(),
        )]))
        .await;
    let requests = server.requests();
    server.shutdown().await;
    if human {
        let stats = match &result {
            Ok(summary) => summary.stats.clone(),
            Err(_) => rebound_core::RunTally::default(),
        };
        let faults = requests
            .iter()
            .filter(|r| {
                !matches!(
                    r.outcome,
                    rebound_sim::fake::Outcome::Answered { .. }
                        | rebound_sim::fake::Outcome::Summarized
                )
            })
            .count();
        let requests = u64::try_from(requests.len()).unwrap_or(u64::MAX);
        let faults = u64::try_from(faults).unwrap_or(u64::MAX);
        eprintln!(
            "\nsummary: {} ({} answered with a fault), {} waiting {:.1}s, {}, {} ({}), {} — \
             {:.1}s wall time",
            counted(requests, "request", "requests"),
            faults,
            counted(stats.retries, "retry", "retries"),
            stats.retry_wait_ms as f64 / 1000.0,
            counted(stats.stream_resets, "stream reset", "stream resets"),
            counted(stats.tool_calls, "tool call", "tool calls"),
            counted(stats.tool_errors, "error", "errors"),
            counted(stats.compactions, "compaction", "compactions"),
            started.elapsed().as_secs_f64()
        );
        match &result {
            Ok(summary) => eprintln!(
                "outcome: finished ({}) after {} turns",
                summary.reason, summary.turns
            ),
            Err(e) => eprintln!("outcome: failed: {e}"),
        }
    }
    exit_code(&result)
}

/// `rebound serve`: the fake provider for other agents, until SIGINT/SIGTERM.
pub async fn serve(args: ServeArgs) -> i32 {
    let mut config = match &args.scenario {
        Some(name) => match super::load_scenario(name) {
            Ok(s) => FakeServerConfig::new(s, args.seed),
            Err(e) => return usage_error(e),
        },
        None => FakeServerConfig::healthy(),
    };
    config.addr = std::net::SocketAddr::from(([127, 0, 0, 1], args.port));
    if args.shared_script {
        config.script = rebound_sim::fake::ScriptScope::Shared;
    }
    config.clock = args.clock.into();
    let log_requests = args.log_requests;
    if log_requests {
        config.raw_body_bytes = args.log_body_bytes;
    }
    // One write per request, so the lines of concurrent requests never interleave.
    config.on_request = Some(Arc::new(
        move |record: &rebound_sim::fake::RequestRecord| {
            if log_requests {
                eprintln!("{}", record.dump());
            } else {
                eprintln!("{record}");
            }
        },
    ));
    let server = match FakeServer::start(config).await {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    println!("http://{}", server.addr());
    eprintln!(
        "serving scenario `{}`: Anthropic base URL {} , OpenAI base URL {} (Chat Completions \
         and Responses) , Gemini base URL {} (AI Studio's paths; Vertex AI's too) , Bedrock \
         endpoint {} ; stop with Ctrl-C",
        server.scenario().name,
        server.base_url(),
        server.openai_base_url(),
        server.gemini_base_url(),
        server.base_url()
    );
    let clock = match args.clock {
        crate::ClockArg::ServerStart => "the server's start",
        crate::ClockArg::FirstRequest if args.shared_script => "the first request",
        crate::ClockArg::FirstRequest => "each conversation's first request",
    };
    if args.shared_script {
        eprintln!("one script for every request; the scenario's clock starts at {clock}");
    } else {
        eprintln!(
            "each conversation (its x-rebound-conversation header, else its first message) \
             plays the scenario from its start; the scenario's clock starts at {clock}"
        );
    }
    wait_for_signal().await;
    server.shutdown().await;
    EXIT_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_models_are_current_and_are_the_aliases_models() {
        assert_eq!(default_model(ProviderKind::Anthropic), "claude-sonnet-4-6");
        assert_eq!(resolve_model("@sonnet").unwrap(), "claude-sonnet-4-6");
        assert_eq!(resolve_model("@opus").unwrap(), "claude-opus-4-7");
        assert_eq!(default_model(ProviderKind::OpenAi), "gpt-4o");
        assert_eq!(default_model(ProviderKind::OpenAiResponses), "gpt-5");
        assert_eq!(default_model(ProviderKind::Gemini), "gemini-2.5-flash");
    }

    #[test]
    fn fallback_specs_parse_with_optional_base_url() {
        let t = parse_fallback("openai:gpt-4o@http://127.0.0.1:9/v1").unwrap();
        assert_eq!(t.provider, ProviderKind::OpenAi);
        assert_eq!(t.model, "gpt-4o");
        assert_eq!(t.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        let t = parse_fallback("anthropic:@haiku").unwrap();
        assert_eq!(resolve_model(&t.model).unwrap(), "claude-haiku-4-5");
        let t = parse_fallback("vertex:@gemini").unwrap();
        assert_eq!((t.provider, t.vertex), (ProviderKind::Gemini, true));
        assert_eq!(resolve_model(&t.model).unwrap(), "gemini-2.5-pro");
        assert!(!parse_fallback("gemini:x").unwrap().vertex);
        assert_eq!(
            parse_fallback("bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0")
                .unwrap()
                .model,
            "anthropic.claude-sonnet-4-5-20250929-v1:0"
        );
        assert!(parse_fallback("azure:x").is_err());
        assert!(parse_fallback("openai").is_err());
    }

    /// The agent options of `rebound run hi LINE…`.
    fn run_args(line: &[&str]) -> AgentArgs {
        let args = ["rebound", "run", "hi"].iter().chain(line);
        match crate::parse(args).expect("parses").command {
            crate::Commands::Run(args) => args.agent,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn durable_serve_takes_the_agent_options_of_run_in_their_order() {
        let line = [
            "rebound",
            "durable",
            "serve",
            "--port",
            "0",
            "--mcp",
            "a",
            "--mcp-env",
            "T=1",
            "--max-attempts",
            "7",
        ];
        match crate::parse(line).expect("parses").command {
            crate::Commands::Durable(crate::DurableCommand::Serve(args)) => {
                assert_eq!(args.port, 0);
                assert_eq!(args.agent.max_attempts, 7);
                assert_eq!(args.agent.mcp_env_server, [Some(0)]);
            }
            other => panic!("not durable serve: {other:?}"),
        }
    }

    #[test]
    fn each_mcp_env_belongs_to_the_mcp_before_it() {
        let args = run_args(&[
            "--mcp",
            "a",
            "--mcp-env=ONE",
            "--mcp-env",
            "TOKEN",
            "--mcp=b",
            "--mcp-env",
            "MODE=x=y",
            "--mcp",
            "c",
        ]);
        assert_eq!(args.mcp_env_server, [Some(0), Some(0), Some(1)]);
        let configs = mcp_configs(&args).expect("valid");
        assert_eq!(configs.len(), 3);
        let names = |c: &McpConfig| c.env.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&configs[0]), ["ONE", "TOKEN"]);
        assert_eq!(
            configs[1].env["MODE"],
            rebound_effects::tools::mcp::EnvValue::Set("x=y".into())
        );
        assert!(configs[2].env.is_empty());
    }

    #[test]
    fn an_mcp_env_without_a_server_before_it_or_a_name_is_refused() {
        let err = mcp_configs(&run_args(&["--mcp-env", "T=secret", "--mcp", "a"]))
            .expect_err("before any --mcp");
        assert!(err.contains("--mcp-env T comes before any --mcp"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let err = mcp_configs(&run_args(&["--mcp", "a", "--mcp-env", "=v"])).expect_err("no name");
        assert!(err.contains("needs a variable name"), "{err}");
    }

    #[test]
    fn retry_budget_is_budget_local_and_a_redis_budget_names_its_server_and_name() {
        assert_eq!(
            budget_location(&run_args(&["--retry-budget"])),
            Some(BudgetLocation::Local)
        );
        assert_eq!(
            budget_location(&run_args(&["--budget", "local"])),
            Some(BudgetLocation::Local)
        );
        assert_eq!(budget_location(&run_args(&[])), None);
        let Some(BudgetLocation::Redis(url)) =
            budget_location(&run_args(&["--budget", "redis://127.0.0.1:6380/evals"]))
        else {
            panic!("a redis budget");
        };
        assert_eq!(url.name(), "evals");
        for bad in [
            &["--budget", "redis://127.0.0.1:6380"][..],
            &["--budget", "memcached://x/y"],
            &["--budget", "local", "--retry-budget"],
        ] {
            let args = ["rebound", "run", "hi"].iter().chain(bad);
            assert!(crate::parse(args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn request_settings_come_from_the_flags_and_never_repeat_a_header_value() {
        let settings = RequestSettings::from_args(&run_args(&[
            "--temperature",
            "0.5",
            "--tool-choice",
            "tool:read",
            "--no-parallel-tool-calls",
            "--reasoning-effort",
            "HIGH",
            "--header",
            "X-Org: org-1",
            "--extra-body",
            r#"{"seed": 7}"#,
        ]))
        .expect("valid");
        assert_eq!(settings.options.temperature, Some(0.5));
        assert_eq!(
            settings.options.tool_choice,
            Some(rebound_core::wire::ToolChoice::tool("read"))
        );
        assert_eq!(settings.options.parallel_tool_calls, Some(false));
        assert_eq!(
            settings.options.reasoning_effort,
            Some(rebound_core::wire::ReasoningEffort::High)
        );
        assert_eq!(settings.headers.names().collect::<Vec<_>>(), ["x-org"]);
        assert_eq!(settings.extra_body["seed"], 7);
        assert!(
            settings.options.extra_body.is_empty(),
            "for the first target only"
        );
        for bad in [
            &["--header", "token-secret"][..],
            &["--header", "x-token: line\u{7}secret"],
            &["--header", "bad name: secret"],
        ] {
            let err = RequestSettings::from_args(&run_args(bad)).expect_err("refused");
            assert!(err.starts_with("--header: "), "{err}");
            assert!(!err.contains("secret"), "{err}");
        }
        let err = extra_body("{\"a\": secret}").expect_err("not JSON");
        assert!(
            err.contains("not valid JSON") && !err.contains("secret"),
            "{err}"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("extra.json");
        std::fs::write(&file, r#"{"top_k": 3}"#).expect("write");
        let map = extra_body(&format!("@{}", file.display())).expect("a file");
        assert_eq!(map["top_k"], 3);
        assert!(extra_body("@/no/such/file.json").is_err());
    }

    #[test]
    fn unknown_aliases_and_empty_models_are_config_errors() {
        assert!(matches!(
            resolve_model("@nope"),
            Err(ConfigError::UnknownModelAlias { .. })
        ));
        assert_eq!(resolve_model(" "), Err(ConfigError::EmptyModel));
        assert_eq!(resolve_model("llama3").unwrap(), "llama3");
    }
}
