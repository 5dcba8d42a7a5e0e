//! The registry of tools and sources, and the execution of a `RunTools` batch.

use super::schema::{bounded, InputSchema};
use super::{Tool, ToolContext, ToolSource};
use crate::telemetry::names;
use rebound_core::{
    BatchOutcome, CallOutcome, HostFailure, HostFailureKind, ToolCall, ToolFailure, ToolOutput,
    ToolResultPart, ToolSpec,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

/// How a [`ToolSet`] runs a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSetConfig {
    /// At most this many jobs run at once; a job is one native call or one tool source's share
    /// of the batch. `1` runs the batch sequentially, in call order. Default 8.
    pub concurrency: usize,
    /// A native call that runs longer is stopped and answered with the error result
    /// "timed out after Ns". Default 120 s.
    pub call_timeout: Duration,
    /// A tool source's share of a batch that runs longer is stopped and every call in it is
    /// answered with a timeout error result. Default 120 s.
    pub source_timeout: Duration,
    /// The text parts of one call's output are cut to this many bytes in all (at a character
    /// boundary), with a note saying so: a tool or source cannot flood the conversation.
    /// Default 1 MiB.
    pub max_output_bytes: usize,
}

impl Default for ToolSetConfig {
    fn default() -> Self {
        ToolSetConfig {
            concurrency: 8,
            call_timeout: Duration::from_secs(120),
            source_timeout: Duration::from_secs(120),
            max_output_bytes: 1024 * 1024,
        }
    }
}

impl ToolSetConfig {
    /// Sets [`concurrency`](Self::concurrency), the most jobs running at once.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout), the longest a native call may run.
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// Sets [`source_timeout`](Self::source_timeout), the longest a tool source's share of a batch
    /// may run.
    #[must_use]
    pub fn with_source_timeout(mut self, source_timeout: Duration) -> Self {
        self.source_timeout = source_timeout;
        self
    }

    /// Sets [`max_output_bytes`](Self::max_output_bytes), the most text bytes of one call's output.
    #[must_use]
    pub fn with_max_output_bytes(mut self, max_output_bytes: usize) -> Self {
        self.max_output_bytes = max_output_bytes;
        self
    }
}

/// Why a [`ToolSet`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSetError {
    /// Two tools have the same name; the model could not tell them apart.
    #[error(
        "tool name `{name}` is offered twice (by {first} and by {second}): rename or drop one"
    )]
    DuplicateName {
        /// The name.
        name: String,
        /// Who offered it first, e.g. "a native tool" or "tool source `mcp:x`".
        first: String,
        /// Who offered it again.
        second: String,
    },
    /// A name providers would refuse.
    #[error(
        "tool name `{name}` (from {owner}) is not allowed: use 1 to 64 ASCII letters, digits, `_` or `-`"
    )]
    InvalidName {
        /// The name (cut to a readable length).
        name: String,
        /// Who offered it.
        owner: String,
    },
    /// The input schema is not a valid JSON Schema object.
    #[error("tool `{tool}` (from {owner}) has an invalid input schema: {message}")]
    InvalidSchema {
        /// The tool's name.
        tool: String,
        /// Who offered it.
        owner: String,
        /// What is wrong with the schema.
        message: String,
    },
    /// `concurrency` was 0; nothing could ever run.
    #[error("tool concurrency must be at least 1 (1 runs tools sequentially)")]
    ZeroConcurrency,
}

enum Owner {
    Native(Arc<dyn Tool>),
    Source(usize),
}

struct Entry {
    owner: Owner,
    schema: InputSchema,
}

/// Builds a [`ToolSet`]; see [`ToolSet::builder`].
#[derive(Default)]
pub struct ToolSetBuilder {
    tools: Vec<Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
    config: ToolSetConfig,
}

impl fmt::Debug for ToolSetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSetBuilder")
            .field("tools", &self.tools.len())
            .field("sources", &self.sources.len())
            .field("config", &self.config)
            .finish()
    }
}

impl ToolSetBuilder {
    /// Adds a native tool.
    #[must_use]
    pub fn tool(self, tool: impl Tool + 'static) -> Self {
        self.shared_tool(Arc::new(tool))
    }

    /// Adds a native tool that is shared with other owners.
    #[must_use]
    pub fn shared_tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds several native tools, e.g. [`files::tools`](super::files::tools).
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds a tool source.
    #[must_use]
    pub fn source(self, source: impl ToolSource + 'static) -> Self {
        self.shared_source(Arc::new(source))
    }

