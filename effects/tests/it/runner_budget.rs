//! Runners sharing a retry budget share its clock: a run started later, or an hour later,
//! meets the budget at the budget's own time, so refill, deposits and deadlines agree.

use rebound_core::{
    BudgetConfig, BudgetUse, MachineConfig, PermitAsk, PermitDecision, PermitKind, ProviderKind,
    RetryConfig,
};
use rebound_effects::budget::SharedBudget;
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::Scenario;
use std::time::Duration;

fn refill_only(refill_per_sec: f64) -> BudgetConfig {
    BudgetConfig::default()
        .with_capacity(1.0)
        .with_initial(0.0)
        .with_deposit_per_request(0.0)
        .with_deposit_per_success(0.0)
        .with_refill_per_sec(refill_per_sec)
}

#[tokio::test]
async fn a_run_started_after_the_budget_waits_for_refill_on_the_budgets_clock() {
    // One 529, then the answer: the run needs one charged retry.
    let scenario: Scenario = serde_json::from_str(
        r#"{"turns": [{"faults": [{"type": "http", "status": 529}], "answer": {"text": "Hi."}}]}"#,
    )
    .expect("a scenario");
    let server = FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("fake server starts");
    // Another runner of the process spent the budget's one token a while after it started;
    // refill brings the next one a second later.
    let budget = SharedBudget::new(refill_only(1.0));
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let now = budget.now();
    let spent = PermitAsk {
        kind: PermitKind::Charged,
        target: 0,
        deadline: now,
        since: now,
    };
    assert_eq!(budget.acquire(spent).await, PermitDecision::Granted);
    let config = MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        // Enough to wait for the refill on the budget's clock. A run that counted time from
        // its own start would ask with a deadline in the budget's past, and be denied.
        .with_retry_budget(BudgetUse::new(1_500));
    let mut provider =
        HttpProviderConfig::new(ProviderKind::Anthropic, "claude-test", ApiKey::new("k"));
    provider.base_url = server.base_url();
    let provider = HttpProvider::new(provider).expect("valid provider");
    let mut runner = Runner::new(config, vec![Box::new(provider)])
        .seed(1)
        .budget(budget.clone());
    let summary = runner
        .run(RunInput::text("hello"))
        .await
        .expect("the retry waits for the refill on the budget's clock");
    assert_eq!(summary.stats.requests, 2);
    assert_eq!(budget.stats().granted, 2);
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_budget_an_hour_old_keeps_refilling() {
    let budget = SharedBudget::new(refill_only(0.5).with_capacity(3.0));
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!((budget.balance() - 3.0).abs() < f64::EPSILON);
    let ask = |budget: &SharedBudget| {
        let now = budget.now();
        PermitAsk {
            kind: PermitKind::Charged,
            target: 0,
            deadline: now.plus(10_000),
            since: now,
        }
    };
    for _ in 0..3 {
        assert_eq!(budget.acquire(ask(&budget)).await, PermitDecision::Granted);
    }
    // Empty an hour in: the next token is two seconds of refill away, as at the start.
    let before = tokio::time::Instant::now();
    assert_eq!(budget.acquire(ask(&budget)).await, PermitDecision::Granted);
    assert_eq!(before.elapsed(), Duration::from_secs(2));
}
