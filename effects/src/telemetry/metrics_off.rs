//! Without the `otel` feature there are no metrics: these do nothing, and the runner never
//! has any to call (its `Option<Arc<Metrics>>` is always `None`).

use std::time::Duration;

/// No instruments.
#[derive(Debug)]
pub(crate) struct Metrics;

#[allow(clippy::unused_self)]
impl Metrics {
    pub(crate) fn chat_finished(
        &self,
        _: &'static str,
        _: &str,
        _: Option<&str>,
        _: Option<&'static str>,
        _: Duration,
    ) {
    }
    pub(crate) fn run_finished(
        &self,
        _: &'static str,
        _: &str,
        _: Option<&'static str>,
        _: Duration,
    ) {
    }
    pub(crate) fn tokens(&self, _: &'static str, _: &str, _: Option<&str>, _: u64, _: u64) {}
    pub(crate) fn retry(&self, _: &'static str, _: &str, _: &'static str, _: &'static str) {}
    pub(crate) fn fallback(&self, _: &'static str, _: &str, _: &'static str) {}
    pub(crate) fn compaction(&self, _: &str, _: &str) {}
    pub(crate) fn tool_call(&self, _: &str, _: Option<&'static str>) {}
    pub(crate) fn budget_answered(&self, _: &'static str, _: Duration) {}
    pub(crate) fn budget_waiters(&self, _: i64) {}
    pub(crate) fn budget_tokens(&self, _: f64) {}
}
