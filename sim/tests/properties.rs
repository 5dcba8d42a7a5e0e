//! Property tests of every retry invariant of issue 4, over random scenarios, configs and
//! seeds.
//!
//! Each property is a function from a [`Case`] (scenario, config, seed) to `Ok` or a message;
//! proptest generates cases from a fixed seed, so runs are reproducible. A failing case is
//! written to `$CARGO_TARGET_TMPDIR/sim-failures/<property>.json` and the message prints the
//! seed and the command that replays it:
//!
//! ```text
//! REBOUND_SIM_CASE=<file> cargo test -p rebound-sim --test properties reproduce -- --ignored --nocapture
//! ```
//!
//! `PROPTEST_CASES` sets the cases per property (default 256); `PROPTEST_RNG_SEED` picks
//! another fixed generator seed (for soaks: `PROPTEST_CASES=100000 PROPTEST_RNG_SEED=$RANDOM`).

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use rebound_core::trace::command_value;
use rebound_core::{
    BatchOutcome, BudgetConfig, BudgetUse, Command, Event, FailureAction, FailureKind, GiveUp,
    HostFailureKind, InputProblemKind, PermitAsk, PermitKind, ProviderFailure, ProviderKind,
    RequestId, RequestPurpose, RunError, TargetSpec, ToolFailure, TransportFault,
};
use rebound_sim::scenario::{
    Answer, Cancel, Fault, FaultKind, History, InputProblem, Outage, RandomFaults, Scenario,
    ScriptedCall, ToolError, ToolOutcome, Turn, WeightedFault, INTERRUPTED_CALL_ID,
};
use rebound_sim::{replay, simulate, SimConfig, SimOutcome, Trace};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

// ----- cases and reporting -------------------------------------------------------------------

/// One generated run: everything needed to reproduce it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Case {
    seed: u64,
    config: SimConfig,
    scenario: Scenario,
}

impl Case {
    fn run(&self) -> Result<SimOutcome, String> {
        simulate(&self.scenario, &self.config, self.seed).map_err(|e| format!("simulator: {e}"))
    }

    fn max_attempts(&self) -> u32 {
        self.config.machine.retry.attempts()
    }
}

type Property = fn(&Case) -> Result<(), String>;

/// A failing case as saved for `reproduce`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Saved {
    property: String,
    case: Case,
}

