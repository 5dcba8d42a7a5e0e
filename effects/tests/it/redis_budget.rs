//! The retry budget in Redis (`budget::redis`) against a real `redis-server` per test: the
//! script decides as core's budget does, processes with different clocks agree, a retry
//! waiting in one process is paid by a success in another, and every way Redis can fail —
//! down, silent, malformed, erroring — leaves the decision to a local budget, reported once,
//! until Redis answers again.

#[path = "../redis_support/server.rs"]
mod server;
#[path = "../redis_support/slow_connects.rs"]
mod slow_connects;
use crate::table;

use rebound_core::{
    BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind, RetryBudget, Ticket,
};
use rebound_effects::budget::redis::{PollAnswer, ScriptOp, ScriptReply};
use rebound_effects::budget::{
    BudgetEvent, BudgetStore, RedisBudget, RedisBudgetError, RedisOptions,
};
use server::RedisServer;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn budget(url: &str, config: BudgetConfig, options: RedisOptions) -> RedisBudget {
    RedisBudget::new(&url.parse().expect("a redis url"), config, options).expect("a client")
}

/// Generous bounds where the test is not about them: a loaded CI machine must not make a
/// parity test fall back.
fn patient() -> RedisOptions {
    RedisOptions::default()
        .with_call_timeout(Duration::from_secs(5))
        .with_waiter_stale_after(Duration::from_secs(3_600))
}

/// Collects a budget's events. Its calls may take a loaded machine's time (5 s, not the
/// 50 ms default): a test about a script error or a refused connection must not see a
/// timeout instead because the test process was starved (`redis_budget` failed so once in
/// 200 runs under load). Tests about timeouts set their own.
fn recorder() -> (Arc<Mutex<Vec<BudgetEvent>>>, RedisOptions) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let options = RedisOptions::default()
        .with_call_timeout(Duration::from_secs(5))
        .with_on_event(Arc::new(move |e: &BudgetEvent| {
            seen.lock().expect("not poisoned").push(e.clone());
        }));
    (events, options)
}

fn kinds(events: &Mutex<Vec<BudgetEvent>>) -> Vec<&'static str> {
    events
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|e| match e {
            BudgetEvent::FellBack { .. } => "fell_back",
            BudgetEvent::Restored { .. } => "restored",
            _ => "other",
        })
        .collect()
}

fn charged(budget: &impl BudgetStore, wait_ms: u64, age_ms: u64) -> PermitAsk {
    let now = Millis(u64::try_from(budget.origin().elapsed().as_millis()).unwrap_or(0));
    PermitAsk {
        kind: PermitKind::Charged,
        target: 0,
        deadline: now.plus(wait_ms),
        since: Millis(now.0.saturating_sub(age_ms)),
    }
}

/// Waits until `n` asks in all have been queued in `budget`'s Redis (at most 10 s).
async fn queued(budget: &RedisBudget, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = budget.stats().await.expect("redis answers");
        if stats.stats.queued >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} asks never queued: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn tokens(initial: f64, success: f64) -> BudgetConfig {
    BudgetConfig::default()
        .with_capacity(initial.max(1.0))
        .with_initial(initial)
        .with_deposit_per_request(0.0)
        .with_deposit_per_success(success)
        .with_refill_per_sec(0.0)
}

async fn call(b: &RedisBudget, op: ScriptOp, now: u64) -> ScriptReply {
    let what = format!("{op:?} at {now}");
    b.call(op, Some(now))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What one poll of `request` says.
async fn poll(b: &RedisBudget, request: u64, now: u64) -> PollAnswer {
    match call(
        b,
        ScriptOp::Poll {
            requests: vec![request],
        },
        now,
    )
    .await
    {
        ScriptReply::Polled { answers, .. } if answers.len() == 1 => answers[0],
        other => panic!("poll of {request} at {now}: {other:?}"),
    }
}

fn answer_of(decision: PermitDecision, now: u64) -> PollAnswer {
    match decision {
        PermitDecision::Granted => PollAnswer::Granted,
        PermitDecision::Denied => PollAnswer::Denied,
        PermitDecision::WaitUntil(until) => PollAnswer::Wait(until.since(Millis(now))),
        other => panic!("a decision this test does not know: {other:?}"),
    }
}

fn reply_of(decision: PermitDecision, now: u64) -> ScriptReply {
    match decision {
        PermitDecision::Granted => ScriptReply::Granted,
        PermitDecision::Denied => ScriptReply::Denied,
        PermitDecision::WaitUntil(until) => ScriptReply::Wait(until.since(Millis(now))),
        other => panic!("a decision this test does not know: {other:?}"),
    }
}

#[tokio::test]
async fn the_script_decides_as_core_does() {
    let Some(server) = RedisServer::start("the_script_decides_as_core_does") else {
        return;
    };
    let pick = |rng: &mut fastrand::Rng, from: &[f64]| from[rng.usize(..from.len())];
    for seed in 0..32_u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        // The last seeds have outages: many successes in a second, then long silences in
        // which nothing succeeds (the pace's memory of what the provider served).
        let outages = seed >= 24;
        let config = BudgetConfig::default()
            .with_capacity(pick(&mut rng, &[0.5, 1.0, 2.0, 3.5, 5.0]))
            .with_initial(pick(&mut rng, &[0.0, 1.0, 2.5, 5.0]))
            .with_deposit_per_request(pick(&mut rng, &[0.0, 0.1, 0.25]))
            .with_deposit_per_success(pick(&mut rng, &[0.0, 1.0, 3.0]))
            .with_refill_per_sec(pick(&mut rng, &[0.0, 0.5, 2.5, 7.0]))
            .with_deposit_per_answered_retry(pick(&mut rng, &[0.0, 2.0, 10.0]));
        let redis = budget(
            &server.budget_url(&format!("parity-{seed}")),
            config.clone(),
            patient(),
        );
        let mut core = RetryBudget::new(config.clone());
        let mut now = 0_u64;
        // Both budgets are born at 0 (the script's at its first call).
        call(&redis, ScriptOp::Stats, now).await;
        // Core's ticket -> the script's ticket, for the asks waiting in both.
        let mut waiting: BTreeMap<u64, u64> = BTreeMap::new();
        for step in 0..120_u64 {
            now += match rng.u8(..4) {
                _ if outages && rng.u8(..25) == 0 => rng.u64(5_000..40_000),
                0 => 0,
                1 => 1,
                _ => rng.u64(..600),
            };
            let at = format!("seed {seed} ({config:?}) step {step} at {now} ms");
            let mut decided: BTreeMap<u64, PermitDecision> = BTreeMap::new();
            let op = if outages && rng.u8(..3) == 0 {
                5
            } else {
                rng.u8(..10)
            };
            match op {
                0..=4 => {
                    let kind = match rng.u8(..6) {
                        0 => PermitKind::FirstAttempt,
                        1 => PermitKind::Hinted,
                        _ => PermitKind::Charged,
                    };
                    let ask = PermitAsk {
                        kind,
                        target: rng.usize(..2),
                        deadline: Millis(now + rng.u64(..2_500)),
                        since: Millis(rng.u64(..=now)),
                    };
                    let ticket = step + 1;
                    let expected = core.request(Millis(now), Ticket(ticket), ask);
                    decided
                        .extend(std::iter::from_fn(|| core.poll_decision()).map(|(t, d)| (t.0, d)));
                    let got = call(
                        &redis,
                        ScriptOp::Ask {
                            request: ticket,
                            kind,
                            target: ask.target,
                            wait_ms: ask.deadline.since(Millis(now)),
                            age_ms: now - ask.since.0,
                        },
                        now,
                    )
                    .await;
                    match (expected, decided.remove(&ticket), got) {
                        (Some(d), None, got) | (None, Some(d), got) => {
                            assert_eq!(got, reply_of(d, now), "{at}: {ask:?}");
                        }
                        (None, None, ScriptReply::Queued { .. }) => {
                            waiting.insert(ticket, ticket);
                        }
                        (expected, _, got) => {
                            panic!("{at}: {ask:?}: core {expected:?}, script {got:?}")
                        }
                    }
                }
                5 => {
                    core.record(Millis(now), BudgetNote::Succeeded { target: 0 });
                    let got = call(&redis, ScriptOp::Succeeded { target: 0 }, now).await;
                    assert_eq!(got, ScriptReply::Ok, "{at}");
                }
                8 => {
                    core.record(Millis(now), BudgetNote::RetryAnswered { target: 0 });
                    let got = call(&redis, ScriptOp::RetryAnswered { target: 0 }, now).await;
                    assert_eq!(got, ScriptReply::Ok, "{at}");
                }
                6 => {
                    let (target, for_ms) = (rng.usize(..2), rng.u64(..2_000));
                    core.record(
                        Millis(now),
                        BudgetNote::RateLimited {
                            target,
                            until: Millis(now + for_ms),
                        },
                    );
                    let got = call(&redis, ScriptOp::RateLimited { target, for_ms }, now).await;
                    assert_eq!(got, ScriptReply::Ok, "{at}");
                }
                7 if !waiting.is_empty() => {
                    let (&ours, &theirs) = waiting
                        .iter()
                        .nth(rng.usize(..waiting.len()))
                        .expect("one waits");
                    assert!(core.cancel(Ticket(ours)), "{at}");
                    let got = call(
                        &redis,
                        ScriptOp::Cancel {
                            requests: vec![theirs],
                        },
                        now,
                    )
                    .await;
                    assert_eq!(got, ScriptReply::Ok, "{at}");
                    waiting.remove(&ours);
                }
                _ => {
                    core.tick(Millis(now));
                    call(&redis, ScriptOp::Stats, now).await;
                }
            }
            // A poll lets the script's time pass (as the local budget's waiters tick theirs):
            // so does core's, for the operations that do not (a cancel).
            core.tick(Millis(now));
            decided.extend(std::iter::from_fn(|| core.poll_decision()).map(|(t, d)| (t.0, d)));
            // Every waiter's answer, asked at the same time: the same as core's.
            for (ours, theirs) in waiting.clone() {
                let got = poll(&redis, theirs, now).await;
                match (decided.remove(&ours), got) {
                    (None, PollAnswer::Queued) => {}
                    (Some(d), got) => {
                        assert_eq!(got, answer_of(d, now), "{at}: waiter {ours}");
                        waiting.remove(&ours);
                    }
                    (None, got) => {
                        panic!("{at}: waiter {ours} still waits in core, script {got:?}")
                    }
                }
            }
            assert!(
                decided.is_empty(),
                "{at}: decided in core only: {decided:?}"
            );
            let ScriptReply::Stats(stats) = call(&redis, ScriptOp::Stats, now).await else {
                panic!("{at}: stats");
            };
            let balance = (core.balance(Millis(now)) * 1_000.0).round() as u64;
            assert_eq!(stats.balance_milli, balance, "{at}: balance");
            assert_eq!(stats.stats, core.stats(), "{at}: counters");
            assert_eq!(stats.waiting, core.waiting() as u64, "{at}: queue");
            assert_eq!(core.poll_decision(), None, "{at}");
        }
    }
}

