//! Request options: the parameters every agent sets (sampling, stop sequences, tool choice,
//! reasoning, a user id) and a provider-specific JSON object, each mapped to the wire form
//! of each API and checked against its constraints before any request is built
//! ([`RequestOptions`] has the table).

use crate::failure::ProviderKind;
use crate::tool::ToolSpec;
use serde_json::{json, Map, Value};
use std::fmt;

/// Which tool the model may or must call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (every API's default).
    Auto,
    /// The model must call a tool, any of them (Anthropic `any`, OpenAI `required`).
    Any,
    /// The model must not call a tool.
    None,
    /// The model must call this tool.
    Tool(String),
}

impl ToolChoice {
    /// A choice of the tool named `name`.
    #[must_use]
    pub fn tool(name: impl Into<String>) -> Self {
        ToolChoice::Tool(name.into())
    }
}

impl fmt::Display for ToolChoice {
    /// The form the command line takes: `auto`, `any`, `none` or `tool:NAME`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolChoice::Auto => f.write_str("auto"),
            ToolChoice::Any => f.write_str("any"),
            ToolChoice::None => f.write_str("none"),
            ToolChoice::Tool(name) => write!(f, "tool:{name}"),
        }
    }
}

impl std::str::FromStr for ToolChoice {
    type Err = UnknownToolChoice;

    /// Reads the form [`Display`](fmt::Display) writes (`auto`, `any`, `none`, `tool:NAME`),
    /// and OpenAI's `required` for `any`; surrounding blanks are ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(ToolChoice::Auto),
            "any" | "required" => Ok(ToolChoice::Any),
            "none" => Ok(ToolChoice::None),
            other => match other.strip_prefix("tool:").map(str::trim) {
                Some(name) if !name.is_empty() => Ok(ToolChoice::tool(name)),
                _ => Err(UnknownToolChoice {
                    given: s.chars().take(40).collect(),
                }),
            },
        }
    }
}

/// A tool choice that is none of `auto`, `any`, `none` or `tool:NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool choice `{given}`: expected auto, any, none or tool:NAME")]
pub struct UnknownToolChoice {
    /// What was given (at most 40 characters of it).
    pub given: String,
}

/// How much an OpenAI reasoning model reasons before it answers (`reasoning_effort` in Chat
/// Completions, `reasoning.effort` in Responses). Which levels a model accepts depends on the
/// model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ReasoningEffort {
    /// `none`: no reasoning (models that can answer without it).
    None,
    /// `minimal`.
    Minimal,
    /// `low`.
    Low,
    /// `medium` (the APIs' default).
    Medium,
    /// `high`.
    High,
    /// `xhigh`.
    XHigh,
    /// `max`.
    Max,
}

impl ReasoningEffort {
    /// Every level, lowest first.
    pub const ALL: [ReasoningEffort; 7] = [
        ReasoningEffort::None,
        ReasoningEffort::Minimal,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
        ReasoningEffort::XHigh,
        ReasoningEffort::Max,
    ];

    /// The wire value, e.g. `"high"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::XHigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }
}

impl fmt::Display for ReasoningEffort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ReasoningEffort {
    type Err = UnknownEffort;

    /// Reads a wire value (`low`, `high`, …), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReasoningEffort::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownEffort {
                given: s.chars().take(40).collect(),
            })
    }
}

/// A reasoning effort that is not one of [`ReasoningEffort::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown reasoning effort `{given}`: expected none, minimal, low, medium, high, xhigh or max"
)]
pub struct UnknownEffort {
    /// What was given (at most 40 characters of it).
    pub given: String,
}

