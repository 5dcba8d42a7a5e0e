//! Durable rebound agent runs on [Restate](https://restate.dev): a crash loses nothing and
//! repeats nothing.
//!
//! rebound's [`AgentMachine`](rebound_core::AgentMachine) decides as a pure function of its
//! configuration, its seed and the events it is given. [`DurableAgent`] runs it inside a
//! Restate Virtual Object (one per conversation id) and makes every effect a journaled
//! step: each provider attempt, each tool call, each compaction and each retry-budget
//! decision is written to Restate's journal with the time it finished, and each backoff is a
//! durable timer. When the process dies, Restate calls the handler again and replays the
//! journal: a fresh machine, seeded from the engine's deterministic randomness, gets the
//! same events at the same times and so gives the same commands, and every step already in
//! the journal is answered from it. No request that completed is sent again, no tool whose
//! result is journaled runs again, and a backoff ends at the time it was set for.
//!
//! rebound's retry policy decides every retry, fallback and compaction; Restate's own
//! retries only bring the handler back after a crash or a lost connection (a step never
//! fails in Restate's eyes: a failed attempt is an event for the machine).
//!
//! What a journal cannot promise: a tool call that had its effect and then lost its process
//! before its result was journaled runs again (at-least-once in that window). Each call gets
//! an [`idempotency_key`] that is the same on every attempt of the call, for the systems a
//! tool changes.
//!
//! What is not journaled: the side channel ([`DurableAgent::receivers`]), where streamed
//! text and retry notices go as they happen; a step read back from the journal is not shown
//! again.
//!
//! A cancel of the invocation takes effect when the step under way ends (Restate runs a step
//! to its end): the machine hears the step's outcome first when it finished, then the
//! cancel, so the saved conversation keeps every answer and tool result that finished, and
//! nothing starts after it. A failed run answers with a status that says which failure it was
//! and its [`RunFailure`] as the error's message.
//!
//! `rebound durable serve` runs this endpoint with the options of `rebound run`; the
//! repository's `docs/durable.md` shows the commands to start Restate, register the endpoint
//! and run a turn.

mod agent;
mod clock;
mod failure;
mod idempotency;
mod journal;
mod live;
mod register;

pub use agent::{serve, DurableAgent, ReceiverFactory, TurnInput, TurnReply, CONVERSATION_KEY};
pub use failure::RunFailure;
pub use idempotency::idempotency_key;
pub use register::{register, RegisterError};