#[tokio::test]
async fn processes_whose_clocks_differ_agree_on_the_rate_limit_window() {
    let Some(server) = RedisServer::start("processes_whose_clocks_differ_agree") else {
        return;
    };
    let url = server.budget_url("window");
    let first = budget(&url, BudgetConfig::default(), patient());
    // The second process started 700 ms later: its clock reads 700 ms less at any moment.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let second = budget(&url, BudgetConfig::default(), patient());
    let now =
        |b: &RedisBudget| Millis(u64::try_from(b.origin().elapsed().as_millis()).unwrap_or(0));
    let until = now(&first).plus(2_000);
    first
        .record(BudgetNote::RateLimited { target: 0, until })
        .await;
    let ask = PermitAsk {
        kind: PermitKind::FirstAttempt,
        target: 0,
        deadline: Millis::ZERO,
        since: now(&second),
    };
    let asked = now(&second);
    let PermitDecision::WaitUntil(theirs) = second.acquire(ask).await else {
        panic!("the second process must wait out the window the first one heard of");
    };
    // The same moment, on the second process's own clock: about 2 s from now, not 2.7 s.
    let remaining = theirs.since(asked);
    assert!((1_900..=2_050).contains(&remaining), "{remaining} ms");
    let other_target = PermitAsk { target: 1, ..ask };
    assert_eq!(second.acquire(other_target).await, PermitDecision::Granted);
}

#[tokio::test]
async fn a_retry_waiting_in_one_process_is_paid_by_a_success_in_another() {
    let Some(server) = RedisServer::start("a_retry_waiting_in_one_process") else {
        return;
    };
    let url = server.budget_url("queue");
    let config = tokens(1.0, 1.0);
    let spender = budget(&url, config.clone(), patient());
    let waiter = budget(&url, config, patient());
    assert_eq!(
        spender.acquire(charged(&spender, 0, 0)).await,
        PermitDecision::Granted
    );
    let ask = charged(&waiter, 10_000, 0);
    let handle = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire(ask).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!handle.is_finished(), "no token: the retry waits");
    let paid = Instant::now();
    spender.record(BudgetNote::Succeeded { target: 0 }).await;
    let decision = tokio::time::timeout(Duration::from_secs(2), handle)
        .await
        .expect("granted within a few polls")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
    assert!(
        paid.elapsed() < Duration::from_millis(500),
        "{:?}",
        paid.elapsed()
    );
    let stats = spender.stats().await.expect("redis answers");
    assert_eq!((stats.stats.granted, stats.stats.queued), (2, 1));
}

#[tokio::test]
async fn the_oldest_request_is_served_first_whichever_process_asked_first() {
    let Some(server) = RedisServer::start("the_oldest_request_is_served_first") else {
        return;
    };
    let url = server.budget_url("fcfs");
    let config = tokens(1.0, 1.0);
    let a = budget(&url, config.clone(), patient());
    let b = budget(&url, config, patient());
    // A request's age is measured on its process's clock, which starts with the budget: let
    // the clocks run long enough for the "old" request's age to be what the test says, with
    // room for a loaded machine's scheduling delays (the age is read before the call).
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(a.acquire(charged(&a, 0, 0)).await, PermitDecision::Granted);
    let young = {
        let a = a.clone();
        let ask = charged(&a, 10_000, 0);
        tokio::spawn(async move { a.acquire(ask).await })
    };
    queued(&a, 1).await;
    // Asked later, but for a request 1.5 s old: it goes first. (Both must be in the
    // queue before the success pays: on a loaded machine a sleep does not make sure of it.)
    let old = {
        let b = b.clone();
        let ask = charged(&b, 10_000, 1_500);
        tokio::spawn(async move { b.acquire(ask).await })
    };
    queued(&a, 2).await;
    a.record(BudgetNote::Succeeded { target: 0 }).await;
    let first = tokio::time::timeout(Duration::from_secs(2), old)
        .await
        .expect("the old request is granted")
        .expect("joins");
    assert_eq!(first, PermitDecision::Granted);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!young.is_finished(), "one token, one grant");
    b.record(BudgetNote::Succeeded { target: 0 }).await;
    let second = tokio::time::timeout(Duration::from_secs(2), young)
        .await
        .expect("then the younger one")
        .expect("joins");
    assert_eq!(second, PermitDecision::Granted);
}