/// The parameters a request may carry besides the conversation, the tools and the output
/// limit, and how each reaches each API:
///
/// | option | Anthropic Messages | OpenAI Chat Completions | OpenAI Responses | Gemini |
/// |---|---|---|---|---|
/// | `temperature` | `temperature`, 0 to 1 | `temperature`, 0 to 2 | `temperature`, 0 to 2 | `generationConfig.temperature`, 0 to 2 |
/// | `top_p` | `top_p`, 0 to 1 | `top_p`, 0 to 1 | `top_p`, 0 to 1 | `generationConfig.topP`, 0 to 1 |
/// | `stop_sequences` | `stop_sequences` | `stop`, at most 4 | refused: the API has none | `generationConfig.stopSequences`, at most 5 |
/// | `tool_choice` | `tool_choice: {type: auto\|any\|none\|tool, name}` | `tool_choice: "auto"\|"required"\|"none"\|{type: function, function: {name}}` | `tool_choice: "auto"\|"required"\|"none"\|{type: function, name}` | `toolConfig.functionCallingConfig: {mode: AUTO\|ANY\|NONE, allowedFunctionNames}` |
/// | `parallel_tool_calls: false` | `tool_choice.disable_parallel_tool_use: true` (with `type: auto` when no choice is set) | `parallel_tool_calls: false` | `parallel_tool_calls: false` | refused: the API has no such switch |
/// | `reasoning_effort` | refused: give a thinking budget | `reasoning_effort` | `reasoning: {effort}` | `generationConfig.thinkingConfig.thinkingLevel`: minimal, low, medium or high |
/// | `thinking_budget` | `thinking: {type: enabled, budget_tokens}`, at least 1024 and below the output limit | refused: give a reasoning effort | refused: give a reasoning effort | `generationConfig.thinkingConfig.thinkingBudget`, below the output limit (not with an effort) |
/// | `user_id` | `metadata: {user_id}`, at most 256 characters | `safety_identifier`, at most 64 | `safety_identifier`, at most 64 | refused: the API has none |
/// | `extra_body` | merged last, top-level keys | the same | the same | the same, and a `generationConfig` object merged key by key |
///
/// Gemini's thinking settings also ask for the thoughts' summaries (`includeThoughts`),
/// which stream as thinking deltas.
///
/// Bedrock's Converse takes them as: `temperature` (0 to 1), `top_p` and `stop_sequences` in
/// `inferenceConfig`; `tool_choice` as `toolConfig.toolChoice` (`auto`, `any`, `tool`; `none`
/// is refused: offer no tools); a thinking budget as `additionalModelRequestFields.thinking`
/// (Claude's form and rules); reasoning effort, parallel tool calls and a user id refused;
/// the extra body's `inferenceConfig` and `additionalModelRequestFields` objects merged key
/// by key.
///
/// The output token limit is not here: it is [`RequestParams::max_tokens`], which every
/// request carries (`max_tokens`, `max_completion_tokens`, `max_output_tokens`).
///
/// Decisions worth knowing:
///
/// - A parameter an API does not have is refused ([`OptionsError::Unsupported`]), never
///   dropped: a request that silently ignores a stop sequence or a thinking budget behaves
///   differently from the one asked for.
/// - With a thinking budget, Anthropic accepts no temperature but 1, a `top_p` only from
///   0.95 to 1, and a tool choice only of `auto` or `none`; other combinations are refused
///   ([`OptionsError::Conflict`]), as the API would refuse them.
/// - With a thinking budget, a request that answers tool calls whose assistant turn has no
///   thinking to pass back (another target produced it, another provider answered, or a
///   retry left reasoning out) goes without `thinking`, as the API's own 400 advises: it
///   requires that turn to start with its thinking block, which cannot be made up. The
///   model thinks again once the tool loop ends.
/// - Tool choice and parallel tool calls mean something only when tools are offered; a
///   request offering none leaves them out (the APIs refuse a tool choice without tools). A
///   named tool that the request does not offer is refused ([`OptionsError::UnknownTool`]).
/// - `extra_body` is merged into the body last, one top-level key at a time, and never
///   replaces a key rebound sets: the keys that carry the model, the conversation, the tools
///   and the stream, and the key of every option set here, are refused
///   ([`OptionsError::ExtraBodyKey`]), so neither a typo nor a stale setting can break the
///   stream or quietly win over a typed option. Anything else (`top_k`, `service_tier`,
///   `metadata` for OpenAI, a beta parameter) goes through unchecked.
///
/// [`RequestParams::max_tokens`]: crate::wire::RequestParams::max_tokens
///
/// Build it with [`RequestOptions::new`] and the `with_*` methods, check it once with
/// [`check`](Self::check) (the HTTP providers do so when they are built), and pass it to
/// [`request_body`](crate::wire::request_body) through
/// [`RequestParams::with_options`](crate::wire::RequestParams::with_options):
///
/// ```
/// use rebound_core::wire::{request_body, RequestOptions, RequestParams, ToolChoice};
/// use rebound_core::{Conversation, Message, ProviderKind, ToolSpec};
///
/// let tools = [ToolSpec {
///     name: "read".into(),
///     description: "Reads a file".into(),
///     input_schema: serde_json::json!({"type": "object"}),
/// }];
/// let options = RequestOptions::new()
///     .with_temperature(0.2)
///     .with_tool_choice(ToolChoice::Any)
///     .with_parallel_tool_calls(false);
/// options.check(ProviderKind::OpenAi, 1024)?;
/// let conversation = Conversation::from(vec![Message::user_text("Read a")]);
/// let params = RequestParams::new("gpt-4o", 1024).with_tools(&tools).with_options(&options);
/// let body = request_body(ProviderKind::OpenAi, &conversation, &params)?;
/// assert_eq!(body["tool_choice"], "required");
/// assert_eq!(body["parallel_tool_calls"], false);
/// let body = request_body(ProviderKind::Anthropic, &conversation, &params)?;
/// assert_eq!(
///     body["tool_choice"],
///     serde_json::json!({"type": "any", "disable_parallel_tool_use": true})
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct RequestOptions {
    /// Sampling temperature (Anthropic: 0 to 1; OpenAI: 0 to 2).
    pub temperature: Option<f64>,
    /// Nucleus sampling: the probability mass sampled from, 0 to 1.
    pub top_p: Option<f64>,
    /// Text sequences that end the response when generated (not for Responses).
    pub stop_sequences: Vec<String>,
    /// Which tool the model may or must call.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one response (every API's default is
    /// yes); `Some(false)` asks for at most one call.
    pub parallel_tool_calls: Option<bool>,
    /// How much an OpenAI reasoning model reasons (not for Anthropic: see
    /// [`thinking_budget`](Self::thinking_budget)).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Anthropic extended thinking: the tokens Claude may think with, at least 1024 and
    /// below the output limit (not for OpenAI: see
    /// [`reasoning_effort`](Self::reasoning_effort)).
    pub thinking_budget: Option<u32>,
    /// An opaque id of the end user (a hash, never a name or an address), which the
    /// providers use to detect abuse: Anthropic `metadata.user_id`, OpenAI
    /// `safety_identifier`.
    pub user_id: Option<String>,
    /// A provider-specific JSON object merged into the body last, one top-level key at a
    /// time; keys rebound sets are refused (above).
    pub extra_body: Map<String, Value>,
}

