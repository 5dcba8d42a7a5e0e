//! Tools: native async tools, external tool sources, and the [`ToolSet`] that runs the
//! machine's [`Command::RunTools`](rebound_core::Command::RunTools) batches.
//!
//! - A [`Tool`] is one native async tool: a [`ToolSpec`] (name, description, JSON Schema of its
//!   input) and an `invoke` that returns `Result<ToolOutput, ToolError>`. [`ToolError`] keeps
//!   the two kinds of failure apart in the type system: [`ToolError::Model`] becomes an error
//!   tool result the model reads, [`ToolError::Host`] ends the run.
//! - A [`ToolSource`] is an external provider of many tools (an MCP server, say): it lists its
//!   specs and runs a *batch* of calls, failing per call or as a whole batch.
//! - A [`ToolSet`] holds both, refuses duplicate names when it is built, validates each input
//!   against its tool's schema, runs independent calls concurrently (up to a limit; limit 1 is
//!   sequential, in call order), bounds each call with a timeout, turns a panicking tool into an
//!   error result, and returns promptly when canceled.
//! - [`files`] has the built-in `read`, `list` and `write` tools, confined to a root folder.
//! - [`lua`] loads tools written in Lua (feature `lua`, off by default); [`mcp`] makes an MCP
//!   server a tool source (feature `mcp`, off by default); [`media`] drops images a provider
//!   could not take, with a note, from every output.
//!
//! ```
//! use rebound_core::{BatchOutcome, ToolCall, ToolOutput, ToolSpec};
//! use rebound_effects::tools::{FnTool, ToolError, ToolSet};
//! use serde_json::json;
//! use tokio_util::sync::CancellationToken;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let echo = FnTool::new(
//!     ToolSpec {
//!         name: "echo".into(),
//!         description: "Returns its `text` input.".into(),
//!         input_schema: json!({
//!             "type": "object",
//!             "properties": {"text": {"type": "string"}},
//!             "required": ["text"],
//!             "additionalProperties": false
//!         }),
//!     },
//!     |input, _ctx| async move {
//!         match input["text"].as_str() {
//!             Some(text) => Ok(ToolOutput::text(text)),
//!             None => Err(ToolError::model("`text` must be a string")),
//!         }
//!     },
//! );
//! let tools = ToolSet::builder().tool(echo).build()?;
//! let calls = vec![
//!     ToolCall::new("t1", "echo", json!({"text": "hi"})),
//!     ToolCall::new("t2", "echo", json!({"text": 7})),
//! ];
//! let BatchOutcome::PerCall(outcomes) = tools.run_batch(calls, &CancellationToken::new()).await
//! else { panic!("not canceled") };
//! assert_eq!(outcomes[0].result, Ok(ToolOutput::text("hi")));
//! assert!(outcomes[1].result.is_err()); // 7 is not a string: the schema refused it
//! # Ok::<(), rebound_effects::tools::ToolSetError>(())
//! # }).unwrap();
//! ```

pub mod files;
#[cfg(feature = "lua")]
pub mod lua;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod media;
mod schema;
mod set;

/// Re-exported so implementers of [`Tool`] and [`ToolSource`] need no extra dependency.
pub use async_trait::async_trait;
use rebound_core::{
    BatchOutcome, HostFailure, HostFailureKind, ToolCall, ToolFailure, ToolOutput, ToolSpec,
};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use set::{ToolSet, ToolSetBuilder, ToolSetConfig, ToolSetError};

/// Why a tool call failed, as the tool itself reports it.
///
/// The variant decides where the failure goes: [`ToolError::Model`] becomes an error tool
/// result (`is_error: true`) and the loop continues; [`ToolError::Host`] fails the run and is
/// never shown to the model. Choose `Host` only for failures of the machine the agent runs on
/// (cancellation, memory exhaustion), never for a bad argument or a missing file.
///
/// More kinds may come in a minor release (it is `#[non_exhaustive]`): a `match` on it ends
/// with a catch-all arm.
///
/// ```compile_fail
/// use rebound_effects::tools::ToolError;
/// fn shown_to_the_model(error: &ToolError) -> bool {
///     match error {
///         ToolError::Model(_) => true,
///         ToolError::Host(_) => false,
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// A failure the model can act on: a bad argument, a missing file, a handler error. The
    /// text is what the model reads, so say what to do: "file not found: src/foo.rs". It
    /// reaches the model wrapped, as every error result is
    /// ([`tool_error_text`](rebound_core::tool_error_text)): "Tool execution failed for
    /// \`read\`: file not found: src/foo.rs" and a line saying it may fix the arguments, try
    /// another tool or explain the failure to the user.
    #[error("{0}")]
    Model(String),
    /// The host failed: the run ends and the embedder hears about it.
    #[error(transparent)]
    Host(HostFailure),
}

