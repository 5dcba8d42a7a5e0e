//! The model of the budget in Redis (`rebound_sim::redis_store`), through its public API:
//! when an answer reaches its process, what a process does while Redis is down, and what a
//! fleet of processes on it sends.

use rebound_core::{
    BudgetConfig, BudgetNote, BudgetUse, Millis, PermitAsk, PermitDecision, PermitKind,
    RetryBudget, Ticket,
};
use rebound_sim::redis_store::{ProcessId, RedisOutage, RedisStore, RedisTiming, StoreEvent};
use rebound_sim::{
    simulate_fleet, simulate_fleet_in_redis, FleetAgent, Scenario, SimConfig, SimOutcome,
};

const A: ProcessId = ProcessId(0);
const B: ProcessId = ProcessId(1);

/// Tokens only from successes: nothing at the start, no refill.
fn paid_by_successes() -> BudgetConfig {
    BudgetConfig::default()
        .with_initial(0.0)
        .with_refill_per_sec(0.0)
        .with_deposit_per_request(0.0)
        .with_deposit_per_answered_retry(0.0)
}

fn charged(deadline_ms: u64) -> PermitAsk {
    PermitAsk {
        kind: PermitKind::Charged,
        target: 0,
        deadline: Millis(deadline_ms),
        since: Millis(0),
    }
}

fn first_attempt() -> PermitAsk {
    PermitAsk {
        kind: PermitKind::FirstAttempt,
        ..charged(0)
    }
}

/// Ticks the store at each of its wake-ups up to `until`; every answer with the time it
/// reached its process.
fn run_until(store: &mut RedisStore, until: u64) -> Vec<(Millis, Ticket, PermitDecision)> {
    let mut answers = Vec::new();
    while let Some(at) = store.next_wakeup().filter(|at| at.0 <= until) {
        store.tick(at);
        while let Some((ticket, decision)) = store.poll_decision() {
            answers.push((at, ticket, decision));
        }
    }
    store.tick(Millis(until));
    while let Some((ticket, decision)) = store.poll_decision() {
        answers.push((Millis(until), ticket, decision));
    }
    answers
}

/// When `ticket` was answered, and how.
fn answer_of(
    answers: &[(Millis, Ticket, PermitDecision)],
    ticket: Ticket,
) -> Option<(Millis, PermitDecision)> {
    answers
        .iter()
        .find(|(_, t, _)| *t == ticket)
        .map(|(at, _, d)| (*at, *d))
}

#[test]
fn a_grant_paid_by_another_process_reaches_the_waiter_when_its_process_reads_its_inbox() {
    let rt = 4;
    let deposit_at = 500;
    // In memory, the success grants the waiter the moment it lands.
    let mut memory = RetryBudget::new(paid_by_successes());
    assert_eq!(memory.request(Millis(0), Ticket(1), charged(10_000)), None);
    memory.record(Millis(deposit_at), BudgetNote::Succeeded { target: 0 });
    assert_eq!(
        memory.poll_decision(),
        Some((Ticket(1), PermitDecision::Granted))
    );

    // In Redis, with A subscribed: B's note reaches Redis, Redis wakes A, A reads its inbox.
    let timing = RedisTiming::default().with_round_trip_ms(rt);
    let mut store = RedisStore::new(paid_by_successes(), timing);
    assert_eq!(
        store.request(Millis(0), A, Ticket(1), charged(10_000)),
        None
    );
    let mut answers = run_until(&mut store, deposit_at);
    assert_eq!(answer_of(&answers, Ticket(1)), None, "nothing pays before");
    store.record(Millis(deposit_at), B, BudgetNote::Succeeded { target: 0 });
    answers.extend(run_until(&mut store, 5_000));
    assert_eq!(
        answer_of(&answers, Ticket(1)),
        Some((Millis(deposit_at + 2 * rt), PermitDecision::Granted)),
        "the note's way there, the wake-up's way back, then A's inbox read there and back"
    );
    assert!(store.counts().wakes >= 1);

    // Never subscribed: A hears of it at its first poll after the deposit landed, at most a
    // poll interval (and the read's round trip) later.
    let unsubscribed = timing.with_subscribe_ms(1_000_000);
    let mut store = RedisStore::new(paid_by_successes(), unsubscribed);
    assert_eq!(
        store.request(Millis(0), A, Ticket(1), charged(10_000)),
        None
    );
    let mut answers = run_until(&mut store, deposit_at);
    let polls_before = store.counts().polls;
    assert!(
        polls_before >= deposit_at / timing.poll_interval_ms - 1,
        "{polls_before}"
    );
    store.record(Millis(deposit_at), B, BudgetNote::Succeeded { target: 0 });
    answers.extend(run_until(&mut store, 5_000));
    let (at, decision) = answer_of(&answers, Ticket(1)).expect("an answer");
    assert_eq!(decision, PermitDecision::Granted);
    let landed = deposit_at + rt / 2;
    assert!(
        at.0 > deposit_at + 2 * rt,
        "{at}: a wake-up cannot have come"
    );
    assert!(
        at.0 <= landed + timing.poll_interval_ms + rt,
        "{at}: later than the next poll"
    );
    assert_eq!(store.counts().wakes, 0);
}