#[tokio::test]
async fn a_waiter_whose_process_died_leaves_the_queue() {
    let Some(server) = RedisServer::start("a_waiter_whose_process_died") else {
        return;
    };
    let url = server.budget_url("stale");
    let options = patient().with_waiter_stale_after(Duration::from_millis(300));
    let config = tokens(1.0, 1.0);
    let dead = budget(&url, config.clone(), options.clone());
    let alive = budget(&url, config, options);
    assert_eq!(
        alive.acquire(charged(&alive, 0, 0)).await,
        PermitDecision::Granted
    );
    // A process queues a retry for its oldest request, then dies: it never polls again.
    let queued = dead
        .call(
            ScriptOp::Ask {
                request: 1,
                kind: PermitKind::Charged,
                target: 0,
                wait_ms: 60_000,
                age_ms: 60_000,
            },
            None,
        )
        .await
        .expect("redis answers");
    assert!(matches!(queued, ScriptReply::Queued { .. }), "{queued:?}");
    let ask = charged(&alive, 10_000, 0);
    let handle = {
        let alive = alive.clone();
        tokio::spawn(async move { alive.acquire(ask).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    alive.record(BudgetNote::Succeeded { target: 0 }).await;
    let decision = tokio::time::timeout(Duration::from_secs(2), handle)
        .await
        .expect("the live waiter gets the token")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
}

#[tokio::test]
async fn keys_are_namespaced_expire_when_idle_and_hold_only_numbers() {
    let Some(server) = RedisServer::start("keys_are_namespaced") else {
        return;
    };
    let options = patient().with_idle_expiry(Duration::from_millis(1_500));
    let b = budget(
        &server.budget_url("team-a"),
        BudgetConfig::default(),
        options,
    );
    b.record(BudgetNote::RateLimited {
        target: 0,
        until: Millis(u64::MAX / 2),
    })
    .await;
    b.record(BudgetNote::Succeeded { target: 0 }).await;
    let keys = server.command("KEYS *");
    for line in keys.lines().filter(|l| l.starts_with("rebound")) {
        assert!(line.starts_with("rebound:budget:{team-a}:"), "{line}");
    }
    assert!(keys.contains("rebound:budget:{team-a}:state"), "{keys}");
    let state = server.command("HGETALL rebound:budget:{team-a}:state");
    for line in state.lines().filter(|l| !l.starts_with(['*', '$'])) {
        assert!(
            line.bytes()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || c == b' '),
            "only field names and numbers (the settings: five of them): {line}"
        );
    }
    let ttl: i64 = server
        .command("PTTL rebound:budget:{team-a}:state")
        .trim()
        .trim_start_matches(':')
        .parse()
        .expect("a number");
    assert!((1..=1_500).contains(&ttl), "expires when idle: {ttl}");
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    assert_eq!(
        server
            .command("EXISTS rebound:budget:{team-a}:state")
            .trim(),
        ":0"
    );
    assert_eq!(
        server
            .command("EXISTS rebound:budget:{team-a}:limits")
            .trim(),
        ":0"
    );
}

#[tokio::test]
async fn a_redis_that_is_down_falls_back_once_and_is_used_again_when_it_returns() {
    let Some(mut server) = RedisServer::start("a_redis_that_is_down_falls_back") else {
        return;
    };
    server.kill();
    let (events, options) = recorder();
    let options = options.with_retry_redis_after(Duration::from_millis(300));
    let b = budget(&server.budget_url("down"), tokens(2.0, 1.0), options);
    let started = Instant::now();
    let decisions = [
        b.acquire(charged(&b, 0, 0)).await,
        b.acquire(charged(&b, 0, 0)).await,
        b.acquire(charged(&b, 0, 0)).await,
    ];
    // The local budget's answers: two tokens, then none.
    assert_eq!(
        decisions,
        [
            PermitDecision::Granted,
            PermitDecision::Granted,
            PermitDecision::Denied
        ]
    );
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(kinds(&events), ["fell_back"]);
    assert!(!b.is_shared());
    assert_eq!(b.fallback().stats().granted, 2);

    server.restart();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert_eq!(kinds(&events), ["fell_back", "restored"]);
    assert!(b.is_shared());
    let stats = b.stats().await.expect("redis is back");
    assert_eq!(
        stats.stats.granted, 1,
        "the grant came from the budget in Redis"
    );
}

#[tokio::test]
async fn a_silent_redis_costs_one_bounded_call() {
    // Accepts connections and never answers a byte.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("bound").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(8) {
            held.push(stream);
        }
    });
    let (events, options) = recorder();
    let b = budget(
        &format!("redis://127.0.0.1:{port}/silent"),
        tokens(1.0, 1.0),
        options
            .with_call_timeout(Duration::from_millis(50))
            .with_connect_timeout(Duration::from_millis(100)),
    );
    let started = Instant::now();
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    let took = started.elapsed();
    // Its handshake is never answered: one connect timeout, not tried again (the ask never
    // reached Redis).
    assert!(
        took < Duration::from_millis(190),
        "bounded by the 100 ms connect timeout: {took:?}"
    );
    let events = events.lock().expect("not poisoned").clone();
    assert!(
        matches!(
            events.as_slice(),
            [BudgetEvent::FellBack {
                error: RedisBudgetError::ConnectTimeout { timeout_ms: 100 },
                ..
            }]
        ),
        "{events:?}"
    );
    // Within `retry_redis_after`, the next decisions do not touch Redis at all.
    let started = Instant::now();
    b.record(BudgetNote::Succeeded { target: 0 }).await;
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert!(started.elapsed() < Duration::from_millis(20));
}

