//! core's `RetryBudget` for JavaScript: one token bucket of retries shared by every machine
//! of a process (or a worker). Asks, notes and decisions cross as JSON text in their JSON
//! shape; core decides everything.
//!
//! The only thing kept here besides the budget is the set of tickets whose answer is still
//! to come, so that a ticket given twice is refused (core names a waiting request by its
//! ticket alone: a second request with the same ticket would make its answers ambiguous).

use crate::convert::{to_json, whole};
use crate::errors::{error, Kind, Result};
use rebound_core::{
    BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, RetryBudget as CoreBudget, Ticket,
};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use wasm_bindgen::prelude::*;

/// What a JSON value is, for an error message.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The JSON object of `text`, of `kind` when it is none. Only an object: serde would also
/// read a struct from an array, by position (`[1, 2]` as a config of capacity 1 and
/// initial 2), which is no JSON shape of these types.
fn object(text: &str, what: &str, kind: Kind) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(error(
            kind,
            format!(
                "invalid {what}: expected an object, got {}",
                kind_of(&other)
            ),
        )),
        Err(e) => Err(error(kind, format!("{what} is not valid JSON: {e}"))),
    }
}

/// A `T` read from the JSON object of `text`; a malformed one is a BudgetError.
fn read<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_value(Value::Object(object(text, what, Kind::Budget)?))
        .map_err(|e| error(Kind::Budget, format!("invalid {what}: {e}")))
}

/// A budget config from its JSON shape: core reads it (an object only, unknown fields
/// refused, defaults for the rest).
fn budget_config(text: &str) -> Result<BudgetConfig> {
    crate::convert::from_json(text, "budget config", Kind::Config)
}

/// The budget's clock reading (its fraction dropped as the machine drops it).
fn clock(now_ms: f64) -> Result<Millis> {
    crate::convert::clock(now_ms, "the budget's clock", Kind::Rebound)
}

fn ticket(value: f64) -> Result<u64> {
    whole(value, "ticket", Kind::Rebound)
}

/// The JSON text of a permit decision: `"granted"`, `"denied"` or `{"wait_until": ms}`.
fn decision(decision: &PermitDecision) -> Result<String> {
    to_json(decision)
}

/// core's retry budget: a token bucket of retries shared by every machine of a process, with
/// a first-come, first-served queue of waiting retries and the providers' shared rate-limit
/// windows. Use `RetryBudget` of `lib/budget.js`, which parses what it returns.
#[wasm_bindgen(js_name = RetryBudget)]
pub struct Budget {
    budget: CoreBudget,
    config: BudgetConfig,
    /// Tickets queued by `request` whose answer `pollDecision` has not handed out yet.
    pending: BTreeSet<u64>,
}

#[wasm_bindgen(js_class = RetryBudget)]
impl Budget {
    /// A budget of `config_json` (a BudgetConfig's JSON text; none: core's default). A
    /// ConfigError for one that cannot be read or names a field core does not know.
    #[wasm_bindgen(constructor)]
    pub fn new(config_json: Option<String>) -> Result<Budget> {
        let config = match config_json {
            Some(text) => budget_config(&text)?,
            None => BudgetConfig::default(),
        };
        Ok(Budget {
            budget: CoreBudget::new(config.clone()),
            config,
            pending: BTreeSet::new(),
        })
    }

    /// Asks for a permit at `now_ms` under `ticket` (an `acquire_permit`'s `ask`, JSON text).
    /// Returns the decision's JSON text when it is known at once, or nothing when the request
    /// waits: its answer comes from `pollDecision`. A BudgetError for a malformed ask or a
    /// ticket whose answer is still to come.
    pub fn request(&mut self, now_ms: f64, ticket: f64, ask_json: &str) -> Result<Option<String>> {
        let now = clock(now_ms)?;
        let ticket = self::ticket(ticket)?;
        let ask: PermitAsk = read(ask_json, "permit ask")?;
        if self.pending.contains(&ticket) {
            return Err(error(
                Kind::Budget,
                format!(
                    "ticket {ticket} already names a request whose answer pollDecision has not \
                     handed out; give each waiting request its own ticket"
                ),
            ));
        }
        let decided = self.budget.request(now, Ticket(ticket), ask);
        if decided.is_none() {
            self.pending.insert(ticket);
        }
        decided.as_ref().map(decision).transpose()
    }

    /// Takes what a machine noted (a `note_budget`'s `note`, JSON text) at `now_ms`. A
    /// BudgetError when it is malformed.
    pub fn record(&mut self, now_ms: f64, note_json: &str) -> Result<()> {
        let now = clock(now_ms)?;
        let note: BudgetNote = read(note_json, "budget note")?;
        self.budget.record(now, note);
        Ok(())
    }

    /// Lets time pass to `now_ms`: refill, the grants it pays for, denials at deadlines.
    pub fn tick(&mut self, now_ms: f64) -> Result<()> {
        let now = clock(now_ms)?;
        self.budget.tick(now);
        Ok(())
    }

    /// Withdraws a waiting request; returns whether it was waiting.
    pub fn cancel(&mut self, ticket: f64) -> Result<bool> {
        let ticket = self::ticket(ticket)?;
        let was_waiting = self.budget.cancel(Ticket(ticket));
        if was_waiting {
            self.pending.remove(&ticket);
        }
        Ok(was_waiting)
    }

    /// The next answer decided for a waiting request, as the JSON text of
    /// `[ticket, decision]`, or nothing.
    #[wasm_bindgen(js_name = pollDecision)]
    pub fn poll_decision(&mut self) -> Result<Option<String>> {
        let Some((ticket, decided)) = self.budget.poll_decision() else {
            return Ok(None);
        };
        self.pending.remove(&ticket.0);
        to_json(&(ticket.0, decided)).map(Some)
    }

    /// When `tick` next changes something without other input (ms), or nothing when nobody
    /// waits.
    #[wasm_bindgen(js_name = nextWakeup)]
    pub fn next_wakeup(&self) -> Option<f64> {
        // A clock reading the budget was given, so below 2^53: exact as a number.
        #[allow(clippy::cast_precision_loss)]
        self.budget.next_wakeup().map(|t| t.0 as f64)
    }

    /// Tokens available at `now_ms` (after refilling up to it, which may decide waiters:
    /// drain `pollDecision` afterwards).
    pub fn balance(&mut self, now_ms: f64) -> Result<f64> {
        let now = clock(now_ms)?;
        Ok(self.budget.balance(now))
    }

    /// Charged permits waiting in the queue.
    #[wasm_bindgen(getter)]
    pub fn waiting(&self) -> usize {
        self.budget.waiting()
    }

    /// What the budget did so far, as JSON text: `{"granted", "denied", "queued",
    /// "deposited_milli"}`.
    #[wasm_bindgen(js_name = statsJson)]
    pub fn stats_json(&self) -> Result<String> {
        to_json(&self.budget.stats())
    }

    /// The configuration, as JSON text, every default filled in.
    #[wasm_bindgen(js_name = configJson)]
    pub fn config_json(&self) -> Result<String> {
        to_json(&self.config)
    }
}
