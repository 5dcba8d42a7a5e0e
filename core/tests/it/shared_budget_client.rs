//! The process's side of the budget in Redis, `BudgetClient`, through its public API: what
//! it calls, when it falls back and comes back, what it withdraws; and, as properties over
//! random replies, errors and withdrawals, that every ask gets exactly one answer and that
//! no request is left in Redis.

use proptest::prelude::*;
use rebound_core::shared_budget::{
    Answer, BudgetClient, CallId, ClientTiming, OpId, Output, PollAnswer, RedisBudgetError,
    RedisBudgetStats, ScriptOp, ScriptReply, DEADLINE_GRACE_MS,
};
use rebound_core::{BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind};
use std::collections::{BTreeMap, BTreeSet};

fn charged(deadline: u64) -> PermitAsk {
    PermitAsk {
        kind: PermitKind::Charged,
        target: 0,
        deadline: Millis(deadline),
        since: Millis(0),
    }
}

fn first() -> PermitAsk {
    PermitAsk {
        kind: PermitKind::FirstAttempt,
        ..charged(0)
    }
}

fn drain(client: &mut BudgetClient) -> Vec<Output> {
    std::iter::from_fn(|| client.poll()).collect()
}

fn timeout() -> RedisBudgetError {
    RedisBudgetError::Timeout { timeout_ms: 50 }
}

/// The one call among `outputs`, with whether it goes on a new connection.
fn the_call(outputs: &[Output]) -> (CallId, ScriptOp, bool) {
    let calls: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Call { call, op, fresh } => Some((*call, op.clone(), *fresh)),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{outputs:?}");
    calls[0].clone()
}

fn request_of(op: &ScriptOp) -> u64 {
    match op {
        ScriptOp::Ask { request, .. } => *request,
        other => panic!("not an ask: {other:?}"),
    }
}

#[test]
fn a_reply_lost_once_is_asked_again_under_the_same_request_on_a_new_connection() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), charged(5_000));
    let (call, ask, fresh) = the_call(&drain(&mut client));
    assert!(!fresh);
    client.handle_reply(Millis(50), call, Err(timeout()));
    let (again, repeat, fresh) = the_call(&drain(&mut client));
    assert_eq!(repeat, ask, "the same request, the same durations");
    assert!(fresh, "the repeat goes on a new connection");
    client.handle_reply(Millis(51), again, Ok(ScriptReply::Granted));
    assert_eq!(
        drain(&mut client),
        vec![Output::Answer {
            op,
            answer: Answer::Decided(PermitDecision::Granted),
            unheard: Some(request_of(&ask)),
        }]
    );
    assert!(client.is_shared());
}

#[test]
fn a_reply_lost_twice_decides_locally_once_and_the_orphan_is_withdrawn_when_redis_answers() {
    let timing = ClientTiming::default().with_retry_redis_after_ms(1_000);
    let mut client = BudgetClient::new(timing);
    let op = client.ask(Millis(0), charged(30_000));
    let (call, ask, _) = the_call(&drain(&mut client));
    let request = request_of(&ask);
    client.handle_reply(Millis(50), call, Err(timeout()));
    let (again, _, _) = the_call(&drain(&mut client));
    client.handle_reply(Millis(100), again, Err(timeout()));
    assert_eq!(
        drain(&mut client),
        vec![
            Output::FellBack(timeout()),
            Output::Answer {
                op,
                answer: Answer::Local,
                unheard: None
            }
        ]
    );
    assert!(!client.is_shared());
    assert_eq!(client.orphaned(), 1);
    // Local until `retry_redis_after` has passed: no call.
    let local = client.ask(Millis(500), first());
    assert_eq!(
        drain(&mut client),
        vec![Output::Answer {
            op: local,
            answer: Answer::Local,
            unheard: None
        }]
    );
    // Then Redis again; its answer restores the budget and withdraws the orphan.
    let shared = client.ask(Millis(1_100), first());
    let (call, _, _) = the_call(&drain(&mut client));
    client.handle_reply(Millis(1_101), call, Ok(ScriptReply::Granted));
    let outputs = drain(&mut client);
    assert_eq!(outputs[0], Output::Restored);
    assert!(matches!(
        &outputs[1],
        Output::Call { op: ScriptOp::Cancel { requests }, .. } if requests == &vec![request]
    ));
    assert_eq!(
        outputs[2],
        Output::Answer {
            op: shared,
            answer: Answer::Decided(PermitDecision::Granted),
            unheard: None
        }
    );
    assert!(client.is_shared());
}