#[tokio::test]
async fn a_malformed_reply_is_a_typed_error_and_the_local_budget_decides() {
    // Answers every command with the integer 42: a handshake it passes, a script reply it
    // does not.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("bound").port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let data = &buf[..n];
                    let commands = usize::from(data.first() == Some(&b'*'))
                        + data.windows(3).filter(|w| w == b"\r\n*").count();
                    if s.write_all(&b":42\r\n".repeat(commands)).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let (events, options) = recorder();
    let b = budget(
        &format!("redis://127.0.0.1:{port}/garbled"),
        tokens(1.0, 1.0),
        options,
    );
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Denied);
    let events = events.lock().expect("not poisoned").clone();
    assert!(
        matches!(
            events.as_slice(),
            [BudgetEvent::FellBack {
                error: RedisBudgetError::MalformedReply { .. },
                ..
            }]
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_script_error_falls_back_and_the_budget_returns_once_it_runs_again() {
    let Some(server) = RedisServer::start("a_script_error_falls_back") else {
        return;
    };
    // Something else wrote a plain string where the budget keeps its state.
    assert_eq!(
        server
            .command("SET rebound:budget:{clash}:state oops")
            .trim(),
        "+OK"
    );
    let (events, options) = recorder();
    let options = options.with_retry_redis_after(Duration::from_millis(100));
    let b = budget(&server.budget_url("clash"), tokens(1.0, 1.0), options);
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    {
        let events = events.lock().expect("not poisoned");
        assert!(
            matches!(
                events.as_slice(),
                [BudgetEvent::FellBack {
                    error: RedisBudgetError::Script { .. },
                    ..
                }]
            ),
            "{events:?}"
        );
    }
    server.command("DEL rebound:budget:{clash}:state");
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The shared budget (one fresh token) decides again, not the spent local one.
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert_eq!(kinds(&events), ["fell_back", "restored"]);
}

#[tokio::test]
async fn a_rate_limit_is_shared_and_also_kept_for_the_fall_back() {
    let Some(mut server) = RedisServer::start("a_rate_limit_is_shared") else {
        return;
    };
    let url = server.budget_url("limits");
    let a = budget(&url, BudgetConfig::default(), patient());
    let b = budget(&url, BudgetConfig::default(), RedisOptions::default());
    let now = Millis(u64::try_from(a.origin().elapsed().as_millis()).unwrap_or(0));
    a.record(BudgetNote::RateLimited {
        target: 0,
        until: now.plus(5_000),
    })
    .await;
    let first = PermitAsk {
        kind: PermitKind::FirstAttempt,
        target: 0,
        deadline: Millis::ZERO,
        since: Millis::ZERO,
    };
    assert!(matches!(
        b.acquire(first).await,
        PermitDecision::WaitUntil(_)
    ));
    // Redis goes away: `a` heard the window itself and keeps honouring it locally.
    server.kill();
    assert!(matches!(
        a.acquire(first).await,
        PermitDecision::WaitUntil(_)
    ));
    assert!(!a.is_shared());
}

/// A TCP proxy in front of a Redis that can swallow its replies: while `swallow` is set,
/// what Redis sends back is dropped (the commands still run). `heal_on_connect` clears it
/// when the client opens a new connection (a reply lost once).
struct LossyProxy {
    port: u16,
    swallow: Arc<std::sync::atomic::AtomicBool>,
    heal_on_connect: Arc<std::sync::atomic::AtomicBool>,
    swallowed: Arc<std::sync::atomic::AtomicUsize>,
}

impl LossyProxy {
    async fn start(redis_port: u16) -> LossyProxy {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let port = listener.local_addr().expect("bound").port();
        let swallow = Arc::new(AtomicBool::new(false));
        let heal_on_connect = Arc::new(AtomicBool::new(false));
        let swallowed = Arc::new(AtomicUsize::new(0));
        let (s, h, n) = (swallow.clone(), heal_on_connect.clone(), swallowed.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if h.load(Ordering::SeqCst) {
                    s.store(false, Ordering::SeqCst);
                }
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", redis_port)).await
                else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let (s, n) = (s.clone(), n.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(len) = server_read.read(&mut buf).await {
                        if len == 0 {
                            break;
                        }
                        if s.load(Ordering::SeqCst) {
                            n.fetch_add(len, Ordering::SeqCst);
                            continue;
                        }
                        if client_write.write_all(&buf[..len]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        LossyProxy {
            port,
            swallow,
            heal_on_connect,
            swallowed,
        }
    }

    /// Drops Redis's replies: until the client reconnects (`once`), or until `deliver`.
    fn lose_replies(&self, once: bool) {
        use std::sync::atomic::Ordering;
        self.heal_on_connect.store(once, Ordering::SeqCst);
        self.swallow.store(true, Ordering::SeqCst);
    }

    fn deliver(&self) {
        self.swallow
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn swallowed(&self) -> usize {
        self.swallowed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Options for a budget behind a [`LossyProxy`]: a call timeout a loaded machine keeps to
/// when nothing is lost.
/// Its processes poll every 2 s even when woken (a lost reply may be the wake-up).
fn through_proxy(events: RedisOptions) -> RedisOptions {
    events
        .with_call_timeout(Duration::from_secs(1))
        .with_retry_redis_after(Duration::from_millis(200))
        .with_waiter_stale_after(Duration::from_secs(4))
}

#[tokio::test]
async fn a_reply_lost_to_the_timeout_is_read_again_and_a_token_is_spent_once() {
    let Some(server) = RedisServer::start("a_reply_lost_to_the_timeout") else {
        return;
    };
    let proxy = LossyProxy::start(server.port()).await;
    let mut cases = 0;
    let url = format!("redis://127.0.0.1:{}/lost", proxy.port);
    let direct = budget(&server.budget_url("lost"), tokens(1.0, 1.0), patient());

    // 1. The reply to a granted ask is lost once: asked again under the same request, the
    // grant is read, not made twice, and nothing is decided locally.
    let (events, options) = recorder();
    let b = budget(&url, tokens(1.0, 1.0), through_proxy(options));
    b.check().await.expect("redis answers");
    proxy.lose_replies(true);
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert!(proxy.swallowed() > 0, "a reply was lost");
    let stats = direct.stats().await.expect("redis answers");
    assert_eq!((stats.stats.granted, stats.balance_milli), (1, 0));
    assert_eq!(b.fallback().stats().granted, 0, "no local token spent");
    assert!(kinds(&events).is_empty(), "{:?}", kinds(&events));
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Denied);
    cases += 1;

    // 2. The reply to a poll that carries a grant is lost once: the next poll reads it.
    let waiting = {
        let b = b.clone();
        let ask = charged(&b, 10_000, 0);
        tokio::spawn(async move { b.acquire(ask).await })
    };
    queued(&direct, 1).await;
    // The waiter's subscription opens its own connection; opened after the loss below, it
    // would heal it before any reply is lost.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.command("PUBSUB CHANNELS *:wake:*").starts_with("*0") {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lost_before = proxy.swallowed();
    proxy.lose_replies(true);
    direct.record(BudgetNote::Succeeded { target: 0 }).await;
    let decision = tokio::time::timeout(Duration::from_secs(6), waiting)
        .await
        .expect("granted after the lost poll")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
    assert!(proxy.swallowed() > lost_before, "a poll's reply was lost");
    let stats = direct.stats().await.expect("redis answers");
    assert_eq!((stats.stats.granted, stats.balance_milli), (2, 0));
    assert_eq!(b.fallback().stats().granted, 0);
    assert!(kinds(&events).is_empty(), "{:?}", kinds(&events));
    cases += 1;

    // 3. Every reply is lost: the process decides locally, and once Redis answers again it
    // withdraws the request, so the token Redis granted to it goes back.
    direct.record(BudgetNote::Succeeded { target: 0 }).await;
    let (events, options) = recorder();
    let c = budget(&url, tokens(1.0, 1.0), through_proxy(options));
    c.check().await.expect("redis answers");
    proxy.lose_replies(false);
    assert_eq!(c.acquire(charged(&c, 0, 0)).await, PermitDecision::Granted);
    assert_eq!(c.fallback().stats().granted, 1, "decided locally");
    proxy.deliver();
    tokio::time::sleep(Duration::from_millis(250)).await;
    c.record(BudgetNote::RateLimited {
        target: 1,
        until: Millis(0),
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = direct.stats().await.expect("redis answers");
        if stats.balance_milli == 1_000 {
            assert_eq!(stats.stats.granted, 2, "the lost grant was paid back");
            break;
        }
        assert!(Instant::now() < deadline, "never paid back: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(kinds(&events), ["fell_back", "restored"]);
    cases += 1;
    table::check("redis-lost-replies", cases);
}

#[tokio::test]
async fn the_budget_clock_never_goes_back_when_redis_time_does() {
    let Some(server) = RedisServer::start("the_budget_clock_never_goes_back") else {
        return;
    };
    let mut cases = 0;
    // What a failover to a host whose clock is 10 s behind looks like to the budget: the
    // state says a time 10 s after what `TIME` now says.
    let step_back = |name: &str| {
        let time = server.command("TIME");
        let numbers: Vec<u64> = time.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(numbers.len(), 2, "TIME: {time}");
        let ahead = numbers[0] * 1_000 + numbers[1] / 1_000 + 10_000;
        let set = server.command(&format!("HSET rebound:budget:{{{name}}}:state now {ahead}"));
        assert!(set.starts_with(':'), "{set}");
        ahead
    };

    // 1. A charged retry allowed to wait 5 s waits (and is granted by a success), instead
    // of being denied at once.
    let b = budget(&server.budget_url("behind"), tokens(0.0, 1.0), patient());
    b.check().await.expect("redis answers");
    let ahead = step_back("behind");
    let ask = charged(&b, 5_000, 0);
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(ask).await })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished(), "the retry waits for a token");
    b.record(BudgetNote::Succeeded { target: 0 }).await;
    let decision = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("decided")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
    let stats = b.stats().await.expect("redis answers");
    assert!(stats.now_ms >= ahead, "{} < {ahead}", stats.now_ms);
    cases += 1;

    // 2. A shared rate limit heard after the step back holds for its whole window.
    let b = budget(
        &server.budget_url("limit-behind"),
        BudgetConfig::default(),
        patient(),
    );
    b.check().await.expect("redis answers");
    step_back("limit-behind");
    let now = Millis(u64::try_from(b.origin().elapsed().as_millis()).unwrap_or(0));
    b.record(BudgetNote::RateLimited {
        target: 0,
        until: now.plus(2_000),
    })
    .await;
    let first = PermitAsk {
        kind: PermitKind::FirstAttempt,
        target: 0,
        deadline: Millis::ZERO,
        since: now,
    };
    let PermitDecision::WaitUntil(until) = b.acquire(first).await else {
        panic!("the window was dropped");
    };
    let left = until.since(now);
    assert!((1_500..=2_100).contains(&left), "{left} ms left");
    cases += 1;

    // 3. The same through the script's clock: ticked at 20 s, then asked at 10 s, a retry
    // allowed to wait 5 s is queued, and a window of 2 s holds 2 s.
    let b = budget(&server.budget_url("scripted"), tokens(0.0, 1.0), patient());
    call(&b, ScriptOp::Stats, 20_000).await;
    let ask = ScriptOp::Ask {
        request: 1,
        kind: PermitKind::Charged,
        target: 0,
        wait_ms: 5_000,
        age_ms: 0,
    };
    assert!(matches!(
        call(&b, ask, 10_000).await,
        ScriptReply::Queued { .. }
    ));
    let limited = ScriptOp::RateLimited {
        target: 1,
        for_ms: 2_000,
    };
    assert_eq!(call(&b, limited, 10_100).await, ScriptReply::Ok);
    let first = ScriptOp::Ask {
        request: 2,
        kind: PermitKind::FirstAttempt,
        target: 1,
        wait_ms: 0,
        age_ms: 0,
    };
    assert_eq!(call(&b, first, 10_200).await, ScriptReply::Wait(1_900));
    cases += 1;
    table::check("redis-clock-back", cases);
}

#[tokio::test]
async fn the_budget_clock_does_not_jump_when_redis_time_steps_forward_while_retries_wait() {
    let Some(server) = RedisServer::start("the_budget_clock_does_not_jump") else {
        return;
    };
    let mut cases = 0;
    // A waiter's process polls at least every second (half of `waiter_stale_after`).
    let options = patient().with_waiter_stale_after(Duration::from_secs(2));

    // 1. `TIME` steps 300 s forward while a retry allowed to wait 5 s waits (the budget's
    // clock is `TIME` plus the stored offset: raising the offset is what the script sees
    // of a step): the retry still waits, and is granted by a success.
    let b = budget(
        &server.budget_url("ahead"),
        tokens(0.0, 1.0),
        options.clone(),
    );
    let before = b.check().await.expect("redis answers").now_ms;
    let ask = charged(&b, 5_000, 0);
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(ask).await })
    };
    queued(&b, 1).await;
    let stepped = server.command("HINCRBY rebound:budget:{ahead}:state offset 300000");
    assert!(stepped.starts_with(':'), "{stepped}");
    // Past the waiter's next poll, which sees the step.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !waiting.is_finished(),
        "the retry was decided at the step: {:?}",
        waiting.await
    );
    b.record(BudgetNote::Succeeded { target: 0 }).await;
    let decision = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("decided")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
    let after = b.stats().await.expect("redis answers").now_ms;
    assert!(
        after - before < 60_000,
        "the budget's clock jumped {} ms",
        after - before
    );
    cases += 1;

    // 2. The same through the script's clock: queued at 0.1 s, polled at 1 s, polled again
    // at 301 s: still queued, and the budget's time goes on from 1 s.
    let b = budget(
        &server.budget_url("scripted-ahead"),
        tokens(0.0, 1.0),
        options.clone(),
    );
    call(&b, ScriptOp::Stats, 0).await;
    let ask = ScriptOp::Ask {
        request: 1,
        kind: PermitKind::Charged,
        target: 0,
        wait_ms: 15_000,
        age_ms: 0,
    };
    assert!(matches!(
        call(&b, ask, 100).await,
        ScriptReply::Queued { .. }
    ));
    let inbox = || ScriptOp::Inbox { acks: vec![] };
    assert!(matches!(
        call(&b, inbox(), 1_000).await,
        ScriptReply::Inbox { waiting: 1, ref answers, .. } if answers.is_empty()
    ));
    let got = call(&b, inbox(), 301_000).await;
    assert!(
        matches!(got, ScriptReply::Inbox { waiting: 1, ref answers, .. } if answers.is_empty()),
        "{got:?}"
    );
    let ScriptReply::Stats(stats) = call(&b, ScriptOp::Stats, 301_200).await else {
        panic!("stats");
    };
    assert_eq!(stats.now_ms, 1_200);
    assert_eq!(stats.waiting, 1);
    call(&b, ScriptOp::Succeeded { target: 0 }, 301_300).await;
    assert_eq!(poll(&b, 1, 301_400).await, PollAnswer::Granted);
    cases += 1;

    // 3. A gap no live waiter could leave is not a step: shorter than `waiter_stale_after`,
    // it is time, and a waiter whose deadline it passed is denied.
    let b = budget(
        &server.budget_url("short-gap"),
        tokens(0.0, 1.0),
        options.clone(),
    );
    call(&b, ScriptOp::Stats, 0).await;
    let ask = ScriptOp::Ask {
        request: 1,
        kind: PermitKind::Charged,
        target: 0,
        wait_ms: 1_000,
        age_ms: 0,
    };
    assert!(matches!(
        call(&b, ask, 100).await,
        ScriptReply::Queued { .. }
    ));
    call(&b, inbox(), 1_000).await;
    assert_eq!(poll(&b, 1, 2_900).await, PollAnswer::Denied);
    cases += 1;

    // 4. Nobody waits: any gap is time. The bucket refills to capacity and a rate-limit
    // window ends.
    let config = BudgetConfig::default()
        .with_capacity(5.0)
        .with_initial(0.0)
        .with_refill_per_sec(1.0);
    let b = budget(&server.budget_url("idle"), config, options);
    call(&b, ScriptOp::Stats, 0).await;
    let limited = ScriptOp::RateLimited {
        target: 0,
        for_ms: 60_000,
    };
    assert_eq!(call(&b, limited, 0).await, ScriptReply::Ok);
    let ScriptReply::Stats(stats) = call(&b, ScriptOp::Stats, 300_000).await else {
        panic!("stats");
    };
    assert_eq!((stats.now_ms, stats.balance_milli), (300_000, 5_000));
    let first = ScriptOp::Ask {
        request: 1,
        kind: PermitKind::FirstAttempt,
        target: 0,
        wait_ms: 0,
        age_ms: 0,
    };
    assert_eq!(call(&b, first, 300_000).await, ScriptReply::Granted);
    cases += 1;
    table::check("redis-clock-forward", cases);
}

#[tokio::test]
async fn an_old_waiter_never_takes_or_cancels_a_newcomers_place_after_redis_forgets() {
    let Some(server) = RedisServer::start("an_old_waiter_never_takes") else {
        return;
    };
    let mut cases = 0;
    // A flush; a failover to a replica that never received the budget's keys.
    for forget in ["FLUSHALL", "DEL"] {
        let name = format!("forgot-{cases}");
        let url = server.budget_url(&name);
        // Each process polls every 2 s, woken or not: how it finds that Redis forgot.
        let options = patient().with_waiter_stale_after(Duration::from_secs(4));
        let a = budget(&url, tokens(0.0, 1.0), options.clone());
        let b = budget(&url, tokens(0.0, 1.0), options);
        let old = {
            let a = a.clone();
            let ask = charged(&a, 20_000, 0);
            tokio::spawn(async move { a.acquire(ask).await })
        };
        queued(&a, 1).await;
        if forget == "FLUSHALL" {
            assert!(server.command("FLUSHALL").starts_with("+OK"));
        } else {
            let keys = server.command(&format!("KEYS rebound:budget:{{{name}}}:*"));
            let keys: Vec<&str> = keys.lines().filter(|l| l.starts_with("rebound")).collect();
            assert!(keys.len() >= 5, "{keys:?}");
            let deleted = server.command(&format!("DEL {}", keys.join(" ")));
            assert!(deleted.starts_with(':'), "{deleted}");
        }
        // A newcomer in another process asks after Redis forgot: its request is the first
        // the fresh budget numbers, as the old waiter's was.
        let newcomer = {
            let b = b.clone();
            let ask = charged(&b, 20_000, 0);
            tokio::spawn(async move { b.acquire(ask).await })
        };
        // The old waiter learns its request is gone and asks again: two wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.stats().await.expect("redis answers").waiting < 2 {
            assert!(Instant::now() < deadline, "{forget}: both never waited");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The old waiter stops waiting (its run was canceled): only its own request goes.
        old.abort();
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.stats().await.expect("redis answers").waiting != 1 {
            assert!(
                Instant::now() < deadline,
                "{forget}: the old request stayed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        b.record(BudgetNote::Succeeded { target: 0 }).await;
        let decision = tokio::time::timeout(Duration::from_secs(3), newcomer)
            .await
            .unwrap_or_else(|_| panic!("{forget}: the newcomer kept its place"))
            .expect("joins");
        assert_eq!(decision, PermitDecision::Granted, "{forget}");
        assert!(a.is_shared() && b.is_shared(), "{forget}");
        cases += 1;
    }
    table::check("redis-forgotten-requests", cases);
}

#[tokio::test]
async fn a_run_canceled_while_its_ask_is_on_the_way_leaves_no_request_in_the_queue() {
    let Some(server) = RedisServer::start("a_run_canceled_while_its_ask") else {
        return;
    };
    let proxy = LossyProxy::start(server.port()).await;
    let url = format!("redis://127.0.0.1:{}/in-flight", proxy.port);
    let direct = budget(&server.budget_url("in-flight"), tokens(0.0, 1.0), patient());
    let a = budget(&url, tokens(0.0, 1.0), patient());
    a.check().await.expect("redis answers");
    // Redis queues the ask (no token), but its reply never comes back: the run is canceled
    // while it still waits for it.
    proxy.lose_replies(false);
    let asking = {
        let a = a.clone();
        let ask = charged(&a, 60_000, 0);
        tokio::spawn(async move { a.acquire(ask).await })
    };
    queued(&direct, 1).await;
    asking.abort();
    // The withdrawal reaches Redis (its reply is lost too, which changes nothing).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = direct.stats().await.expect("redis answers");
        if stats.waiting == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the canceled request kept its place: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A newcomer is first in line: the next success pays it.
    proxy.deliver();
    let newcomer = {
        let direct = direct.clone();
        let ask = charged(&direct, 20_000, 0);
        tokio::spawn(async move { direct.acquire(ask).await })
    };
    queued(&direct, 2).await;
    direct.record(BudgetNote::Succeeded { target: 0 }).await;
    let decision = tokio::time::timeout(Duration::from_secs(5), newcomer)
        .await
        .expect("granted")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
}

/// A server that answers `INFO` as a Redis 4 would, and `+OK` to anything else.
async fn redis_four() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("bound").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let data = String::from_utf8_lossy(&buf[..n]).to_ascii_uppercase();
                    let mut out = Vec::new();
                    for command in data.split('*').filter(|c| !c.trim().is_empty()) {
                        if command.contains("\r\nINFO\r\n") {
                            let info =
                                "# Server\r\nredis_version:4.0.14\r\nredis_mode:standalone\r\n";
                            out.extend(format!("${}\r\n{info}\r\n", info.len()).bytes());
                        } else {
                            out.extend(b"+OK\r\n");
                        }
                    }
                    if s.write_all(&out).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_redis_that_cannot_keep_the_budget_is_refused_once_with_a_clear_error() {
    let mut cases = 0;
    let cluster = RedisServer::start_cluster_node("refused_cluster");
    let sentinel = RedisServer::start_sentinel("refused_sentinel");
    let (Some(cluster), Some(sentinel)) = (cluster, sentinel) else {
        return;
    };
    let old = redis_four().await;
    for (url, expected) in [
        (cluster.budget_url("c"), "Redis Cluster"),
        (sentinel.budget_url("s"), "Sentinel"),
        (format!("redis://127.0.0.1:{old}/old"), "Redis 5 or later"),
    ] {
        let (events, options) = recorder();
        // A loaded machine must not turn the refusal into a timeout.
        let options = options.with_call_timeout(Duration::from_secs(5));
        let b = budget(&url, tokens(1.0, 1.0), options);
        match b.check().await {
            Err(RedisBudgetError::Unsupported { reason }) => {
                assert!(reason.contains(expected), "{url}: {reason}");
            }
            other => panic!("{url}: {other:?}"),
        }
        // Decided locally from then on, without asking Redis again, told once.
        assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Denied);
        assert_eq!(b.fallback().stats().granted, 1, "{url}");
        assert!(!b.is_shared());
        assert_eq!(kinds(&events), ["fell_back"], "{url}");
        cases += 1;
    }
    table::check("redis-unsupported", cases);
}

/// Server CPU seconds (user + system) so far, from `INFO cpu`.
/// Options under which a waiter would hear nothing for a minute by polling alone.
fn never_polling() -> RedisOptions {
    patient()
        .with_poll_interval(Duration::from_secs(60))
        .with_waiter_stale_after(Duration::from_secs(120))
}

#[tokio::test]
async fn a_grant_wakes_the_waiting_process_at_once_instead_of_its_next_poll() {
    let Some(server) = RedisServer::start("a_grant_wakes_the_waiting_process") else {
        return;
    };
    let url = server.budget_url("push");
    let config = tokens(0.0, 1.0);
    let payer = budget(&url, config.clone(), never_polling());
    let waiter = budget(&url, config, never_polling());
    let ask = charged(&waiter, 60_000, 0);
    let handle = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire(ask).await })
    };
    queued(&payer, 1).await;
    // Well past the subscription's start (a bounded call), so what follows is a wake-up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!handle.is_finished(), "no token: the retry waits");
    payer.record(BudgetNote::Succeeded { target: 0 }).await;
    // Polling alone would answer in a minute; the script's message wakes it now.
    let decision = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("woken by the grant, not by a poll a minute later")
        .expect("joins");
    assert_eq!(decision, PermitDecision::Granted);
    let stats = payer.stats().await.expect("redis answers");
    assert_eq!((stats.stats.granted, stats.stats.queued), (1, 1));
}

#[tokio::test]
async fn a_waiter_hears_its_denial_from_redis_at_its_deadline_without_a_wake_up() {
    let Some(server) = RedisServer::start("a_waiter_hears_its_denial") else {
        return;
    };
    let url = server.budget_url("deadline");
    let waiter = budget(&url, tokens(0.0, 1.0), never_polling());
    let asked = Instant::now();
    let decision = tokio::time::timeout(
        Duration::from_secs(10),
        waiter.acquire(charged(&waiter, 500, 0)),
    )
    .await
    .expect("denied at its deadline, not a minute later");
    assert_eq!(decision, PermitDecision::Denied);
    assert!(asked.elapsed() >= Duration::from_millis(500));
    // Redis denied it (its process polled at the deadline), not the local safety net a
    // second later, which withdraws the request instead.
    let stats = waiter.stats().await.expect("redis answers");
    assert_eq!((stats.stats.denied, stats.waiting), (1, 0), "{stats:?}");
}

fn server_cpu(server: &RedisServer) -> f64 {
    let info = server.command("INFO cpu");
    ["used_cpu_sys:", "used_cpu_user:"]
        .iter()
        .map(|field| {
            info.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("INFO cpu without {field}: {info}"))
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiting_retries_across_ten_processes_keep_redis_cheap_and_none_falls_back() {
    const PROCESSES: usize = 10;
    const PER_PROCESS: usize = 100;
    // Each retry waits at most this long: long enough that every ask reaches Redis before
    // its time runs out even when the test process shares two cores with a hundred other
    // tests (at 4 s, a tenth of them came too late and were denied unqueued).
    const WAIT_MS: u64 = 10_000;
    let Some(server) = RedisServer::start("a_thousand_waiting_retries") else {
        return;
    };
    let url = server.budget_url("fleet");
    // A total outage: nothing succeeds, refill pays 20 retries a second, each retry waits
    // at most WAIT_MS. A call or connect timeout would measure the test machine's scheduler (a debug build,
    // 1,000 tasks, two shared cores: 2 s was once too short under load), not Redis, so it is
    // far above any wait here; the server's cost is measured below.
    let config = BudgetConfig::default()
        .with_capacity(20.0)
        .with_initial(0.0)
        .with_deposit_per_request(0.0)
        .with_deposit_per_success(0.0)
        .with_refill_per_sec(20.0);
    let mut fell_back = Vec::new();
    let processes: Vec<RedisBudget> = (0..PROCESSES)
        .map(|_| {
            let (events, options) = recorder();
            fell_back.push(events);
            budget(
                &url,
                config.clone(),
                // Nobody dies here; a starved test process must not look dead.
                options
                    .with_call_timeout(Duration::from_secs(60))
                    .with_connect_timeout(Duration::from_secs(30))
                    .with_waiter_stale_after(Duration::from_secs(60)),
            )
        })
        .collect();
    processes[0].check().await.expect("redis answers");
    let started = Instant::now();
    let mut waiters = Vec::new();
    for p in &processes {
        for _ in 0..PER_PROCESS {
            let p = p.clone();
            // Asked when the task runs, not when it is spawned: a loaded test process starts
            // a thousand tasks over seconds, and an ask whose wait had run out before it was
            // sent would be denied without waiting (never queued), which is not this test.
            waiters.push(tokio::spawn(async move {
                let ask = charged(&p, WAIT_MS, 0);
                p.acquire(ask).await
            }));
        }
    }
    let total = (PROCESSES * PER_PROCESS) as u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = processes[0].stats().await.expect("redis answers");
        if stats.stats.queued + stats.stats.granted >= total {
            break;
        }
        assert!(Instant::now() < deadline, "never all asked: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Measured while (nearly) everyone waits and polls.
    server.command("CONFIG RESETSTAT");
    let cpu_before = server_cpu(&server);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = (server_cpu(&server) - cpu_before) / window.elapsed().as_secs_f64();
    let commandstats = server.command("INFO commandstats");
    let mut decisions = [0_usize; 3];
    for w in waiters {
        match w.await.expect("joins") {
            PermitDecision::Granted => decisions[0] += 1,
            PermitDecision::Denied => decisions[1] += 1,
            PermitDecision::WaitUntil(_) => decisions[2] += 1,
            other => panic!("a decision this test does not know: {other:?}"),
        }
    }
    let wall = started.elapsed().as_secs_f64();
    // A waiter that gave up on its own (a starved test process hears late) withdraws its
    // request, and a token granted to it goes back: wait for those withdrawals.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = processes[0].stats().await.expect("redis answers");
        let settled = stats.waiting == 0 && stats.stats.granted as usize == decisions[0];
        if settled || Instant::now() > deadline {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "{total} waiters: server CPU {:.1} % of a core while they waited, decisions \
         {decisions:?} in {wall:.1} s, {stats:?}\n{}",
        cpu * 100.0,
        commandstats
            .lines()
            .filter(|l| l.contains("evalsha"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for events in &fell_back {
        assert!(kinds(events).is_empty(), "{:?}", kinds(events));
    }
    assert!(processes.iter().all(RedisBudget::is_shared));
    assert_eq!(decisions[2], 0, "{decisions:?}");
    // Each grant was Redis's, and each token Redis spent went to a waiter that used it.
    assert_eq!(stats.stats.granted as usize, decisions[0], "{decisions:?}");
    assert!(
        stats.stats.denied as usize <= decisions[1],
        "{decisions:?}: {stats:?}"
    );
    // What refill funds over the run, no more.
    assert!(
        decisions[0] as f64 <= 20.0 * wall + 1.0,
        "{decisions:?} in {wall:.1} s"
    );
    assert!(decisions[0] > 0 && decisions[1] > 0, "{decisions:?}");
    assert!(cpu < 0.5, "redis used {:.0} % of a core", cpu * 100.0);
    table::check("redis-fleet-waiters", PROCESSES * PER_PROCESS);
}

/// How one Redis fault is put right.
enum Heal<'a> {
    /// Run these commands (inline, one connection each, in order).
    Commands(&'a RedisServer, Vec<String>),
    /// Start the killed server again, empty.
    Restart(&'a mut RedisServer),
    /// Let the proxy forward again.
    Deliver(&'a LossyProxy),
}

/// One fault, from its start to its end: while it lasts every decision comes back (from
/// the local budget, within two call timeouts: no agent stops), one `FellBack` says why;
/// once it is put right the budget is shared again within a few `retry_redis_after`, with
/// one `Restored`. Returns the error the fallback named.
async fn through_fault(
    b: &RedisBudget,
    events: &Mutex<Vec<BudgetEvent>>,
    heal: Heal<'_>,
) -> RedisBudgetError {
    for _ in 0..3 {
        let decision = tokio::time::timeout(Duration::from_secs(2), b.acquire(charged(b, 0, 0)))
            .await
            .expect("a decision within two call timeouts, whatever Redis does");
        assert_eq!(
            decision,
            PermitDecision::Granted,
            "the local budget's tokens"
        );
    }
    assert!(!b.is_shared());
    assert_eq!(kinds(events), ["fell_back"]);
    let error = match events.lock().expect("not poisoned").first() {
        Some(BudgetEvent::FellBack { error, .. }) => error.clone(),
        other => panic!("{other:?}"),
    };
    match heal {
        Heal::Commands(server, commands) => {
            for c in commands {
                let reply = server.command(&c);
                assert!(!reply.starts_with('-'), "{c}: {reply}");
            }
        }
        Heal::Restart(server) => server.restart(),
        Heal::Deliver(proxy) => proxy.deliver(),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.is_shared() {
        assert!(Instant::now() < deadline, "never shared again: {error}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.acquire(charged(b, 0, 0)).await;
    }
    assert_eq!(kinds(events), ["fell_back", "restored"]);
    error
}

/// Options for the faults: a patient call timeout (a loaded machine is not the fault under
/// test) and a quick return.
fn faulty(options: RedisOptions) -> RedisOptions {
    options
        .with_call_timeout(Duration::from_millis(500))
        .with_retry_redis_after(Duration::from_millis(200))
}

#[tokio::test]
async fn every_redis_fault_falls_back_with_one_notice_and_returns_once_redis_answers() {
    let Some(mut server) = RedisServer::start("every_redis_fault") else {
        return;
    };
    let config = tokens(100.0, 1.0);
    let mut cases = 0;

    // 1. Killed mid-run (SIGKILL), then started again, empty: the script is gone too, and
    //    is loaded again (`NOSCRIPT` answered by `SCRIPT LOAD`).
    let (events, options) = recorder();
    let b = budget(
        &server.budget_url("killed"),
        config.clone(),
        faulty(options),
    );
    b.check().await.expect("redis answers");
    server.kill();
    let error = through_fault(&b, &events, Heal::Restart(&mut server)).await;
    assert!(
        matches!(
            error,
            RedisBudgetError::Connection { .. } | RedisBudgetError::Timeout { .. }
        ),
        "{error:?}"
    );
    cases += 1;

    // 2. Stalled: a proxy that stops forwarding Redis's replies, then forwards again.
    let proxy = LossyProxy::start(server.port()).await;
    let (events, options) = recorder();
    let url = format!("redis://127.0.0.1:{}/stalled", proxy.port);
    let b = budget(&url, config.clone(), faulty(options));
    b.check().await.expect("redis answers");
    proxy.lose_replies(false);
    let error = through_fault(&b, &events, Heal::Deliver(&proxy)).await;
    assert!(
        error.to_string().contains("timed out") || error.to_string().contains("within"),
        "{error}"
    );
    cases += 1;

    // 3. The script flushed from a running Redis (`SCRIPT FLUSH`; a restart does the same):
    //    `NOSCRIPT` is answered by loading it again, so nothing falls back at all.
    let (events, options) = recorder();
    let b = budget(
        &server.budget_url("noscript"),
        config.clone(),
        faulty(options),
    );
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert!(
        b.is_shared() && kinds(&events).is_empty(),
        "{:?}",
        kinds(&events)
    );
    assert_eq!(b.stats().await.expect("redis answers").stats.granted, 2);
    cases += 1;

    // 4. A wrong password: refused at the handshake; the notice names neither password.
    //    Put right by the server taking that password.
    assert!(server
        .command("CONFIG SET requirepass right-pw-1")
        .starts_with("+OK"));
    let (events, options) = recorder();
    let url = format!("redis://:wrong-pw-2@127.0.0.1:{}/password", server.port());
    let b = budget(&url, config.clone(), faulty(options));
    let heal = vec!["AUTH right-pw-1\r\nCONFIG SET requirepass wrong-pw-2".to_owned()];
    let error = through_fault(&b, &events, Heal::Commands(&server, heal)).await;
    let told = format!("{error} {:?}", events.lock().expect("not poisoned"));
    assert!(
        !told.contains("right-pw") && !told.contains("wrong-pw"),
        "{told}"
    );
    let reply = server.command("AUTH wrong-pw-2\r\nCONFIG SET requirepass \"\"");
    assert!(reply.starts_with("+OK"), "{reply}");
    cases += 1;

    // 5. A read-only replica (a failover left this process on one): every script writes, so
    //    every decision is refused; put right when it is a master again.
    let (events, options) = recorder();
    let b = budget(
        &server.budget_url("replica"),
        config.clone(),
        faulty(options),
    );
    b.check().await.expect("redis answers");
    let nobody = server::free_port();
    assert!(server
        .command(&format!("REPLICAOF 127.0.0.1 {nobody}"))
        .starts_with("+OK"));
    let heal = vec!["REPLICAOF NO ONE".to_owned()];
    let error = through_fault(&b, &events, Heal::Commands(&server, heal)).await;
    assert!(matches!(error, RedisBudgetError::ReadOnly), "{error}");
    assert!(error.to_string().contains("read-only replica"), "{error}");
    cases += 1;

    // 6. Out of memory (`maxmemory` reached, no eviction): scripts that write are refused;
    //    put right when memory is given back.
    let (events, options) = recorder();
    let b = budget(&server.budget_url("memory"), config, faulty(options));
    b.check().await.expect("redis answers");
    for c in [
        "CONFIG SET maxmemory-policy noeviction",
        "CONFIG SET maxmemory 1",
    ] {
        assert!(server.command(c).starts_with("+OK"), "{c}");
    }
    let heal = vec!["CONFIG SET maxmemory 0".to_owned()];
    let error = through_fault(&b, &events, Heal::Commands(&server, heal)).await;
    assert!(error.to_string().contains("maxmemory"), "{error}");
    cases += 1;

    table::check("redis-faults", cases);
}

#[tokio::test]
async fn a_process_with_other_settings_is_refused_naming_both_never_mixed_in() {
    let Some(server) = RedisServer::start("a_process_with_other_settings") else {
        return;
    };
    let url = server.budget_url("settings");
    let first = budget(&url, tokens(10.0, 1.0), patient());
    assert_eq!(
        first.acquire(charged(&first, 0, 0)).await,
        PermitDecision::Granted
    );
    let (events, options) = recorder();
    let other = budget(
        &url,
        tokens(3.0, 1.0),
        options.with_call_timeout(Duration::from_secs(5)),
    );
    let error = other.check().await.expect_err("other settings");
    let RedisBudgetError::OtherSettings { theirs, ours } = &error else {
        panic!("{error:?}");
    };
    assert!(
        theirs.contains("capacity 10") && ours.contains("capacity 3"),
        "{error}"
    );
    assert!(error.is_permanent());
    // Refused for good: decided locally, told once, Redis's budget untouched by it.
    assert_eq!(
        other.acquire(charged(&other, 0, 0)).await,
        PermitDecision::Granted
    );
    assert_eq!(kinds(&events), ["fell_back"]);
    assert!(!other.is_shared());
    let stats = first.stats().await.expect("redis answers");
    assert_eq!(
        stats.stats.granted, 1,
        "only the first process's grant: {stats:?}"
    );
    // The same settings again: shared.
    let same = budget(&url, tokens(10.0, 1.0), patient());
    same.check().await.expect("same settings");
    assert_eq!(
        same.acquire(charged(&same, 0, 0)).await,
        PermitDecision::Granted
    );
    assert_eq!(first.stats().await.expect("redis answers").stats.granted, 2);
}

#[tokio::test]
async fn a_refused_password_or_a_read_only_replica_is_told_as_such_once_never_as_unreachable() {
    const PASSWORD: &str = "s3cret-budget-pw";
    let Some(locked) = RedisServer::start("a_refused_password_or_a_read_only_replica") else {
        return;
    };
    assert!(locked
        .command(&format!("CONFIG SET requirepass {PASSWORD}"))
        .starts_with("+OK"));
    let Some(replica) = RedisServer::start("a_refused_password_or_a_read_only_replica") else {
        return;
    };
    // A replica of a master that is not there: read-only all the same.
    let replicating = replica.command(&format!("REPLICAOF 127.0.0.1 {}", server::free_port()));
    assert!(replicating.starts_with("+OK"), "{replicating}");
    let port = locked.port();
    let mut cases = 0;
    for (url, says) in [
        // No password.
        (
            format!("redis://127.0.0.1:{port}/locked"),
            "authentication failed",
        ),
        // A wrong one.
        (
            format!("redis://:not-it@127.0.0.1:{port}/locked"),
            "authentication failed",
        ),
        // The password without its colon, which reads as a user name.
        (
            format!("redis://{PASSWORD}@127.0.0.1:{port}/locked"),
            "authentication failed",
        ),
        (replica.budget_url("replica"), "read-only replica"),
    ] {
        let (events, options) = recorder();
        let b = budget(
            &url,
            tokens(1.0, 1.0),
            options.with_retry_redis_after(Duration::from_millis(50)),
        );
        let error = b.check().await.expect_err("refused").to_string();
        assert!(error.contains(says), "{url}: {error}");
        assert!(!error.contains("cannot reach"), "{url}: {error}");
        // Tried again (and refused again) by later decisions: told once.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert_eq!(
                b.acquire(charged(&b, 0, 0)).await,
                PermitDecision::Granted,
                "{url}: the local budget decides"
            );
            b.fallback().record(BudgetNote::Succeeded { target: 0 });
        }
        assert!(!b.is_shared(), "{url}");
        assert_eq!(kinds(&events), ["fell_back"], "{url}");
        let told = events.lock().expect("not poisoned")[0].to_string();
        assert!(told.contains(says), "{url}: {told}");
        assert!(!told.contains(PASSWORD), "{url}: {told}");
        cases += 1;
    }
    table::check("redis-refused", cases);
}

#[tokio::test]
async fn a_connection_slower_to_open_than_a_call_may_take_still_shares_the_budget() {
    let Some(server) = RedisServer::start("a_connection_slower_to_open") else {
        return;
    };
    // Opening a connection takes 300 ms (a loaded machine); a call may take 150 ms once
    // connected; opening one has its own bound (the default, 1 s).
    let proxy = slow_connects::SlowConnects::start(server.port(), Duration::from_millis(300)).await;
    let (events, options) = recorder();
    let options = options.with_call_timeout(Duration::from_millis(150));
    let b = budget(&proxy.budget_url("slow-start"), tokens(1.0, 1.0), options);
    // The check at start opens the connection: Redis's answer, not a fallback.
    b.check().await.expect("redis answers");
    assert!(b.is_shared());
    // Later calls use the connection: decided in Redis.
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Denied);
    assert_eq!(b.fallback().stats().granted, 0, "no local decision");
    let direct = budget(
        &server.budget_url("slow-start"),
        tokens(1.0, 1.0),
        patient(),
    );
    assert_eq!(
        direct.stats().await.expect("redis answers").stats.granted,
        1
    );
    assert!(kinds(&events).is_empty(), "{:?}", kinds(&events));

    // A connection that cannot open within its bound is a failure of its own, told once.
    let (events, options) = recorder();
    let options = options
        .with_call_timeout(Duration::from_millis(150))
        .with_connect_timeout(Duration::from_millis(100));
    let b = budget(&proxy.budget_url("slow-start"), tokens(1.0, 1.0), options);
    let started = Instant::now();
    let error = b.check().await.expect_err("too slow to connect");
    assert!(
        matches!(error, RedisBudgetError::ConnectTimeout { timeout_ms: 100 }),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(290),
        "not waited out"
    );
    assert_eq!(kinds(&events), ["fell_back"]);
}