/// Reads the options' JSON shape, as the Python and JavaScript bindings take them: the
/// fields' names, `tool_choice` as [`ToolChoice`]'s text, `reasoning_effort` as
/// [`ReasoningEffort`]'s; every field may be left out, an unknown one is refused.
///
/// ```
/// use rebound_core::wire::{RequestOptions, ToolChoice};
///
/// let options: RequestOptions = serde_json::from_str(
///     r#"{"temperature": 0.2, "tool_choice": "tool:read", "extra_body": {"seed": 7}}"#,
/// )?;
/// assert_eq!(options.tool_choice, Some(ToolChoice::tool("read")));
/// assert!(serde_json::from_str::<RequestOptions>(r#"{"tool_choice": "maybe"}"#).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
impl<'de> serde::Deserialize<'de> for RequestOptions {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;

        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Shape {
            temperature: Option<f64>,
            top_p: Option<f64>,
            #[serde(default)]
            stop_sequences: Vec<String>,
            tool_choice: Option<String>,
            parallel_tool_calls: Option<bool>,
            reasoning_effort: Option<String>,
            thinking_budget: Option<u32>,
            user_id: Option<String>,
            #[serde(default)]
            extra_body: Map<String, Value>,
        }
        let shape = Shape::deserialize(deserializer)?;
        Ok(RequestOptions {
            temperature: shape.temperature,
            top_p: shape.top_p,
            stop_sequences: shape.stop_sequences,
            tool_choice: shape
                .tool_choice
                .map(|c| c.parse())
                .transpose()
                .map_err(D::Error::custom)?,
            parallel_tool_calls: shape.parallel_tool_calls,
            reasoning_effort: shape
                .reasoning_effort
                .map(|e| e.parse())
                .transpose()
                .map_err(D::Error::custom)?,
            thinking_budget: shape.thinking_budget,
            user_id: shape.user_id,
            extra_body: shape.extra_body,
        })
    }
}

impl fmt::Debug for RequestOptions {
    /// Shows `extra_body`'s keys but not its values, which may hold anything (a token for
    /// a gateway, a customer's data).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let extra: Vec<&str> = self.extra_body.keys().map(String::as_str).collect();
        f.debug_struct("RequestOptions")
            .field("temperature", &self.temperature)
            .field("top_p", &self.top_p)
            .field("stop_sequences", &self.stop_sequences)
            .field("tool_choice", &self.tool_choice)
            .field("parallel_tool_calls", &self.parallel_tool_calls)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("thinking_budget", &self.thinking_budget)
            .field("user_id", &self.user_id)
            .field("extra_body_keys", &extra)
            .finish()
    }
}

impl RequestOptions {
    /// No option set: each API's defaults.
    #[must_use]
    pub fn new() -> Self {
        RequestOptions::default()
    }

