//! The model of the budget in Redis (`rebound_sim::redis_store`), through its public API:
//! when an answer reaches its process, what a process does while Redis is down, and what a
//! fleet of processes on it sends.

use rebound_core::{
    BudgetConfig, BudgetNote, BudgetUse, Millis, PermitAsk, PermitDecision, PermitKind,
    RetryBudget, Ticket,
};
use rebound_sim::redis_store::{
    CallStalls, ProcessId, RedisOutage, RedisStore, RedisTiming, StoreCounts, StoreEvent,
};
use rebound_sim::scenario::{Answer, Fault, Outage, RandomFaults, Turn};
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
    // A refused call may have lost its reply: the ask is made once more, then decided
    // locally.
    let answers = run_until(&mut store, 1_550);
    assert_eq!(
        answer_of(&answers, Ticket(2)),
        Some((Millis(1_500 + 2 * rt), PermitDecision::Granted))
    );
    assert!(!store.is_shared(A));
    assert!(store.is_shared(B), "B never called");
    // Until `retry_redis_after` passed, the local budget answers at once.
    assert_eq!(
        store.request(Millis(1_600), A, Ticket(3), first_attempt()),
        Some(PermitDecision::Granted)
    );
    // Then one decision tries Redis, still stopped: local again, told once only.
    let tried = 1_500 + 2 * rt + retry;
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
            (Millis(1_500 + 2 * rt), A, StoreEvent::FellBack),
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

/// What a fleet in Redis did: every request's time (per agent), what the store counted,
/// and what it said (when, which process, what).
type Played = (
    Vec<Vec<u64>>,
    StoreCounts,
    Vec<(Millis, ProcessId, StoreEvent)>,
);

/// One of the outage study's models whose agents share a process, by name: one turn answered
/// "Done.", through a total outage (`total-outage`: 529 for ten minutes) or a rate limit
/// (`rate-limit-shared`: 429 with `retry-after: 5` for 12 s).
fn study_model(name: &str) -> Scenario {
    let (description, outage) = match name {
        "total-outage" => (
            "every attempt in the first ten minutes gets 529; all agents in one process",
            Outage::total(0, 600_000, Fault::http(529)),
        ),
        "rate-limit-shared" => (
            "the rate limit, all agents in one process",
            Outage::total(0, 12_000, Fault::http_with(429, "retry-after", "5")),
        ),
        other => panic!("no model {other}"),
    };
    let mut scenario = Scenario::default();
    scenario.name = name.into();
    scenario.description = description.into();
    scenario.turns = vec![Turn {
        answer: Answer::text("Done."),
        ..Turn::default()
    }];
    scenario.random = Some(RandomFaults {
        outages: vec![outage],
        ..RandomFaults::default()
    });
    scenario
}

/// A fleet of `processes` × 10 playing `model` in Redis with `timing` (and Redis down
/// during `outage`), its slow calls drawn from `seed`.
fn play_in_redis(
    model: &str,
    processes: u64,
    timing: RedisTiming,
    outage: Option<RedisOutage>,
    seed: u64,
) -> Played {
    let scenario = study_model(model);
    let fleet = total_outage_fleet(&scenario, processes, 10);
    let mut store = RedisStore::new(BudgetConfig::default(), timing).with_seed(seed);
    if let Some(outage) = outage {
        store = store.with_outage(outage);
    }
    let outcomes = simulate_fleet_in_redis(&fleet, &budgeted(), &mut store).expect("runs");
    let sent = outcomes
        .iter()
        .flatten()
        .map(|o| {
            o.commands()
                .filter(|(_, c)| matches!(c, rebound_core::Command::SendRequest { .. }))
                .map(|(t, _)| t.0)
                .collect()
        })
        .collect();
    let events = store
        .notifications()
        .iter()
        .map(|n| (n.at, n.process, n.event))
        .collect();
    (sent, store.counts(), events)
}

fn sum(sent: &[Vec<u64>]) -> (usize, u64) {
    (sent.iter().map(Vec::len).sum(), sent.iter().flatten().sum())
}