    /// Adds a tool source that is shared with other owners.
    #[must_use]
    pub fn shared_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Replaces the whole configuration.
    #[must_use]
    pub fn config(mut self, config: ToolSetConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets [`ToolSetConfig::concurrency`].
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// Sets [`ToolSetConfig::call_timeout`].
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.config.call_timeout = timeout;
        self
    }

    /// Sets [`ToolSetConfig::source_timeout`].
    #[must_use]
    pub fn source_timeout(mut self, timeout: Duration) -> Self {
        self.config.source_timeout = timeout;
        self
    }

    /// Sets [`ToolSetConfig::max_output_bytes`].
    #[must_use]
    pub fn max_output_bytes(mut self, max: usize) -> Self {
        self.config.max_output_bytes = max;
        self
    }

    /// Collects the specs, compiles their schemas and checks the names.
    pub fn build(self) -> Result<ToolSet, ToolSetError> {
        if self.config.concurrency == 0 {
            return Err(ToolSetError::ZeroConcurrency);
        }
        let mut entries: BTreeMap<String, (String, Entry)> = BTreeMap::new();
        let mut specs = Vec::new();
        let native = self.tools.iter().map(|t| {
            (
                t.spec(),
                "a native tool".to_owned(),
                Owner::Native(t.clone()),
            )
        });
        let sourced = self.sources.iter().enumerate().flat_map(|(i, s)| {
            let owner = format!("tool source `{}`", s.name());
            s.specs()
                .into_iter()
                .map(move |spec| (spec, owner.clone(), Owner::Source(i)))
        });
        for (spec, owner_name, owner) in native.chain(sourced) {
            if !valid_name(&spec.name) {
                return Err(ToolSetError::InvalidName {
                    name: bounded(&spec.name, 80),
                    owner: owner_name,
                });
            }
            if let Some((first, _)) = entries.get(&spec.name) {
                return Err(ToolSetError::DuplicateName {
                    name: spec.name,
                    first: first.clone(),
                    second: owner_name,
                });
            }
            let schema = InputSchema::compile(&spec.input_schema).map_err(|message| {
                ToolSetError::InvalidSchema {
                    tool: spec.name.clone(),
                    owner: owner_name.clone(),
                    message,
                }
            })?;
            entries.insert(spec.name.clone(), (owner_name, Entry { owner, schema }));
            specs.push(spec);
        }
        Ok(ToolSet {
            entries: entries.into_iter().map(|(k, (_, e))| (k, e)).collect(),
            sources: self.sources,
            specs,
            config: self.config,
        })
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The tools an agent may call, and the executor of the machine's tool batches.
///
/// Built once with [`ToolSet::builder`] from native [`Tool`]s and [`ToolSource`]s; the names
/// must be unique. [`run_batch`](ToolSet::run_batch) answers a
/// [`Command::RunTools`](rebound_core::Command::RunTools).
///
/// # Failures, and where they go
///
/// | what happened | outcome for the call |
/// |---|---|
/// | input does not match the schema | error result listing what is wrong (bounded) |
/// | the tool returned `ToolError::Model` | error result with its text |
/// | the output's text exceeds `max_output_bytes` | the output, cut, with a note |
/// | an image the provider cannot take (see [`media`](super::media)) | the output, with a note in the image's place |
/// | the tool ran longer than `call_timeout` | error result "timed out after Ns"; the call's future is dropped |
/// | the tool **panicked** | error result "the tool crashed (panic: …)"; the runner goes on |
/// | a source failed one call | that call's error result |
/// | a source failed the whole batch | that failure for each of the calls it was given |
/// | a source left a call unanswered | error result naming the source |
/// | the tool returned `ToolError::Host` | the host failure (the machine fails the run) |
/// | `cancel` fired | the calls that finished keep their outcomes; the others fail with a `Canceled` host failure, at once (the whole batch does when none finished) |
///
/// A panicking tool still prints the panic message through the process's panic hook (to
/// stderr by default), like any tokio task that panics.
pub struct ToolSet {
    entries: BTreeMap<String, Entry>,
    sources: Vec<Arc<dyn ToolSource>>,
    specs: Vec<ToolSpec>,
    config: ToolSetConfig,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSet")
            .field(
                "tools",
                &self
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One unit of concurrent work.
enum Job {
    Native {
        index: usize,
        tool: Arc<dyn Tool>,
        call: ToolCall,
    },
    Source {
        source: usize,
        indices: Vec<usize>,
        calls: Vec<ToolCall>,
    },
}

type JobResult = Vec<(usize, Result<ToolOutput, ToolFailure>)>;

impl ToolSet {
    /// A builder with no tools and the default [`ToolSetConfig`].
    #[must_use]
    pub fn builder() -> ToolSetBuilder {
        ToolSetBuilder::default()
    }

    /// The specs of all tools, native tools first (in the order added), then each source's.
    #[must_use]
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// How batches are run.
    #[must_use]
    pub fn config(&self) -> &ToolSetConfig {
        &self.config
    }

    /// Runs a batch of calls and answers each of them.
    ///
    /// Returns [`BatchOutcome::PerCall`] with one outcome per call (in call order). As soon
    /// as `cancel` fires, running calls are dropped (their tasks aborted) and no other call
    /// starts: the calls that finished keep their outcomes and the others answer with a
    /// [`HostFailureKind::Canceled`] host failure, or, when none had finished,
    /// [`BatchOutcome::WholeBatch`] with that failure. See the [type docs](ToolSet) for how
    /// each failure is answered.
    ///
    /// Calls run as tokio tasks, at most [`ToolSetConfig::concurrency`] at a time, started in
    /// call order; all calls for one [`ToolSource`] go to it as one batch, which counts as one
    /// job. Must be awaited inside a tokio runtime with its time driver enabled; outside a
    /// runtime the batch fails with an `Internal` host failure.
    pub async fn run_batch(
        &self,
        calls: Vec<ToolCall>,
        cancel: &CancellationToken,
    ) -> BatchOutcome {
        if cancel.is_cancelled() {
            return canceled();
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure::new(
                HostFailureKind::Internal,
                "ToolSet::run_batch was awaited outside a tokio runtime",
            )));
        }
        let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
        let mut results: Vec<Option<Result<ToolOutput, ToolFailure>>> = vec![None; calls.len()];
        let mut jobs = Vec::new();
        let mut source_jobs: BTreeMap<usize, usize> = BTreeMap::new();
        for (index, call) in calls.into_iter().enumerate() {
            let Some(entry) = self.entries.get(&call.name) else {
                crate::telemetry::refused_tool_call(&call, names::ERROR_UNKNOWN_TOOL);
                results[index] = Some(Err(ToolFailure::model(self.unknown_tool(&call.name))));
                continue;
            };
            if let Err(message) = entry.schema.check(&call.input) {
                crate::telemetry::refused_tool_call(&call, names::ERROR_INVALID_ARGUMENTS);
                results[index] = Some(Err(ToolFailure::model(message)));
                continue;
            }
            match &entry.owner {
                Owner::Native(tool) => jobs.push(Job::Native {
                    index,
                    tool: tool.clone(),
                    call,
                }),
                Owner::Source(source) => {
                    let job = *source_jobs.entry(*source).or_insert_with(|| {
                        jobs.push(Job::Source {
                            source: *source,
                            indices: Vec::new(),
                            calls: Vec::new(),
                        });
                        jobs.len() - 1
                    });
                    if let Job::Source { indices, calls, .. } = &mut jobs[job] {
                        indices.push(index);
                        calls.push(call);
                    }
                }
            }
        }

        let mut pending = jobs.into_iter();
        let mut running: JoinSet<JobResult> = JoinSet::new();
        // Which calls each task answers, what to call it (for a task that panicked), and the
        // calls' `execute_tool` spans, each open while its job runs.
        let mut owners: HashMap<tokio::task::Id, (Vec<usize>, String, Vec<Span>)> = HashMap::new();
        loop {
            // After a cancel, no call starts.
            while !cancel.is_cancelled() && running.len() < self.config.concurrency {
                let Some(job) = pending.next() else { break };
                let (indices, label, spans) = match &job {
                    Job::Native { index, call, .. } => (
                        vec![*index],
                        format!("tool `{}`", call.name),
                        vec![crate::telemetry::tool_span(call)],
                    ),
                    Job::Source {
                        source,
                        indices,
                        calls,
                    } => (
                        indices.clone(),
                        format!("tool source `{}`", self.sources[*source].name()),
                        calls.iter().map(crate::telemetry::tool_span).collect(),
                    ),
                };
                // A native call runs inside its span (its own spans nest there); a source's
                // calls run as one job, under the batch's span.
                let inside = match spans.as_slice() {
                    [one] => one.clone(),
                    _ => Span::current(),
                };
                let handle = running.spawn(self.job_future(job, cancel).instrument(inside));
                owners.insert(handle.id(), (indices, label, spans));
            }
            if running.is_empty() {
                break;
            }
            let joined = tokio::select! {
                biased;
                // Canceled: the calls whose tasks already ended are still read, so that what
                // finished keeps its outcome; then the batch stops.
                () = cancel.cancelled() => match running.try_join_next_with_id() {
                    Some(joined) => Some(joined),
                    None => break,
                },
                joined = running.join_next_with_id() => joined,
            };
            match joined {
                None => break,
                Some(Ok((id, answered))) => {
                    let (indices, _, spans) = owners.remove(&id).unwrap_or_default();
                    for (index, result) in answered {
                        let max = self.config.max_output_bytes;
                        let result = match result {
                            Ok(output) => Ok(cap_output(
                                super::media::screen(output, &Default::default()),
                                max,
                            )),
                            // Error text reaches the model too: the same cap applies.
                            Err(ToolFailure::Model { message }) if message.len() > max => {
                                Err(ToolFailure::model(bounded(&message, max)))
                            }
                            Err(failure) => Err(failure),
                        };
                        if let Some(span) = indices
                            .iter()
                            .position(|i| *i == index)
                            .and_then(|at| spans.get(at))
                        {
                            crate::telemetry::record_tool_result(span, &result);
                        }
                        results[index] = Some(result);
                    }
                }
                Some(Err(error)) => {
                    let Some((indices, label, spans)) = owners.remove(&error.id()) else {
                        continue;
                    };
                    let failure = if error.is_panic() {
                        let message = panic_message(error.into_panic());
                        ToolFailure::model(format!(
                            "the {label} crashed (panic: {}); this is a bug in the tool, not in your input",
                            bounded(&message, 300)
                        ))
                    } else {
                        ToolFailure::Host(HostFailure::new(
                            HostFailureKind::Internal,
                            format!("the task running the {label} was aborted"),
                        ))
                    };
                    for span in &spans {
                        crate::telemetry::record_tool_result(span, &Err(failure.clone()));
                    }
                    for index in indices {
                        results[index] = Some(Err(failure.clone()));
                    }
                }
            }
        }
        if results.iter().any(Option::is_none) {
            return stopped(ids, results, &owners);
        }
        BatchOutcome::PerCall(
            ids.into_iter()
                .zip(results)
                .map(|(tool_use_id, result)| CallOutcome {
                    result: result.unwrap_or_else(|| {
                        panic!("invariant: every call of a batch is answered (call `{tool_use_id}` was not)")
                    }),
                    tool_use_id,
                })
                .collect(),
        )
    }

    /// A call to a tool outside this set (the machine refuses calls outside its own list
    /// before they get here; a set used without the machine says the same).
    fn unknown_tool(&self, name: &str) -> String {
        let names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
        rebound_core::tool::unknown_tool_message(name, &names)
    }

    /// The task body for one job. Owns everything it needs (tasks are `'static`).
    fn job_future(
        &self,
        job: Job,
        cancel: &CancellationToken,
    ) -> impl std::future::Future<Output = JobResult> + Send + 'static {
        let token = cancel.child_token();
        let ctx = ToolContext::new(token.clone());
        let call_timeout = self.config.call_timeout;
        let source_timeout = self.config.source_timeout;
        let source = match &job {
            Job::Source { source, .. } => Some(self.sources[*source].clone()),
            Job::Native { .. } => None,
        };
        async move {
            // Tells work the tool started outside its future to stop, however the job ends.
            let _stop = token.drop_guard();
            match (job, source) {
                (Job::Native { index, tool, call }, _) => {
                    let result = match tokio::time::timeout(
                        call_timeout,
                        tool.invoke(Arc::unwrap_or_clone(call.input), ctx),
                    )
                    .await
                    {
                        Ok(result) => result.map_err(ToolFailure::from),
                        Err(_) => Err(ToolFailure::model(format!(
                            "timed out after {}",
                            human_duration(call_timeout)
                        ))),
                    };
                    vec![(index, result)]
                }
                (Job::Source { indices, calls, .. }, Some(source)) => {
                    let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
                    let outcome =
                        tokio::time::timeout(source_timeout, source.run_batch(calls, ctx)).await;
                    source_results(source.name(), indices, ids, outcome, source_timeout)
                }
                (Job::Source { indices, .. }, None) => {
                    let failure = ToolFailure::Host(HostFailure::new(
                        HostFailureKind::Internal,
                        "invariant: a source job without its source",
                    ));
                    indices
                        .into_iter()
                        .map(|i| (i, Err(failure.clone())))
                        .collect()
                }
            }
        }
    }
}

/// The runner runs tool batches through this.
impl crate::runner::ToolExecutor for ToolSet {
    fn specs(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        cancel: &'a CancellationToken,
    ) -> crate::provider::BoxFuture<'a, BatchOutcome> {
        Box::pin(ToolSet::run_batch(self, calls, cancel))
    }

