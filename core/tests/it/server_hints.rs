//! Server delay hints from the headers a provider sends to the machine's decision: which
//! delay a retry waits, or whether it happens at all. Each case goes through the public path
//! an embedder uses: `classify_http` (or `classify_transport`) into `AgentMachine`.

use rebound_core::classify::{classify_http, classify_transport};
use rebound_core::{
    AgentMachine, Command, ContentBlock, Event, GiveUp, Headers, MachineConfig, Millis,
    ProviderFailure, ProviderKind, RetryConfig, RunError, TransportFault,
};

fn config(jitter: bool) -> MachineConfig {
    MachineConfig::default().with_retry(RetryConfig::default().with_jitter(jitter))
}

fn status_failure(status: u16, headers: &Headers) -> ProviderFailure {
    classify_http(ProviderKind::OpenAi, status, headers, b"{}", None)
}

/// What the machine does after the first attempt of a run fails.
#[derive(Debug, PartialEq)]
enum Decision {
    /// It retries after this many ms.
    RetryAfter(u64),
    /// The run fails.
    Fail(RunError),
}

use Decision::{Fail, RetryAfter};

impl Decision {
    fn delay(self) -> u64 {
        match self {
            RetryAfter(ms) => ms,
            Fail(error) => panic!("expected a retry, the run failed: {error}"),
        }
    }
}

fn decision(config: MachineConfig, seed: u64, failure: ProviderFailure) -> Decision {
    let mut m = AgentMachine::new(config, seed);
    let commands = m.step(
        Millis(0),
        Event::UserMessage {
            content: vec![ContentBlock::text("hi")],
        },
    );
    let request = commands
        .iter()
        .find_map(|c| match c {
            Command::SendRequest { request, .. } => Some(*request),
            _ => None,
        })
        .expect("the first request");
    let commands = m.step(Millis(1), Event::ProviderFailed { request, failure });
    for c in commands {
        match c {
            Command::Sleep { delay_ms, .. } => return RetryAfter(delay_ms),
            Command::Fail { error } => return Fail(*error),
            _ => {}
        }
    }
    panic!("neither a retry nor a failure")
}

/// The delay the machine waits after a failure without any hint, for the same seed: the
/// policy's own jittered backoff.
fn backoff(jitter: bool, seed: u64) -> u64 {
    let plain = status_failure(500, &Headers::new());
    decision(config(jitter), seed, plain).delay()
}

#[test]
fn rate_limit_reset_headers_do_not_set_the_delay_of_a_server_error() {
    // OpenAI sends its rate-limit headers on every response, errors included.
    let headers = Headers::new()
        .with("x-ratelimit-remaining-requests", "0")
        .with("x-ratelimit-reset-requests", "3ms")
        .with("x-ratelimit-reset-tokens", "2ms");
    for status in [500, 502, 503, 529] {
        let f = status_failure(status, &headers);
        for seed in [1, 2, 3] {
            assert_eq!(
                decision(config(true), seed, f.clone()).delay(),
                backoff(true, seed),
                "{status}, seed {seed}"
            );
        }
    }
}

#[test]
fn rate_limit_reset_headers_do_not_set_the_delay_of_a_transport_failure_or_stream_cut() {
    for fault in [TransportFault::Reset, TransportFault::StreamCut] {
        let mut f = classify_transport(fault, None);
        f.rate_limit_reset_ms = Some(3);
        for seed in [1, 2, 3] {
            assert_eq!(
                decision(config(true), seed, f.clone()).delay(),
                backoff(true, seed),
                "{fault:?}, seed {seed}"
            );
        }
    }
}

#[test]
fn a_tiny_rate_limit_reset_on_a_429_waits_at_least_the_jittered_backoff() {
    let headers = Headers::new()
        .with("x-ratelimit-remaining-requests", "0")
        .with("x-ratelimit-reset-requests", "3ms");
    let f = status_failure(429, &headers);
    assert_eq!(f.rate_limit_reset_ms, Some(3));
    let delays: Vec<u64> = (1..=20)
        .map(|seed| decision(config(true), seed, f.clone()).delay())
        .collect();
    for (seed, delay) in (1..=20).zip(&delays) {
        assert_eq!(*delay, backoff(true, seed), "seed {seed}");
        assert!((250..=500).contains(delay), "seed {seed}: {delay} ms");
    }
    // Jittered: a fleet that hit the limit together spreads out.
    let mut distinct = delays.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() > 10, "{delays:?}");
}

#[test]
fn a_rate_limit_reset_on_a_429_longer_than_the_backoff_is_waited_out() {
    let headers = Headers::new()
        .with("x-ratelimit-remaining-tokens", "0")
        .with("x-ratelimit-reset-tokens", "6s");
    let f = status_failure(429, &headers);
    for seed in [1, 2, 3] {
        assert_eq!(decision(config(true), seed, f.clone()), RetryAfter(6_000));
    }
}

#[test]
fn a_retry_after_above_the_cap_ends_retries_whatever_its_size() {
    // The cap is 10 minutes by default: one hour, 25 hours, a year and a date in year 9999 are all
    // "longer than allowed", none is "no hint at all".
    for value in [
        "3600",
        "90000",
        "31536000",
        "99999999999999999999999",
        "Fri, 31 Dec 9999 23:59:59 GMT",
    ] {
        let headers = Headers::new().with("retry-after", value);
        let f = classify_http(
            ProviderKind::Anthropic,
            503,
            &headers,
            b"{}",
            Some(1_696_004_797_000),
        );
        let decided = decision(config(true), 1, f);
        assert!(
            matches!(
                decided,
                Fail(RunError::Provider {
                    reason: GiveUp::RetryAfterTooLong {
                        cap_ms: 600_000,
                        ..
                    },
                    ..
                })
            ),
            "{value}: {decided:?}"
        );
    }
}

#[test]
fn a_retry_after_forwarded_by_litellm_is_honoured() {
    let headers = Headers::new().with("llm_provider-retry-after", "7");
    let f = status_failure(429, &headers);
    assert_eq!(decision(config(true), 1, f), RetryAfter(7_000));
}
