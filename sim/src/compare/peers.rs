//! Models of the retry policies other agent stacks use today.
//!
//! Each model is a plain per-request retry loop, written from the source of the library it
//! models (cited beside each one), and played against the same fault process as rebound:
//! the same [`ScriptCursor`] seeded the same way, the same [`Timing`], the same virtual
//! clock. The models are simple on purpose — they are what a default-configured client does
//! with one request, not an agent loop around it.
//!
//! What a client can see of a fault decides everything, so each fault is first reduced to a
//! [`Seen`]: an HTTP error (status and `retry-after`), a failure before any response
//! (connect, reset, timeout), or a failure *after* the response started streaming. The
//! Python SDKs and the Vercel AI SDK retry only inside the request call, which returns as
//! soon as the response headers arrive; a stream that breaks later raises from the iterator,
//! outside every retry loop.

use crate::scenario::{FaultKind, Planned, Scenario, ScriptCursor, Timing};
use rebound_core::{Conversation, Message, Millis, TransportFault};
use std::fmt;

/// A retry policy of another stack, modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    /// The official Anthropic Python SDK, default client (`max_retries=2`).
    AnthropicPython,
    /// The official OpenAI Python SDK, default client (`max_retries=2`).
    OpenAiPython,
    /// The Vercel AI SDK's `streamText` / `generateText` (`maxRetries: 2`).
    VercelAi,
    /// OpenAI's Codex CLI (`codex-rs`), default provider settings.
    CodexCli,
    /// One attempt, no retry.
    NoRetries,
}

impl Peer {
    /// Every modelled peer, in table order.
    pub const ALL: [Peer; 5] = [
        Peer::AnthropicPython,
        Peer::OpenAiPython,
        Peer::VercelAi,
        Peer::CodexCli,
        Peer::NoRetries,
    ];

    /// The name used in tables.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Peer::AnthropicPython => "anthropic-sdk-python",
            Peer::OpenAiPython => "openai-python",
            Peer::VercelAi => "vercel-ai",
            Peer::CodexCli => "codex-cli",
            Peer::NoRetries => "no retries",
        }
    }

    /// A salt that gives each peer its own jitter stream for the same agent seed.
    fn salt(self) -> u64 {
        match self {
            Peer::AnthropicPython => 0xa1,
            Peer::OpenAiPython => 0xb2,
            Peer::VercelAi => 0xc3,
            Peer::CodexCli => 0xd4,
            Peer::NoRetries => 0xe5,
        }
    }

    /// How long to wait before retrying after `seen`, or `None` to give up. `state` counts
    /// what was retried so far in this turn.
    fn decide(self, seen: &Seen, state: &mut PeerState, rng: &mut fastrand::Rng) -> Option<u64> {
        match self {
            Peer::AnthropicPython => stainless_python(seen, state, rng, StainlessCaps::ANTHROPIC),
            Peer::OpenAiPython => stainless_python(seen, state, rng, StainlessCaps::OPENAI),
            Peer::VercelAi => vercel_ai(seen, state),
            Peer::CodexCli => codex_cli(seen, state, rng),
            Peer::NoRetries => None,
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What a client sees of one failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    /// An HTTP error status, with the server's delay hint in seconds and `x-should-retry`.
    Http {
        status: u16,
        retry_after_s: Option<f64>,
        should_retry: Option<bool>,
    },
    /// No response at all: connect, DNS, TLS, reset or timeout.
    NoResponse,
    /// The response started (200) and its stream then failed: cut, error event, malformed,
    /// idle, or empty.
    MidStream,
}

impl Seen {
    pub(crate) fn of(kind: &FaultKind) -> Seen {
        match kind {
            FaultKind::Http {
                status, headers, ..
            } => {
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.trim())
                };
                // Both SDKs read `retry-after-ms` first, then `retry-after` as seconds.
                let retry_after_s = header("retry-after-ms")
                    .and_then(|v| v.parse::<f64>().ok())
                    .map(|ms| ms / 1000.0)
                    .or_else(|| header("retry-after").and_then(|v| v.parse::<f64>().ok()));
                let should_retry = match header("x-should-retry") {
                    Some("true") => Some(true),
                    Some("false") => Some(false),
                    _ => None,
                };
                Seen::Http {
                    status: *status,
                    retry_after_s,
                    should_retry,
                }
            }
            FaultKind::Transport { fault } => match fault {
                TransportFault::Connect
                | TransportFault::Dns
                | TransportFault::Tls
                | TransportFault::Reset
                | TransportFault::Timeout => Seen::NoResponse,
                _ => Seen::MidStream,
            },
            // A 400 the client does not retry; modelled as a non-retryable status.
            FaultKind::ContextOverflow => Seen::Http {
                status: 400,
                retry_after_s: None,
                should_retry: None,
            },
            FaultKind::StreamCut { .. }
            | FaultKind::StreamCutBytes { .. }
            | FaultKind::SlowDrip { .. }
            | FaultKind::StreamError { .. }
            | FaultKind::EmptyMessage
            | FaultKind::MalformedStream
            | FaultKind::Stall { .. } => Seen::MidStream,
        }
    }
}