#[test]
fn a_denial_is_not_published_and_reaches_the_waiter_at_its_process_s_deadline_poll() {
    let timing = RedisTiming::default().with_round_trip_ms(2);
    let mut store = RedisStore::new(paid_by_successes(), timing);
    let deadline = 700;
    assert_eq!(
        store.request(Millis(0), A, Ticket(1), charged(deadline)),
        None
    );
    let answers = run_until(&mut store, 5_000);
    let (at, decision) = answer_of(&answers, Ticket(1)).expect("an answer");
    assert_eq!(decision, PermitDecision::Denied);
    assert!(at.0 >= deadline, "{at}: denied before its deadline");
    assert!(
        at.0 <= deadline + rebound_sim::redis_store::DEADLINE_POLL_MS + timing.round_trip_ms,
        "{at}: the process polls for its deadline"
    );
    assert_eq!(store.counts().wakes, 0, "denials wake nobody");
}

#[test]
fn with_redis_down_a_process_decides_locally_says_so_once_and_returns_when_redis_answers() {
    let rt = 2;
    let timing = RedisTiming::default().with_round_trip_ms(rt);
    let retry = timing.retry_redis_after_ms;
    let outage = RedisOutage::new(1_000, 3_000).expect("a window");
    let mut store = RedisStore::new(BudgetConfig::default(), timing).with_outage(outage);

    // Before: Redis decides, a round trip later.
    assert_eq!(
        store.request(Millis(500), A, Ticket(1), first_attempt()),
        None
    );
    let answers = run_until(&mut store, 900);
    assert_eq!(
        answer_of(&answers, Ticket(1)),
        Some((Millis(500 + rt), PermitDecision::Granted))
    );

    // Redis stopped: the call is refused, the process falls back and decides locally.
    assert_eq!(
        store.request(Millis(1_500), A, Ticket(2), first_attempt()),
        None
    );
    let answers = run_until(&mut store, 1_550);
    assert_eq!(
        answer_of(&answers, Ticket(2)),
        Some((Millis(1_500 + rt), PermitDecision::Granted))
    );
    assert!(!store.is_shared(A));
    assert!(store.is_shared(B), "B never called");
    // Until `retry_redis_after` passed, the local budget answers at once.
    assert_eq!(
        store.request(Millis(1_600), A, Ticket(3), first_attempt()),
        Some(PermitDecision::Granted)
    );
    // Then one decision tries Redis, still stopped: local again, told once only.
    let tried = 1_500 + rt + retry;
    assert_eq!(
        store.request(Millis(tried), A, Ticket(4), first_attempt()),
        None
    );
    run_until(&mut store, tried + 50);
    assert!(!store.is_shared(A));
    // Back after the window (and another `retry_redis_after`): shared again.
    let back = 3_000 + retry;
    assert_eq!(
        store.request(Millis(back), A, Ticket(5), first_attempt()),
        None
    );
    let answers = run_until(&mut store, back + 50);
    assert_eq!(
        answer_of(&answers, Ticket(5)),
        Some((Millis(back + rt), PermitDecision::Granted))
    );
    assert!(store.is_shared(A));
    let events: Vec<(Millis, ProcessId, StoreEvent)> = store
        .notifications()
        .iter()
        .map(|n| (n.at, n.process, n.event))
        .collect();
    assert_eq!(
        events,
        vec![
            (Millis(1_500 + rt), A, StoreEvent::FellBack),
            (Millis(back + rt), A, StoreEvent::Restored),
        ]
    );
    let counts = store.counts();
    assert_eq!((counts.fell_back, counts.restored), (1, 1));
    assert_eq!(counts.local_decisions, 3, "tickets 2, 3 and 4");
}

#[test]
fn a_retry_queued_in_redis_asks_the_local_budget_when_redis_stops() {
    let timing = RedisTiming::default().with_round_trip_ms(2);
    let outage = RedisOutage::new(1_000, 60_000).expect("a window");
    let mut store = RedisStore::new(paid_by_successes(), timing).with_outage(outage);
    assert_eq!(
        store.request(Millis(0), A, Ticket(1), charged(30_000)),
        None
    );
    let answers = run_until(&mut store, 900);
    assert!(answers.is_empty(), "queued in Redis: {answers:?}");
    // Redis stops: the subscription breaks, the process's poll fails, the waiter asks its
    // local budget (as empty), and the process says it fell back.
    let answers = run_until(&mut store, 1_900);
    assert!(answers.is_empty(), "waiting locally: {answers:?}");
    assert!(!store.is_shared(A));
    assert_eq!(store.counts().fell_back, 1);
    // A success of the same process pays its local budget, which grants at once.
    store.record(Millis(2_000), A, BudgetNote::Succeeded { target: 0 });
    assert_eq!(
        store.poll_decision(),
        Some((Ticket(1), PermitDecision::Granted))
    );
    assert_eq!(store.shared_stats().granted, 0, "Redis granted nothing");
}