#[test]
fn without_slow_calls_a_fleet_keeps_its_figures_whatever_the_seed() {
    // Figures of the fleet on core's client, without slow calls: requests (how many, and
    // the sum of their times), calls, polls, wake-ups, local decisions, fallbacks and
    // returns. (The hand-kept model before it sent the same 155 requests, 347 ms earlier in
    // sum, with 293 calls and 10 wake-ups: it did not repeat an ask Redis refused, withdrew
    // waiters without a call, and woke a process whose own ask decided one of its
    // waiters.)
    let outage = RedisOutage::new(2_000, 6_000);
    let before = [
        (
            "total-outage",
            RedisTiming::default().with_round_trip_ms(3),
            outage,
            (155, 1_107_451),
            [307, 141, 5, 82, 4, 4],
        ),
        (
            "rate-limit-shared",
            RedisTiming::default().with_round_trip_ms(2),
            None,
            (52, 728_209),
            [230, 0, 0, 0, 0, 0],
        ),
    ];
    for (model, timing, outage, requests, counts) in before {
        // No stalls, or a chance of none: the seed draws nothing.
        for (timing, seed) in [
            (timing, 0),
            (timing.with_stalls(CallStalls::new(0, 500)), 7),
        ] {
            let (sent, c, _) = play_in_redis(model, 4, timing, outage, seed);
            assert_eq!(
                (
                    sum(&sent),
                    [
                        c.calls,
                        c.polls,
                        c.wakes,
                        c.local_decisions,
                        c.fell_back,
                        c.restored
                    ]
                ),
                (requests, counts),
                "{model}"
            );
            // Asks Redis refused are orphans (withdrawn once it answers), never timeouts.
            assert_eq!((c.timed_out, c.repaid), (0, 0), "{model}");
        }
    }
}

#[test]
fn with_slow_calls_processes_fall_back_and_return_as_the_real_store_does_and_a_seed_replays() {
    let timing = RedisTiming::default()
        .with_round_trip_ms(2)
        .with_stalls(CallStalls::new(50_000, 60));
    let (sent, counts, events) = play_in_redis("rate-limit-shared", 4, timing, None, 3);
    assert!(counts.timed_out > 0, "{counts:?}");
    // An ask or an inbox read times out twice before its process falls back, a note once;
    // a process already fallen back says nothing more.
    assert!(
        counts.fell_back > 0 && counts.fell_back <= counts.timed_out,
        "{counts:?}"
    );
    assert!(counts.restored > 0, "{counts:?}");
    assert!(counts.local_decisions > 0, "{counts:?}");
    assert_eq!(
        events.len() as u64,
        counts.fell_back + counts.restored,
        "{events:?}"
    );
    // Each process's notices alternate, a fallback first.
    for p in 0..4 {
        let mine: Vec<StoreEvent> = events
            .iter()
            .filter(|(_, process, _)| *process == ProcessId(p))
            .map(|(_, _, e)| *e)
            .collect();
        for (i, event) in mine.iter().enumerate() {
            let expected = if i % 2 == 0 {
                StoreEvent::FellBack
            } else {
                StoreEvent::Restored
            };
            assert_eq!(*event, expected, "process {p}: {mine:?}");
        }
    }
    // One seed, one run; another seed, other calls stall.
    assert_eq!(
        play_in_redis("rate-limit-shared", 4, timing, None, 3),
        (sent.clone(), counts, events.clone())
    );
    assert!(
        (4..8).any(|seed| play_in_redis("rate-limit-shared", 4, timing, None, seed).1 != counts),
        "the seed draws the stalls"
    );
    // Stalls within the call timeout delay replies and fail nothing.
    let in_time = timing.with_stalls(CallStalls::new(50_000, 40));
    let (sent_in_time, counts, events) = play_in_redis("rate-limit-shared", 4, in_time, None, 3);
    assert_eq!((counts.timed_out, counts.fell_back), (0, 0), "{counts:?}");
    assert!(events.is_empty());
    assert_ne!(sent_in_time, sent);
}

#[test]
fn slow_calls_cost_a_total_outage_more_requests_but_never_more_than_the_budgets_that_pay_them() {
    let scenario = Scenario::builtin("total-outage").expect("a built-in");
    let fleet = total_outage_fleet(&scenario, 5, 10);
    let config = budgeted();
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
    let in_redis = |stalls: CallStalls, seed: u64| {
        let timing = RedisTiming::default().with_stalls(stalls);
        let mut store = RedisStore::new(BudgetConfig::default(), timing).with_seed(seed);
        let outcomes = simulate_fleet_in_redis(&fleet, &config, &mut store).expect("runs");
        (requests(&outcomes), store.counts())
    };
    let (shared, _) = in_redis(CallStalls::NONE, 0);
    for seed in 1..4 {
        // One call in five misses the timeout: processes spend their local budgets for a
        // second after each fallback, as the real ones do on a loaded machine.
        let (slow, counts) = in_redis(CallStalls::new(200_000, 100), seed);
        assert!(counts.fell_back > 0, "{counts:?}");
        // Each retry is paid by Redis or by its process's local budget, never by both:
        // at most the retries of a budget each and of the shared one (first attempts
        // counted once).
        let agents = 50;
        assert!(
            shared < slow && slow <= budget_each + shared - agents,
            "seed {seed}: in Redis {shared}, with slow calls {slow}, a budget each {budget_each}"
        );
    }
}