/// Retries taken in the current turn.
#[derive(Debug, Default)]
pub(crate) struct PeerState {
    /// Retries of the HTTP request (reset by Codex's stream-level retry).
    request_retries: u32,
    /// Codex's turn-level retries of a dropped stream.
    stream_retries: u32,
}

/// The constants that differ between the two Stainless-generated Python SDKs.
#[derive(Clone, Copy)]
struct StainlessCaps {
    /// The longest `retry-after` honoured, in seconds.
    max_retry_after_s: f64,
    /// Whether a longer `retry-after` means "do not retry" (else: fall back to backoff).
    longer_hint_refuses: bool,
    /// Whether 424 (failed dependency) is retried.
    retries_424: bool,
}

impl StainlessCaps {
    // anthropics/anthropic-sdk-python, src/anthropic/_base_client.py (commit 0235ed2a):
    // `_calculate_retry_timeout` returns `retry_after` when `0 < retry_after <= 60`, else
    // `min(INITIAL_RETRY_DELAY * 2**nb_retries, MAX_RETRY_DELAY) * (1 - 0.25 * random())`;
    // `_should_retry` obeys `x-should-retry`, then retries 408, 409, 424, 429 and >= 500.
    // Constants (src/anthropic/_constants.py): DEFAULT_MAX_RETRIES = 2,
    // INITIAL_RETRY_DELAY = 0.5, MAX_RETRY_DELAY = 8.0. A longer `retry-after` falls back
    // to the computed backoff.
    const ANTHROPIC: StainlessCaps = StainlessCaps {
        max_retry_after_s: 60.0,
        longer_hint_refuses: false,
        retries_424: true,
    };
    // openai/openai-python, src/openai/_base_client.py (commit 000f030a): the same loop,
    // but `retry_after` is honoured up to MAX_RETRY_AFTER_DELAY ("Honor server-directed
    // delays up to two minutes": 120 s), and `_should_retry` returns False when
    // `retry_after > MAX_RETRY_AFTER_DELAY` — a longer hint means no retry at all. 424 is
    // not retried. Constants (src/openai/_constants.py): DEFAULT_MAX_RETRIES = 2,
    // INITIAL_RETRY_DELAY = 0.5, MAX_RETRY_DELAY = 8.0.
    const OPENAI: StainlessCaps = StainlessCaps {
        max_retry_after_s: 120.0,
        longer_hint_refuses: true,
        retries_424: false,
    };
}

/// The Stainless Python request loop (`for retries_taken in range(max_retries + 1)`), with
/// `nb_retries = retries_taken`: 0.5 s, 1 s, ... capped at 8 s, times `1 - 0.25 * U`.
/// Connection errors and timeouts are retried like statuses (without a hint). A stream
/// that fails after the 200 raises from the iterator, outside the loop: never retried.
fn stainless_python(
    seen: &Seen,
    state: &mut PeerState,
    rng: &mut fastrand::Rng,
    caps: StainlessCaps,
) -> Option<u64> {
    const MAX_RETRIES: u32 = 2;
    if state.request_retries >= MAX_RETRIES {
        return None;
    }
    let hint = match seen {
        Seen::MidStream => return None,
        Seen::NoResponse => None,
        Seen::Http {
            status,
            retry_after_s,
            should_retry,
        } => {
            if caps.longer_hint_refuses
                && retry_after_s.is_some_and(|s| s.is_finite() && s > caps.max_retry_after_s)
            {
                return None;
            }
            let retry = match should_retry {
                Some(v) => *v,
                None => {
                    matches!(status, 408 | 409 | 429)
                        || (*status == 424 && caps.retries_424)
                        || *status >= 500
                }
            };
            if !retry {
                return None;
            }
            retry_after_s.filter(|s| *s > 0.0 && *s <= caps.max_retry_after_s)
        }
    };
    let nb_retries = state.request_retries;
    state.request_retries += 1;
    if let Some(s) = hint {
        return Some(seconds_to_ms(s));
    }
    let sleep = (0.5 * 2f64.powi(nb_retries as i32)).min(8.0);
    let jitter = 1.0 - 0.25 * rng.f64();
    Some(seconds_to_ms(sleep * jitter))
}