#[test]
fn a_queued_ask_is_answered_by_the_inbox_read_a_wake_up_makes_at_once_and_acknowledged() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), charged(10_000));
    let (call, ask, _) = the_call(&drain(&mut client));
    let request = request_of(&ask);
    client.handle_reply(
        Millis(1),
        call,
        Ok(ScriptReply::Queued { retry_in_ms: 500 }),
    );
    assert_eq!(drain(&mut client), vec![Output::Subscribe]);
    // The first read is at most `poll_interval` away.
    assert_eq!(client.poll_timeout(), Some(Millis(51)));
    client.handle_subscription(Millis(3), true);
    let (read, inbox, _) = the_call(&drain(&mut client));
    assert_eq!(inbox, ScriptOp::Inbox { acks: vec![] });
    client.handle_reply(
        Millis(4),
        read,
        Ok(ScriptReply::Inbox {
            retry_in_ms: 2_000,
            waiting: 1,
            answers: vec![],
        }),
    );
    assert!(drain(&mut client).is_empty());
    // Live subscription: the next read is `waiter_stale_after / 2` away.
    assert_eq!(client.poll_timeout(), Some(Millis(1_004)));
    client.handle_wake(Millis(300));
    let (read, _, _) = the_call(&drain(&mut client));
    client.handle_reply(
        Millis(301),
        read,
        Ok(ScriptReply::Inbox {
            retry_in_ms: 2_000,
            waiting: 0,
            answers: vec![(request, PollAnswer::Granted)],
        }),
    );
    assert_eq!(
        drain(&mut client),
        vec![Output::Answer {
            op,
            answer: Answer::Decided(PermitDecision::Granted),
            unheard: Some(request)
        }]
    );
    // The loop ends at its next turn, with nobody left; a new waiter's first read
    // acknowledges the answer delivered.
    let later = client.ask(Millis(400), charged(10_000));
    let (call, _, _) = the_call(&drain(&mut client));
    client.handle_reply(
        Millis(401),
        call,
        Ok(ScriptReply::Queued { retry_in_ms: 9 }),
    );
    client.handle_timeout(client.poll_timeout().unwrap());
    let (_, inbox, _) = the_call(&drain(&mut client));
    assert_eq!(
        inbox,
        ScriptOp::Inbox {
            acks: vec![request]
        }
    );
    assert_eq!(client.waiting(), 1);
    client.withdraw(Millis(2_000), later);
    assert_eq!(client.waiting(), 0);
}

#[test]
fn a_waiter_past_its_deadline_and_grace_is_denied_and_withdrawn_from_redis() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), charged(300));
    let (call, ask, _) = the_call(&drain(&mut client));
    client.handle_reply(Millis(1), call, Ok(ScriptReply::Queued { retry_in_ms: 9 }));
    drain(&mut client);
    let end = Millis(300 + DEADLINE_GRACE_MS);
    client.handle_timeout(end);
    let outputs = drain(&mut client);
    assert!(outputs.contains(&Output::Answer {
        op,
        answer: Answer::Decided(PermitDecision::Denied),
        unheard: None
    }));
    assert!(outputs.iter().any(|o| matches!(
        o,
        Output::Call { op: ScriptOp::Cancel { requests }, .. } if requests == &vec![request_of(&ask)]
    )));
}