    /// Whether no option is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == RequestOptions::default()
    }

    /// Sets [`temperature`](Self::temperature).
    #[must_use]
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets [`top_p`](Self::top_p).
    #[must_use]
    pub fn with_top_p(mut self, top_p: f64) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// Adds a stop sequence to [`stop_sequences`](Self::stop_sequences).
    #[must_use]
    pub fn with_stop_sequence(mut self, stop: impl Into<String>) -> Self {
        self.stop_sequences.push(stop.into());
        self
    }

    /// Sets [`tool_choice`](Self::tool_choice).
    #[must_use]
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Sets [`parallel_tool_calls`](Self::parallel_tool_calls).
    #[must_use]
    pub fn with_parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.parallel_tool_calls = Some(parallel);
        self
    }

    /// Sets [`reasoning_effort`](Self::reasoning_effort).
    #[must_use]
    pub fn with_reasoning_effort(mut self, effort: ReasoningEffort) -> Self {
        self.reasoning_effort = Some(effort);
        self
    }

    /// Sets [`thinking_budget`](Self::thinking_budget).
    #[must_use]
    pub fn with_thinking_budget(mut self, tokens: u32) -> Self {
        self.thinking_budget = Some(tokens);
        self
    }

    /// Sets [`user_id`](Self::user_id).
    #[must_use]
    pub fn with_user_id(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// Sets [`extra_body`](Self::extra_body), replacing what was there.
    #[must_use]
    pub fn with_extra_body(mut self, extra: Map<String, Value>) -> Self {
        self.extra_body = extra;
        self
    }

    /// Adds one top-level key to [`extra_body`](Self::extra_body).
    #[must_use]
    pub fn with_extra_field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra_body.insert(key.into(), value);
        self
    }

    /// Checks the options against `provider`'s API with an output limit of `max_tokens`:
    /// every option the API has, in its range, no combination it refuses, no `extra_body`
    /// key that rebound sets. Everything [`request_body`](crate::wire::request_body) checks
    /// except a named tool's presence among the tools offered (known per request).
    pub fn check(&self, provider: ProviderKind, max_tokens: u32) -> Result<(), OptionsError> {
        let unsupported = |option, hint| OptionsError::Unsupported {
            provider,
            option,
            hint,
        };
        let out_of_range = |option, value: f64, range| OptionsError::OutOfRange {
            provider,
            option,
            value: value.to_string(),
            range,
        };
        let anthropic = provider == ProviderKind::Anthropic;
        let gemini = provider == ProviderKind::Gemini;
        if let Some(t) = self.temperature {
            let (max, range) = if anthropic || provider == ProviderKind::Bedrock {
                (1.0, "0 to 1")
            } else {
                (2.0, "0 to 2")
            };
            if !(0.0..=max).contains(&t) {
                return Err(out_of_range("temperature", t, range));
            }
        }
        if let Some(p) = self.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(out_of_range("top_p", p, "0 to 1"));
            }
        }
        if !self.stop_sequences.is_empty() {
            match provider {
                ProviderKind::OpenAiResponses => {
                    return Err(unsupported(
                        "stop sequences",
                        "the Responses API has no stop sequences; use Chat Completions",
                    ))
                }
                ProviderKind::OpenAi if self.stop_sequences.len() > MAX_CHAT_STOP => {
                    return Err(OptionsError::TooManyStopSequences {
                        provider,
                        count: self.stop_sequences.len(),
                        max: MAX_CHAT_STOP,
                    })
                }
                ProviderKind::Gemini if self.stop_sequences.len() > MAX_GEMINI_STOP => {
                    return Err(OptionsError::TooManyStopSequences {
                        provider,
                        count: self.stop_sequences.len(),
                        max: MAX_GEMINI_STOP,
                    })
                }
                _ => {}
            }
            if self.stop_sequences.iter().any(String::is_empty) {
                return Err(OptionsError::EmptyStopSequence);
            }
        }
        if let Some(ToolChoice::Tool(name)) = &self.tool_choice {
            if name.trim().is_empty() {
                return Err(OptionsError::EmptyToolName);
            }
        }
        if self.reasoning_effort.is_some() && anthropic {
            return Err(unsupported(
                "reasoning effort",
                "give Anthropic a thinking budget instead",
            ));
        }
        if gemini {
            return self.check_gemini(max_tokens);
        }
        if provider == ProviderKind::Bedrock {
            return self.check_bedrock(max_tokens);
        }
        if let Some(budget) = self.thinking_budget {
            if !anthropic {
                return Err(unsupported(
                    "thinking budget",
                    "give OpenAI a reasoning effort instead",
                ));
            }
            if budget < MIN_THINKING_BUDGET || budget >= max_tokens {
                return Err(OptionsError::ThinkingBudget { budget, max_tokens });
            }
            self.check_thinking_combinations(provider)?;
        }
        if let Some(id) = &self.user_id {
            let max = if anthropic { 256 } else { 64 };
            let len = id.chars().count();
            if id.trim().is_empty() || len > max {
                return Err(OptionsError::UserId { provider, len, max });
            }
        }
        self.check_extra_body(provider)
    }

    /// What Gemini refuses, after the checks every API shares.
    fn check_gemini(&self, max_tokens: u32) -> Result<(), OptionsError> {
        let provider = ProviderKind::Gemini;
        if let Some(effort) = self.reasoning_effort {
            if gemini_level(effort).is_none() {
                return Err(OptionsError::OutOfRange {
                    provider,
                    option: "reasoning effort",
                    value: effort.to_string(),
                    range: "minimal, low, medium or high",
                });
            }
        }
        if let Some(budget) = self.thinking_budget {
            if self.reasoning_effort.is_some() {
                return Err(OptionsError::Unsupported {
                    provider,
                    option: "thinking budget with a reasoning effort",
                    hint: "give one of them: a thinking level (effort) or a thinking budget",
                });
            }
            if budget >= max_tokens {
                return Err(OptionsError::ThinkingBudget { budget, max_tokens });
            }
        }
        if self.parallel_tool_calls.is_some() {
            return Err(OptionsError::Unsupported {
                provider,
                option: "parallel tool calls",
                hint: "Gemini decides how many functions to call; leave it unset",
            });
        }
        if self.user_id.is_some() {
            return Err(OptionsError::Unsupported {
                provider,
                option: "user id",
                hint: "on Vertex AI, send `labels` in the extra body instead",
            });
        }
        for key in self.extra_body.keys() {
            let owned = matches!(key.as_str(), "contents" | "systemInstruction" | "tools")
                || (key == "toolConfig" && self.tool_choice.is_some());
            if owned {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: key.chars().take(64).collect(),
                    reason: "rebound sends the conversation, the system prompt and the tools",
                });
            }
        }
        if let Some(config) = self.extra_body.get("generationConfig") {
            let Some(config) = config.as_object() else {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: "generationConfig".into(),
                    reason: "it must be an object, merged key by key into rebound's",
                });
            };
            let typed = self.gemini_generation_keys();
            for key in config.keys() {
                if key == "maxOutputTokens" || typed.contains(&key.as_str()) {
                    return Err(OptionsError::ExtraBodyKey {
                        provider,
                        key: format!(
                            "generationConfig.{}",
                            key.chars().take(48).collect::<String>()
                        ),
                        reason: "rebound or a typed option set here already sends it",
                    });
                }
            }
        }
        Ok(())
    }

    /// What Bedrock's Converse refuses, after the checks every API shares.
    fn check_bedrock(&self, max_tokens: u32) -> Result<(), OptionsError> {
        let provider = ProviderKind::Bedrock;
        let unsupported = |option, hint| OptionsError::Unsupported {
            provider,
            option,
            hint,
        };
        if self.reasoning_effort.is_some() {
            return Err(unsupported(
                "reasoning effort",
                "give a Claude model a thinking budget, or put the model's own field in the \
                 extra body's `additionalModelRequestFields`",
            ));
        }
        if self.tool_choice == Some(ToolChoice::None) {
            return Err(unsupported(
                "tool choice none",
                "Converse's toolChoice is auto, any or a tool; offer no tools instead",
            ));
        }
        if self.parallel_tool_calls.is_some() {
            return Err(unsupported(
                "parallel tool calls",
                "Converse has no such switch; leave it unset",
            ));
        }
        if self.user_id.is_some() {
            return Err(unsupported(
                "user id",
                "Converse has none; AWS attributes requests to the signing identity",
            ));
        }
        if let Some(budget) = self.thinking_budget {
            if budget < MIN_THINKING_BUDGET || budget >= max_tokens {
                return Err(OptionsError::ThinkingBudget { budget, max_tokens });
            }
            // Claude's rules, whichever host runs it.
            self.check_thinking_combinations(provider)?;
        }
        for key in self.extra_body.keys() {
            if let Some(reason) = owned_key_reason(provider, key) {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: key.chars().take(64).collect(),
                    reason,
                });
            }
        }
        for (object, owned) in [
            ("inferenceConfig", self.bedrock_inference_keys()),
            (
                "additionalModelRequestFields",
                if self.thinking_budget.is_some() {
                    vec!["thinking"]
                } else {
                    Vec::new()
                },
            ),
        ] {
            let Some(extra) = self.extra_body.get(object) else {
                continue;
            };
            let Some(extra) = extra.as_object() else {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: object.to_owned(),
                    reason: "it must be an object, merged key by key into rebound's",
                });
            };
            if let Some(key) = extra.keys().find(|k| owned.contains(&k.as_str())) {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: format!("{object}.{}", key.chars().take(48).collect::<String>()),
                    reason: "rebound or a typed option set here already sends it",
                });
            }
        }
        Ok(())
    }

    /// The `inferenceConfig` keys rebound and the typed options send to Bedrock.
    fn bedrock_inference_keys(&self) -> Vec<&'static str> {
        let mut keys = vec!["maxTokens"];
        if self.temperature.is_some() {
            keys.push("temperature");
        }
        if self.top_p.is_some() {
            keys.push("topP");
        }
        if !self.stop_sequences.is_empty() {
            keys.push("stopSequences");
        }
        keys
    }

    /// The `generationConfig` keys the typed options send to Gemini.
    fn gemini_generation_keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.temperature.is_some() {
            keys.push("temperature");
        }
        if self.top_p.is_some() {
            keys.push("topP");
        }
        if !self.stop_sequences.is_empty() {
            keys.push("stopSequences");
        }
        if self.reasoning_effort.is_some() || self.thinking_budget.is_some() {
            keys.push("thinkingConfig");
        }
        keys
    }

    /// What Anthropic refuses alongside extended thinking.
    fn check_thinking_combinations(&self, provider: ProviderKind) -> Result<(), OptionsError> {
        let conflict = |option, reason| OptionsError::Conflict {
            provider,
            option,
            reason,
        };
        if self.temperature.is_some_and(|t| t != 1.0) {
            return Err(conflict(
                "temperature",
                "extended thinking needs the default temperature (unset, or 1)",
            ));
        }
        if self.top_p.is_some_and(|p| p < 0.95) {
            return Err(conflict(
                "top_p",
                "extended thinking allows top_p only from 0.95 to 1",
            ));
        }
        if matches!(
            self.tool_choice,
            Some(ToolChoice::Any | ToolChoice::Tool(_))
        ) {
            return Err(conflict(
                "tool choice",
                "extended thinking allows only the tool choices auto and none",
            ));
        }
        Ok(())
    }

    fn check_extra_body(&self, provider: ProviderKind) -> Result<(), OptionsError> {
        for key in self.extra_body.keys() {
            if let Some(reason) = owned_key_reason(provider, key) {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: key.chars().take(64).collect(),
                    reason,
                });
            }
            if self.option_keys(provider).contains(&key.as_str()) {
                return Err(OptionsError::ExtraBodyKey {
                    provider,
                    key: key.clone(),
                    reason: "a typed option set here already sends it; set it in one place",
                });
            }
        }
        Ok(())
    }

    /// The top-level keys the options set here send to `provider` (when tools are offered).
    fn option_keys(&self, provider: ProviderKind) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let anthropic = provider == ProviderKind::Anthropic;
        if self.temperature.is_some() {
            keys.push("temperature");
        }
        if self.top_p.is_some() {
            keys.push("top_p");
        }
        if !self.stop_sequences.is_empty() {
            keys.push(if anthropic { "stop_sequences" } else { "stop" });
        }
        if self.tool_choice.is_some() || (anthropic && self.parallel_tool_calls.is_some()) {
            keys.push("tool_choice");
        }
        if self.parallel_tool_calls.is_some() && !anthropic {
            keys.push("parallel_tool_calls");
        }
        if self.reasoning_effort.is_some() {
            keys.push(match provider {
                ProviderKind::OpenAiResponses => "reasoning",
                _ => "reasoning_effort",
            });
        }
        if self.thinking_budget.is_some() {
            keys.push("thinking");
        }
        if self.user_id.is_some() {
            keys.push(if anthropic {
                "metadata"
            } else {
                "safety_identifier"
            });
        }
        keys
    }
}