/// vercel/ai, packages/ai/src/util/retry-with-exponential-backoff.ts (commit 0530ac34):
/// `maxRetries = 2`, `initialDelayInMs = 2000`, `backoffFactor = 2`, no jitter; an
/// `APICallError` is retryable when its status is 408, 409, 429 or >= 500 (or the fetch
/// itself failed); `retry-after-ms` / `retry-after` win when `0 <= ms` and
/// `(ms < 60 s || ms < backoff)`. The retry wraps the call that opens the stream
/// (`doStream`), so an error inside the stream is never retried.
fn vercel_ai(seen: &Seen, state: &mut PeerState) -> Option<u64> {
    const MAX_RETRIES: u32 = 2;
    if state.request_retries >= MAX_RETRIES {
        return None;
    }
    let backoff_ms = 2_000.0 * 2f64.powi(state.request_retries as i32);
    let delay_ms = match seen {
        Seen::MidStream => return None,
        Seen::NoResponse => backoff_ms,
        Seen::Http {
            status,
            retry_after_s,
            ..
        } => {
            if !(matches!(status, 408 | 409 | 429) || *status >= 500) {
                return None;
            }
            match retry_after_s.map(|s| s * 1000.0) {
                Some(ms) if ms >= 0.0 && (ms < 60_000.0 || ms < backoff_ms) => ms,
                _ => backoff_ms,
            }
        }
    };
    state.request_retries += 1;
    Some(delay_ms.round() as u64)
}

/// openai/codex, codex-rs. The HTTP request goes through `run_with_retry`
/// (codex-rs/codex-client/src/retry.rs, commit 71163530): attempts `0..=max_attempts` with
/// `max_attempts = request_max_retries() = 4` (codex-rs/core/src/model_provider_info.rs:
/// DEFAULT_REQUEST_MAX_RETRIES = 4, `retry_429: false, retry_5xx: true,
/// retry_transport: true`, `base_delay: 200 ms`), sleeping `backoff(200 ms, attempt + 1)`
/// = 200 ms * 2^attempt * U(0.9, 1.1), no cap, no `retry-after`. A 429 is not retried
/// there and surfaces as `CodexErr::RetryLimit`, which the turn loop does not retry either
/// (`CodexErr::is_retryable` in codex-rs/core/src/error.rs lists `RetryLimit(_)`,
/// `UsageLimitReached(_)` and `ServerOverloaded` as not retryable); the same holds for a
/// 5xx once the four transport retries are spent (a 500 alone becomes the retryable
/// `InternalServerError`; the models here use 503 and 529). A stream
/// that drops after the 200 is retried by the turn loop up to `stream_max_retries() = 5`
/// times (DEFAULT_STREAM_MAX_RETRIES = 5) after `util::backoff(retries)` (codex-rs/core/
/// src/util.rs: 200 ms * 2^(retries-1) * U(0.9, 1.1)), each time as a new HTTP request
/// with its own four transport retries.
fn codex_cli(seen: &Seen, state: &mut PeerState, rng: &mut fastrand::Rng) -> Option<u64> {
    const REQUEST_MAX_RETRIES: u32 = 4;
    const STREAM_MAX_RETRIES: u32 = 5;
    let jitter = |rng: &mut fastrand::Rng| 0.9 + 0.2 * rng.f64();
    match seen {
        Seen::MidStream => {
            if state.stream_retries >= STREAM_MAX_RETRIES {
                return None;
            }
            state.stream_retries += 1;
            state.request_retries = 0;
            let base = 200.0 * 2f64.powi(state.stream_retries as i32 - 1);
            Some((base * jitter(rng)) as u64)
        }
        Seen::Http { status, .. } if *status < 500 => None,
        Seen::Http { .. } | Seen::NoResponse => {
            if state.request_retries >= REQUEST_MAX_RETRIES {
                return None;
            }
            state.request_retries += 1;
            let base = 200.0 * 2f64.powi(state.request_retries as i32 - 1);
            Some((base * jitter(rng)) as u64)
        }
    }
}

fn seconds_to_ms(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1000.0).round() as u64
    } else {
        0
    }
}

/// What one modelled turn did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TurnRecord {
    /// When each attempt was sent, in virtual ms.
    pub(crate) requests: Vec<u64>,
    /// When the turn completed, if it did.
    pub(crate) completed_at: Option<u64>,
}