#[test]
fn a_request_redis_forgot_is_asked_again_under_a_new_name() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), charged(10_000));
    let (call, ask, _) = the_call(&drain(&mut client));
    client.handle_reply(Millis(1), call, Ok(ScriptReply::Queued { retry_in_ms: 9 }));
    drain(&mut client);
    client.handle_wake(Millis(2));
    let (read, _, _) = the_call(&drain(&mut client));
    // Redis holds none of ours and answers nothing: each is polled, and one is gone.
    client.handle_reply(
        Millis(3),
        read,
        Ok(ScriptReply::Inbox {
            retry_in_ms: 9,
            waiting: 0,
            answers: vec![],
        }),
    );
    let (poll, polled, _) = the_call(&drain(&mut client));
    assert_eq!(
        polled,
        ScriptOp::Poll {
            requests: vec![request_of(&ask)]
        }
    );
    client.handle_reply(
        Millis(4),
        poll,
        Ok(ScriptReply::Polled {
            retry_in_ms: 9,
            answers: vec![PollAnswer::Gone],
        }),
    );
    let (again, asked_again, _) = the_call(&drain(&mut client));
    assert_ne!(request_of(&asked_again), request_of(&ask));
    client.handle_reply(Millis(5), again, Ok(ScriptReply::Denied));
    assert_eq!(
        drain(&mut client),
        vec![Output::Answer {
            op,
            answer: Answer::Decided(PermitDecision::Denied),
            unheard: None
        }]
    );
}

#[test]
fn a_budget_redis_cannot_keep_is_local_for_good_and_said_once() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let check = client.check(Millis(0));
    let (call, op, _) = the_call(&drain(&mut client));
    assert_eq!(op, ScriptOp::Stats);
    let refused = RedisBudgetError::Unsupported {
        reason: "a cluster".into(),
    };
    client.handle_reply(Millis(1), call, Err(refused.clone()));
    assert_eq!(
        drain(&mut client),
        vec![
            Output::FellBack(refused.clone()),
            Output::Checked {
                op: check,
                result: Err(refused)
            }
        ]
    );
    for at in [10, 5_000, 100_000] {
        let op = client.ask(Millis(at), first());
        assert_eq!(
            drain(&mut client),
            vec![Output::Answer {
                op,
                answer: Answer::Local,
                unheard: None
            }]
        );
    }
}

#[test]
fn a_malformed_reply_is_a_typed_error_and_the_local_budget_decides() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), first());
    let (call, _, _) = the_call(&drain(&mut client));
    client.handle_reply(Millis(1), call, Ok(ScriptReply::Ok));
    let outputs = drain(&mut client);
    assert!(matches!(
        &outputs[0],
        Output::FellBack(RedisBudgetError::MalformedReply { .. })
    ));
    assert_eq!(
        outputs[1],
        Output::Answer {
            op,
            answer: Answer::Local,
            unheard: None
        }
    );
}

#[test]
fn a_rate_limit_is_kept_locally_too_and_a_deposit_redis_refused_is_made_locally() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let limited = BudgetNote::RateLimited {
        target: 0,
        until: Millis(2_000),
    };
    let op = client.note(Millis(500), limited);
    let outputs = drain(&mut client);
    assert_eq!(outputs[0], Output::RecordLocally(limited));
    let (call, sent, _) = the_call(&outputs);
    assert_eq!(
        sent,
        ScriptOp::RateLimited {
            target: 0,
            for_ms: 1_500
        }
    );
    client.handle_reply(Millis(501), call, Ok(ScriptReply::Ok));
    assert_eq!(drain(&mut client), vec![Output::Noted { op }]);
    let success = BudgetNote::Succeeded { target: 0 };
    let op = client.note(Millis(600), success);
    let (call, _, _) = the_call(&drain(&mut client));
    let down = RedisBudgetError::Connection {
        message: "refused".into(),
    };
    client.handle_reply(Millis(601), call, Err(down.clone()));
    assert_eq!(
        drain(&mut client),
        vec![
            Output::FellBack(down),
            Output::RecordLocally(success),
            Output::Noted { op }
        ]
    );
}