/// Chat Completions takes at most this many stop sequences.
const MAX_CHAT_STOP: usize = 4;

/// Gemini takes at most this many stop sequences (`GenerationConfig.stopSequences`).
const MAX_GEMINI_STOP: usize = 5;

/// Gemini's thinking level for an effort, `None` for one it does not have: the enum's
/// names as the API's description lists them (`ThinkingLevel`: `MINIMAL`, `LOW`, `MEDIUM`,
/// `HIGH`), which its JSON parser takes whatever it does with other spellings.
fn gemini_level(effort: ReasoningEffort) -> Option<&'static str> {
    match effort {
        ReasoningEffort::Minimal => Some("MINIMAL"),
        ReasoningEffort::Low => Some("LOW"),
        ReasoningEffort::Medium => Some("MEDIUM"),
        ReasoningEffort::High => Some("HIGH"),
        _ => None,
    }
}

/// Anthropic's smallest thinking budget.
const MIN_THINKING_BUDGET: u32 = 1024;

/// Why `key` may not come from `extra_body` for `provider`: rebound sets it on every request.
fn owned_key_reason(provider: ProviderKind, key: &str) -> Option<&'static str> {
    let owned: &[&str] = match provider {
        ProviderKind::Anthropic => &[
            "model",
            "max_tokens",
            "system",
            "messages",
            "tools",
            "stream",
        ],
        ProviderKind::OpenAi => &[
            "model",
            "messages",
            "max_completion_tokens",
            "tools",
            "stream",
            "stream_options",
        ],
        ProviderKind::OpenAiResponses => &[
            "model",
            "instructions",
            "input",
            "max_output_tokens",
            "tools",
            "store",
            "include",
            "stream",
        ],
        ProviderKind::Gemini => &["contents", "systemInstruction", "tools"],
        ProviderKind::Bedrock => &["messages", "system", "toolConfig"],
    };
    if owned.contains(&key) {
        return Some(match key {
            "max_tokens" | "max_completion_tokens" | "max_output_tokens" => {
                "rebound sets the output limit (the provider's max_tokens setting)"
            }
            "system" | "instructions" => {
                "rebound sets the system prompt (the provider's system setting)"
            }
            "stream" | "stream_options" => "rebound reads the response as a stream",
            "store" | "include" => {
                "rebound keeps Responses requests stateless and passes reasoning items back whole"
            }
            _ => "rebound sends the model, the conversation and the tools",
        });
    }
    let stateful = provider == ProviderKind::OpenAiResponses
        && matches!(key, "previous_response_id" | "conversation");
    stateful.then_some("rebound sends the whole conversation with each request")
}