#[test]
fn an_outage_window_must_hold_time() {
    assert_eq!(RedisOutage::new(5, 5), None);
    assert_eq!(RedisOutage::new(9, 2), None);
    let window = RedisOutage::new(2, 9).expect("a window");
    assert_eq!((window.from(), window.until()), (Millis(2), Millis(9)));
}

fn total_outage_fleet(
    scenario: &Scenario,
    processes: u64,
    per_process: u64,
) -> Vec<Vec<FleetAgent<'_>>> {
    (0..processes)
        .map(|p| {
            (0..per_process)
                .map(|i| FleetAgent {
                    scenario,
                    seed: p * 1_000 + i,
                    start_ms: (p * per_process + i) * 37,
                })
                .collect()
        })
        .collect()
}

fn budgeted() -> SimConfig {
    let mut config = SimConfig::default().with_budget(BudgetConfig::default());
    config.machine.retry.max_attempts = 8;
    config.machine.retry_budget = Some(BudgetUse::default());
    config
}

fn requests(outcomes: &[Vec<SimOutcome>]) -> u32 {
    outcomes.iter().flatten().map(SimOutcome::requests).sum()
}

#[test]
fn processes_sharing_redis_spend_one_budget_and_with_redis_down_a_budget_each() {
    let scenario = Scenario::builtin("total-outage").expect("a built-in");
    let fleet = total_outage_fleet(&scenario, 5, 10);
    let config = budgeted();
    let one_budget: u32 = simulate_fleet(
        &fleet.iter().flatten().copied().collect::<Vec<_>>(),
        &config,
    )
    .expect("the fleet runs")
    .iter()
    .map(SimOutcome::requests)
    .sum();
    let budget_each: u32 = fleet
        .iter()
        .map(|agents| {
            simulate_fleet(agents, &config)
                .expect("the fleet runs")
                .iter()
                .map(SimOutcome::requests)
                .sum::<u32>()
        })
        .sum();
    assert!(one_budget < budget_each, "{one_budget} vs {budget_each}");

    let mut store = RedisStore::new(BudgetConfig::default(), RedisTiming::default());
    let in_redis = simulate_fleet_in_redis(&fleet, &config, &mut store).expect("the fleet runs");
    assert_eq!(in_redis.len(), fleet.len());
    assert!(in_redis.iter().zip(&fleet).all(|(o, f)| o.len() == f.len()));
    let shared = requests(&in_redis);
    let gap = shared.abs_diff(one_budget);
    assert!(
        gap * 10 <= one_budget && shared < budget_each,
        "in Redis {shared}, one budget {one_budget}, a budget each {budget_each}"
    );
    assert_eq!(store.counts().fell_back, 0);

    // Redis down from the start to past the end: every process falls back once, and spends
    // its own budget.
    let down = RedisOutage::new(0, u64::MAX).expect("a window");
    let mut store =
        RedisStore::new(BudgetConfig::default(), RedisTiming::default()).with_outage(down);
    let local = requests(&simulate_fleet_in_redis(&fleet, &config, &mut store).expect("runs"));
    assert_eq!(store.counts().fell_back, fleet.len() as u64);
    assert_eq!(store.counts().restored, 0);
    let gap = local.abs_diff(budget_each);
    assert!(
        gap * 10 <= budget_each && local > shared,
        "Redis down {local}, a budget each {budget_each}, in Redis {shared}"
    );
}

#[test]
fn the_same_fleet_on_the_same_store_gives_the_same_runs() {
    let scenario = Scenario::builtin("blip").expect("a built-in");
    let fleet = total_outage_fleet(&scenario, 4, 8);
    let run = || {
        let outage = RedisOutage::new(300, 1_500).expect("a window");
        let mut store =
            RedisStore::new(BudgetConfig::default(), RedisTiming::default()).with_outage(outage);
        let outcomes = simulate_fleet_in_redis(&fleet, &budgeted(), &mut store).expect("runs");
        let sent: Vec<Vec<u64>> = outcomes
            .iter()
            .flatten()
            .map(|o| {
                o.commands()
                    .filter(|(_, c)| matches!(c, rebound_core::Command::SendRequest { .. }))
                    .map(|(t, _)| t.0)
                    .collect()
            })
            .collect();
        (sent, store.counts(), store.notifications().to_vec())
    };
    assert_eq!(run(), run());
}