#[test]
fn an_ask_whose_replies_miss_the_timeout_twice_is_decided_locally_and_its_token_paid_back() {
    // One token in Redis, one in each local budget; nothing else pays.
    let config = paid_by_successes().with_initial(1.0);
    let timing = RedisTiming::default()
        .with_round_trip_ms(2)
        .with_waiter_stale_after_ms(60_000)
        .with_stalls(CallStalls::new(500_000, 100));
    let timeout = timing.call_timeout_ms;
    // A seed whose first ask misses the timeout twice: Redis granted it a token in time,
    // and both replies were lost.
    let (seed, mut store, answers) = (0..100)
        .find_map(|seed| {
            let mut store = RedisStore::new(config.clone(), timing).with_seed(seed);
            store.request(Millis(0), A, Ticket(1), charged(30_000));
            let answers = run_until(&mut store, 500);
            (store.counts().orphaned == 1).then_some((seed, store, answers))
        })
        .expect("a seed among 100 with two stalls in a row");
    let counts = store.counts();
    assert_eq!((counts.timed_out, counts.fell_back), (2, 1), "seed {seed}");
    // Asked once more under the same request, which read the same answer: one grant.
    assert_eq!(store.shared_stats().granted, 1, "seed {seed}");
    // After the second timeout the local budget decides, with its own token.
    assert_eq!(
        answer_of(&answers, Ticket(1)),
        Some((Millis(2 * timeout), PermitDecision::Granted)),
        "seed {seed}"
    );
    assert!(!store.is_shared(A));
    // Once Redis answers A again, A withdraws the orphan: the token nobody used goes back.
    let mut at = 2 * timeout + timing.retry_redis_after_ms;
    for ticket in 2..40 {
        store.request(Millis(at), A, Ticket(ticket), first_attempt());
        run_until(&mut store, at + 500);
        if store.counts().restored == 1 {
            break;
        }
        at += timing.retry_redis_after_ms;
    }
    run_until(&mut store, at + 2_000);
    let counts = store.counts();
    assert_eq!(
        (counts.restored, counts.repaid),
        (1, 1),
        "seed {seed}: {counts:?}"
    );
    assert_eq!(store.shared_stats().granted, 0, "seed {seed}");
    assert_eq!(store.shared_balance(Millis(at + 2_000)), 1.0, "seed {seed}");
}

#[test]
fn a_new_connection_has_a_bound_of_its_own_and_a_call_whose_connection_misses_it_is_not_repeated() {
    // Every connecting takes 300 ms more: longer than a call may take, shorter than opening
    // a connection may. No call on an open connection stalls.
    let stalls = CallStalls::new(0, 300).with_fresh_per_million(1_000_000);
    let timing = RedisTiming::default()
        .with_round_trip_ms(2)
        .with_stalls(stalls);
    assert!(timing.call_timeout_ms < 300 && 300 < timing.connect_timeout_ms);
    let mut store = RedisStore::new(BudgetConfig::default(), timing);

    // A checks Redis at its start: its connection opens 300 ms later, within its own bound:
    // Redis answers, nothing falls back.
    store.check(Millis(0), A);
    run_until(&mut store, 400);
    assert!(store.is_shared(A));
    // Then it asks on the connection it has: answered in a round trip.
    assert_eq!(
        store.request(Millis(400), A, Ticket(1), first_attempt()),
        None
    );
    let answers = run_until(&mut store, 500);
    assert_eq!(
        answer_of(&answers, Ticket(1)),
        Some((Millis(402), PermitDecision::Granted))
    );
    let counts = store.counts();
    assert_eq!((counts.timed_out, counts.fell_back), (0, 0), "{counts:?}");

    // Opening a connection may take 200 ms: B's first call, an ask, gives up at 200 ms
    // without reaching Redis, is not made again, and B decides locally.
    let timing = timing.with_connect_timeout_ms(200);
    let retry = timing.retry_redis_after_ms;
    let mut store = RedisStore::new(BudgetConfig::default(), timing);
    assert_eq!(
        store.request(Millis(0), B, Ticket(2), first_attempt()),
        None
    );
    let answers = run_until(&mut store, 500);
    assert_eq!(
        answer_of(&answers, Ticket(2)),
        Some((Millis(200), PermitDecision::Granted))
    );
    assert!(!store.is_shared(B));
    // A second later B tries Redis again with a charged ask, which misses the same way: an
    // orphan, as the real process keeps one (it cannot tell), and no second notice.
    let at = 200 + retry + 100;
    assert_eq!(
        store.request(Millis(at), B, Ticket(3), charged(30_000)),
        None
    );
    let answers = run_until(&mut store, at + 500);
    assert_eq!(
        answer_of(&answers, Ticket(3)),
        Some((Millis(at + 200), PermitDecision::Granted))
    );
    let counts = store.counts();
    assert_eq!(
        (
            counts.calls,
            counts.timed_out,
            counts.fell_back,
            counts.orphaned
        ),
        (2, 2, 1, 1),
        "{counts:?}"
    );
    assert_eq!(store.shared_stats().granted, 0, "nothing reached Redis");
}