/// Plays one turn of `scenario` under `peer`: the agent sends its request at `start_ms`
/// and retries as the peer would, against the fault process seeded by `seed`.
pub(crate) fn run_peer_turn(
    peer: Peer,
    scenario: &Scenario,
    seed: u64,
    start_ms: u64,
    idle_timeout_ms: u64,
) -> TurnRecord {
    let mut cursor = ScriptCursor::new(seed);
    let mut rng = fastrand::Rng::with_seed(seed ^ peer.salt().wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut conversation = Conversation::new();
    conversation.push(Message::user_text(scenario.user_message.clone()));
    let timing: &Timing = &scenario.timing;
    let mut state = PeerState::default();
    let mut requests = Vec::new();
    let mut sent = start_ms;
    loop {
        requests.push(sent);
        // As the simulator's driver does: a stall shorter than the idle timeout only
        // delays what the same request gets next.
        let mut stalled = 0u64;
        let (seen, failed_at) = loop {
            match cursor.next(
                scenario,
                Millis(sent.saturating_add(stalled)),
                &conversation,
            ) {
                Planned::Answer { answer, .. } => {
                    let latency = answer
                        .and_then(|a| a.latency_ms)
                        .unwrap_or(timing.answer_ms);
                    return TurnRecord {
                        requests,
                        completed_at: Some(sent + stalled + latency),
                    };
                }
                Planned::Overflow { .. } => {
                    let seen = Seen::of(&FaultKind::ContextOverflow);
                    break (seen, sent + stalled + timing.error_ms);
                }
                Planned::Fault(fault) => {
                    if let FaultKind::Stall { ms } = fault.kind {
                        if ms < idle_timeout_ms {
                            stalled = stalled.saturating_add(ms);
                            continue;
                        }
                    }
                    let delay = fault.delay_ms(timing, idle_timeout_ms);
                    break (Seen::of(&fault.kind), sent + stalled + delay);
                }
            }
        };
        match peer.decide(&seen, &mut state, &mut rng) {
            Some(wait) => sent = failed_at + wait,
            None => {
                return TurnRecord {
                    requests,
                    completed_at: None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Fault;

    fn http(status: u16, retry_after: Option<&str>) -> Seen {
        let fault = match retry_after {
            Some(v) => Fault::http_with(status, "retry-after", v),
            None => Fault::http(status),
        };
        Seen::of(&fault.kind)
    }

    fn delays(peer: Peer, seen: &Seen) -> Vec<u64> {
        let mut state = PeerState::default();
        let mut rng = fastrand::Rng::with_seed(1);
        std::iter::from_fn(|| peer.decide(seen, &mut state, &mut rng))
            .take(20)
            .collect()
    }

    #[test]
    fn stainless_sdks_retry_twice_with_half_second_doubling_and_quarter_jitter() {
        for peer in [Peer::AnthropicPython, Peer::OpenAiPython] {
            let d = delays(peer, &http(529, None));
            assert_eq!(d.len(), 2, "{peer}");
            assert!((375..=500).contains(&d[0]), "{peer}: {d:?}");
            assert!((750..=1000).contains(&d[1]), "{peer}: {d:?}");
        }
    }

    #[test]
    fn retry_after_caps_differ_between_the_python_sdks() {
        let long = http(429, Some("90"));
        // Anthropic: above 60 s the hint is ignored in favour of backoff.
        let d = delays(Peer::AnthropicPython, &long);
        assert!(d.len() == 2 && d[0] <= 500, "{d:?}");
        // OpenAI: up to 120 s is honoured.
        assert_eq!(delays(Peer::OpenAiPython, &long), [90_000, 90_000]);
        // OpenAI: above 120 s there is no retry at all.
        assert!(delays(Peer::OpenAiPython, &http(429, Some("600"))).is_empty());
        assert_eq!(
            delays(Peer::AnthropicPython, &http(429, Some("5"))),
            [5_000, 5_000]
        );
    }

    #[test]
    fn vercel_retries_twice_after_two_then_four_seconds_but_never_mid_stream() {
        assert_eq!(delays(Peer::VercelAi, &http(503, None)), [2_000, 4_000]);
        assert_eq!(
            delays(Peer::VercelAi, &http(429, Some("5"))),
            [5_000, 5_000]
        );
        assert!(delays(Peer::VercelAi, &Seen::MidStream).is_empty());
        assert!(delays(Peer::AnthropicPython, &Seen::MidStream).is_empty());
    }

    #[test]
    fn codex_retries_5xx_four_times_never_429_and_streams_five_times() {
        let d = delays(Peer::CodexCli, &http(503, None));
        assert_eq!(d.len(), 4, "{d:?}");
        for (i, ms) in d.iter().enumerate() {
            let base = 200.0 * 2f64.powi(i as i32);
            assert!(
                (*ms as f64) >= base * 0.9 - 1.0 && (*ms as f64) <= base * 1.1,
                "{d:?}"
            );
        }
        assert!(delays(Peer::CodexCli, &http(429, Some("5"))).is_empty());
        assert_eq!(delays(Peer::CodexCli, &Seen::MidStream).len(), 5);
        assert!(delays(Peer::NoRetries, &http(503, None)).is_empty());
    }
}
