//! The retry budget shared by processes through Redis, as far as it decides: the budget
//! script's operations and replies ([`ScriptOp`], [`ScriptReply`]), and a process's side of
//! it as a state machine with no I/O ([`BudgetClient`]): when to call, what to call again
//! after a lost reply, when to read the queue's answers, when to fall back to the local
//! budget and when to come back, what to withdraw.
//!
//! The rules of the budget itself are [`RetryBudget`](crate::RetryBudget)'s; the script in
//! Redis (`rebound-effects`) runs them atomically on the server. The Redis store of
//! `rebound-effects` drives a [`BudgetClient`] over a real connection, and the simulator
//! (`rebound-sim`) over a virtual Redis, so what the simulator shows of a fleet is what the
//! real store does.

mod client;
mod script;

pub use client::{
    Answer, BudgetClient, CallId, ClientTiming, OpId, Output, DEADLINE_GRACE_MS, DEADLINE_POLL_MS,
};
pub use script::{
    PollAnswer, RedisBudgetError, RedisBudgetStats, ScriptOp, ScriptReply, POLL_BATCH,
};