/// Runs `property` on `case`; on failure, saves the case and explains how to reproduce it.
fn check(name: &str, case: &Case, property: Property) -> Result<(), TestCaseError> {
    property(case).map_err(|message| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim-failures");
        let path = dir.join(format!("{name}.json"));
        let json = serde_json::to_string(case).unwrap_or_default();
        let saved = serde_json::to_string(&Saved {
            property: name.to_owned(),
            case: case.clone(),
        })
        .unwrap_or_default();
        let saved = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, &saved))
            .map_or_else(|e| format!("(could not save: {e})"), |()| String::new());
        TestCaseError::fail(format!(
            "property `{name}` failed: {message}\n  seed: {seed}\n  case: {json}\n  \
             reproduce: REBOUND_SIM_CASE={path} cargo test -p rebound-sim --test properties \
             reproduce -- --ignored --nocapture {saved}",
            seed = case.seed,
            path = path.display(),
        ))
    })
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn proptest_config() -> ProptestConfig {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    ProptestConfig {
        cases: env("PROPTEST_CASES").map_or(256, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        rng_seed: RngSeed::Fixed(env("PROPTEST_RNG_SEED").unwrap_or(0x0005_eed0_f0b5)),
        failure_persistence: None,
        max_shrink_iters: 1_000,
        ..ProptestConfig::default()
    }
}

// ----- generators --------------------------------------------------------------------------

/// Which faults a generated scenario may contain.
#[derive(Debug, Clone, Copy, Default)]
struct Mix {
    /// Faults the machine does not retry (auth, bad request, not found, quota, should-retry: false).
    fatal: bool,
    /// Context overflows (with history so compaction can shrink), limits, compaction errors.
    overflow: bool,
    /// Server hints longer than the policy's cap.
    long_hints: bool,
    /// Empty messages.
    empty: bool,
    /// Tool host failures.
    host_tools: bool,
    /// Random fault models.
    random: bool,
    /// Cancellation.
    cancel: bool,
    /// At most this many scripted faults per turn (`None`: up to 6).
    max_faults: Option<usize>,
    /// Fewer scripted faults per turn than the attempt budget (overrides `max_faults`).
    fit_budget: bool,
    /// A fallback chain of up to three targets and a shared retry budget.
    chain: bool,
}

const TOOLS: [&str; 3] = ["read", "edit", "bash"];

fn retryable_fault(cap: u64) -> BoxedStrategy<Fault> {
    let transport = prop::sample::select(vec![
        TransportFault::Connect,
        TransportFault::Reset,
        TransportFault::Timeout,
        TransportFault::Dns,
        TransportFault::Tls,
    ]);
    prop_oneof![
        3 => prop::sample::select(vec![408u16, 409, 425, 429, 500, 502, 503, 504, 529])
            .prop_map(Fault::http),
        1 => (0..=cap).prop_map(|ms| Fault::http_with(429, "retry-after-ms", &ms.to_string())),
        1 => (0..=cap / 1000).prop_map(|s| Fault::http_with(529, "retry-after", &s.to_string())),
        // OpenAI's reset headers come on every response: they shape the delay of a 429 only.
        1 => (prop::sample::select(vec![429u16, 500, 503]), 0..=cap).prop_map(|(status, ms)| {
            Fault::http_with(status, "x-ratelimit-reset-requests", &format!("{ms}ms"))
        }),
        1 => Just(Fault::http_with(400, "x-should-retry", "true")),
        2 => transport.prop_map(Fault::transport),
        1 => (0u32..60).prop_map(|n| FaultKind::StreamCut { after_events: n }.into()),
        1 => (0u32..4).prop_map(|after_deltas| FaultKind::StreamError {
            error_type: "overloaded_error".into(),
            message: "Overloaded".into(),
            after_deltas,
        }
        .into()),
        1 => Just(FaultKind::MalformedStream.into()),
        1 => (59_000u64..62_000).prop_map(|ms| FaultKind::Stall { ms }.into()),
    ]
    .prop_flat_map(|f| {
        prop_oneof![3 => Just(None), 1 => (0u64..5_000).prop_map(Some)].prop_map(move |after| {
            Fault {
                after_ms: after,
                ..f.clone()
            }
        })
    })
    .boxed()
}

fn fatal_fault() -> BoxedStrategy<Fault> {
    prop_oneof![
        prop::sample::select(vec![400u16, 401, 403, 404, 422]).prop_map(Fault::http),
        Just(Fault::from(FaultKind::Http {
            status: 429,
            headers: BTreeMap::new(),
            error_type: Some("insufficient_quota".into()),
            message: Some("You exceeded your current quota".into()),
        })),
        Just(Fault::http_with(529, "x-should-retry", "false")),
    ]
    .boxed()
}

fn fault(mix: Mix, cap: u64) -> BoxedStrategy<Fault> {
    let mut options: Vec<(u32, BoxedStrategy<Fault>)> = vec![(8, retryable_fault(cap))];
    if mix.fatal {
        options.push((1, fatal_fault()));
    }
    if mix.overflow {
        options.push((2, Just(Fault::from(FaultKind::ContextOverflow)).boxed()));
    }
    if mix.long_hints {
        options.push((
            1,
            (cap + 1..cap * 3 + 2)
                .prop_map(|ms| Fault::http_with(429, "retry-after-ms", &ms.to_string()))
                .boxed(),
        ));
    }
    if mix.empty {
        options.push((1, Just(Fault::from(FaultKind::EmptyMessage)).boxed()));
    }
    prop::strategy::Union::new_weighted(options).boxed()
}

fn tool_call(mix: Mix) -> impl Strategy<Value = ScriptedCall> {
    let name = prop::sample::select(vec!["read", "edit", "bash", "grep"]);
    let problem = prop_oneof![
        8 => Just(None),
        1 => Just(Some(InputProblem { kind: InputProblemKind::Truncated, raw: "{\"pa".into() })),
        1 => Just(Some(InputProblem { kind: InputProblemKind::InvalidJson, raw: "{x}".into() })),
    ];
    let host_weight = u32::from(mix.host_tools);
    let outcome = prop_oneof![
        7 => (prop::option::of("[a-z ]{0,20}"), prop::option::of(0usize..300))
            .prop_map(|(text, bytes)| ToolOutcome::Ok { text, bytes }),
        2 => "[a-z ]{1,20}".prop_map(|m| ToolOutcome::error(&m)),
        host_weight => prop::sample::select(vec![HostFailureKind::OutOfMemory, HostFailureKind::Canceled])
            .prop_map(|kind| ToolOutcome::Host { kind, message: "host".into() }),
    ];
    (
        name,
        0u32..100,
        problem,
        outcome,
        prop::option::of(0u64..3_000),
    )
        .prop_map(
            |(name, n, input_problem, outcome, duration_ms)| ScriptedCall {
                id: None,
                name: name.to_owned(),
                input: json!({ "n": n }),
                input_problem,
                outcome,
                duration_ms,
            },
        )
}

fn answer(mix: Mix) -> impl Strategy<Value = Answer> {
    let host_weight = u32::from(mix.host_tools);
    let batch_error = prop_oneof![
        10 => Just(None),
        1 => Just(Some(ToolError::Error { message: "tool server crashed".into() })),
        host_weight => Just(Some(ToolError::Host {
            kind: HostFailureKind::OutOfMemory,
            message: "oom".into()
        })),
    ];
    (
        prop::option::of("[a-z ]{0,30}"),
        prop::collection::vec(tool_call(mix), 0..4),
        batch_error,
        prop::option::of(0u64..5_000),
    )
        .prop_map(|(text, tool_calls, batch_error, latency_ms)| Answer {
            // Never empty: an empty answer is the `empty_message` fault's job.
            text: match text {
                Some(t) if t.trim().is_empty() && tool_calls.is_empty() => Some("ok".into()),
                None if tool_calls.is_empty() => Some("ok".into()),
                t => t,
            },
            batch_error: if tool_calls.is_empty() {
                None
            } else {
                batch_error
            },
            tool_calls,
            stop_reason: None,
            latency_ms,
        })
}

fn turn(mix: Mix, cap: u64) -> impl Strategy<Value = Turn> {
    let max = mix.max_faults.map_or(7, |m| m + 1);
    (
        prop::collection::vec(fault(mix, cap), 0..max),
        answer(mix),
        prop::option::of(answer(mix)),
    )
        .prop_map(|(faults, answer, when_last_tool_error)| Turn {
            faults,
            answer,
            when_last_tool_error,
        })
}

fn random_faults(mix: Mix, cap: u64) -> impl Strategy<Value = Option<RandomFaults>> {
    let model = (
        0.0f64..0.6,
        prop::collection::vec((1u32..5, fault(mix, cap)), 0..3),
        prop::collection::vec(
            (
                0u64..30_000,
                1u64..20_000,
                prop::option::of(0.0f64..1.0),
                fault(mix, cap),
            ),
            0..3,
        ),
    )
        .prop_map(|(failure_rate, mix, outages)| RandomFaults {
            failure_rate,
            mix: mix
                .into_iter()
                .map(|(weight, fault)| WeightedFault { weight, fault })
                .collect(),
            outages: outages
                .into_iter()
                .map(|(from, len, rate, fault)| Outage {
                    from_ms: from,
                    until_ms: from + len,
                    rate,
                    fault,
                    target: None,
                })
                .collect(),
        });
    if mix.random {
        prop::option::of(model).boxed()
    } else {
        Just(None).boxed()
    }
}

fn scenario(mix: Mix, cap: u64) -> impl Strategy<Value = Scenario> {
    let provider = prop::sample::select(vec![
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ]);
    let history = if mix.overflow {
        prop::option::of((0usize..8, 0usize..4_000, any::<bool>()).prop_map(
            |(turns, bytes, interrupted)| History {
                turns,
                bytes,
                interrupted,
            },
        ))
        .boxed()
    } else {
        Just(None).boxed()
    };
    let overflow_extras = if mix.overflow {
        (
            prop::option::of(5_000usize..40_000),
            prop_oneof![5 => Just(None), 1 => Just(Some("compactor crashed".to_owned()))],
        )
            .boxed()
    } else {
        Just((None, None)).boxed()
    };
    let resume = if mix.overflow {
        prop_oneof![3 => Just(false), 1 => Just(true)].boxed()
    } else {
        Just(false).boxed()
    };
    let cancel = if mix.cancel {
        prop_oneof![
            1 => Just(None),
            2 => (0u64..30_000).prop_map(|t| Some(Cancel::AtMs(t))),
            2 => (0usize..30).prop_map(|n| Some(Cancel::AtStep(n))),
        ]
        .boxed()
    } else {
        Just(None).boxed()
    };
    (
        provider,
        prop::collection::vec(turn(mix, cap), 1..5),
        history,
        overflow_extras,
        random_faults(mix, cap),
        cancel,
        resume,
    )
        .prop_map(
            move |(
                provider,
                turns,
                history,
                (context_limit_bytes, compaction_error),
                random,
                cancel,
                resume,
            )| {
                let mut scenario = Scenario::default();
                scenario.name = "generated".into();
                scenario.provider = provider;
                scenario.history = history;
                scenario.resume = resume;
                scenario.tools = TOOLS.map(rebound_sim::scenario::ToolDef::named).to_vec();
                scenario.turns = turns;
                scenario.random = random;
                scenario.context_limit_bytes = context_limit_bytes;
                scenario.compaction_error = compaction_error;
                scenario.cancel = cancel;
                scenario
            },
        )
}

fn sim_config() -> impl Strategy<Value = SimConfig> {
    (
        1u32..=6,
        any::<bool>(),
        0u64..2_000,
        1.0f64..3.0,
        0u64..20_000,
        1_000u64..60_000,
        1u32..=3,
        prop_oneof![3 => Just(None), 1 => (1u32..4).prop_map(Some)],
        1_000u64..60_000,
    )
        .prop_map(
            |(
                max_attempts,
                jitter,
                initial,
                multiplier,
                max_delay,
                max_retry_after,
                empties,
                max_turns,
                fallback_after,
            )| {
                let mut c = SimConfig::default();
                c.machine.max_turns = max_turns;
                let r = &mut c.machine.retry;
                r.max_attempts = max_attempts;
                r.jitter = jitter;
                r.initial_delay_ms = initial;
                r.multiplier = multiplier;
                r.max_delay_ms = max_delay;
                r.max_retry_after_ms = max_retry_after;
                r.fallback_after_ms = fallback_after;
                r.max_empty_responses = empties;
                c
            },
        )
}

/// A fallback chain of 1 to 3 targets and, sometimes, a small shared retry budget.
fn chain() -> impl Strategy<Value = (Vec<TargetSpec>, Option<(BudgetUse, BudgetConfig)>)> {
    let target = prop::sample::select(vec![
        TargetSpec::new(ProviderKind::Anthropic, "claude-sonnet-4-5").with_context_window(None),
        TargetSpec::new(ProviderKind::OpenAi, "gpt-4.1").with_context_window(None),
        TargetSpec::new(ProviderKind::OpenAiResponses, "gpt-5").with_context_window(None),
    ]);
    let budget = (
        0u64..20_000,
        0.0f64..4.0,
        0.0f64..0.5,
        0.0f64..4.0,
        0.0f64..2.0,
    )
        .prop_map(|(max_wait_ms, capacity, deposit, success, refill)| {
            (
                BudgetUse::new(max_wait_ms),
                BudgetConfig::default()
                    .with_capacity(capacity)
                    .with_initial(capacity)
                    .with_deposit_per_request(deposit)
                    .with_deposit_per_success(success)
                    .with_refill_per_sec(refill),
            )
        });
    (
        prop::collection::vec(target, 1..=3),
        prop::option::of(budget),
    )
}

fn cases(mix: Mix) -> impl Strategy<Value = Case> {
    let chain = if mix.chain {
        chain().boxed()
    } else {
        Just((Vec::new(), None)).boxed()
    };
    (any::<u64>(), sim_config(), chain).prop_flat_map(
        move |(seed, mut config, (targets, budget))| {
            config.machine.targets = targets;
            if let Some((budget_use, budget)) = budget {
                config.machine.retry_budget = Some(budget_use);
                config.budget = Some(budget);
            }
            let cap = config.machine.retry.max_retry_after_ms;
            let mix = Mix {
                max_faults: if mix.fit_budget {
                    Some(config.machine.retry.attempts() as usize - 1)
                } else {
                    mix.max_faults
                },
                ..mix
            };
            scenario(mix, cap).prop_map(move |scenario| Case {
                seed,
                config: config.clone(),
                scenario,
            })
        },
    )
}

/// Everything at once.
const EVERYTHING: Mix = Mix {
    fatal: true,
    overflow: true,
    long_hints: true,
    empty: true,
    host_tools: true,
    random: true,
    cancel: true,
    max_faults: Some(4),
    fit_budget: false,
    chain: true,
};

/// Faults that are retried and end in time: every turn's faults fit in its attempt budget.
const SURVIVABLE: Mix = Mix {
    fatal: false,
    overflow: false,
    long_hints: false,
    empty: false,
    host_tools: false,
    random: false,
    cancel: false,
    max_faults: None,
    fit_budget: true,
    chain: false,
};

// ----- reading an outcome ------------------------------------------------------------------

/// A provider request attempt as the outcome shows it.
struct Attempt {
    step: usize,
    request: RequestId,
    attempt: u32,
}

fn attempts(o: &SimOutcome) -> Vec<Attempt> {
    let mut out = Vec::new();
    for (step, s) in o.steps.iter().enumerate() {
        for c in &s.commands {
            if let Command::SendRequest {
                request, attempt, ..
            } = c
            {
                out.push(Attempt {
                    step,
                    request: *request,
                    attempt: *attempt,
                });
            }
        }
    }
    out
}

fn target_of(o: &SimOutcome, request: RequestId) -> usize {
    o.commands()
        .find_map(|(_, c)| match c {
            Command::SendRequest {
                request: r, target, ..
            } if *r == request => Some(*target),
            _ => None,
        })
        .unwrap_or(usize::MAX)
}

fn attempt_of(o: &SimOutcome, request: RequestId) -> Option<u32> {
    attempts(o)
        .into_iter()
        .find(|a| a.request == request)
        .map(|a| a.attempt)
}

fn failed_event(event: &Event) -> Option<(RequestId, &ProviderFailure)> {
    match event {
        Event::ProviderFailed { request, failure } => Some((*request, failure)),
        _ => None,
    }
}

/// Splits the commands into requests: a new one starts after each appended message.
fn request_groups(o: &SimOutcome) -> Vec<Vec<(usize, &Command)>> {
    let mut groups = vec![Vec::new()];
    for (step, s) in o.steps.iter().enumerate() {
        for c in &s.commands {
            if matches!(c, Command::AppendMessage { .. }) {
                groups.push(Vec::new());
            } else if let Some(g) = groups.last_mut() {
                g.push((step, c));
            }
        }
    }
    groups
}

// ----- properties --------------------------------------------------------------------------

fn failed_attempts_never_change_the_conversation(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    for (i, s) in o.steps.iter().enumerate() {
        if failed_event(&s.event).is_some() {
            ensure!(
                !s.commands.iter().any(|c| matches!(
                    c,
                    Command::AppendMessage { .. } | Command::ReplaceConversation { .. }
                )),
                "step {i}: a failed attempt changed the conversation: {:?}",
                s.commands
            );
        }
    }
    // Retries of one request send the very same snapshot (no copy, no change) until a
    // compaction replaces it.
    for group in request_groups(&o) {
        let mut current: Option<&rebound_core::Snapshot> = None;
        for (step, c) in group {
            match c {
                Command::SendRequest { conversation, .. } => {
                    if let Some(prev) = current {
                        ensure!(
                            std::sync::Arc::ptr_eq(prev.arc(), conversation.arc()),
                            "step {step}: a retry sent a different conversation snapshot"
                        );
                    }
                    current = Some(conversation);
                }
                Command::ReplaceConversation { .. } => current = None,
                _ => {}
            }
        }
    }
    Ok(())
}

fn eventual_success_matches_the_fault_free_run(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    if !o.succeeded() {
        return Ok(());
    }
    let clean = Case {
        scenario: case.scenario.without_faults(),
        ..case.clone()
    }
    .run()?;
    ensure!(
        clean.succeeded(),
        "the fault-free run failed: {:?}",
        clean.result
    );
    ensure!(
        o.conversation == clean.conversation,
        "the conversation after retries differs from the fault-free run's:\n  faulty: {}\n  clean:  {}",
        serde_json::to_string(&o.conversation).unwrap_or_default(),
        serde_json::to_string(&clean.conversation).unwrap_or_default()
    );
    ensure!(
        o.result == clean.result,
        "outcomes differ: {:?} vs {:?}",
        o.result,
        clean.result
    );
    Ok(())
}

fn attempts_are_capped_and_exhaustion_returns_the_last_failure(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let max = case.max_attempts();
    for a in attempts(&o) {
        ensure!(
            a.attempt >= 1 && a.attempt <= max,
            "step {}: attempt {} of at most {max}",
            a.step,
            a.attempt
        );
    }
    if let Err(RunError::Provider {
        failure,
        reason: GiveUp::AttemptsExhausted { attempts: n },
        ..
    }) = &o.result
    {
        ensure!(
            *n == max,
            "gave up after {n} attempts, the policy allows {max}"
        );
        let last = o
            .steps
            .iter()
            .rev()
            .find_map(|s| failed_event(&s.event))
            .map(|(_, f)| f);
        ensure!(
            last == Some(failure),
            "the run failed with {failure:?}, but the last failure was {last:?}"
        );
        let last_step = o.steps.len() - 1;
        ensure!(
            failed_event(&o.steps[last_step].event).is_some(),
            "exhaustion was not decided on a provider failure"
        );
    }
    Ok(())
}

fn retry_delays_follow_the_policy_or_the_capped_server_hint(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let retry = &case.config.machine.retry;
    for (i, s) in o.steps.iter().enumerate() {
        let Some((request, failure)) = failed_event(&s.event) else {
            continue;
        };
        let Some(n) = attempt_of(&o, request) else {
            return Err(format!(
                "step {i}: a failure for an unknown request {request}"
            ));
        };
        let sleep = s.commands.iter().find_map(|c| match c {
            Command::Sleep { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        });
        let cap = retry.max_retry_after_ms;
        // With a next target (a summary request never moves), a hint above the fallback
        // threshold is not waited either.
        let summary = o.commands().any(|(_, c)| {
            matches!(c, Command::SendRequest { request: r, purpose: RequestPurpose::Summary, .. }
                if *r == request)
        });
        let can_move = !summary && target_of(&o, request) + 1 < case.config.machine.target_count();
        let moves_on = |hint| can_move && retry.moves_on(hint);
        let fell_back = s
            .commands
            .iter()
            .any(|c| matches!(c, Command::NotifyFallback { .. }));
        match (failure.retry_after_ms, sleep) {
            (Some(hint), Some(d)) => ensure!(
                hint <= cap && d == hint && !moves_on(hint),
                "step {i}: slept {d} ms for a server hint of {hint} ms (cap {cap}, fallback \
                 after {} ms, next target: {can_move})",
                retry.fallback_after_ms
            ),
            (Some(hint), None) if hint > cap && failure.action() == FailureAction::Retry => {
                ensure!(
                    s.commands.iter().any(|c| matches!(
                        c,
                        Command::Fail { error } if matches!(
                            **error,
                            RunError::Provider {
                                reason: GiveUp::RetryAfterTooLong { .. },
                                ..
                            }
                        )
                    )) || n >= retry.attempts()
                        || fell_back,
                    "step {i}: a hint of {hint} ms over the cap {cap} did not end the run: {:?}",
                    s.commands
                );
            }
            (Some(hint), None) if moves_on(hint) && failure.action() == FailureAction::Retry => {
                ensure!(
                    fell_back || n >= retry.attempts(),
                    "step {i}: a hint of {hint} ms over the fallback threshold {} ms did not \
                     move to the next target: {:?}",
                    retry.fallback_after_ms,
                    s.commands
                );
            }
            (None, Some(d)) => {
                let base = retry.base_delay_ms(n);
                let low = if retry.jitter { base - base / 2 } else { base };
                // A rate-limit reset is a floor under the jittered backoff, and for a 429 only.
                let floor = failure
                    .rate_limit_reset_ms
                    .filter(|reset| failure.kind == FailureKind::RateLimited && *reset <= cap)
                    .unwrap_or(0);
                let (low, high) = (low.max(floor), base.max(floor));
                ensure!(
                    (low..=high).contains(&d),
                    "step {i}: retry after attempt {n} slept {d} ms, policy allows {low}..={high} \
                     ({:?}, reset hint {:?})",
                    failure.kind,
                    failure.rate_limit_reset_ms
                );
            }
            _ => {}
        }
    }
    Ok(())
}

fn no_request_is_sent_before_its_delay_has_passed(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let mut not_before = rebound_core::Millis::ZERO;
    for (i, s) in o.steps.iter().enumerate() {
        for c in &s.commands {
            match c {
                Command::Sleep { delay_ms, .. } => not_before = s.at.plus(*delay_ms),
                Command::SendRequest { attempt, .. } if *attempt > 1 => ensure!(
                    s.at >= not_before,
                    "step {i}: attempt {attempt} sent at {} before its delay ended at {not_before}",
                    s.at
                ),
                _ => {}
            }
        }
    }
    Ok(())
}

fn one_retry_notification_precedes_each_retry_delay(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let max = case.max_attempts();
    let mut announced: Option<u32> = None;
    for (i, s) in o.steps.iter().enumerate() {
        let notes: Vec<_> = s
            .commands
            .iter()
            .filter_map(|c| match c {
                Command::NotifyRetry { info } => Some(info),
                _ => None,
            })
            .collect();
        if let Some((request, _)) = failed_event(&s.event) {
            let n = attempt_of(&o, request).unwrap_or(0);
            for (j, c) in s.commands.iter().enumerate() {
                if let Command::Sleep { delay_ms, .. } = c {
                    ensure!(notes.len() == 1, "step {i}: {} notifications", notes.len());
                    let Some(Command::NotifyRetry { info }) =
                        j.checked_sub(1).map(|k| &s.commands[k])
                    else {
                        return Err(format!(
                            "step {i}: the sleep is not right after a notification"
                        ));
                    };
                    ensure!(
                        info.attempt == n + 1 && info.max_attempts == max && info.delay_ms == *delay_ms,
                        "step {i}: notification {info:?} for a retry after attempt {n} of {max}, sleeping {delay_ms}"
                    );
                    announced = Some(info.attempt);
                }
            }
            if s.commands
                .iter()
                .any(|c| matches!(c, Command::Compact { .. }))
            {
                ensure!(
                    matches!(notes.as_slice(), [info] if info.attempt == n && info.delay_ms == 0
                        && info.kind == FailureKind::ContextOverflow),
                    "step {i}: a compaction retry of attempt {n} announced as {notes:?}"
                );
            }
            if notes.iter().any(|n| n.kind != FailureKind::ContextOverflow) {
                ensure!(
                    s.commands
                        .iter()
                        .any(|c| matches!(c, Command::Sleep { .. })),
                    "step {i}: a retry notification without a delay"
                );
            }
        } else {
            ensure!(
                notes.is_empty(),
                "step {i}: a retry notification after {:?}",
                s.event
            );
        }
        for c in &s.commands {
            if let Command::SendRequest { attempt, .. } = c {
                if let Some(expected) = announced.take() {
                    ensure!(
                        *attempt == expected,
                        "step {i}: announced attempt {expected}, sent attempt {attempt}"
                    );
                }
            }
        }
    }
    Ok(())
}

fn non_retryable_failures_are_never_retried(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    for (i, s) in o.steps.iter().enumerate() {
        let fatal = match &s.event {
            Event::ProviderFailed { failure, .. } => failure.action() == FailureAction::Fail,
            Event::Cancel | Event::HostFailed { .. } => true,
            Event::ToolsFinished { outcome, .. } => match outcome {
                BatchOutcome::WholeBatch(failure) => matches!(failure, ToolFailure::Host(_)),
                BatchOutcome::PerCall(calls) => calls
                    .iter()
                    .any(|c| matches!(c.result, Err(ToolFailure::Host(_)))),
            },
            _ => false,
        };
        if let (true, Event::ProviderFailed { request, failure }) = (fatal, &s.event) {
            let from = target_of(&o, *request);
            // The first attempt on the next target: sent at once, or (with a budget) asked
            // for first.
            let next = match s.commands.as_slice() {
                [Command::NotifyFallback { info }, Command::SendRequest {
                    target, attempt: 1, ..
                }]
                | [Command::NotifyFallback { info }, Command::AcquirePermit {
                    ask:
                        PermitAsk {
                            target,
                            kind: PermitKind::FirstAttempt,
                            ..
                        },
                    ..
                }] => Some((info, target)),
                _ => None,
            };
            if let Some((info, target)) = next {
                ensure!(
                    matches!(
                        failure.kind,
                        FailureKind::QuotaExhausted | FailureKind::ModelNotFound
                    ) && info.from == from
                        && *target == from + 1,
                    "step {i}: a non-retryable {:?} on target {from} fell back to {target}",
                    failure.kind
                );
                // Never again to the target that refused.
                let later = o.steps[i + 1..]
                    .iter()
                    .flat_map(|s| &s.commands)
                    .any(|c| matches!(c, Command::SendRequest { target, .. } if *target == from));
                ensure!(
                    !later,
                    "step {i}: target {from} was asked again after refusing"
                );
                continue;
            }
        }
        if fatal {
            // A batch stopped by a host failure first keeps the results of the calls that
            // finished (one message of tool results), then fails.
            let kept = |m: &rebound_core::Message| {
                m.role == rebound_core::Role::User
                    && m.content
                        .iter()
                        .all(|b| matches!(b, rebound_core::ContentBlock::ToolResult(_)))
            };
            let per_call = matches!(
                s.event,
                Event::ToolsFinished {
                    outcome: BatchOutcome::PerCall(_),
                    ..
                }
            );
            ensure!(
                match s.commands.as_slice() {
                    [Command::Fail { .. }] => true,
                    [Command::AppendMessage { message }, Command::Fail { .. }] => {
                        per_call && kept(message)
                    }
                    _ => false,
                },
                "step {i}: a non-retryable failure produced {:?}",
                s.commands
            );
            ensure!(
                i + 1 == o.steps.len(),
                "step {i}: the run went on after a non-retryable failure"
            );
            if let Event::ProviderFailed { failure, .. } = &s.event {
                ensure!(
                    matches!(&o.result, Err(RunError::Provider { reason: GiveUp::NotRetryable, failure: f, .. }) if f == failure),
                    "step {i}: the run ended with {:?}",
                    o.result
                );
            }
        }
    }
    Ok(())
}

fn overflow_compacts_once_per_request_without_spending_attempts(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let max = case.max_attempts();
    for group in request_groups(&o) {
        let compactions = group
            .iter()
            .filter(|(_, c)| matches!(c, Command::Compact { .. }))
            .count();
        ensure!(
            compactions <= 1,
            "{compactions} compactions for one request"
        );
        let mut last_attempt = 0;
        let mut replaced = false;
        for (step, c) in &group {
            match c {
                Command::SendRequest { attempt, .. } => {
                    if replaced {
                        ensure!(
                            *attempt == last_attempt,
                            "step {step}: the compaction retry is attempt {attempt}, the overflowed one was {last_attempt}"
                        );
                        replaced = false;
                    }
                    ensure!(*attempt <= max, "step {step}: attempt {attempt} > {max}");
                    last_attempt = *attempt;
                }
                Command::ReplaceConversation { .. } => replaced = true,
                _ => {}
            }
        }
    }
    // A second overflow of the same request fails the run.
    let mut overflowed = false;
    for (i, s) in o.steps.iter().enumerate() {
        if s.commands
            .iter()
            .any(|c| matches!(c, Command::AppendMessage { .. }))
        {
            overflowed = false;
        }
        if let Some((_, f)) = failed_event(&s.event) {
            if f.kind == FailureKind::ContextOverflow {
                if overflowed {
                    ensure!(
                        matches!(
                            s.commands.as_slice(),
                            [Command::Fail { error }] if matches!(
                                **error,
                                RunError::Provider {
                                    reason: GiveUp::OverflowAfterCompaction,
                                    ..
                                }
                            )
                        ),
                        "step {i}: a second overflow produced {:?}",
                        s.commands
                    );
                }
                overflowed = true;
            }
        }
    }
    Ok(())
}

/// What the scenario says about a call id: (call, its answer's batch error).
fn scripted_calls(s: &Scenario) -> BTreeMap<String, (&ScriptedCall, Option<&ToolError>)> {
    let mut out = BTreeMap::new();
    for (t, turn) in s.turns.iter().enumerate() {
        for (alt, answer) in [
            (false, Some(&turn.answer)),
            (true, turn.when_last_tool_error.as_ref()),
        ] {
            let Some(answer) = answer else { continue };
            for (i, call) in answer.tool_calls.iter().enumerate() {
                out.insert(
                    answer.call_id(t, alt, i),
                    (call, answer.batch_error.as_ref()),
                );
            }
        }
    }
    out
}

fn every_tool_use_gets_one_result_in_order(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let scripted = scripted_calls(&case.scenario);
    let messages = o.conversation.messages();
    let mut host_failure_expected = false;
    for (i, m) in messages.iter().enumerate() {
        let uses: Vec<_> = m.tool_uses().collect();
        if uses.is_empty() {
            continue;
        }
        let Some(next) = messages.get(i + 1) else {
            // The run stopped with open calls: only a host failure or a cancel may do that.
            ensure!(
                matches!(o.result, Err(RunError::Host { .. } | RunError::Canceled)),
                "message {i}: open tool calls at the end of a run that ended with {:?}",
                o.result
            );
            continue;
        };
        let results: Vec<_> = next.tool_results().collect();
        ensure!(
            results.len() == uses.len(),
            "message {i}: {} tool uses, {} results",
            uses.len(),
            results.len()
        );
        for ((id, name, _), r) in uses.iter().zip(&results) {
            ensure!(
                r.tool_use_id == *id,
                "message {}: results out of order",
                i + 1
            );
            if *id == INTERRUPTED_CALL_ID {
                ensure!(
                    r.is_error,
                    "the interrupted call {id} got a successful result"
                );
                continue;
            }
            if id.starts_with("toolu_hist_") {
                continue; // answered in the history
            }
            let (call, batch_error) = scripted
                .get(*id)
                .ok_or_else(|| format!("unknown call id {id}"))?;
            let refused = !TOOLS.contains(name) || call.input_problem.is_some();
            let runs = !refused;
            let host = runs
                && (matches!(call.outcome, ToolOutcome::Host { .. }) && batch_error.is_none()
                    || matches!(batch_error, Some(ToolError::Host { .. })));
            if host {
                // Its batch was stopped by it, keeping the results of the calls that
                // finished: it is answered as interrupted, and the run ends there.
                ensure!(
                    r.is_error && r.text().contains("interrupted"),
                    "message {i}: call {id} had a host failure but got {r:?}"
                );
                ensure!(
                    i + 2 == messages.len()
                        && matches!(o.result, Err(RunError::Host { .. } | RunError::Canceled)),
                    "message {i}: the run went on after call {id}'s host failure: {:?}",
                    o.result
                );
                continue;
            }
            let failed = refused
                || matches!(batch_error, Some(ToolError::Error { .. }))
                || matches!(call.outcome, ToolOutcome::Error { .. });
            ensure!(
                r.is_error == failed,
                "call {id} ({name}): is_error = {}, expected {failed}",
                r.is_error
            );
            if !failed {
                let expected = call.outcome.output_text(name).unwrap_or_default();
                ensure!(
                    r.text() == expected,
                    "call {id}: content {:?}, expected {expected:?}",
                    r.text()
                );
            }
        }
        ensure!(
            o.conversation.check_tool_pairing(true).is_ok(),
            "pairing broken: {:?}",
            o.conversation.check_tool_pairing(true)
        );
    }
    // The last assistant message's calls, if any host failure would run, fail the run.
    if let Some(m) = messages
        .iter()
        .rev()
        .find(|m| m.role == rebound_core::Role::Assistant)
    {
        for (id, name, _) in m.tool_uses() {
            if let Some((call, batch_error)) = scripted.get(id) {
                let runs = TOOLS.contains(&name) && call.input_problem.is_none();
                if runs
                    && (matches!(batch_error, Some(ToolError::Host { .. }))
                        || batch_error.is_none()
                            && matches!(call.outcome, ToolOutcome::Host { .. }))
                {
                    host_failure_expected = true;
                }
            }
        }
    }
    if host_failure_expected && !matches!(o.result, Err(RunError::Canceled)) {
        ensure!(
            matches!(o.result, Err(RunError::Host { .. })),
            "a tool host failure did not fail the run: {:?}",
            o.result
        );
    }
    Ok(())
}

fn cancellation_fails_promptly_and_nothing_is_sent_after_it(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let Some(i) = o.steps.iter().position(|s| s.event == Event::Cancel) else {
        // The run ended before the cancel came.
        match case.scenario.cancel {
            Some(Cancel::AtMs(t)) => ensure!(
                o.elapsed.0 <= t,
                "the cancel at {t} ms was never handled though the run lasted until {}",
                o.elapsed
            ),
            Some(Cancel::AtStep(n)) => ensure!(
                o.steps.len() <= n,
                "the cancel after step {n} was never handled ({} steps)",
                o.steps.len()
            ),
            Some(other) => return Err(format!("a cancel this test does not know: {other:?}")),
            None => {}
        }
        return Ok(());
    };
    let s = &o.steps[i];
    ensure!(
        matches!(
            s.commands.as_slice(),
            [Command::Fail { error }] if **error == RunError::Canceled
        ),
        "the cancel produced {:?}",
        s.commands
    );
    ensure!(
        i + 1 == o.steps.len(),
        "{} steps after the cancel",
        o.steps.len() - i - 1
    );
    ensure!(
        o.result == Err(RunError::Canceled),
        "the run ended with {:?}",
        o.result
    );
    match case.scenario.cancel {
        Some(Cancel::AtMs(t)) => ensure!(s.at.0 == t, "canceled at {}, scheduled at {t} ms", s.at),
        Some(Cancel::AtStep(n)) => {
            ensure!(i == n, "canceled at step {i}, scheduled after step {n}")
        }
        Some(other) => return Err(format!("a cancel this test does not know: {other:?}")),
        None => return Err("a cancel nobody scheduled".into()),
    }
    Ok(())
}

fn same_config_seed_and_events_give_identical_commands(case: &Case) -> Result<(), String> {
    let a = case.run()?;
    let b = case.run()?;
    ensure!(
        a.steps.len() == b.steps.len(),
        "{} vs {} steps",
        a.steps.len(),
        b.steps.len()
    );
    for (i, (x, y)) in a.steps.iter().zip(&b.steps).enumerate() {
        ensure!(x == y, "step {i} differs:\n  {x:?}\n  {y:?}");
    }
    // The machine alone, fed the same events, gives the same commands too.
    let mut m = match &a.header.initial_conversation {
        Some(c) => rebound_core::AgentMachine::with_conversation(
            a.header.config.clone(),
            a.seed,
            c.clone(),
        ),
        None => rebound_core::AgentMachine::new(a.header.config.clone(), a.seed),
    };
    for (i, s) in a.steps.iter().enumerate() {
        let commands = m.step(s.at, s.event.clone());
        ensure!(
            commands == s.commands,
            "step {i}: a fresh machine emitted {commands:?}"
        );
    }
    Ok(())
}

fn recorded_trace_replays_without_divergence(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let text = o.trace().to_jsonl();
    let trace = Trace::parse(&text).map_err(|e| format!("reading the trace back: {e}"))?;
    let report = replay(&trace).map_err(|e| e.to_string())?;
    ensure!(
        report.steps == o.steps.len(),
        "{} of {} steps replayed",
        report.steps,
        o.steps.len()
    );
    ensure!(
        report.outcome.as_ref() == Some(&o.result),
        "replay ended with {:?}, the run with {:?}",
        report.outcome,
        o.result
    );
    Ok(())
}

fn altered_trace_diverges_at_the_altered_step(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    let trace = Trace::parse(&o.trace().to_jsonl()).map_err(|e| e.to_string())?;
    // One altered delay.
    if let Some(step) = trace
        .steps
        .iter()
        .position(|s| s.commands.iter().any(|c| c["type"] == "sleep"))
    {
        let mut altered = trace.clone();
        for c in &mut altered.steps[step].commands {
            if c["type"] == "sleep" {
                let d = c["delay_ms"].as_u64().unwrap_or(0);
                c["delay_ms"] = (d + 1).into();
            }
        }
        match replay(&altered) {
            Err(e) => ensure!(
                e.divergence().step == step,
                "an altered delay at step {step} diverged at {}",
                e.divergence().step
            ),
            Ok(_) => return Err(format!("an altered delay at step {step} replayed cleanly")),
        }
    }
    // One altered provider answer.
    if let Some(step) = trace.steps.iter().position(|s| {
        matches!(
            s.event,
            Event::ProviderSucceeded { .. } | Event::ProviderFailed { .. }
        )
    }) {
        let mut altered = trace.clone();
        match &mut altered.steps[step].event {
            Event::ProviderSucceeded { response, .. } => response
                .message
                .content
                .push(rebound_core::ContentBlock::text("altered")),
            Event::ProviderFailed { failure, .. } => {
                failure.message = format!("{} (altered)", failure.message).into();
            }
            _ => unreachable!("matched above"),
        }
        match replay(&altered) {
            Err(e) => ensure!(
                e.divergence().step == step,
                "an altered event at step {step} diverged at {}",
                e.divergence().step
            ),
            Ok(_) => return Err(format!("an altered event at step {step} replayed cleanly")),
        }
    }
    // The recorded commands themselves are what `command_value` makes of the run's commands.
    for (s, t) in o.steps.iter().zip(&trace.steps) {
        let values: Vec<_> = s.commands.iter().map(command_value).collect();
        ensure!(
            values == t.commands,
            "a trace line does not hold the run's commands"
        );
    }
    Ok(())
}

fn faults_that_end_within_the_attempt_budget_finish(case: &Case) -> Result<(), String> {
    let o = case.run()?;
    ensure!(o.succeeded(), "the run failed: {:?}", o.result);
    Ok(())
}

// ----- the tests ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn prop_failed_attempts_never_change_the_conversation(case in cases(EVERYTHING)) {
        check("failed_attempts_never_change_the_conversation", &case, failed_attempts_never_change_the_conversation)?;
    }

    #[test]
    fn prop_eventual_success_matches_the_fault_free_run(case in cases(Mix { random: true, empty: true, ..SURVIVABLE })) {
        check("eventual_success_matches_the_fault_free_run", &case, eventual_success_matches_the_fault_free_run)?;
    }

    #[test]
    fn prop_attempts_are_capped_and_exhaustion_returns_the_last_failure(case in cases(EVERYTHING)) {
        check("attempts_are_capped_and_exhaustion_returns_the_last_failure", &case, attempts_are_capped_and_exhaustion_returns_the_last_failure)?;
    }

    #[test]
    fn prop_retry_delays_follow_the_policy_or_the_capped_server_hint(case in cases(EVERYTHING)) {
        check("retry_delays_follow_the_policy_or_the_capped_server_hint", &case, retry_delays_follow_the_policy_or_the_capped_server_hint)?;
    }

    #[test]
    fn prop_no_request_is_sent_before_its_delay_has_passed(case in cases(EVERYTHING)) {
        check("no_request_is_sent_before_its_delay_has_passed", &case, no_request_is_sent_before_its_delay_has_passed)?;
    }

    #[test]
    fn prop_one_retry_notification_precedes_each_retry_delay(case in cases(EVERYTHING)) {
        check("one_retry_notification_precedes_each_retry_delay", &case, one_retry_notification_precedes_each_retry_delay)?;
    }

    #[test]
    fn prop_non_retryable_failures_are_never_retried(case in cases(EVERYTHING)) {
        check("non_retryable_failures_are_never_retried", &case, non_retryable_failures_are_never_retried)?;
    }

    #[test]
    fn prop_overflow_compacts_once_per_request_without_spending_attempts(case in cases(Mix { overflow: true, ..EVERYTHING })) {
        check("overflow_compacts_once_per_request_without_spending_attempts", &case, overflow_compacts_once_per_request_without_spending_attempts)?;
    }

    #[test]
    fn prop_every_tool_use_gets_one_result_in_order(case in cases(EVERYTHING)) {
        check("every_tool_use_gets_one_result_in_order", &case, every_tool_use_gets_one_result_in_order)?;
    }

    #[test]
    fn prop_cancellation_fails_promptly_and_nothing_is_sent_after_it(case in cases(EVERYTHING)) {
        check("cancellation_fails_promptly_and_nothing_is_sent_after_it", &case, cancellation_fails_promptly_and_nothing_is_sent_after_it)?;
    }

    #[test]
    fn prop_same_config_seed_and_events_give_identical_commands(case in cases(EVERYTHING)) {
        check("same_config_seed_and_events_give_identical_commands", &case, same_config_seed_and_events_give_identical_commands)?;
    }

    #[test]
    fn prop_recorded_trace_replays_without_divergence(case in cases(EVERYTHING)) {
        check("recorded_trace_replays_without_divergence", &case, recorded_trace_replays_without_divergence)?;
    }

    #[test]
    fn prop_altered_trace_diverges_at_the_altered_step(case in cases(EVERYTHING)) {
        check("altered_trace_diverges_at_the_altered_step", &case, altered_trace_diverges_at_the_altered_step)?;
    }

    #[test]
    fn prop_faults_that_end_within_the_attempt_budget_finish(case in cases(SURVIVABLE)) {
        check("faults_that_end_within_the_attempt_budget_finish", &case, faults_that_end_within_the_attempt_budget_finish)?;
    }
}