/// An API named for people, e.g. `OpenAI Responses API`.
pub(crate) fn api_name(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => "Anthropic Messages API",
        ProviderKind::OpenAi => "OpenAI Chat Completions API",
        ProviderKind::OpenAiResponses => "OpenAI Responses API",
        ProviderKind::Gemini => "Gemini API",
        ProviderKind::Bedrock => "Bedrock Converse API",
    }
}

/// Request options an API would refuse, found before any request is made. Messages name
/// the option and the API, never an `extra_body` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// The API has no such parameter.
    #[error("the {} has no {option} parameter: {hint}", api_name(*provider))]
    Unsupported {
        /// Which API.
        provider: ProviderKind,
        /// The option, e.g. `stop sequences`.
        option: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A number outside the API's range (or not a number: NaN).
    #[error("{option} {value} is out of range for the {}: it takes {range}", api_name(*provider))]
    OutOfRange {
        /// Which API.
        provider: ProviderKind,
        /// The option, e.g. `temperature`.
        option: &'static str,
        /// The value given.
        value: String,
        /// What the API takes, e.g. `0 to 1`.
        range: &'static str,
    },
    /// More stop sequences than the API takes.
    #[error(
        "{count} stop sequences are too many for the {}: it takes at most {max}",
        api_name(*provider)
    )]
    TooManyStopSequences {
        /// Which API.
        provider: ProviderKind,
        /// How many were given.
        count: usize,
        /// The most the API takes.
        max: usize,
    },
    /// An empty stop sequence, which no API accepts.
    #[error("a stop sequence is empty: give at least one character")]
    EmptyStopSequence,
    /// A tool choice naming no tool.
    #[error("the tool choice names no tool: give the name of one of the tools")]
    EmptyToolName,
    /// A thinking budget Anthropic refuses.
    #[error(
        "thinking budget {budget} is not allowed: it must be at least 1024 tokens and less \
         than the output limit ({max_tokens}); raise the output limit or lower the budget"
    )]
    ThinkingBudget {
        /// The budget given.
        budget: u32,
        /// The output limit of the request.
        max_tokens: u32,
    },
    /// A user id the API refuses: blank or too long.
    #[error(
        "the user id ({len} characters) is not allowed by the {}: it takes 1 to {max} \
         characters (an opaque id such as a hash)",
        api_name(*provider)
    )]
    UserId {
        /// Which API.
        provider: ProviderKind,
        /// Its length in characters.
        len: usize,
        /// The most the API takes.
        max: usize,
    },
    /// Two options the API refuses together.
    #[error(
        "{option} cannot be set with a thinking budget on the {}: {reason}",
        api_name(*provider)
    )]
    Conflict {
        /// Which API.
        provider: ProviderKind,
        /// The option refused, e.g. `temperature`.
        option: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// An `extra_body` key that would replace one rebound sets.
    #[error("extra body key `{key}` is refused for the {}: {reason}", api_name(*provider))]
    ExtraBodyKey {
        /// Which API.
        provider: ProviderKind,
        /// The key.
        key: String,
        /// Why rebound keeps it.
        reason: &'static str,
    },
    /// A tool choice naming a tool the request does not offer.
    #[error("the tool choice names `{name}`, which is not among the tools offered")]
    UnknownTool {
        /// The name given.
        name: String,
    },
}

