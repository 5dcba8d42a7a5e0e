//! The run's metrics through the OpenTelemetry metrics API (feature `otel`): the GenAI
//! conventions' `gen_ai.client.operation.duration` and `gen_ai.client.token.usage`, and
//! rebound's own counters of retries, fallbacks, compactions, tool calls and budget waits.
//!
//! Instruments are made once per [`Telemetry`](super::Telemetry) (its first run), from the
//! meter it was given or the global one; with no meter provider installed they are the API's
//! no-ops.

use super::names as n;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};
use opentelemetry::KeyValue;
use std::time::Duration;

/// The instruments.
#[derive(Debug)]
pub(crate) struct Metrics {
    duration: Histogram<f64>,
    tokens: Histogram<u64>,
    retries: Counter<u64>,
    fallbacks: Counter<u64>,
    compactions: Counter<u64>,
    tool_calls: Counter<u64>,
    budget_wait: Histogram<f64>,
    budget_waiters: UpDownCounter<i64>,
    budget_tokens: Gauge<f64>,
}

impl Metrics {
    /// Makes the instruments on `meter`.
    pub(crate) fn new(meter: &Meter) -> Self {
        Metrics {
            duration: meter
                .f64_histogram(n::METRIC_OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration.")
                .with_boundaries(n::DURATION_BUCKETS.to_vec())
                .build(),
            tokens: meter
                .u64_histogram(n::METRIC_TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(n::TOKEN_BUCKETS.to_vec())
                .build(),
            retries: meter
                .u64_counter(n::METRIC_RETRIES)
                .with_unit("{retry}")
                .with_description("Provider requests retried after a failed attempt.")
                .build(),
            fallbacks: meter
                .u64_counter(n::METRIC_FALLBACKS)
                .with_unit("{fallback}")
                .with_description("Requests moved to the next target of the fallback chain.")
                .build(),
            compactions: meter
                .u64_counter(n::METRIC_COMPACTIONS)
                .with_unit("{compaction}")
                .with_description("Conversations compacted.")
                .build(),
            tool_calls: meter
                .u64_counter(n::METRIC_TOOL_CALLS)
                .with_unit("{call}")
                .with_description("Tool calls run, by tool and error type.")
                .build(),
            budget_wait: meter
                .f64_histogram(n::METRIC_BUDGET_WAIT)
                .with_unit("s")
                .with_description("Time a retry-budget permit was waited for.")
                .with_boundaries(n::DURATION_BUCKETS.to_vec())
                .build(),
            budget_waiters: meter
                .i64_up_down_counter(n::METRIC_BUDGET_WAITERS)
                .with_unit("{waiter}")
                .with_description("Runners waiting for a retry-budget permit.")
                .build(),
            budget_tokens: meter
                .f64_gauge(n::METRIC_BUDGET_TOKENS)
                .with_unit("{token}")
                .with_description("Tokens in the shared retry budget.")
                .build(),
        }
    }

    fn model_attributes(
        operation: &'static str,
        provider: &'static str,
        request_model: &str,
        response_model: Option<&str>,
        error: Option<&'static str>,
    ) -> Vec<KeyValue> {
        let mut attributes = vec![
            KeyValue::new(n::GEN_AI_OPERATION_NAME, operation),
            KeyValue::new(n::GEN_AI_PROVIDER_NAME, provider),
        ];
        if !request_model.is_empty() {
            attributes.push(KeyValue::new(
                n::GEN_AI_REQUEST_MODEL,
                request_model.to_owned(),
            ));
        }
        if let Some(model) = response_model {
            attributes.push(KeyValue::new(n::GEN_AI_RESPONSE_MODEL, model.to_owned()));
        }
        if let Some(error) = error {
            attributes.push(KeyValue::new(n::ERROR_TYPE, error));
        }
        attributes
    }

    /// A `chat` call ended after `elapsed`, answered by `response_model` or failed.
    pub(crate) fn chat_finished(
        &self,
        provider: &'static str,
        request_model: &str,
        response_model: Option<&str>,
        error: Option<&'static str>,
        elapsed: Duration,
    ) {
        let attributes =
            Self::model_attributes(n::CHAT, provider, request_model, response_model, error);
        self.duration.record(elapsed.as_secs_f64(), &attributes);
    }

    /// A run ended after `elapsed`.
    pub(crate) fn run_finished(
        &self,
        provider: &'static str,
        request_model: &str,
        error: Option<&'static str>,
        elapsed: Duration,
    ) {
        let attributes =
            Self::model_attributes(n::INVOKE_AGENT, provider, request_model, None, error);
        self.duration.record(elapsed.as_secs_f64(), &attributes);
    }

    /// An answered `chat` call's tokens.
    pub(crate) fn tokens(
        &self,
        provider: &'static str,
        request_model: &str,
        response_model: Option<&str>,
        input: u64,
        output: u64,
    ) {
        let mut attributes =
            Self::model_attributes(n::CHAT, provider, request_model, response_model, None);
        attributes.push(KeyValue::new(n::GEN_AI_TOKEN_TYPE, "input"));
        self.tokens.record(input, &attributes);
        if let Some(last) = attributes.last_mut() {
            *last = KeyValue::new(n::GEN_AI_TOKEN_TYPE, "output");
        }
        self.tokens.record(output, &attributes);
    }

    /// A retry sent (its request went out; one announced and canceled in its backoff is
    /// not one).
    pub(crate) fn retry(
        &self,
        provider: &'static str,
        model: &str,
        error: &'static str,
        reason: &'static str,
    ) {
        let mut attributes = Self::model_attributes(n::CHAT, provider, model, None, Some(error));
        attributes.push(KeyValue::new(n::REBOUND_RETRY_REASON, reason));
        self.retries.add(1, &attributes);
    }

    /// A move to the next target.
    pub(crate) fn fallback(&self, provider: &'static str, model: &str, error: &'static str) {
        let attributes = Self::model_attributes(n::CHAT, provider, model, None, Some(error));
        self.fallbacks.add(1, &attributes);
    }

    /// A compaction applied.
    pub(crate) fn compaction(&self, reason: &str, method: &str) {
        self.compactions.add(
            1,
            &[
                KeyValue::new(n::REBOUND_COMPACTION_REASON, reason.to_owned()),
                KeyValue::new(n::REBOUND_COMPACTION_METHOD, method.to_owned()),
            ],
        );
    }

    /// A tool call ended, failed with `error` or not.
    pub(crate) fn tool_call(&self, tool: &str, error: Option<&'static str>) {
        let mut attributes = vec![KeyValue::new(n::GEN_AI_TOOL_NAME, tool.to_owned())];
        if let Some(error) = error {
            attributes.push(KeyValue::new(n::ERROR_TYPE, error));
        }
        self.tool_calls.add(1, &attributes);
    }

    /// A budget permit was answered with `decision` after `waited`.
    pub(crate) fn budget_answered(&self, decision: &'static str, waited: Duration) {
        self.budget_wait.record(
            waited.as_secs_f64(),
            &[KeyValue::new(n::REBOUND_BUDGET_DECISION, decision)],
        );
    }

    /// A runner started (`1`) or stopped (`-1`) waiting for a permit.
    pub(crate) fn budget_waiters(&self, delta: i64) {
        self.budget_waiters.add(delta, &[]);
    }

    /// The budget's tokens now.
    pub(crate) fn budget_tokens(&self, tokens: f64) {
        self.budget_tokens.record(tokens, &[]);
    }
}