// ----- properties -----

#[derive(Debug, Clone)]
enum Step {
    Ask {
        charged: bool,
        wait_ms: u64,
    },
    Note,
    Check,
    Withdraw(usize),
    /// Answers the call in flight at this index (modulo) with this outcome.
    Reply {
        call: usize,
        outcome: u8,
        n: u8,
    },
    Wake,
    Subscription(bool),
    Pass(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<bool>(), 0u64..5_000).prop_map(|(charged, wait_ms)| Step::Ask { charged, wait_ms }),
        1 => Just(Step::Note),
        1 => Just(Step::Check),
        1 => (0usize..64).prop_map(Step::Withdraw),
        6 => (0usize..64, any::<u8>(), any::<u8>()).prop_map(|(call, outcome, n)| Step::Reply { call, outcome, n }),
        1 => Just(Step::Wake),
        1 => any::<bool>().prop_map(Step::Subscription),
        2 => (0u64..3_000).prop_map(Step::Pass),
    ]
}

/// What the test saw of the client.
#[derive(Default)]
struct Seen {
    asks: BTreeSet<OpId>,
    answered: BTreeMap<OpId, u32>,
    withdrawn: BTreeSet<OpId>,
    ends: BTreeMap<OpId, u32>,
    others: BTreeSet<OpId>,
    calls: BTreeMap<CallId, ScriptOp>,
    /// Requests Redis may hold: queued, or asked with a reply the client never heard.
    held: BTreeSet<u64>,
    /// Requests whose answer the client heard, or that it withdrew.
    settled: BTreeSet<u64>,
    events: Vec<bool>,
}