/// Replays a saved failing case: `REBOUND_SIM_CASE=<file> cargo test -p rebound-sim --test
/// properties reproduce -- --ignored --nocapture`. Prints the run's trace and checks the
/// property that failed on it.
#[test]
#[ignore = "reproduces a saved failing case named by REBOUND_SIM_CASE"]
fn reproduce() {
    let path =
        std::env::var("REBOUND_SIM_CASE").expect("set REBOUND_SIM_CASE to a saved case file");
    // Cargo runs tests in `sim/`; accept paths relative to the workspace root too.
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(&path);
    let text = std::fs::read_to_string(&path)
        .or_else(|_| std::fs::read_to_string(&workspace))
        .expect("the case file is readable");
    let saved: Saved = serde_json::from_str(&text).expect("the file holds a saved case");
    let case = saved.case;
    let outcome = case.run().expect("the simulation runs");
    println!("{}", outcome.trace().to_jsonl());
    println!("result: {:?}", outcome.result);
    let properties: [(&str, Property); 14] = [
        (
            "failed_attempts_never_change_the_conversation",
            failed_attempts_never_change_the_conversation,
        ),
        (
            "eventual_success_matches_the_fault_free_run",
            eventual_success_matches_the_fault_free_run,
        ),
        (
            "attempts_are_capped_and_exhaustion_returns_the_last_failure",
            attempts_are_capped_and_exhaustion_returns_the_last_failure,
        ),
        (
            "retry_delays_follow_the_policy_or_the_capped_server_hint",
            retry_delays_follow_the_policy_or_the_capped_server_hint,
        ),
        (
            "no_request_is_sent_before_its_delay_has_passed",
            no_request_is_sent_before_its_delay_has_passed,
        ),
        (
            "one_retry_notification_precedes_each_retry_delay",
            one_retry_notification_precedes_each_retry_delay,
        ),
        (
            "non_retryable_failures_are_never_retried",
            non_retryable_failures_are_never_retried,
        ),
        (
            "overflow_compacts_once_per_request_without_spending_attempts",
            overflow_compacts_once_per_request_without_spending_attempts,
        ),
        (
            "every_tool_use_gets_one_result_in_order",
            every_tool_use_gets_one_result_in_order,
        ),
        (
            "cancellation_fails_promptly_and_nothing_is_sent_after_it",
            cancellation_fails_promptly_and_nothing_is_sent_after_it,
        ),
        (
            "same_config_seed_and_events_give_identical_commands",
            same_config_seed_and_events_give_identical_commands,
        ),
        (
            "recorded_trace_replays_without_divergence",
            recorded_trace_replays_without_divergence,
        ),
        (
            "altered_trace_diverges_at_the_altered_step",
            altered_trace_diverges_at_the_altered_step,
        ),
        (
            "faults_that_end_within_the_attempt_budget_finish",
            faults_that_end_within_the_attempt_budget_finish,
        ),
    ];
    let (name, property) = properties
        .into_iter()
        .find(|(name, _)| *name == saved.property)
        .expect("the saved property exists");
    if let Err(e) = property(&case) {
        panic!("{name} fails on this case (seed {}): {e}", case.seed);
    }
    println!("{name} holds on this case");
}

