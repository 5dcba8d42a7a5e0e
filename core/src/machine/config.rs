//! What a machine is told before it starts: retry policy, tools, targets, limits.

use crate::compaction::{CompactionMethod, CompactionPolicy};
use crate::conversation::TargetIdentity;
use crate::failure::ProviderKind;
use crate::retry::RetryConfig;
use crate::tool::ToolSpec;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One model on one provider that requests can go to. Secrets and URLs stay with the driver;
/// the machine only names targets by index into [`MachineConfig::targets`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
#[non_exhaustive]
pub struct TargetSpec {
    /// The wire format the target speaks.
    pub provider: ProviderKind,
    /// The model name, e.g. `claude-sonnet-4-6`.
    pub model: String,
    /// The model's context window in tokens, when known (see
    /// [`context_window`](fn@crate::context_window) for a table of common models). With it, the
    /// machine compacts before a request once the last one's input passed
    /// [`MachineConfig::compact_threshold_percent`] of it, instead of waiting for a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Who this target is, for the encrypted reasoning and signed thinking it produces
    /// (see [`TargetIdentity`]): the machine records it on every such block of the
    /// assistant messages it appends, and requests to another target leave those blocks
    /// out. Opaque and free of secrets (the tokio runner fills it from its HTTP
    /// providers: provider kind, base URL and a keyed hash of the key). `None`: this
    /// target's reasoning has an unknown owner, like that of sessions written before
    /// provenance was kept — sent only to the primary target (index 0), while the
    /// conversation holds no reasoning of a known owner and until a provider refused
    /// reasoning in the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<TargetIdentity>,
}

crate::objects_only!(TargetSpec, "an object describing a target");

impl TargetSpec {
    /// A target for `model` on `provider`, its context window looked up in the built-in
    /// table.
    ///
    /// ```
    /// use rebound_core::{ProviderKind, TargetSpec};
    /// let t = TargetSpec::new(ProviderKind::Anthropic, "claude-sonnet-4-6");
    /// assert_eq!(t.context_window, Some(200_000));
    /// ```
    #[must_use]
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> Self {
        let model = model.into();
        TargetSpec {
            provider,
            context_window: crate::context_window(&model),
            model,
            identity: None,
        }
    }
}

impl TargetSpec {
    /// Sets [`context_window`](Self::context_window) in tokens, for a model the built-in
    /// table does not know (or `None`: compact only on overflow).
    ///
    /// ```
    /// use rebound_core::{ProviderKind, TargetSpec};
    /// let t = TargetSpec::new(ProviderKind::OpenAi, "llama3").with_context_window(Some(8_192));
    /// assert_eq!(t.context_window, Some(8_192));
    /// ```
    #[must_use]
    pub fn with_context_window(mut self, tokens: Option<u64>) -> Self {
        self.context_window = tokens;
        self
    }

    /// Sets [`identity`](Self::identity), who owns the reasoning this target produces.
    ///
    /// ```
    /// use rebound_core::{ProviderKind, TargetIdentity, TargetSpec};
    /// let id = TargetIdentity::new("openai_responses:5eb63bbbe01eeed0");
    /// let t = TargetSpec::new(ProviderKind::OpenAiResponses, "gpt-5").with_identity(id.clone());
    /// assert_eq!(t.identity, Some(id));
    /// ```
    #[must_use]
    pub fn with_identity(mut self, identity: TargetIdentity) -> Self {
        self.identity = Some(identity);
        self
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

/// How the machine uses a shared [`RetryBudget`](crate::RetryBudget).
///
/// With it, every attempt asks the budget first ([`Command::AcquirePermit`](crate::Command)):
/// first attempts and retries obeying a server delay are never refused (only delayed while the
/// provider is rate-limited), charged retries wait for a token, and the machine tells the
/// budget of every success and every 429 with a delay ([`Command::NoteBudget`](crate::Command)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BudgetUse {
    /// How long a charged retry may wait for a token, in ms, after its backoff ended. Tokens
    /// arrive with successes, so waiting is what lets a fleet ride out a short failure that
    /// hits every agent at once (the first successes after it pay for the waiting retries);
    /// in a total outage nothing pays, and the wait ends in a denial.
    pub max_wait_ms: u64,
}

crate::objects_only!(BudgetUse, "an object of budget-use settings");

impl BudgetUse {
    /// A charged retry waits up to `max_wait_ms` for a token.
    #[must_use]
    pub fn new(max_wait_ms: u64) -> Self {
        BudgetUse { max_wait_ms }
    }