impl Seen {
    fn take(&mut self, client: &mut BudgetClient) {
        while let Some(output) = client.poll() {
            match output {
                Output::Call { call, op, .. } => {
                    if let ScriptOp::Cancel { requests } = &op {
                        self.settled.extend(requests.iter().copied());
                    }
                    assert!(self.calls.insert(call, op).is_none(), "call ids are new");
                }
                Output::Answer { op, .. } => {
                    assert!(self.asks.contains(&op), "an answer to an ask");
                    assert!(
                        !self.withdrawn.contains(&op),
                        "no answer after a withdrawal"
                    );
                    *self.answered.entry(op).or_default() += 1;
                }
                Output::Noted { op } | Output::Checked { op, .. } => {
                    assert!(self.others.contains(&op));
                    *self.ends.entry(op).or_default() += 1;
                }
                Output::FellBack(_) => self.events.push(false),
                Output::Restored => {
                    assert_eq!(self.events.last(), Some(&false), "restored after a fall");
                    self.events.push(true);
                }
                Output::Subscribe | Output::RecordLocally(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

/// A reply to `op`, chosen by `outcome` and `n`: every kind the script gives, errors, and
/// replies that make no sense for the call.
fn reply_to(
    op: &ScriptOp,
    outcome: u8,
    n: u8,
    seen: &mut Seen,
) -> Result<ScriptReply, RedisBudgetError> {
    match outcome % 10 {
        0 => return Err(timeout()),
        1 => {
            return Err(RedisBudgetError::Connection {
                message: "reset".into(),
            })
        }
        2 if n % 4 == 0 => {
            return Err(RedisBudgetError::Script {
                message: "oops".into(),
            })
        }
        3 if n % 8 == 0 => return Ok(ScriptReply::Wait(u64::from(n))),
        _ => {}
    }
    let answer = |n: u8| match n % 5 {
        0 => PollAnswer::Granted,
        1 => PollAnswer::Denied,
        2 => PollAnswer::Wait(u64::from(n)),
        3 => PollAnswer::Queued,
        _ => PollAnswer::Gone,
    };
    Ok(match op {
        ScriptOp::Ask { request, kind, .. } => match n % 4 {
            0 => ScriptReply::Granted,
            1 => ScriptReply::Denied,
            2 => ScriptReply::Wait(u64::from(n) * 10),
            _ => {
                if *kind == PermitKind::Charged {
                    seen.held.insert(*request);
                }
                ScriptReply::Queued {
                    retry_in_ms: u64::from(n),
                }
            }
        },
        ScriptOp::Inbox { .. } => {
            let answers: Vec<(u64, PollAnswer)> = seen
                .held
                .iter()
                .filter(|r| *r % 3 == u64::from(n % 3))
                .map(|r| (*r, answer(n.wrapping_add(*r as u8))))
                .filter(|(_, a)| *a != PollAnswer::Queued)
                .collect();
            seen.settled.extend(answers.iter().map(|(r, _)| *r));
            ScriptReply::Inbox {
                retry_in_ms: u64::from(n),
                waiting: u64::from(n % 3),
                answers,
            }
        }
        ScriptOp::Poll { requests } => {
            let answers: Vec<PollAnswer> = requests
                .iter()
                .map(|r| answer(n.wrapping_add(*r as u8)))
                .take(if n % 7 == 0 { 0 } else { usize::MAX })
                .collect();
            if answers.len() == requests.len() {
                seen.settled.extend(
                    requests
                        .iter()
                        .zip(&answers)
                        .filter(|(_, a)| **a != PollAnswer::Queued)
                        .map(|(r, _)| *r),
                );
            }
            ScriptReply::Polled {
                retry_in_ms: 5,
                answers,
            }
        }
        ScriptOp::Stats => ScriptReply::Stats(RedisBudgetStats::default()),
        _ => ScriptReply::Ok,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whatever Redis replies, fails or loses, and whatever askers withdraw: every ask gets
    /// exactly one answer (none after its withdrawal), every note and check one end, a
    /// restore only follows a fall, and once Redis answers again nothing is left waiting in
    /// the client or held in Redis.
    #[test]
    fn every_ask_is_answered_once_and_nothing_is_left_waiting(steps in prop::collection::vec(step(), 1..120)) {
        let mut client = BudgetClient::new(ClientTiming::default());
        let mut seen = Seen::default();
        let mut now = 0u64;
        let mut order: Vec<OpId> = Vec::new();
        for step in steps {
            match step {
                Step::Ask { charged: c, wait_ms } => {
                    let mut ask = charged(now + wait_ms);
                    if !c { ask.kind = PermitKind::FirstAttempt; }
                    let op = client.ask(Millis(now), ask);
                    seen.asks.insert(op);
                    order.push(op);
                }
                Step::Note => { seen.others.insert(client.note(Millis(now), BudgetNote::Succeeded { target: 0 })); }
                Step::Check => { seen.others.insert(client.check(Millis(now))); }
                Step::Withdraw(i) => {
                    if let Some(op) = order.get(i % order.len().max(1)).copied() {
                        if !seen.answered.contains_key(&op) {
                            seen.withdrawn.insert(op);
                        }
                        client.withdraw(Millis(now), op);
                    }
                }
                Step::Reply { call, outcome, n } => {
                    let ids: Vec<CallId> = seen.calls.keys().copied().collect();
                    if let Some(id) = ids.get(call % ids.len().max(1)).copied() {
                        let op = seen.calls.remove(&id).unwrap();
                        let reply = reply_to(&op, outcome, n, &mut seen);
                        if let (ScriptOp::Ask { request, kind: PermitKind::Charged, .. }, Err(e)) = (&op, &reply) {
                            if e.may_be_lost() { seen.held.insert(*request); }
                        }
                        if let (ScriptOp::Ask { request, .. }, Ok(ScriptReply::Granted | ScriptReply::Denied | ScriptReply::Wait(_))) = (&op, &reply) {
                            seen.settled.insert(*request);
                        }
                        client.handle_reply(Millis(now), id, reply);
                    }
                }
                Step::Wake => client.handle_wake(Millis(now)),
                Step::Subscription(live) => client.handle_subscription(Millis(now), live),
                Step::Pass(ms) => {
                    now += ms;
                    if client.poll_timeout().is_some_and(|t| t.0 <= now) {
                        client.handle_timeout(Millis(now));
                    }
                }
            }
            seen.take(&mut client);
            prop_assert_eq!(client.is_shared(), seen.events.last() != Some(&false));
        }
        // Redis answers again, every call gets a reply that settles it, and time runs on.
        let mut rounds = 0;
        loop {
            rounds += 1;
            prop_assert!(rounds < 1_000, "the client settles");
            now += 2_000;
            seen.others.insert(client.check(Millis(now)));
            seen.take(&mut client);
            while let Some((&id, _)) = seen.calls.iter().next() {
                let op = seen.calls.remove(&id).unwrap();
                let reply = match &op {
                    ScriptOp::Ask { request, .. } => {
                        seen.settled.insert(*request);
                        ScriptReply::Denied
                    }
                    ScriptOp::Inbox { .. } => ScriptReply::Inbox { retry_in_ms: 1, waiting: 0, answers: vec![] },
                    ScriptOp::Poll { requests } => ScriptReply::Polled {
                        retry_in_ms: 1,
                        answers: requests.iter().map(|_| PollAnswer::Denied).collect(),
                    },
                    ScriptOp::Stats => ScriptReply::Stats(RedisBudgetStats::default()),
                    _ => ScriptReply::Ok,
                };
                if let (ScriptOp::Poll { requests }, _) = (&op, &reply) {
                    seen.settled.extend(requests.iter().copied());
                }
                client.handle_reply(Millis(now), id, Ok(reply));
                seen.take(&mut client);
            }
            if let Some(t) = client.poll_timeout() {
                client.handle_timeout(t.max(Millis(now)));
                seen.take(&mut client);
            }
            if seen.calls.is_empty() && client.poll_timeout().is_none() {
                break;
            }
        }
        prop_assert_eq!(client.waiting(), 0);
        prop_assert!(client.is_shared());
        for op in &seen.asks {
            let answers = seen.answered.get(op).copied().unwrap_or(0);
            if seen.withdrawn.contains(op) {
                prop_assert_eq!(answers, 0, "{:?} withdrawn", op);
            } else {
                prop_assert_eq!(answers, 1, "{:?}", op);
            }
        }
        let left: Vec<&u64> = seen.held.difference(&seen.settled).collect();
        prop_assert!(left.is_empty(), "requests left in Redis: {:?}", left);
        for op in &seen.others {
            prop_assert_eq!(seen.ends.get(op).copied(), Some(1));
        }
    }
}

#[test]
fn an_answer_never_leaves_a_request_in_redis_when_the_asker_withdraws_while_it_is_on_its_way() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), charged(10_000));
    let (call, ask, _) = the_call(&drain(&mut client));
    client.withdraw(Millis(1), op);
    let (_, cancel, _) = the_call(&drain(&mut client));
    assert_eq!(
        cancel,
        ScriptOp::Cancel {
            requests: vec![request_of(&ask)]
        }
    );
    client.handle_reply(Millis(2), call, Ok(ScriptReply::Granted));
    assert!(
        drain(&mut client).is_empty(),
        "no answer for a withdrawn ask"
    );
    assert_eq!(client.waiting(), 0);
}

#[test]
fn a_grant_the_asker_did_not_hear_is_withdrawn_so_its_token_goes_back() {
    let mut client = BudgetClient::new(ClientTiming::default());
    let op = client.ask(Millis(0), charged(10_000));
    let (call, ask, _) = the_call(&drain(&mut client));
    client.handle_reply(Millis(1), call, Ok(ScriptReply::Granted));
    let Some(Output::Answer {
        op: answered,
        unheard: Some(request),
        ..
    }) = client.poll()
    else {
        panic!("a charged grant names its request");
    };
    assert_eq!((answered, request), (op, request_of(&ask)));
    client.unheard(Millis(2), request);
    let (_, cancel, _) = the_call(&drain(&mut client));
    assert_eq!(
        cancel,
        ScriptOp::Cancel {
            requests: vec![request]
        }
    );
}
