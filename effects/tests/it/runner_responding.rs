//! The runner tells the machine when an answer begins, while it still streams: a retry
//! being answered reaches the shared budget before its success does, as a real HTTP
//! provider streams it from 127.0.0.1.

use crate::shared_buf;

use rebound_core::{BudgetConfig, BudgetUse, Event, MachineConfig, ProviderKind, RetryConfig};
use rebound_effects::budget::SharedBudget;
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::{RunInput, Runner, TraceRecorder};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::{Scenario, Trace};
use shared_buf::SharedBuf;

/// One run against a fake Anthropic server playing `scenario`, with a shared budget that
/// only an answered retry pays into; returns the run's trace and the budget.
async fn traced_run(scenario: &str) -> (Trace, SharedBudget) {
    let scenario: Scenario = serde_json::from_str(scenario).expect("a scenario");
    let server = FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("fake server starts");
    let budget = SharedBudget::new(
        BudgetConfig::default()
            .with_capacity(5.0)
            .with_initial(1.0)
            .with_deposit_per_request(0.0)
            .with_deposit_per_success(0.0)
            .with_refill_per_sec(0.0)
            .with_deposit_per_answered_retry(4.0),
    );
    let config = MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_retry_budget(BudgetUse::new(1_000));
    let mut provider =
        HttpProviderConfig::new(ProviderKind::Anthropic, "claude-test", ApiKey::new("k"));
    provider.base_url = server.base_url();
    let provider = HttpProvider::new(provider).expect("valid provider");
    let buf = SharedBuf::default();
    let mut runner = Runner::new(config, vec![Box::new(provider)])
        .seed(1)
        .budget(budget.clone())
        .trace(TraceRecorder::new(buf.clone()));
    runner
        .run(RunInput::text("hello"))
        .await
        .expect("the run completes");
    server.shutdown().await;
    let text = buf.text();
    (Trace::parse(&text).expect("a readable trace"), budget)
}

/// The trace's events, as their `type` names.
fn events(trace: &Trace) -> Vec<String> {
    trace
        .steps
        .iter()
        .map(|s| {
            serde_json::to_value(&s.event).expect("an event is JSON")["type"]
                .as_str()
                .expect("a type")
                .to_owned()
        })
        .collect()
}

/// The budget notes the machine gave for each `provider_responding` event.
fn notes_on_responding(trace: &Trace) -> Vec<Vec<String>> {
    trace
        .steps
        .iter()
        .filter(|s| matches!(s.event, Event::ProviderResponding { .. }))
        .map(|s| {
            s.commands
                .iter()
                .filter(|c| c["type"] == "note_budget")
                .filter_map(|c| c["note"]["note"].as_str().map(str::to_owned))
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_retry_being_answered_pays_the_budget_before_its_success_arrives() {
    let (trace, budget) = traced_run(
        r#"{"turns": [{"faults": [{"type": "http", "status": 529}], "answer": {"text": "Hi."}}]}"#,
    )
    .await;
    let events = events(&trace);
    let answered = events
        .iter()
        .rposition(|e| e == "provider_responding")
        .expect("the retry's answer began");
    let succeeded = events
        .iter()
        .position(|e| e == "provider_succeeded")
        .expect("the retry succeeded");
    assert!(answered < succeeded, "{events:?}");
    assert_eq!(notes_on_responding(&trace), [vec!["retry_answered"]]);
    // The one token paid for the retry; the answered retry paid four back.
    assert_eq!(budget.balance(), 4.0);
}

#[tokio::test]
async fn a_first_attempt_being_answered_pays_nothing() {
    let (trace, budget) = traced_run(r#"{"turns": [{"answer": {"text": "Hi."}}]}"#).await;
    assert_eq!(notes_on_responding(&trace), [Vec::<String>::new()]);
    assert_eq!(budget.balance(), 1.0);
}