    /// Sets [`max_wait_ms`](Self::max_wait_ms), how long a charged retry may wait for a
    /// token.
    ///
    /// ```
    /// use rebound_core::{BudgetUse, MachineConfig};
    ///
    /// let config = MachineConfig::default()
    ///     .with_retry_budget(BudgetUse::new(5_000));
    /// assert_eq!(config.retry_budget.map(|b| b.max_wait_ms), Some(5_000));
    /// ```
    #[must_use]
    pub fn with_max_wait_ms(mut self, max_wait_ms: u64) -> Self {
        self.max_wait_ms = max_wait_ms;
        self
    }
}

impl Default for BudgetUse {
    fn default() -> Self {
        BudgetUse {
            max_wait_ms: 15_000,
        }
    }
}

pub use crate::deadline::StreamDeadlines;

/// Everything an [`AgentMachine`](crate::AgentMachine) needs to decide. Serializable, so a
/// trace header can carry it and a replay can rebuild the same machine. Holds no secrets.
///
/// Read from JSON (a trace header, Python's `config=`, the simulator's settings), every
/// record in it is an object: a missing field takes the default's value, also inside a
/// partial nested object (`{"retry": {"jitter": false}}` is the default with jitter off), a
/// key that is no setting is an error naming it, and fields given by position (an array)
/// are refused.
///
/// New fields may come in a minor release (it is `#[non_exhaustive]`), so build one from
/// [`default`](Self::default) or [`resilient`](Self::resilient) and chain `with_*` calls,
/// or set the public fields:
///
/// ```
/// use rebound_core::{MachineConfig, ProviderKind, RetryConfig, TargetSpec};
///
/// let config = MachineConfig::default()
///     .with_retry(RetryConfig::default().with_max_attempts(6))
///     .with_targets(vec![TargetSpec::new(ProviderKind::Anthropic, "claude-sonnet-4-6")])
///     .with_max_turns(20);
///
/// let mut same = MachineConfig::default();
/// same.retry.max_attempts = 6;
/// same.targets.push(TargetSpec::new(ProviderKind::Anthropic, "claude-sonnet-4-6"));
/// same.max_turns = Some(20);
/// assert_eq!(config, same);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MachineConfig {
    /// Retry policy for provider failures.
    pub retry: RetryConfig,
    /// The tools the model may call; a call to any other name gets an error result.
    pub tools: Vec<ToolSpec>,
    /// The fallback chain, primary first. Empty means one unnamed target (index 0).
    ///
    /// A request moves to the next target when the current one's attempts are spent on a
    /// retryable failure (or its server asked to wait longer than `max_retry_after_ms`, or,
    /// with this next target at hand, longer than `fallback_after_ms`), and
    /// at once on quota exhaustion or an unknown model — never on cancel, host failures, a
    /// plain bad request, auth failures or a context overflow. Each target gets its own
    /// attempt budget and the same conversation snapshot.
    ///
    /// **The choice is sticky for the run**: once a run has fallen back, its later requests
    /// (after tool results) stay on the fallback target rather than probing an overloaded
    /// primary again at every turn. A new run (a new machine) starts at the primary.
    pub targets: Vec<TargetSpec>,
    /// Stop (with `max_turns`) once this many assistant messages were appended in this run.
    pub max_turns: Option<u32>,
    /// Whether a context overflow triggers one compaction and retry (else it fails).
    pub auto_compact: bool,
    /// The default compactor's policy (drivers that compact differently ignore it); also
    /// what the summary request keeps verbatim and elides.
    pub compaction: CompactionPolicy,
    /// How to compact: a summary written by the current target (falling back to elision
    /// when it fails), or elision alone. Elision by default, and for traces written before
    /// summaries existed.
    pub compact_with: CompactionMethod,
    /// Compact before a request when the previous request's input tokens reached this
    /// percentage of the target's [`context_window`](TargetSpec::context_window) (85 by
    /// default; 0 or a target without a known window: only on overflow).
    pub compact_threshold_percent: u8,
    /// When set, charged retries (those not obeying a server hint) need a permit from a
    /// shared retry budget.
    pub retry_budget: Option<BudgetUse>,
    /// How long a response may take, carried on every request for the driver to enforce.
    #[serde(skip_serializing_if = "StreamDeadlines::is_default")]
    pub stream: StreamDeadlines,
}

crate::objects_only!(MachineConfig, "an object of machine settings");

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            retry: RetryConfig::default(),
            tools: Vec::new(),
            targets: Vec::new(),
            max_turns: None,
            auto_compact: true,
            compaction: CompactionPolicy::default(),
            compact_with: CompactionMethod::Elide,
            compact_threshold_percent: 85,
            retry_budget: None,
            stream: StreamDeadlines::default(),
        }
    }
}