impl ToolError {
    /// A model-visible failure with this text.
    #[must_use]
    pub fn model(message: impl Into<String>) -> Self {
        ToolError::Model(message.into())
    }

    /// A host failure of `kind`: the run ends.
    #[must_use]
    pub fn host(kind: HostFailureKind, message: impl Into<String>) -> Self {
        ToolError::Host(HostFailure::new(kind, message))
    }
}

impl From<HostFailure> for ToolError {
    fn from(failure: HostFailure) -> Self {
        ToolError::Host(failure)
    }
}

impl From<ToolError> for ToolFailure {
    fn from(error: ToolError) -> Self {
        match error {
            ToolError::Model(message) => ToolFailure::Model { message },
            ToolError::Host(failure) => ToolFailure::Host(failure),
        }
    }
}

/// What a tool (or tool source) gets besides its input.
///
/// Cloning is cheap. More fields may be added; build one with [`ToolContext::new`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ToolContext {
    cancel: CancellationToken,
}

impl ToolContext {
    /// A context whose cancellation is `cancel`.
    #[must_use]
    pub fn new(cancel: CancellationToken) -> Self {
        ToolContext { cancel }
    }

    /// Canceled when the run is canceled or the call timed out.
    ///
    /// The [`ToolSet`] also drops the call's future at that point, so a tool only needs to
    /// watch this token for work it started outside its own future (a child process, a
    /// spawned task).
    #[must_use]
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }
}

/// A native async tool.
///
/// The trait is object-safe (it uses [`async_trait`](mod@async_trait), so `invoke` returns a
/// boxed future): a [`ToolSet`] holds tools as `Arc<dyn Tool>`. Implement it with
/// `#[async_trait]`:
///
/// ```
/// use async_trait::async_trait;
/// use rebound_core::{ToolOutput, ToolSpec};
/// use rebound_effects::tools::{Tool, ToolContext, ToolError, ToolSet};
/// use serde_json::{json, Value};
///
/// struct Clock;
///
/// #[async_trait]
/// impl Tool for Clock {
///     fn spec(&self) -> ToolSpec {
///         ToolSpec {
///             name: "clock".into(),
///             description: "Tells the time.".into(),
///             input_schema: json!({"type": "object", "additionalProperties": false}),
///         }
///     }
///     async fn invoke(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::text("teatime"))
///     }
/// }
///
/// let tools = ToolSet::builder().tool(Clock).build()?;
/// assert_eq!(tools.specs()[0].name, "clock");
/// # Ok::<(), rebound_effects::tools::ToolSetError>(())
/// ```
///
/// `invoke` must not block its thread (no long synchronous I/O or computation): the timeout
/// and cancellation stop a call by dropping its future, which a blocked thread never yields
/// to. Put blocking work in `tokio::task::spawn_blocking`; the call then stops on time, though
/// the blocking work itself runs to its end in the background.
///
/// The [`ToolSet`] validates the input against the spec's schema before calling `invoke`, so
/// `invoke` sees only inputs the schema accepts (it should still not `unwrap` on them: a schema
/// may be looser than the code). A panic inside `invoke` is caught by the [`ToolSet`] and
/// becomes an error result; it does not crash the runner.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name, description and input schema the model is told about. Called once, when the
    /// [`ToolSet`] is built.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool on an input the schema accepted.
    async fn invoke(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;
}

/// An external source of tools that runs calls in batches: an MCP server, a plugin host.
///
/// A source may fail per call (return [`BatchOutcome::PerCall`] with an error for some calls)
/// or as a whole batch (return [`BatchOutcome::WholeBatch`], e.g. when its server crashed);
/// the [`ToolSet`] maps a whole-batch failure to every call the source was given. A call the
/// source leaves without an outcome becomes an error result naming the source.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// A short name for messages, e.g. `mcp:everything`.
    fn name(&self) -> &str;

    /// The tools this source offers (as learnt when it connected). Called once, when the
    /// [`ToolSet`] is built.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Runs `calls` (all named by this source's specs, inputs already validated against
    /// their schemas), answering each by its `id`.
    async fn run_batch(&self, calls: Vec<ToolCall>, ctx: ToolContext) -> BatchOutcome;
}

type BoxedInvoke = dyn Fn(
        Value,
        ToolContext,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>
    + Send
    + Sync;

/// A [`Tool`] made of a spec and an async closure: handy for small tools and tests.
///
/// See the [module example](self).
pub struct FnTool {
    spec: ToolSpec,
    invoke: Arc<BoxedInvoke>,
}

impl FnTool {
    /// A tool with this spec whose `invoke` calls `f`.
    pub fn new<F, Fut>(spec: ToolSpec, f: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        FnTool {
            spec,
            invoke: Arc::new(move |input, ctx| Box::pin(f(input, ctx))),
        }
    }
}

impl std::fmt::Debug for FnTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn invoke(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        (self.invoke)(input, ctx).await
    }
}
