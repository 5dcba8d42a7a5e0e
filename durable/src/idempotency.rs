//! The idempotency key of the tool call being run, for tools with side effects.
//!
//! A journal cannot make a side effect exactly-once: a tool call that did its work and then
//! lost its process before its result reached the journal runs again after the restart
//! (at-least-once in that window; once its result is journaled, never again). A tool whose
//! effect must not happen twice (a payment, an email, a ticket) passes this key to the
//! system it calls, which then does the work once per key.

use std::future::Future;

tokio::task_local! {
    static KEY: String;
}

/// The idempotency key of the tool call running on this task, when it runs in a durable
/// run: the same on every attempt of the call, including the one after a crash, and
/// different for every other call (of this or any other run). `None` outside a durable run.
///
/// Read it on the task that runs the call (a tool that spawns other tasks passes it on).
///
/// ```
/// // In a tool's code:
/// let key = rebound_durable::idempotency_key();
/// // e.g. as the `Idempotency-Key` header of the request that has the effect.
/// assert!(key.is_none()); // not inside a durable run here
/// ```
#[must_use]
pub fn idempotency_key() -> Option<String> {
    KEY.try_with(Clone::clone).ok()
}

/// Runs `call` with `key` as its idempotency key.
pub(crate) async fn with_key<F: Future>(key: String, call: F) -> F::Output {
    KEY.scope(key, call).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_key_is_seen_inside_the_call_only() {
        assert_eq!(idempotency_key(), None);
        let seen = with_key("run/1/call_a".into(), async { idempotency_key() }).await;
        assert_eq!(seen.as_deref(), Some("run/1/call_a"));
        assert_eq!(idempotency_key(), None);
    }
}