/// The generators reach every path the properties talk about; a property that never meets
/// its situation proves nothing.
#[test]
fn generated_cases_reach_every_interesting_path() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};

    let mut runner = TestRunner::new_with_rng(
        ProptestConfig::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let strategy = cases(EVERYTHING);
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    let runs = 400;
    for _ in 0..runs {
        let case = strategy
            .new_tree(&mut runner)
            .expect("the generator makes cases")
            .current();
        let o = case.run().expect("the simulation runs");
        let mut hit = |what| *seen.entry(what).or_default() += 1;
        match &o.result {
            Ok(rebound_core::FinishReason::MaxTurns) => hit("max turns"),
            Ok(_) => hit("finished"),
            Err(RunError::Canceled) => hit("canceled"),
            Err(RunError::Host { .. }) => hit("host failure"),
            Err(RunError::Provider { reason, .. }) => hit(match reason {
                GiveUp::NotRetryable => "not retryable",
                GiveUp::AttemptsExhausted { .. } => "attempts exhausted",
                GiveUp::EmptyResponses { .. } => "empty responses",
                GiveUp::RetryAfterTooLong { .. } => "hint too long",
                GiveUp::RetryAfterLong { .. } => "hint long, fallback at hand",
                GiveUp::OverflowAfterCompaction => "overflow after compaction",
                GiveUp::CompactionFailed { .. } => "compaction failed",
                GiveUp::BudgetExhausted => "budget exhausted",
                GiveUp::CompactionDisabled => "other",
                other => panic!("a reason this test does not know: {other:?}"),
            }),
            Err(RunError::EmptyUserMessage) => hit("empty user message"),
            Err(RunError::Invariant { .. }) => hit("invariant"),
            Err(other) => panic!("an error this test does not know: {other:?}"),
        }
        let commands: Vec<_> = o.commands().map(|(_, c)| c).collect();
        if commands
            .iter()
            .any(|c| matches!(c, Command::ReplaceConversation { .. }))
        {
            hit("compacted");
        }
        if commands.iter().any(|c| matches!(c, Command::Sleep { .. })) {
            hit("retried");
        }
        if commands
            .iter()
            .any(|c| matches!(c, Command::NotifyFallback { .. }))
        {
            hit("fell back");
        }
        if commands
            .iter()
            .any(|c| matches!(c, Command::AcquirePermit { .. }))
        {
            hit("asked for a permit");
        }
        if o.conversation
            .messages()
            .iter()
            .any(|m| m.tool_results().any(|r| r.is_error))
        {
            hit("tool error result");
        }
        if o.conversation.messages().iter().any(|m| {
            m.tool_results()
                .any(|r| r.tool_use_id == INTERRUPTED_CALL_ID)
        }) {
            hit("interrupted call answered");
        }
        if case.scenario.resume && o.requests() > 0 {
            hit("resumed");
        }
        if o.conversation
            .messages()
            .iter()
            .any(|m| m.tool_results().any(|r| !r.is_error))
        {
            hit("tool result");
        }
        if o.steps.iter().any(|s| {
            matches!(&s.event, Event::ProviderFailed { failure, .. } if failure.retry_after_ms.is_some())
        }) {
            hit("server hint");
        }
    }
    println!("{seen:#?}");
    for path in [
        "finished",
        "canceled",
        "host failure",
        "not retryable",
        "attempts exhausted",
        "empty responses",
        "hint too long",
        "overflow after compaction",
        "compaction failed",
        "compacted",
        "retried",
        "tool error result",
        "tool result",
        "server hint",
        "fell back",
        "max turns",
        "interrupted call answered",
        "resumed",
        "asked for a permit",
        "budget exhausted",
    ] {
        assert!(
            seen.get(path).copied().unwrap_or(0) >= 2,
            "{runs} generated cases reached `{path}` fewer than twice: {seen:?}"
        );
    }
    assert_eq!(seen.get("invariant"), None, "{seen:?}");
}