/// Adds the options to `body`, a request body of `provider` built for `tools`; checks them
/// first ([`RequestOptions::check`]) and that a named tool is offered.
pub(crate) fn apply(
    provider: ProviderKind,
    options: &RequestOptions,
    tools: &[ToolSpec],
    max_tokens: u32,
    body: &mut Map<String, Value>,
) -> Result<(), OptionsError> {
    options.check(provider, max_tokens)?;
    if options.is_empty() {
        return Ok(());
    }
    if let (false, Some(ToolChoice::Tool(name))) = (tools.is_empty(), &options.tool_choice) {
        if !tools.iter().any(|t| t.name == *name) {
            return Err(OptionsError::UnknownTool { name: name.clone() });
        }
    }
    if provider == ProviderKind::Gemini {
        return apply_gemini(options, tools, body);
    }
    if provider == ProviderKind::Bedrock {
        return apply_bedrock(options, tools, body);
    }
    let anthropic = provider == ProviderKind::Anthropic;
    if let Some(t) = options.temperature {
        body.insert("temperature".into(), t.into());
    }
    if let Some(p) = options.top_p {
        body.insert("top_p".into(), p.into());
    }
    if !options.stop_sequences.is_empty() {
        let key = if anthropic { "stop_sequences" } else { "stop" };
        body.insert(key.into(), options.stop_sequences.clone().into());
    }
    if !tools.is_empty() {
        tool_use(provider, options, body);
    }
    match (provider, options.reasoning_effort) {
        (ProviderKind::OpenAi, Some(effort)) => {
            body.insert("reasoning_effort".into(), effort.as_str().into());
        }
        (ProviderKind::OpenAiResponses, Some(effort)) => {
            body.insert("reasoning".into(), json!({"effort": effort.as_str()}));
        }
        _ => {}
    }
    if let Some(budget) = options.thinking_budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if let Some(id) = &options.user_id {
        if anthropic {
            body.insert("metadata".into(), json!({"user_id": id}));
        } else {
            body.insert("safety_identifier".into(), id.as_str().into());
        }
    }
    for (key, value) in &options.extra_body {
        body.insert(key.clone(), value.clone());
    }
    Ok(())
}

/// `config` (the object rebound already put in the body, if any) with the sampling options in
/// the camel-case names Gemini's `generationConfig` and Bedrock's `inferenceConfig` share:
/// `temperature`, `topP`, `stopSequences`.
fn nested_sampling(options: &RequestOptions, config: Option<Value>) -> Map<String, Value> {
    let mut config = match config {
        Some(Value::Object(config)) => config,
        _ => Map::new(),
    };
    if let Some(t) = options.temperature {
        config.insert("temperature".into(), t.into());
    }
    if let Some(p) = options.top_p {
        config.insert("topP".into(), p.into());
    }
    if !options.stop_sequences.is_empty() {
        config.insert(
            "stopSequences".into(),
            options.stop_sequences.clone().into(),
        );
    }
    config
}

/// The options in Gemini's form ([`RequestOptions`] has the table); checked already.
fn apply_gemini(
    options: &RequestOptions,
    tools: &[ToolSpec],
    body: &mut Map<String, Value>,
) -> Result<(), OptionsError> {
    let mut config = nested_sampling(options, body.remove("generationConfig"));
    if let Some(level) = options.reasoning_effort.and_then(gemini_level) {
        config.insert(
            "thinkingConfig".into(),
            json!({"thinkingLevel": level, "includeThoughts": true}),
        );
    }
    if let Some(budget) = options.thinking_budget {
        config.insert(
            "thinkingConfig".into(),
            json!({"thinkingBudget": budget, "includeThoughts": true}),
        );
    }
    if !tools.is_empty() {
        if let Some(choice) = &options.tool_choice {
            let calling = match choice {
                ToolChoice::Auto => json!({"mode": "AUTO"}),
                ToolChoice::Any => json!({"mode": "ANY"}),
                ToolChoice::None => json!({"mode": "NONE"}),
                ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            };
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": calling }),
            );
        }
    }
    for (key, value) in &options.extra_body {
        match (key.as_str(), value) {
            ("generationConfig", Value::Object(extra)) => {
                for (k, v) in extra {
                    config.insert(k.clone(), v.clone());
                }
            }
            _ => {
                body.insert(key.clone(), value.clone());
            }
        }
    }
    body.insert("generationConfig".into(), config.into());
    Ok(())
}