    /// Each call's `execute_tool` span is made as its job starts and ends with it.
    fn traces_calls(&self) -> bool {
        true
    }
}

/// Maps a source's answer onto the calls it was given.
fn source_results(
    name: &str,
    indices: Vec<usize>,
    ids: Vec<String>,
    outcome: Result<BatchOutcome, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> JobResult {
    let all = |failure: ToolFailure| -> JobResult {
        indices.iter().map(|&i| (i, Err(failure.clone()))).collect()
    };
    match outcome {
        Err(_) => all(ToolFailure::model(format!(
            "tool source `{name}` timed out after {}",
            human_duration(timeout)
        ))),
        Ok(BatchOutcome::WholeBatch(failure)) => all(failure),
        Ok(BatchOutcome::PerCall(mut outcomes)) => indices
            .iter()
            .zip(ids)
            .map(|(&index, id)| {
                let result = match outcomes.iter().position(|o| o.tool_use_id == id) {
                    Some(at) => outcomes.swap_remove(at).result,
                    None => Err(ToolFailure::model(format!(
                        "tool source `{name}` returned no result for this call"
                    ))),
                };
                (index, result)
            })
            .collect(),
    }
}

/// Cuts the text parts of `output` to `max` bytes in all, adding a note when it does.
fn cap_output(mut output: ToolOutput, max: usize) -> ToolOutput {
    let text_len = |p: &ToolResultPart| p.as_text().map_or(0, str::len);
    let total: usize = output.parts.iter().map(text_len).sum();
    if total <= max {
        return output;
    }
    let mut budget = max;
    for part in &mut output.parts {
        if let ToolResultPart::Text { text } = part {
            if text.len() > budget {
                let mut end = budget;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
            budget -= text.len();
        }
    }
    output
        .parts
        .retain(|p| !matches!(p, ToolResultPart::Text { text } if text.is_empty()));
    output.parts.push(ToolResultPart::text(format!(
        "[output truncated: the tool returned {total} bytes of text; the first {max} are shown]"
    )));
    output
}

fn canceled() -> BatchOutcome {
    BatchOutcome::WholeBatch(canceled_failure())
}

fn canceled_failure() -> ToolFailure {
    ToolFailure::Host(HostFailure::new(
        HostFailureKind::Canceled,
        "the tool batch was canceled",
    ))
}

/// The outcome of a batch the cancel stopped with some calls unanswered: the calls that
/// finished keep their outcomes, the others (running, dropped with their tasks, or not
/// started) fail with a `Canceled` host failure. The whole batch fails so when none had
/// an answer.
fn stopped(
    ids: Vec<String>,
    results: Vec<Option<Result<ToolOutput, ToolFailure>>>,
    running: &HashMap<tokio::task::Id, (Vec<usize>, String, Vec<Span>)>,
) -> BatchOutcome {
    let failure = canceled_failure();
    for (_, _, spans) in running.values() {
        for span in spans {
            crate::telemetry::record_tool_result(span, &Err(failure.clone()));
        }
    }
    if results.iter().all(Option::is_none) {
        return BatchOutcome::WholeBatch(failure);
    }
    BatchOutcome::PerCall(
        ids.into_iter()
            .zip(results)
            .map(|(tool_use_id, result)| CallOutcome {
                result: result.unwrap_or_else(|| Err(failure.clone())),
                tool_use_id,
            })
            .collect(),
    )
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

/// `30s`, `1.5s`, `250ms`.
pub(crate) fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(30)), "30s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn provider_compatible_names_only() {
        assert!(valid_name("read_file-2"));
        assert!(!valid_name(""));
        assert!(!valid_name("a.b"));
        assert!(!valid_name(&"x".repeat(65)));
    }
}
