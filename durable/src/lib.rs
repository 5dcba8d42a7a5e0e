#![doc = include_str!("../README.md")]
// The README's code blocks are doc tests (the crate's front page on docs.rs and crates.io
// cannot rot), and no doc test may warn: an example that warns teaches the warning.
#![doc(test(attr(deny(warnings))))]

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
