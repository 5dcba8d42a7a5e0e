//! The retry budget in Redis (`budget::redis`) against a real `redis-server` per test: the
//! script decides as core's budget does, processes with different clocks agree, a retry
//! waiting in one process is paid by a success in another, and every way Redis can fail —
//! down, silent, malformed, erroring — leaves the decision to a local budget, reported once,
//! until Redis answers again.

#[path = "redis_support/server.rs"]
mod server;

use rebound_core::{
    BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind, RetryBudget, Ticket,
};
use rebound_effects::budget::redis::{ScriptOp, ScriptReply};
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

/// Collects a budget's events.
fn recorder() -> (Arc<Mutex<Vec<BudgetEvent>>>, RedisOptions) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let options = RedisOptions::default().with_on_event(Arc::new(move |e: &BudgetEvent| {
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
    b.call(op, Some(now))
        .await
        .unwrap_or_else(|e| panic!("{op:?} at {now}: {e}"))
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
    for seed in 0..24_u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let config = BudgetConfig::default()
            .with_capacity(pick(&mut rng, &[0.5, 1.0, 2.0, 3.5, 5.0]))
            .with_initial(pick(&mut rng, &[0.0, 1.0, 2.5, 5.0]))
            .with_deposit_per_request(pick(&mut rng, &[0.0, 0.1, 0.25]))
            .with_deposit_per_success(pick(&mut rng, &[0.0, 1.0, 3.0]))
            .with_refill_per_sec(pick(&mut rng, &[0.0, 0.5, 2.5, 7.0]));
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
                0 => 0,
                1 => 1,
                _ => rng.u64(..600),
            };
            let at = format!("seed {seed} ({config:?}) step {step} at {now} ms");
            let mut decided: BTreeMap<u64, PermitDecision> = BTreeMap::new();
            match rng.u8(..10) {
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
                        (None, None, ScriptReply::Queued { ticket: theirs, .. }) => {
                            waiting.insert(ticket, theirs);
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
                    let got = call(&redis, ScriptOp::Cancel { ticket: theirs }, now).await;
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
                let got = call(&redis, ScriptOp::Poll { ticket: theirs }, now).await;
                match (decided.remove(&ours), got) {
                    (None, ScriptReply::Queued { .. }) => {}
                    (Some(d), got) => {
                        assert_eq!(got, reply_of(d, now), "{at}: waiter {ours}");
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
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
            "only field names and numbers: {line}"
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
        options,
    );
    let started = Instant::now();
    assert_eq!(b.acquire(charged(&b, 0, 0)).await, PermitDecision::Granted);
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(250),
        "bounded by the 50 ms call timeout: {took:?}"
    );
    let events = events.lock().expect("not poisoned").clone();
    assert!(
        matches!(
            events.as_slice(),
            [BudgetEvent::FellBack {
                error: RedisBudgetError::Timeout { .. } | RedisBudgetError::Connection { .. },
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