impl MachineConfig {
    /// The configuration for agents that share a process and a retry budget: up to 12
    /// attempts per request (the default's 4 lose brownouts and stream cuts; 8 still lose
    /// one turn in 250 of a brownout failing half the attempts), with every
    /// charged retry (one not obeying a server's `retry-after`) taking a token from the
    /// shared budget and waiting up to 15 s for one when the bucket is empty.
    ///
    /// Pair it with one [`RetryBudget`](crate::RetryBudget) per process, built from
    /// [`BudgetConfig::default`](crate::BudgetConfig::default) (10 tokens; 0.1 per first
    /// attempt, 3 per success, 10 per request whose retry is answered, 0.5 per second), owned
    /// by the driver and shared by every machine of the process: then a total outage hitting
    /// 1,000 agents costs about 1.15 requests per agent instead of 12, while a blip, a short
    /// outage or a brownout hitting
    /// all of them at once stays funded by the successes around it, and a lone agent never
    /// waits for a token. `docs/outages.md` shows what it buys against the retry policies
    /// and budgets of other stacks.
    ///
    /// ```
    /// use rebound_core::MachineConfig;
    ///
    /// let config = MachineConfig::resilient();
    /// assert_eq!(config.retry.max_attempts, 12);
    /// assert_eq!(config.retry_budget.map(|b| b.max_wait_ms), Some(15_000));
    /// ```
    #[must_use]
    pub fn resilient() -> Self {
        MachineConfig {
            retry: RetryConfig {
                max_attempts: 12,
                ..RetryConfig::default()
            },
            retry_budget: Some(BudgetUse {
                max_wait_ms: 15_000,
            }),
            ..MachineConfig::default()
        }
    }

    /// Sets [`retry`](Self::retry), the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Sets [`tools`](Self::tools), the tools the model may call.
    #[must_use]
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets [`targets`](Self::targets), the fallback chain, primary first.
    #[must_use]
    pub fn with_targets(mut self, targets: Vec<TargetSpec>) -> Self {
        self.targets = targets;
        self
    }

    /// Sets [`max_turns`](Self::max_turns): the run finishes once this many assistant
    /// messages were appended.
    #[must_use]
    pub fn with_max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = Some(max_turns);
        self
    }

    /// Sets [`auto_compact`](Self::auto_compact): whether a context overflow compacts and
    /// retries once.
    #[must_use]
    pub fn with_auto_compact(mut self, auto_compact: bool) -> Self {
        self.auto_compact = auto_compact;
        self
    }

    /// Sets [`compaction`](Self::compaction), the default compactor's policy.
    #[must_use]
    pub fn with_compaction(mut self, compaction: CompactionPolicy) -> Self {
        self.compaction = compaction;
        self
    }

    /// Sets [`compact_with`](Self::compact_with): summary or elision.
    #[must_use]
    pub fn with_compact_with(mut self, method: CompactionMethod) -> Self {
        self.compact_with = method;
        self
    }

    /// Sets [`compact_threshold_percent`](Self::compact_threshold_percent) (0: compact only
    /// on overflow).
    #[must_use]
    pub fn with_compact_threshold_percent(mut self, percent: u8) -> Self {
        self.compact_threshold_percent = percent;
        self
    }

    /// Sets [`retry_budget`](Self::retry_budget): every attempt asks a shared retry budget
    /// first.
    #[must_use]
    pub fn with_retry_budget(mut self, budget: BudgetUse) -> Self {
        self.retry_budget = Some(budget);
        self
    }

    /// Sets [`stream`](Self::stream): how long a response may stay silent, or go without
    /// content, before the attempt fails.
    #[must_use]
    pub fn with_stream(mut self, deadlines: StreamDeadlines) -> Self {
        self.stream = deadlines;
        self
    }

    /// Number of targets in the fallback chain (at least 1).
    #[must_use]
    pub fn target_count(&self) -> usize {
        self.targets.len().max(1)
    }

    /// The [identity](TargetSpec::identity) of target `index`, when it has one.
    #[must_use]
    pub fn target_identity(&self, index: usize) -> Option<&TargetIdentity> {
        self.targets.get(index).and_then(|t| t.identity.as_ref())
    }

    /// A printable name for target `index`, e.g. `anthropic:claude-sonnet-4-6`.
    #[must_use]
    pub fn target_label(&self, index: usize) -> String {
        self.targets
            .get(index)
            .map_or_else(|| format!("target {index}"), ToString::to_string)
    }
}