/// The options in Bedrock's Converse form ([`RequestOptions`] has the table); checked already.
fn apply_bedrock(
    options: &RequestOptions,
    tools: &[ToolSpec],
    body: &mut Map<String, Value>,
) -> Result<(), OptionsError> {
    let mut inference = nested_sampling(options, body.remove("inferenceConfig"));
    let mut additional = Map::new();
    if let Some(budget) = options.thinking_budget {
        additional.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if let (false, Some(choice)) = (tools.is_empty(), &options.tool_choice) {
        let value = match choice {
            ToolChoice::Any => json!({"any": {}}),
            ToolChoice::Tool(name) => json!({"tool": {"name": name}}),
            // `none` is refused by the check; `auto` is the default.
            _ => json!({"auto": {}}),
        };
        if let Some(Value::Object(config)) = body.get_mut("toolConfig") {
            config.insert("toolChoice".into(), value);
        }
    }
    for (key, value) in &options.extra_body {
        match (key.as_str(), value) {
            ("inferenceConfig", Value::Object(extra)) => inference.extend(extra.clone()),
            ("additionalModelRequestFields", Value::Object(extra)) => {
                additional.extend(extra.clone());
            }
            _ => {
                body.insert(key.clone(), value.clone());
            }
        }
    }
    body.insert("inferenceConfig".into(), inference.into());
    if !additional.is_empty() {
        body.insert("additionalModelRequestFields".into(), additional.into());
    }
    Ok(())
}

/// `tool_choice` and `parallel_tool_calls` in `provider`'s form, for a request offering tools.
fn tool_use(provider: ProviderKind, options: &RequestOptions, body: &mut Map<String, Value>) {
    let choice = options.tool_choice.as_ref();
    if provider == ProviderKind::Anthropic {
        // Parallel use is a flag of the choice; with no choice given, it is `auto`'s.
        if choice.is_none() && options.parallel_tool_calls.is_none() {
            return;
        }
        let mut value = match choice.unwrap_or(&ToolChoice::Auto) {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Any => json!({"type": "any"}),
            // `none` takes no flag: no tool is called at all.
            ToolChoice::None => {
                body.insert("tool_choice".into(), json!({"type": "none"}));
                return;
            }
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
        if let Some(parallel) = options.parallel_tool_calls {
            value["disable_parallel_tool_use"] = (!parallel).into();
        }
        body.insert("tool_choice".into(), value);
        return;
    }
    if let Some(choice) = choice {
        let value = match (choice, provider) {
            (ToolChoice::Auto, _) => json!("auto"),
            (ToolChoice::Any, _) => json!("required"),
            (ToolChoice::None, _) => json!("none"),
            (ToolChoice::Tool(name), ProviderKind::OpenAi) => {
                json!({"type": "function", "function": {"name": name}})
            }
            (ToolChoice::Tool(name), _) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), value);
    }
    if let Some(parallel) = options.parallel_tool_calls {
        body.insert("parallel_tool_calls".into(), parallel.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_choice_reads_back_what_it_displays_and_refuses_the_rest() {
        for choice in [
            ToolChoice::Auto,
            ToolChoice::Any,
            ToolChoice::None,
            ToolChoice::tool("read"),
        ] {
            assert_eq!(choice.to_string().parse::<ToolChoice>(), Ok(choice));
        }
        assert_eq!(" required ".parse::<ToolChoice>(), Ok(ToolChoice::Any));
        assert_eq!(
            "tool: read ".parse::<ToolChoice>(),
            Ok(ToolChoice::tool("read"))
        );
        for bad in ["", "tool:", "tool: ", "sometimes", "Auto"] {
            let err = bad.parse::<ToolChoice>().expect_err(bad);
            assert!(err
                .to_string()
                .contains("expected auto, any, none or tool:NAME"));
        }
    }

    #[test]
    fn options_read_from_their_json_shape_refuse_unknown_fields_and_bad_values() {
        let o: RequestOptions = serde_json::from_str(
            r#"{"temperature": 0.5, "top_p": 0.9, "stop_sequences": ["END"],
                "tool_choice": "any", "parallel_tool_calls": false,
                "reasoning_effort": "HIGH", "thinking_budget": 2048, "user_id": "u1",
                "extra_body": {"seed": 7}}"#,
        )
        .expect("options");
        let built = RequestOptions::new()
            .with_temperature(0.5)
            .with_top_p(0.9)
            .with_stop_sequence("END")
            .with_tool_choice(ToolChoice::Any)
            .with_parallel_tool_calls(false)
            .with_reasoning_effort(ReasoningEffort::High)
            .with_thinking_budget(2048)
            .with_user_id("u1")
            .with_extra_field("seed", json!(7));
        assert!(o == built, "{o:?} != {built:?}");
        assert!(
            serde_json::from_str::<RequestOptions>("{}").expect("empty") == RequestOptions::new()
        );
        for bad in [
            r#"{"temprature": 1}"#,
            r#"{"tool_choice": "maybe"}"#,
            r#"{"reasoning_effort": "huge"}"#,
            r#"{"thinking_budget": -1}"#,
        ] {
            assert!(
                serde_json::from_str::<RequestOptions>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
