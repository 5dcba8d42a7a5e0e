//! Invariants of the shared retry budget under any sequence of asks, deposits, rate limits,
//! cancels and time steps proptest picks: it never grants more than it was paid, never grants
//! a waiter after its deadline, and serves waiters first come, first served (oldest request
//! first, then order of asking).

use proptest::prelude::*;
use rebound_core::{
    BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind, RetryBudget, Ticket,
};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Ask {
        kind: PermitKind,
        target: usize,
        wait_ms: u64,
        age_ms: u64,
    },
    Succeed,
    RateLimit {
        target: usize,
        for_ms: u64,
    },
    Cancel(usize),
    Tick,
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let kind = prop_oneof![
        1 => Just(PermitKind::FirstAttempt),
        1 => Just(PermitKind::Hinted),
        4 => Just(PermitKind::Charged),
    ];
    let op = prop_oneof![
        6 => (kind, 0usize..2, 0u64..20_000, 0u64..30_000).prop_map(|(kind, target, wait_ms, age_ms)| Op::Ask {
            kind,
            target,
            wait_ms,
            age_ms
        }),
        3 => Just(Op::Succeed),
        1 => (0usize..2, 1u64..8_000).prop_map(|(target, for_ms)| Op::RateLimit { target, for_ms }),
        1 => (0usize..64).prop_map(Op::Cancel),
        2 => Just(Op::Tick),
    ];
    (0u64..3_000, op)
}

fn config() -> impl Strategy<Value = BudgetConfig> {
    (
        0.0f64..5.0,
        0.0f64..1.0,
        0.0f64..0.5,
        0.0f64..4.0,
        0.0f64..2.0,
    )
        .prop_map(|(capacity, initial, request, success, refill)| {
            BudgetConfig::default()
                .with_capacity(capacity)
                .with_initial(capacity * initial)
                .with_deposit_per_request(request)
                .with_deposit_per_success(success)
                .with_refill_per_sec(refill)
        })
}

/// One waiting ticket, as the test sees it.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    since: Millis,
    order: u64,
    deadline: Millis,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_budget_grants_only_what_it_was_paid_in_order_and_before_deadlines(
        config in config(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut budget = RetryBudget::new(config.clone());
        let mut now = Millis(0);
        let mut waiting: BTreeMap<Ticket, Waiting> = BTreeMap::new();
        let mut issued: Vec<Ticket> = Vec::new();
        let mut charged_granted = 0u64;
        let mut next = 0u64;
        for (step, op) in ops {
            now = now.plus(step);
            // A cancel does not move the budget's clock; every other call does.
            let moves_clock = !matches!(op, Op::Cancel(_));
            match op {
                Op::Ask { kind, target, wait_ms, age_ms } => {
                    next += 1;
                    let ticket = Ticket(next);
                    let since = Millis(now.0.saturating_sub(age_ms));
                    let ask = PermitAsk { kind, target, deadline: now.plus(wait_ms), since };
                    match budget.request(now, ticket, ask) {
                        Some(PermitDecision::Granted) if kind == PermitKind::Charged => {
                            charged_granted += 1;
                            // Granted at once only when nobody waits ahead of it.
                            prop_assert!(waiting.is_empty(), "{ticket:?} jumped the queue {waiting:?}");
                        }
                        Some(PermitDecision::Denied) => {
                            prop_assert_eq!(kind, PermitKind::Charged, "only charged permits are refused");
                        }
                        Some(PermitDecision::WaitUntil(until)) => prop_assert!(until > now),
                        Some(PermitDecision::Granted) => {}
                        Some(other) => prop_assert!(false, "a decision this test does not know: {other:?}"),
                        None => {
                            prop_assert_eq!(kind, PermitKind::Charged, "only charged permits wait");
                            waiting.insert(ticket, Waiting { since, order: next, deadline: ask.deadline });
                            issued.push(ticket);
                        }
                    }
                }
                Op::Succeed => budget.record(now, BudgetNote::Succeeded { target: 0 }),
                Op::RateLimit { target, for_ms } => {
                    budget.record(now, BudgetNote::RateLimited { target, until: now.plus(for_ms) });
                }
                Op::Cancel(i) => {
                    if let Some(ticket) = issued.get(i) {
                        let was = budget.cancel(*ticket);
                        prop_assert_eq!(was, waiting.remove(ticket).is_some());
                    }
                }
                Op::Tick => budget.tick(now),
            }
            while let Some((ticket, decision)) = budget.poll_decision() {
                let Some(w) = waiting.remove(&ticket) else {
                    return Err(TestCaseError::fail(format!("{ticket:?} decided twice or never asked")));
                };
                match decision {
                    PermitDecision::Granted => {
                        charged_granted += 1;
                        prop_assert!(now <= w.deadline, "{ticket:?} granted at {now} after its deadline {}", w.deadline);
                        let ahead = waiting.values().find(|o| (o.since, o.order) < (w.since, w.order));
                        prop_assert!(ahead.is_none(), "{ticket:?} served before {ahead:?}");
                    }
                    PermitDecision::Denied => prop_assert!(now >= w.deadline, "{ticket:?} denied early"),
                    PermitDecision::WaitUntil(until) => prop_assert!(until > now),
                    other => prop_assert!(false, "a decision this test does not know: {other:?}"),
                }
            }
            // A driver ticking at the next wakeup always moves forward.
            if let (true, Some(at)) = (moves_clock, budget.next_wakeup()) {
                prop_assert!(at > now, "wakeup {at} is not after {now}");
            }
            // Nobody is left waiting past a deadline that has come.
            if let Some(late) = waiting.values().find(|w| w.deadline < now) {
                // Allowed only until the next tick at `next_wakeup`, which is at the deadline.
                prop_assert!(budget.next_wakeup().is_some_and(|at| at <= late.deadline));
            }
        }
        let stats = budget.stats();
        prop_assert_eq!(stats.granted, charged_granted);
        // Paid: the initial balance, every deposit, and refill over the elapsed time.
        let initial = (config.initial.min(config.capacity).max(0.0) * 1_000.0).round() as u64;
        let refill = (config.refill_per_sec.max(0.0) * 1_000.0).round() as u64;
        let paid = initial + stats.deposited_milli + refill * now.0 / 1_000;
        prop_assert!(
            charged_granted * 1_000 <= paid,
            "granted {charged_granted} tokens but was paid {paid} milli-tokens"
        );
    }
}
