//! Models of the retry policies other agent stacks and RPC libraries use today.
//!
//! Each model is a retry loop written from the source of the library it models (cited
//! beside each one), and played against the same fault process as rebound: the same
//! [`ScriptCursor`](rebound_sim::scenario::ScriptCursor) seeded the same way, the same
//! [`Timing`](rebound_sim::scenario::Timing), the same virtual clock (see the `fleet` module). The
//! models are simple on purpose — they are what a default-configured client does with one
//! request, not an agent loop around it.
//!
//! There are two kinds:
//!
//! - **per-request loops** (the Python SDKs, the Vercel AI SDK, Codex, Google's Gen AI
//!   Python SDK with retries on, Gemini CLI, no retries): each request decides alone, from
//!   what it saw and how often it retried;
//! - **budgeted peers** (the AWS SDKs' standard and adaptive modes, gRPC's retry
//!   throttling, Finagle's `RetryBudget`, the SRE book's adaptive throttling, Linkerd's
//!   budget (tower's `TpsBudget`), Envoy's retry budget): a per-request loop that also
//!   spends a budget every request of the *process* shares (the `budgets` module). In a model
//!   whose agents share one process, all agents spend one budget; otherwise each agent
//!   has its own. A budget may refuse a retry, reject an attempt locally
//!   ([`Peer::SreAdaptive`]) or hold an attempt until it may go ([`Peer::AwsAdaptive`]).
//!
//! What a client can see of a fault decides everything, so each fault is first reduced to a
//! `Seen`: an HTTP error (status and `retry-after`), a failure before any response
//! (connect, reset, timeout), or a failure *after* the response started streaming. Every
//! library here retries only inside the request call, which returns as soon as the
//! response headers arrive; a stream that breaks later raises from the iterator, outside
//! every retry loop (gRPC calls such an RPC *committed*). Codex and Gemini CLI alone retry a
//! broken stream, in a loop around the request.

use super::budgets::{
    AdaptiveRateLimiter, AdaptiveThrottle, EnvoyRetryBudget, FinagleRetryBudget, RetryQuota,
    RetryThrottle, TpsBudget,
};
use rebound_core::{ProviderKind, TransportFault};
use rebound_sim::scenario::FaultKind;
use std::fmt;

/// A retry policy of another stack, modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Peer {
    /// The official Anthropic Python SDK, default client (`max_retries=2`).
    AnthropicPython,
    /// The official OpenAI Python SDK, default client (`max_retries=2`).
    OpenAiPython,
    /// The Vercel AI SDK's `streamText` / `generateText` (`maxRetries: 2`).
    VercelAi,
    /// OpenAI's Codex CLI (`codex-rs`), default provider settings.
    CodexCli,
    /// Google's Gen AI Python SDK (`google-genai`) with retries switched on:
    /// `HttpOptions(retry_options=HttpRetryOptions())`. Its default (`retry_options=None`)
    /// makes one attempt, which [`Peer::NoRetries`] stands for.
    GenaiPython,
    /// Google's Gemini CLI (`gemini -p`) with its model named (`--model`), so the retry
    /// loop's own defaults apply: 10 attempts, broken streams retried 3 times.
    GeminiCli,
    /// The AWS SDKs' standard retry mode with its retry quota (botocore's, which the other
    /// SDKs share), one quota per client.
    AwsStandard,
    /// gRPC's retry policy and retry throttling (gRFC A6's example configuration), one
    /// throttle per channel.
    GrpcThrottled,
    /// A Finagle HTTP client's method retries under its default `RetryBudget`.
    FinagleBudget,
    /// Client-side adaptive throttling from Google's SRE book in front of an SDK retry
    /// loop.
    SreAdaptive,
    /// Linkerd's proxy retrying a ServiceProfile route under its default retry budget
    /// (tower's `TpsBudget`), one budget per proxy.
    LinkerdBudget,
    /// An Envoy route retrying 5xx, resets and 429 under the cluster's default retry budget
    /// (a limit on concurrent retries), one Envoy per process.
    EnvoyBudget,
    /// The AWS SDKs' adaptive retry mode: the standard mode's retry loop and quota
    /// ([`Peer::AwsStandard`]) plus a client-side rate limiter that throttling errors (429)
    /// slow down and that holds every attempt, first ones too, while it is on; one per
    /// client.
    AwsAdaptive,
    /// One attempt, no retry.
    NoRetries,
}

impl Peer {
    /// Every modelled peer, in table order.
    pub const ALL: [Peer; 14] = [
        Peer::AnthropicPython,
        Peer::OpenAiPython,
        Peer::VercelAi,
        Peer::CodexCli,
        Peer::GenaiPython,
        Peer::GeminiCli,
        Peer::AwsStandard,
        Peer::GrpcThrottled,
        Peer::FinagleBudget,
        Peer::SreAdaptive,
        Peer::LinkerdBudget,
        Peer::EnvoyBudget,
        Peer::AwsAdaptive,
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
            Peer::GenaiPython => "python-genai (HttpRetryOptions())",
            Peer::GeminiCli => "gemini-cli",
            Peer::AwsStandard => "aws-sdk standard (retry quota)",
            Peer::GrpcThrottled => "grpc (A6 retry throttling)",
            Peer::FinagleBudget => "finagle (RetryBudget)",
            Peer::SreAdaptive => "sre adaptive throttling",
            Peer::LinkerdBudget => "linkerd (tower TpsBudget)",
            Peer::EnvoyBudget => "envoy (retry budget)",
            Peer::AwsAdaptive => "aws-sdk adaptive (rate limiter)",
            Peer::NoRetries => "no retries",
        }
    }

    /// Whether the peer keeps a budget shared by every request of a process.
    #[must_use]
    pub fn is_budgeted(self) -> bool {
        matches!(
            self,
            Peer::AwsStandard
                | Peer::GrpcThrottled
                | Peer::FinagleBudget
                | Peer::SreAdaptive
                | Peer::LinkerdBudget
                | Peer::EnvoyBudget
                | Peer::AwsAdaptive
        )
    }

    /// A salt that gives each peer its own jitter stream for the same agent seed.
    pub(crate) fn salt(self) -> u64 {
        match self {
            Peer::AnthropicPython => 0xa1,
            Peer::OpenAiPython => 0xb2,
            Peer::VercelAi => 0xc3,
            Peer::CodexCli => 0xd4,
            Peer::NoRetries => 0xe5,
            Peer::AwsStandard => 0xf6,
            Peer::GrpcThrottled => 0x107,
            Peer::FinagleBudget => 0x118,
            Peer::SreAdaptive => 0x129,
            Peer::LinkerdBudget => 0x13a,
            Peer::EnvoyBudget => 0x14b,
            Peer::AwsAdaptive => 0x15c,
            Peer::GenaiPython => 0x16d,
            Peer::GeminiCli => 0x17e,
        }
    }

    /// The state one process of this peer shares among its requests, for a process whose
    /// first request starts at `now`.
    pub(crate) fn new_process(self, now: u64) -> Process {
        match self {
            Peer::AwsStandard => Process::Aws(RetryQuota::new()),
            Peer::GrpcThrottled => Process::Grpc(RetryThrottle::new()),
            Peer::FinagleBudget => Process::Finagle(FinagleRetryBudget::new(now)),
            Peer::SreAdaptive => Process::Sre(AdaptiveThrottle::new()),
            Peer::LinkerdBudget => Process::Linkerd(TpsBudget::linkerd(now)),
            Peer::EnvoyBudget => Process::Envoy(EnvoyRetryBudget::new()),
            Peer::AwsAdaptive => Process::AwsAdaptive(AwsAdaptiveClient {
                quota: RetryQuota::new(),
                limiter: AdaptiveRateLimiter::new(now),
            }),
            Peer::AnthropicPython
            | Peer::OpenAiPython
            | Peer::VercelAi
            | Peer::CodexCli
            | Peer::GenaiPython
            | Peer::GeminiCli
            | Peer::NoRetries => Process::Stateless,
        }
    }

    /// Called when the turn of agent `who` is about to make its next attempt at `now`
    /// (`state.attempts` attempts were made before it): whether the attempt goes out now,
    /// fails at once, or waits for the process to [`grant`](Process::grant) it.
    pub(crate) fn admit(
        self,
        process: &mut Process,
        state: &PeerState,
        rng: &mut fastrand::Rng,
        now: u64,
        who: usize,
    ) -> Admission {
        match self {
            // `RetryFilter.apply` deposits once per request, before its first attempt.
            Peer::FinagleBudget => {
                if state.attempts == 0 {
                    process.finagle().deposit(now);
                }
                Admission::Send
            }
            Peer::SreAdaptive => {
                if process.sre().admit(now, rng) {
                    Admission::Send
                } else {
                    Admission::Reject
                }
            }
            // The connection pool opens an upstream stream: one more active request.
            Peer::EnvoyBudget => {
                process.envoy().open_request();
                Admission::Send
            }
            // `on_sending_request` (`before-send`), for every attempt.
            Peer::AwsAdaptive => {
                if process.aws_adaptive().limiter.try_send(who, now) {
                    Admission::Send
                } else {
                    Admission::Wait
                }
            }
            _ => Admission::Send,
        }
    }

    /// Called when an attempt succeeded, at `now`.
    pub(crate) fn on_success(self, process: &mut Process, state: &PeerState, now: u64) {
        match self {
            Peer::AwsStandard => process.aws().release(
                state
                    .quota_acquired
                    .unwrap_or(RetryQuota::NO_RETRY_INCREMENT),
            ),
            Peer::GrpcThrottled => process.grpc().success(),
            // The stack's `RequeueFilter` deposits for every response its classifier calls
            // a success (see `finagle_method_retries`).
            Peer::FinagleBudget => process.finagle().deposit(now),
            Peer::SreAdaptive => process.sre().record(now, true),
            // A successful response is not retryable: it deposits.
            Peer::LinkerdBudget => process.linkerd().deposit(now),
            // `shouldRetryHeaders` resets the request's open retry; its stream then closes.
            Peer::EnvoyBudget => {
                let budget = process.envoy();
                if state.envoy_retry_open {
                    budget.close_retry();
                }
                budget.close_request();
            }
            Peer::AwsAdaptive => {
                let client = process.aws_adaptive();
                client.limiter.on_response(now, false);
                client.quota.release(
                    state
                        .quota_acquired
                        .unwrap_or(RetryQuota::NO_RETRY_INCREMENT),
                );
            }
            _ => {}
        }
    }

    /// How long to wait before retrying after `seen`, at `now`, or `None` to give up.
    /// `state` counts what was tried so far in this turn (`state.attempts` includes the
    /// attempt that just failed); `process` is the budget the turn's process shares.
    pub(crate) fn decide(
        self,
        seen: &Seen,
        state: &mut PeerState,
        rng: &mut fastrand::Rng,
        process: &mut Process,
        now: u64,
    ) -> Option<u64> {
        match self {
            Peer::AnthropicPython => stainless_python(seen, state, rng, StainlessCaps::ANTHROPIC),
            Peer::OpenAiPython => stainless_python(seen, state, rng, StainlessCaps::OPENAI),
            Peer::VercelAi => vercel_ai(seen, state),
            Peer::CodexCli => codex_cli(seen, state, rng),
            Peer::GenaiPython => python_genai(seen, state, rng),
            Peer::GeminiCli => gemini_cli(seen, state, rng),
            Peer::AwsStandard => aws_standard(seen, state, rng, process.aws()),
            Peer::GrpcThrottled => grpc_a6(seen, state, rng, process.grpc()),
            Peer::FinagleBudget => finagle_method_retries(seen, state, rng, process.finagle(), now),
            Peer::SreAdaptive => sre_adaptive(seen, state, rng, process.sre(), now),
            Peer::LinkerdBudget => linkerd_profile(seen, process.linkerd(), now),
            Peer::EnvoyBudget => envoy_router(seen, state, rng, process.envoy()),
            Peer::AwsAdaptive => {
                let client = process.aws_adaptive();
                client
                    .limiter
                    .on_response(now, botocore_throttling_error(seen));
                aws_standard(seen, state, rng, &mut client.quota)
            }
            Peer::NoRetries => None,
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Whether an attempt may go out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Send it now.
    Send,
    /// Rejected locally: it fails at once like [`Seen::LOCAL_REJECTION`], unsent.
    Reject,
    /// Held by the process until [`Process::grant`] lets it go.
    Wait,
}

/// The AWS SDKs' adaptive mode: one client's retry quota and rate limiter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AwsAdaptiveClient {
    quota: RetryQuota,
    limiter: AdaptiveRateLimiter,
}

/// What one process of a peer shares among its requests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Process {
    /// A per-request loop: nothing shared.
    Stateless,
    /// [`Peer::AwsStandard`]'s retry quota.
    Aws(RetryQuota),
    /// [`Peer::GrpcThrottled`]'s retry throttle.
    Grpc(RetryThrottle),
    /// [`Peer::FinagleBudget`]'s retry budget.
    Finagle(FinagleRetryBudget),
    /// [`Peer::SreAdaptive`]'s request and accept history.
    Sre(AdaptiveThrottle),
    /// [`Peer::LinkerdBudget`]'s retry budget.
    Linkerd(TpsBudget),
    /// [`Peer::EnvoyBudget`]'s open requests and retries.
    Envoy(EnvoyRetryBudget),
    /// [`Peer::AwsAdaptive`]'s retry quota and rate limiter.
    AwsAdaptive(AwsAdaptiveClient),
}

impl Process {
    fn aws(&mut self) -> &mut RetryQuota {
        match self {
            Process::Aws(q) => q,
            other => panic!("invariant: an AWS peer runs in an AWS process, not {other:?}"),
        }
    }

    fn grpc(&mut self) -> &mut RetryThrottle {
        match self {
            Process::Grpc(t) => t,
            other => panic!("invariant: a gRPC peer runs in a gRPC process, not {other:?}"),
        }
    }

    fn finagle(&mut self) -> &mut FinagleRetryBudget {
        match self {
            Process::Finagle(b) => b,
            other => panic!("invariant: a Finagle peer runs in a Finagle process, not {other:?}"),
        }
    }

    /// The held attempts that may go out at `now`, by the `who` they were
    /// [`admit`](Peer::admit)ted with, oldest first. Each is sent at once by the caller.
    pub(crate) fn grant(&mut self, now: u64) -> Vec<usize> {
        match self {
            Process::AwsAdaptive(client) => client.limiter.grant(now),
            _ => Vec::new(),
        }
    }

    /// When [`grant`](Self::grant) should next be called (after `now`), if an attempt is
    /// held. Anything that happens to the process may move it: ask again after each event.
    pub(crate) fn next_grant(&self, now: u64) -> Option<u64> {
        match self {
            Process::AwsAdaptive(client) => client.limiter.next_grant(now),
            _ => None,
        }
    }

    fn linkerd(&mut self) -> &mut TpsBudget {
        match self {
            Process::Linkerd(b) => b,
            other => panic!("invariant: a Linkerd peer runs in a Linkerd process, not {other:?}"),
        }
    }

    fn envoy(&mut self) -> &mut EnvoyRetryBudget {
        match self {
            Process::Envoy(b) => b,
            other => panic!("invariant: an Envoy peer runs in an Envoy process, not {other:?}"),
        }
    }

    fn aws_adaptive(&mut self) -> &mut AwsAdaptiveClient {
        match self {
            Process::AwsAdaptive(c) => c,
            other => panic!(
                "invariant: an adaptive AWS peer runs in an adaptive AWS process, not {other:?}"
            ),
        }
    }

    fn sre(&mut self) -> &mut AdaptiveThrottle {
        match self {
            Process::Sre(t) => t,
            other => panic!(
                "invariant: an SRE-throttled peer runs in its own kind of process, not {other:?}"
            ),
        }
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
    /// No response at all: connect, DNS, TLS, reset or timeout (`timeout`: the last;
    /// `reset`: a connection reset or closed after the request was written).
    NoResponse { timeout: bool, reset: bool },
    /// The response started (200) and its stream then failed: cut, error event, malformed,
    /// idle, or empty.
    MidStream,
}

impl Seen {
    /// What a request rejected by the client's own throttle ([`Peer::SreAdaptive`]) fails
    /// with: like a backend rejection (503, no hint), but never sent.
    pub(crate) const LOCAL_REJECTION: Seen = Seen::Http {
        status: 503,
        retry_after_s: None,
        should_retry: None,
    };

    /// What `peer`, a client of `provider`'s wire format, sees of `kind`.
    pub(crate) fn of(kind: &FaultKind, provider: ProviderKind, peer: Peer) -> Seen {
        match kind {
            FaultKind::Http {
                status,
                headers,
                message,
                ..
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
                let (retry_after_s, should_retry) = match peer {
                    // Header-blind: only the status decides (see `python_genai`).
                    Peer::GenaiPython => (None, None),
                    // Reads a delay only from the body: `RetryInfo.retryDelay` in a Google
                    // error's details (which no Anthropic- or OpenAI-shaped body has), or
                    // "Please retry in X" in its message (see `gemini_cli`). Never a header.
                    Peer::GeminiCli => (message.as_deref().and_then(please_retry_in_s), None),
                    _ => (retry_after_s, should_retry),
                };
                Seen::Http {
                    status: *status,
                    retry_after_s,
                    should_retry,
                }
            }
            FaultKind::Transport { fault } => match fault {
                TransportFault::Connect | TransportFault::Dns | TransportFault::Tls => {
                    Seen::NoResponse {
                        timeout: false,
                        reset: false,
                    }
                }
                TransportFault::Reset => Seen::NoResponse {
                    timeout: false,
                    reset: true,
                },
                TransportFault::Timeout => Seen::NoResponse {
                    timeout: true,
                    reset: false,
                },
                _ => Seen::MidStream,
            },
            // A 400 the client does not retry; modelled as a non-retryable status.
            FaultKind::ContextOverflow => Seen::Http {
                status: 400,
                retry_after_s: None,
                should_retry: None,
            },
            // @ai-sdk/openai's chat model reads ahead to the first output chunk and throws an
            // error frame found before it from `doStream`, as an `APICallError` with a status
            // derived from the frame (see `openai_stream_error_status`). The simulator's
            // error event follows the stream's first event (`Fault::delay_ms`), which in
            // Chat Completions is the role-only chunk: before any output — unless the fault
            // places it after text deltas (`after_deltas`), which are output.
            FaultKind::StreamError {
                error_type,
                after_deltas: 0,
                ..
            } if peer == Peer::VercelAi && provider == ProviderKind::OpenAi => {
                match openai_stream_error_status(error_type) {
                    Some(status) => Seen::Http {
                        status,
                        retry_after_s: None,
                        should_retry: None,
                    },
                    None => Seen::MidStream,
                }
            }
            FaultKind::StreamCut { .. }
            | FaultKind::StreamCutBytes { .. }
            | FaultKind::SlowDrip { .. }
            | FaultKind::StreamError { .. }
            | FaultKind::EmptyMessage
            | FaultKind::MalformedStream
            | FaultKind::Stall { .. } => Seen::MidStream,
            // A kind the simulator gained after these models were written (`FaultKind` is
            // non-exhaustive): not modelled, so seen as the failure every peer retries
            // without a special case, as an unknown transport fault is above.
            _ => Seen::MidStream,
        }
    }
}

/// What the current turn tried so far.
#[derive(Debug, Default)]
pub(crate) struct PeerState {
    /// Attempts made, sent or rejected locally (kept by the fleet loop).
    pub(crate) attempts: u32,
    /// Retries of the HTTP request (reset by Codex's stream-level retry).
    request_retries: u32,
    /// Codex's turn-level retries of a dropped stream.
    stream_retries: u32,
    /// [`Peer::AwsStandard`]: the retry quota taken for the latest retry, given back if it
    /// succeeds.
    quota_acquired: Option<u32>,
    /// [`Peer::GrpcThrottled`]: retries since the last server pushback (backoff resets).
    retries_since_pushback: u32,
    /// [`Peer::FinagleBudget`]: the latest backoff of the decorrelated-jitter stream, in µs.
    finagle_backoff_us: Option<u64>,
    /// [`Peer::EnvoyBudget`]: whether the request holds an open retry of the budget.
    pub(crate) envoy_retry_open: bool,
    /// [`Peer::EnvoyBudget`]: `JitteredBackOffStrategy::current_retry_` less its initial 1.
    envoy_backoff_step: u32,
    /// [`Peer::GeminiCli`]: `retryWithBackoff`'s `currentDelay` in ms (`None`: its
    /// `initialDelayMs`, as every new call of it starts).
    gemini_current_delay_ms: Option<f64>,
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
    // anthropic 2.14.0 from PyPI (anthropics/anthropic-sdk-python), src/anthropic/
    // _base_client.py: `_calculate_retry_timeout` returns `min(retry_after, 4_294_967.0)`
    // for any `retry_after > 0` ("If the API asks us to wait a certain amount of time, just
    // do what it says"; the 60 s cap of <= 1.5.0 went in 1.6.0), else
    // `min(INITIAL_RETRY_DELAY * 2**nb_retries, MAX_RETRY_DELAY) * (1 - 0.25 * random())`;
    // `_should_retry` obeys `x-should-retry`, then retries 408, 409, 429 and >= 500 (not
    // 424). Constants (src/anthropic/_constants.py): DEFAULT_MAX_RETRIES = 2,
    // INITIAL_RETRY_DELAY = 0.5, MAX_RETRY_DELAY = 8.0.
    const ANTHROPIC: StainlessCaps = StainlessCaps {
        max_retry_after_s: 4_294_967.0,
        longer_hint_refuses: false,
        retries_424: false,
    };
    // openai 3.57.0 from PyPI (openai/openai-python), src/openai/_base_client.py: the same loop,
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
        Seen::NoResponse { .. } => None,
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

/// The Vercel AI SDK, ai 6.0.326 from npm: packages/ai/src/util/retry-with-exponential-
/// backoff.ts with @ai-sdk/provider-utils 4.0.66's `retryWithExponentialBackoff`:
/// `maxRetries = 2`, `initialDelayInMs = 2000`, `backoffFactor = 2`, no jitter; an
/// `APICallError` is retryable when its status is 408, 409, 429 or >= 500 (or the fetch
/// itself failed); `retry-after-ms` / `retry-after` win when `0 <= ms` and
/// `(ms < 60 s || ms < backoff)`. The retry wraps the call that opens the stream
/// (`doStream`), so an error inside the stream is not retried — except that
/// @ai-sdk/openai 3.0.141's chat model (`throwIfOpenAIStreamErrorBeforeOutput` in
/// src/openai-stream-error.ts) reads ahead until the first output chunk and throws an error
/// frame found before it as an `APICallError` from `doStream`, inside the retry.
fn vercel_ai(seen: &Seen, state: &mut PeerState) -> Option<u64> {
    const MAX_RETRIES: u32 = 2;
    if state.request_retries >= MAX_RETRIES {
        return None;
    }
    let backoff_ms = 2_000.0 * 2f64.powi(state.request_retries as i32);
    let delay_ms = match seen {
        Seen::MidStream => return None,
        Seen::NoResponse { .. } => backoff_ms,
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

/// The status @ai-sdk/openai 3.0.141 gives the `APICallError` it makes of an OpenAI stream
/// error frame with this `type` (`getStatusCode` in src/openai-stream-error.ts, for a frame
/// without a numeric `code`): `rate_limit` 429, `authentication` 401, `permission` 403,
/// `not_found` 404, `invalid`, `bad_request` or `context_length` 400, `overload` 503,
/// `timeout` 504, anything else 500. `None` for `insufficient_quota`, which
/// `isRetryableStreamError` marks not retryable whatever its status: it fails the call
/// like an error after output.
fn openai_stream_error_status(error_type: &str) -> Option<u16> {
    let t = error_type.to_ascii_lowercase();
    let has = |terms: &[&str]| terms.iter().any(|term| t.contains(term));
    if t == "insufficient_quota" {
        return None;
    }
    Some(if has(&["insufficient_quota", "rate_limit"]) {
        429
    } else if has(&["authentication"]) {
        401
    } else if has(&["permission"]) {
        403
    } else if has(&["not_found"]) {
        404
    } else if has(&["invalid", "bad_request", "context_length"]) {
        400
    } else if has(&["overload"]) {
        503
    } else if has(&["timeout"]) {
        504
    } else {
        500
    })
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
        Seen::Http { .. } | Seen::NoResponse { .. } => {
            if state.request_retries >= REQUEST_MAX_RETRIES {
                return None;
            }
            state.request_retries += 1;
            let base = 200.0 * 2f64.powi(state.request_retries as i32 - 1);
            Some((base * jitter(rng)) as u64)
        }
    }
}

/// Google's Gen AI Python SDK, `google-genai` 2.19.0 (googleapis/python-genai, tag v2.19.0,
/// commit c425b0b9), a client made with `HttpOptions(retry_options=HttpRetryOptions())`.
///
/// - google/genai/_api_client.py, `retry_args`: with `retry_options=None` — the default of
///   `HttpOptions.retry_options` in google/genai/types.py — the client gets
///   `tenacity.stop_after_attempt(1)`: one attempt, no retry ([`Peer::NoRetries`]). With
///   `HttpRetryOptions()` every field is `None` and the module's constants apply:
///   `_RETRY_ATTEMPTS = 5` ("including the initial call"), `_RETRY_INITIAL_DELAY = 1.0`,
///   `_RETRY_MAX_DELAY = 60.0`, `_RETRY_EXP_BASE = 2`, `_RETRY_JITTER = 1` and
///   `_RETRY_HTTP_STATUS_CODES = (408, 429, 500, 502, 503, 504)`. The predicate retries an
///   `errors.APIError` whose `code` (the HTTP status, `raise_for_response`) is in that list,
///   or `_HTTPX_TRANSIENT_EXC` (`httpx.TimeoutException`, `httpx.ConnectError`): a refused
///   connection, DNS or TLS failure or a timeout, but not a reset after the request was
///   written (`httpx.ReadError`, `RemoteProtocolError`).
/// - The wait is tenacity's `wait_exponential_jitter(initial=1, max=60, exp_base=2,
///   jitter=1)` (jd/tenacity, tenacity/wait.py, the same at 8.2.3 and 9.1.4, the range
///   `tenacity>=8.2.3, <9.2.0` that genai 2.19.0 allows): after attempt `n` (1-based)
///   `min(initial * exp_base ** (n - 1) + random.uniform(0, jitter), max)` seconds, so
///   1–2 s, 2–3 s, 4–5 s, 8–9 s; `stop_after_attempt(5)` stops once `attempt_number >= 5`.
/// - Header-blind: nothing on this path reads `retry-after`, `retry-after-ms` or a
///   `RetryInfo`; only the status decides.
/// - `_request` retries `_request_once`, which returns once the response headers are in
///   (`stream=True`); `request_streamed` iterates the body outside it, and raises an error
///   chunk or a broken stream from the iterator: not retried.
///
/// 529 is no Gemini API status (an overloaded Gemini model answers 503 UNAVAILABLE); it is
/// read as the 503 it means, as for the AWS and gRPC models. A literal 529 is not in the
/// list, and the SDK would not retry it.
fn python_genai(seen: &Seen, state: &mut PeerState, rng: &mut fastrand::Rng) -> Option<u64> {
    const ATTEMPTS: u32 = 5;
    const INITIAL_S: f64 = 1.0;
    const MAX_S: f64 = 60.0;
    const EXP_BASE: f64 = 2.0;
    const JITTER_S: f64 = 1.0;
    let retry = match seen {
        Seen::MidStream => false,
        Seen::NoResponse { reset, .. } => !reset,
        Seen::Http { status, .. } => matches!(status, 408 | 429 | 500 | 502 | 503 | 504 | 529),
    };
    // tenacity asks `retry` first, then `stop` (`reraise=True`: the error itself is raised).
    if !retry || state.attempts >= ATTEMPTS {
        return None;
    }
    let exponent = i32::try_from(state.attempts.saturating_sub(1)).unwrap_or(i32::MAX);
    let wait = (INITIAL_S * EXP_BASE.powi(exponent) + JITTER_S * rng.f64()).min(MAX_S);
    Some(seconds_to_ms(wait))
}

/// Google's Gemini CLI, google-gemini/gemini-cli v0.56.0 (commit b6e23a7d), run
/// unattended (`gemini -p`) with its model named (`--model gemini-2.5-pro`).
///
/// The request: `GeminiChat.makeApiCallAndProcessStream` (packages/core/src/core/
/// geminiChat.ts) wraps the call that opens the stream in `retryWithBackoff`
/// (packages/core/src/utils/retry.ts) with `maxAttempts` the model policy's, else
/// `config.getMaxAttempts()` = `DEFAULT_MAX_ATTEMPTS` = 10 (packages/core/src/config/
/// config.ts; a named model gets a one-model chain without `maxAttempts`,
/// `createSingleModelChain` in packages/core/src/availability/policyCatalog.ts), and
/// `DEFAULT_RETRY_OPTIONS`' `initialDelayMs: 5000`, `maxDelayMs: 30000`. In
/// `retryWithBackoff`, after each failure of attempt `attempt` (1-based):
/// - `classifyGoogleError` (packages/core/src/utils/googleQuotaErrors.ts) first: a 404 is
///   a `ModelNotFoundError` and a quota error with a delay above
///   `MAX_RETRYABLE_DELAY_SECONDS = 300` a `TerminalQuotaError`: both go to
///   `onPersistent429` (`handleFallback`, packages/core/src/fallback/handler.ts), which in a
///   one-model chain has nowhere to go and, with no interactive handler registered, returns
///   `null`: the error is thrown. A 429, 499 or 503 is a `RetryableQuotaError`, with
///   `retryDelayMs` when the body gives a delay: `RetryInfo.retryDelay` in a Google error's
///   `details`, or "Please retry in X[s|ms]" in its message (a zero delay counts as none).
///   Neither file reads the `Retry-After` header, so a 429 whose body is not a Google
///   error and carries only `retry-after` is retried without a delay, on the backoff
///   below (a `RetryableQuotaError` without `retryDelayMs`, or an unclassified error that
///   `isRetryableError` accepts: the same wait either way);
/// - a `RetryableQuotaError` or a 5xx (`is500`: 500–599, so 529 too) is retried while
///   `attempt < maxAttempts`: with a delay, after `max(currentDelay, retryDelayMs)` plus up
///   to 20 % ("Positive jitter up to +20% while respecting server minimum delay");
///   without, after `currentDelay ± 30 %`; any other error is retried on the same
///   backoff when `isRetryableError` says so (429, 499, 5xx, and never 400; network codes
///   such as `ECONNRESET`, `ETIMEDOUT`, `ECONNREFUSED`, `ENOTFOUND`; "fetch failed" with
///   `retryFetchErrors`, on by default), so 408 and other 4xx are not. After each wait
///   `currentDelay = min(maxDelayMs, currentDelay * 2)`: 5 s, 10 s, 20 s, then 30 s.
///
/// The stream: `sendMessageStream`'s `streamWithRetries` retries a failure *after* the
/// stream opened — an `InvalidStreamError` (a stream that ends without a finish reason or
/// with no text) or an error `isRetryableError` accepts, such as `ERR_STREAM_PREMATURE_CLOSE`
/// or "incomplete json segment" — up to `MID_STREAM_RETRY_OPTIONS.maxAttempts = 4` (1 + 3
/// retries) after `1000 * 2 ** attempt` ms (1 s, 2 s, 4 s, no jitter), each a new
/// `retryWithBackoff` call with its own attempts and its delay back at 5 s; a failure
/// before the stream opened ("connection phase") is not retried there. A cut stream is
/// modelled as retried: a body that ends cleanly after its last event is an
/// `InvalidStreamError`, and a premature close is `ERR_STREAM_PREMATURE_CLOSE` (the CLI's
/// own test "should retry on premature stream closure"); a client whose fetch reports the
/// cut as undici's `TypeError: terminated` (cause `UND_ERR_SOCKET`, in no list) would
/// not retry it. The model takes the CLI's favourable reading.
///
/// Not modelled: the default `auto` model routing (`GEMINI_MODEL_ALIAS_AUTO`) gives the
/// primary model `maxAttempts: 3` (`AUTO_ROUTING_OVERRIDES`) and then offers the Flash
/// model (10 attempts), silently only where the Flash policy's action for the failure is
/// `silent`; its default is `prompt`, a dialog of the interactive UI
/// (packages/cli/src/ui/hooks/useQuotaAndFallback.ts), which `gemini -p` does not
/// register. Nor the silent retries of a capacity-exhausted `TerminalQuotaError`
/// (`MODEL_CAPACITY_EXHAUSTED`), which no simulated body carries.
fn gemini_cli(seen: &Seen, state: &mut PeerState, rng: &mut fastrand::Rng) -> Option<u64> {
    const MAX_ATTEMPTS: u32 = 10;
    const INITIAL_DELAY_MS: f64 = 5_000.0;
    const MAX_DELAY_MS: f64 = 30_000.0;
    const MAX_RETRYABLE_DELAY_S: f64 = 300.0;
    const MID_STREAM_MAX_ATTEMPTS: u32 = 4;
    const MID_STREAM_INITIAL_DELAY_MS: u64 = 1_000;
    let hint_s = match seen {
        Seen::MidStream => {
            // `attempt < maxAttempts - 1 && attempt < maxMidStreamAttempts - 1`, `attempt`
            // the 0-based index of the stream attempt that failed.
            let attempt = state.stream_retries;
            if attempt + 1 >= MID_STREAM_MAX_ATTEMPTS.min(MAX_ATTEMPTS) {
                return None;
            }
            state.stream_retries += 1;
            state.request_retries = 0;
            state.gemini_current_delay_ms = None;
            return Some(MID_STREAM_INITIAL_DELAY_MS << attempt);
        }
        Seen::NoResponse { .. } => None,
        Seen::Http {
            status,
            retry_after_s,
            ..
        } => {
            if *status == 404 {
                return None;
            }
            match retry_after_s.filter(|s| *s > 0.0) {
                Some(s) if s > MAX_RETRYABLE_DELAY_S => return None,
                Some(s) => Some(s),
                None if *status == 429 || *status == 499 || (500..600).contains(status) => None,
                None => return None,
            }
        }
    };
    // `attempt` counts this call's attempts, the failed one included.
    if state.request_retries + 1 >= MAX_ATTEMPTS {
        return None;
    }
    state.request_retries += 1;
    let current = state.gemini_current_delay_ms.unwrap_or(INITIAL_DELAY_MS);
    let (current, delay) = match hint_s {
        Some(s) => {
            let current = current.max(s * 1_000.0);
            (current, current + current * 0.2 * rng.f64())
        }
        None => (
            current,
            (current + current * 0.3 * (rng.f64() * 2.0 - 1.0)).max(0.0),
        ),
    };
    state.gemini_current_delay_ms = Some((current * 2.0).min(MAX_DELAY_MS));
    Some(delay.round() as u64)
}

/// The delay Gemini CLI's `classifyGoogleError` reads from an error message, in seconds:
/// the first "Please retry in X" with X digits and dots followed by `s` or `ms`
/// (`/Please retry in ([0-9.]+(?:ms|s))/`, `parseDurationInSeconds`).
fn please_retry_in_s(message: &str) -> Option<f64> {
    const PHRASE: &str = "Please retry in ";
    let at = message.find(PHRASE)? + PHRASE.len();
    let rest = &message[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, unit) = rest.split_at(end);
    // `parseFloat` reads the longest prefix that is a number ("1.5.2" is 1.5).
    let parse = |n: &str| (1..=n.len()).rev().find_map(|i| n[..i].parse::<f64>().ok());
    let value = parse(number)?;
    if unit.starts_with("ms") {
        Some(value / 1_000.0)
    } else if unit.starts_with('s') {
        Some(value)
    } else {
        None
    }
}

fn seconds_to_ms(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1000.0).round() as u64
    } else {
        0
    }
}

/// The AWS SDKs' standard retry mode, spending the client's [`RetryQuota`].
///
/// boto/botocore, botocore/retries/standard.py (commit 0719e795), with its default
/// `STANDARD_RETRY_MODE_VERSION = "2.0"`:
/// - `DEFAULT_MAX_ATTEMPTS = 3`: `MaxAttemptsChecker` retries while `attempt_number < 3`;
/// - `StandardRetryConditions`: retryable are statuses 500, 502, 503 and 504 and the
///   `ConnectionError` / `HTTPClientError` exceptions (`TransientRetryableChecker`), and the
///   throttling error codes such as `ThrottlingException` (`ThrottledRetryableChecker`),
///   which is what Bedrock's 429 carries. 529 is no AWS status; it is read as the 503 it
///   means;
/// - only a retryable failure asks the quota (`RetryHandler.needs_retry`); a refused quota
///   fails the call;
/// - `ExponentialBackoff.delay_amount`: `rand(0, 1) * min(2 ** (attempt_number - 1), 20)`
///   seconds with `attempt_number` 1-based — "we want the first delay to just be
///   `rand(0, 1)`" — so 0–1 s, then 0–2 s. `retry-after` is not read (the opt-in version
///   2.1 reads `x-amz-retry-after`).
///
/// aws/aws-sdk-go-v2 (aws/retry/jitter_backoff.go, middleware.go) differs in two details:
/// its backoff is `rand * 2^attempt` with the 1-based attempt (0–2 s, then 0–4 s), and it
/// adds `NoRetryIncrement` after every successful attempt, retried or not.
fn aws_standard(
    seen: &Seen,
    state: &mut PeerState,
    rng: &mut fastrand::Rng,
    quota: &mut RetryQuota,
) -> Option<u64> {
    const MAX_ATTEMPTS: u32 = 3;
    let cost = match seen {
        // An event stream that fails after the response raises while it is read.
        Seen::MidStream => return None,
        Seen::NoResponse { timeout: true, .. } => RetryQuota::TIMEOUT_RETRY_COST,
        Seen::NoResponse { timeout: false, .. } => RetryQuota::RETRY_COST,
        Seen::Http {
            status: 429 | 500 | 502 | 503 | 504 | 529,
            ..
        } => RetryQuota::RETRY_COST,
        Seen::Http { .. } => return None,
    };
    if state.attempts >= MAX_ATTEMPTS || !quota.acquire(cost) {
        return None;
    }
    state.quota_acquired = Some(cost);
    Some(aws_backoff_ms(state.attempts, rng))
}

/// botocore's `ExponentialBackoff.delay_amount` after the failure of attempt
/// `attempt_number` (1-based): `rand(0, 1) * min(2 ** (attempt_number - 1), 20)` seconds.
fn aws_backoff_ms(attempt_number: u32, rng: &mut fastrand::Rng) -> u64 {
    const MAX_BACKOFF_S: f64 = 20.0;
    let exponent = i32::try_from(attempt_number.saturating_sub(1)).unwrap_or(i32::MAX);
    let ceiling_s = 2f64.powi(exponent).min(MAX_BACKOFF_S);
    seconds_to_ms(rng.f64() * ceiling_s)
}

/// gRPC's client retries (gRFC A6) under the channel's [`RetryThrottle`], as grpc-go
/// implements them.
///
/// grpc/proposal, A6-client-retries.md (commit 1fd061ad). The retry policy is A6's example
/// — `"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
/// "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]` — with A6's example
/// `retryThrottling` (10 tokens, ratio 0.1). The backoff is A6's as amended in 2024 (commit
/// dc9fd4f, "change specification of backoff behavior to make sense"): the n-th retry
/// waits `min(initialBackoff * backoffMultiplier^(n-1), maxBackoff) * random(0.8, 1.2)`,
/// no longer the original `random(0, min(...))`; grpc-go does so since commit 4c07bca2.
/// Pushback: `grpc-retry-pushback-ms: n` with `n >= 0` means retry after exactly `n` ms
/// and restart the backoff at `initialBackoff`; a negative value means do not retry, and
/// counts as a failure for throttling. The server's `retry-after` plays that trailer here.
///
/// grpc/grpc-go, stream.go (commit 4793ad04), `csAttempt.shouldRetry`, in this order: a
/// committed RPC (response headers received: here, a stream that broke mid-message) is
/// neither retried nor counted; pushback is read; a status outside `retryableStatusCodes`
/// is neither retried nor counted; `retryThrottler.throttle()` counts the failure and may
/// refuse; `numRetries + 1 >= maxAttempts` refuses; then the delay. A successful RPC calls
/// `successfulRPC()` (`clientStream.finish`).
///
/// The faults are HTTP statuses, which a gRPC client maps as grpc/grpc's
/// doc/http-grpc-status-mapping.md and grpc-go's `HTTPStatusConvTab`
/// (internal/transport/http_util.go) say: 429, 502, 503 and 504 are UNAVAILABLE; every
/// other status maps to a code the policy does not retry (400 INTERNAL, 500 UNKNOWN, …).
/// 529, which that table does not list, is read as the UNAVAILABLE it means (overloaded);
/// a failure before any response is UNAVAILABLE.
fn grpc_a6(
    seen: &Seen,
    state: &mut PeerState,
    rng: &mut fastrand::Rng,
    throttle: &mut RetryThrottle,
) -> Option<u64> {
    const MAX_ATTEMPTS: u32 = 4;
    let pushback_ms = match seen {
        Seen::MidStream => return None,
        Seen::NoResponse { .. } => None,
        Seen::Http {
            status,
            retry_after_s,
            ..
        } => {
            let pushback_ms = match retry_after_s {
                Some(s) if !(s.is_finite() && *s >= 0.0) => {
                    throttle.throttle();
                    return None;
                }
                Some(s) => Some(seconds_to_ms(*s)),
                None => None,
            };
            if !matches!(status, 429 | 502 | 503 | 504 | 529) {
                return None;
            }
            pushback_ms
        }
    };
    if throttle.throttle() || state.attempts >= MAX_ATTEMPTS {
        return None;
    }
    if let Some(ms) = pushback_ms {
        state.retries_since_pushback = 0;
        return Some(ms);
    }
    let delay = grpc_backoff_ms(state.retries_since_pushback, rng);
    state.retries_since_pushback += 1;
    Some(delay)
}

/// A6's backoff after `retries` retries since the last pushback:
/// `min(initialBackoff * backoffMultiplier^retries, maxBackoff) * random(0.8, 1.2)`, with
/// A6's example `initialBackoff = 0.1 s`, `backoffMultiplier = 2`, `maxBackoff = 1 s`.
fn grpc_backoff_ms(retries: u32, rng: &mut fastrand::Rng) -> u64 {
    const INITIAL_BACKOFF_MS: f64 = 100.0;
    const MAX_BACKOFF_MS: f64 = 1_000.0;
    const MULTIPLIER: f64 = 2.0;
    let exponent = i32::try_from(retries).unwrap_or(i32::MAX);
    let backoff = (INITIAL_BACKOFF_MS * MULTIPLIER.powi(exponent)).min(MAX_BACKOFF_MS);
    (backoff * (0.8 + 0.4 * rng.f64())).round() as u64
}

/// A Finagle HTTP client's method retries for 429, 5xx and failed connections, under the
/// client's default [`FinagleRetryBudget`].
///
/// twitter/finagle (commit 4feb34cb). Finagle retries an HTTP *response* only when a
/// `ResponseClassifier` calls it a `RetryableFailure`, which by default none does (the
/// stack's `RequeueFilter` requeues only requests that could not be written). What people
/// deploy against an overloaded backend is a `MethodBuilder` with
/// `withRetryForClassifier` marking 429 and 5xx `RetryableFailure`; its loop, as the
/// source says:
/// - finagle-core/src/main/scala/com/twitter/finagle/client/MethodBuilderRetry.scala:
///   `DefaultMaxRetries = 2`, policy `RetryPolicy.tries(maxRetries + 1, shouldRetry)`;
/// - service/RetryPolicy.scala, `tries`: backoffs
///   `Backoff.decorrelatedJittered(5.millis, 200.millis).take(numTries - 1)`; Backoff.scala,
///   `DecorrelatedJittered`: first `start` (5 ms), then
///   `start + random(0, min(3 * start, maximum) - start)` (5–15 ms);
/// - service/RetryFilter.scala: `apply` deposits once per request; after a failure the
///   policy must want a retry *and* `retryBudget.tryWithdraw()` must succeed, else the
///   failure is returned. `retry-after` is not read;
/// - service/Retries.scala (`moduleRequeueable`, `withdrawsOnly = false`) and
///   service/RequeueFilter.scala: the stack's `RequeueFilter`, below the method's filter,
///   sees every attempt and deposits into the same budget for each response the *client's*
///   classifier calls a success; finagle-http's `Http.scala` makes that
///   `ToggledServerErrorsAsFailures` (on by default): a 5xx is a failure, any other
///   response — 200, 429, or a 200 whose stream breaks later — a success.
///
/// A failed connection is retried here by the method's policy from the same budget
/// (Finagle would requeue it at once through the `RequeueFilter`, also from the budget; no
/// model here has one).
fn finagle_method_retries(
    seen: &Seen,
    state: &mut PeerState,
    rng: &mut fastrand::Rng,
    budget: &mut FinagleRetryBudget,
    now: u64,
) -> Option<u64> {
    const TRIES: u32 = 3;
    const START_US: u64 = 5_000;
    const MAXIMUM_US: u64 = 200_000;
    let (retryable, classified_successful) = match seen {
        Seen::MidStream => (false, true),
        Seen::NoResponse { .. } => (true, false),
        Seen::Http { status, .. } => (*status == 429 || *status >= 500, *status < 500),
    };
    if classified_successful {
        budget.deposit(now);
    }
    if !retryable || state.attempts >= TRIES || !budget.try_withdraw(now) {
        return None;
    }
    let backoff_us = match state.finagle_backoff_us {
        None => START_US,
        Some(start) => {
            let upper = if start >= MAXIMUM_US / 3 {
                MAXIMUM_US
            } else {
                start * 3
            };
            let range = upper.abs_diff(start);
            if range == 0 {
                start
            } else {
                start + rng.u64(0..range)
            }
        }
    };
    state.finagle_backoff_us = Some(backoff_us);
    Some((backoff_us + 500) / 1_000)
}

/// An SDK retry loop behind the SRE book's client-side adaptive throttling
/// ([`AdaptiveThrottle`]: `K = 2`, the last two minutes, one per process).
///
/// The retry loop is the Anthropic Python SDK's ([`StainlessCaps::ANTHROPIC`]): 3 attempts,
/// 0.5 s doubling (to at most 8 s) times `1 - 0.25 * U`, `retry-after` honoured up to
/// 60 s, 408, 409, 424, 429 and 5xx retried, a broken stream not. The throttle sits below
/// it, so every attempt, retries included, asks it first (the book throttles "requests
/// attempted by the application layer"; the SDK's retries are such requests). An attempt
/// rejected locally is not sent, counts as a request, and fails at once like a 503
/// without a hint ([`Seen::LOCAL_REJECTION`]), which the loop retries while it has
/// attempts left. A request is counted when its outcome is known (see
/// [`AdaptiveThrottle`]), as accepted when the backend answered it with anything but 429
/// or 5xx — a 200 whose stream broke later included.
fn sre_adaptive(
    seen: &Seen,
    state: &mut PeerState,
    rng: &mut fastrand::Rng,
    throttle: &mut AdaptiveThrottle,
    now: u64,
) -> Option<u64> {
    let accepted = match seen {
        Seen::MidStream => true,
        Seen::NoResponse { .. } => false,
        Seen::Http { status, .. } => !(*status == 429 || *status >= 500),
    };
    throttle.record(now, accepted);
    stainless_python(seen, state, rng, StainlessCaps::ANTHROPIC)
}

/// Linkerd's proxy retrying a request under its [`TpsBudget`], as linkerd2-proxy's
/// ServiceProfile retries do.
///
/// linkerd/linkerd2-proxy, linkerd/app/core/src/retry.rs (commit 712c2a49),
/// `RetryPolicy::retry`: a response is retryable when the route's response classes call it
/// a failure; an error without a response (`Err(_)`) is not. A result that is not
/// retryable *deposits* and ends the request; a retryable one withdraws, and is retried
/// when the withdrawal succeeded, else returned. The retry is `future::ready`: tower's
/// `Retry` sends it again at once, with no backoff, and with no count limit but the
/// budget. So deposits are made by the responses that end a request (mostly successes),
/// which is also how tower's own `budget` module example uses the budget, not by every
/// request. The ServiceProfile's default response class calls 5xx failures, so 429 is
/// not retried; a stream that breaks after a 200 was classified at its headers, and is
/// not either. Linkerd retries only requests whose body it can buffer (64 KiB,
/// `MAX_BUFFERED_BYTES`); an agent's request with a long conversation is larger, but the
/// model assumes every request is retryable, in Linkerd's favour.
fn linkerd_profile(seen: &Seen, budget: &mut TpsBudget, now: u64) -> Option<u64> {
    let retryable = matches!(seen, Seen::Http { status, .. } if (500..600).contains(status));
    if !retryable {
        budget.deposit(now);
        return None;
    }
    budget.withdraw(now).then_some(0)
}

/// An Envoy route's retries under the cluster's [`EnvoyRetryBudget`].
///
/// envoyproxy/envoy, source/common/router/retry_state_impl.cc (commit e78906c5),
/// `RetryStateImpl::shouldRetry`, in this order: `resetRetry()` closes the retry the
/// request held; a failure the policy does not retry ends the request; with
/// `retries_remaining_ == 0` it ends (`NoRetryLimitExceeded`); `retries_remaining_--`;
/// `retries().canCreate()` refused ends it (`NoOverflow`, `upstream_rq_retry_overflow`);
/// else `retries().inc()` and the backoff timer. The route's `num_retries` defaults to 1
/// (api/envoy/config/route/v3/route_components.proto, `RetryPolicy.num_retries`: "optional
/// and defaults to 1"); the backoff is `upstream.base_retry_backoff_ms = 25` with
/// `max_interval = base * 10 = 250 ms`, fully jittered:
/// source/common/common/backoff_strategy.cc (commit 18a4509c),
/// `JitteredBackOffStrategy::nextBackOffMs` returns
/// `min(random() % ((2^current_retry - 1) * base), max)` with `current_retry` starting at 1,
/// so the one retry waits 0–24 ms. `retry-after` is not read (Envoy's
/// `rate_limited_retry_back_off` is opt-in).
///
/// Envoy retries nothing unless `retry_on` says so. The model is a route configured for an
/// LLM API, `retry_on: 5xx,reset,retriable-status-codes` with `retriable_status_codes:
/// [429]`: `5xx` retries every 5xx (`CodeUtility::is5xx`, so 529 too) and upstream resets,
/// `reset` resets and connection failures, and 429 is the status an LLM API sheds load
/// with. Once response headers went downstream the router cannot retry, so a stream that
/// breaks after its 200 is not retried.
///
/// The request's upstream stream counts as active while the router decides on its
/// response headers (the stream is reset after the decision); a reset has closed it
/// before. A retry stays open through its backoff and its attempt, until the next
/// decision (`shouldRetryHeaders` on the retry's own headers; here, its outcome).
fn envoy_router(
    seen: &Seen,
    state: &mut PeerState,
    rng: &mut fastrand::Rng,
    budget: &mut EnvoyRetryBudget,
) -> Option<u64> {
    const NUM_RETRIES: u32 = 1;
    let would_retry = match seen {
        Seen::MidStream => false,
        Seen::NoResponse { .. } => true,
        Seen::Http { status, .. } => (500..600).contains(status) || *status == 429,
    };
    let reset = matches!(seen, Seen::NoResponse { .. });
    if reset {
        budget.close_request();
    }
    if std::mem::take(&mut state.envoy_retry_open) {
        budget.close_retry();
    }
    let decision = if !would_retry || state.request_retries >= NUM_RETRIES {
        None
    } else {
        state.request_retries += 1;
        if budget.try_open_retry() {
            state.envoy_retry_open = true;
            Some(envoy_backoff_ms(&mut state.envoy_backoff_step, rng))
        } else {
            None
        }
    };
    if !reset {
        budget.close_request();
    }
    decision
}

/// `JitteredBackOffStrategy::nextBackOffMs` with Envoy's default intervals (25 ms, capped
/// at 250 ms); `step` is `current_retry_ - 1`.
fn envoy_backoff_ms(step: &mut u32, rng: &mut fastrand::Rng) -> u64 {
    const BASE_INTERVAL_MS: u64 = 25;
    const MAX_INTERVAL_MS: u64 = BASE_INTERVAL_MS * 10;
    let current_retry = step.saturating_add(1).min(63);
    let base_backoff = ((1u64 << current_retry) - 1).saturating_mul(BASE_INTERVAL_MS);
    if base_backoff <= MAX_INTERVAL_MS {
        *step += 1;
    }
    rng.u64(0..base_backoff).min(MAX_INTERVAL_MS)
}

/// Whether botocore's `ThrottlingErrorDetector` calls this failure a throttling error (its
/// `ThrottledRetryableChecker` error codes, or an error shape modelled as throttling): for
/// Bedrock, a 429 carries `ThrottlingException`, which is in the list. Bedrock's other
/// 429, `ModelNotReadyException`, is modelled `retryable` without `throttling`; the
/// simulator's 429 is read as the first. A 503 (`ServiceUnavailableException`), a 5xx, a
/// failure without a response and a broken stream are not throttling.
fn botocore_throttling_error(seen: &Seen) -> bool {
    matches!(seen, Seen::Http { status: 429, .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_sim::scenario::Fault;

    fn http(status: u16, retry_after: Option<&str>) -> Seen {
        let fault = match retry_after {
            Some(v) => Fault::http_with(status, "retry-after", v),
            None => Fault::http(status),
        };
        Seen::of(&fault.kind, ProviderKind::Anthropic, Peer::AnthropicPython)
    }

    /// The delays one turn waits when every attempt fails with `seen`, in a fresh process.
    fn delays(peer: Peer, seen: &Seen) -> Vec<u64> {
        let mut process = peer.new_process(0);
        delays_in(peer, seen, &mut process)
    }

    /// The same, in `process` (which keeps what the turn spent).
    fn delays_in(peer: Peer, seen: &Seen, process: &mut Process) -> Vec<u64> {
        failing_turn(peer, &vec![seen.clone(); 20], process)
    }

    /// An attempt goes out at time 0. Only Envoy's admission is part of these turns (it
    /// opens the stream its decision closes); the other peers' admissions are tested alone.
    fn send(peer: Peer, process: &mut Process, state: &mut PeerState) {
        if peer == Peer::EnvoyBudget {
            let mut rng = fastrand::Rng::with_seed(1);
            assert_eq!(peer.admit(process, state, &mut rng, 0, 0), Admission::Send);
        }
        state.attempts += 1;
    }

    /// The delays one turn waits when its attempts fail with `seen`, in order, at time 0;
    /// stops when the peer gives up or `seen` runs out.
    fn failing_turn(peer: Peer, seen: &[Seen], process: &mut Process) -> Vec<u64> {
        let mut state = PeerState::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut out = Vec::new();
        for s in seen {
            send(peer, process, &mut state);
            match peer.decide(s, &mut state, &mut rng, process, 0) {
                Some(d) => out.push(d),
                None => break,
            }
        }
        out
    }

    /// A turn whose attempts fail with `seen` and then succeed; returns the turn's state.
    fn turn_succeeding_after(peer: Peer, seen: &[Seen], process: &mut Process) -> PeerState {
        let mut state = PeerState::default();
        let mut rng = fastrand::Rng::with_seed(1);
        for s in seen {
            send(peer, process, &mut state);
            peer.decide(s, &mut state, &mut rng, process, 0)
                .expect("the failure is retried");
        }
        send(peer, process, &mut state);
        peer.on_success(process, &state, 0);
        state
    }

    fn quota(process: &Process) -> u32 {
        match process {
            Process::Aws(q) => q.available(),
            other => panic!("not an AWS process: {other:?}"),
        }
    }

    fn grpc_tokens(process: &Process) -> u32 {
        match process {
            Process::Grpc(t) => t.milli_tokens(),
            other => panic!("not a gRPC process: {other:?}"),
        }
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
        // Anthropic (>= 1.6.0): any hint is waited out.
        assert_eq!(delays(Peer::AnthropicPython, &long), [90_000, 90_000]);
        assert_eq!(
            delays(Peer::AnthropicPython, &http(429, Some("600"))),
            [600_000, 600_000]
        );
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
    fn neither_python_sdk_retries_424() {
        for peer in [Peer::AnthropicPython, Peer::OpenAiPython] {
            assert!(delays(peer, &http(424, None)).is_empty(), "{peer}");
        }
    }

    #[test]
    fn vercel_retries_twice_after_two_then_four_seconds_but_never_mid_stream() {
        assert_eq!(delays(Peer::VercelAi, &http(503, None)), [2_000, 4_000]);
        assert_eq!(
            delays(Peer::VercelAi, &http(429, Some("5"))),
            [5_000, 5_000]
        );
        // A hint of a minute or more loses to the backoff.
        assert_eq!(
            delays(Peer::VercelAi, &http(429, Some("90"))),
            [2_000, 4_000]
        );
        assert!(delays(Peer::VercelAi, &Seen::MidStream).is_empty());
        assert!(delays(Peer::AnthropicPython, &Seen::MidStream).is_empty());
    }

    #[test]
    fn only_vercel_on_openai_retries_an_error_event_before_any_output() {
        let event = |error_type: &str| FaultKind::StreamError {
            error_type: error_type.to_owned(),
            message: "boom".to_owned(),
            after_deltas: 0,
        };
        let seen = |peer, provider, error_type: &str| Seen::of(&event(error_type), provider, peer);
        let openai = ProviderKind::OpenAi;
        let vercel =
            |error_type: &str| delays(Peer::VercelAi, &seen(Peer::VercelAi, openai, error_type));
        assert_eq!(vercel("server_error"), [2_000, 4_000]);
        assert_eq!(vercel("overloaded_error"), [2_000, 4_000]);
        assert_eq!(vercel("rate_limit_exceeded"), [2_000, 4_000]);
        assert!(vercel("invalid_request_error").is_empty());
        assert!(vercel("insufficient_quota").is_empty());
        // @ai-sdk/anthropic does not read ahead; the Python SDKs raise from the iterator.
        let anthropic = seen(Peer::VercelAi, ProviderKind::Anthropic, "overloaded_error");
        assert_eq!(anthropic, Seen::MidStream);
        for peer in [Peer::AnthropicPython, Peer::OpenAiPython] {
            assert_eq!(
                seen(peer, openai, "server_error"),
                Seen::MidStream,
                "{peer}"
            );
        }
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

    /// What `peer` sees of an HTTP error with this status, `retry-after` and message.
    fn http_seen_by(
        peer: Peer,
        status: u16,
        retry_after: Option<&str>,
        message: Option<&str>,
    ) -> Seen {
        let mut headers = std::collections::BTreeMap::new();
        if let Some(v) = retry_after {
            headers.insert("retry-after".to_owned(), v.to_owned());
        }
        let kind = FaultKind::Http {
            status,
            headers,
            error_type: None,
            message: message.map(str::to_owned),
        };
        Seen::of(&kind, ProviderKind::Anthropic, peer)
    }

    /// The delays of many fresh turns failing with `seen`, by retry: the least and the most.
    fn delay_ranges(peer: Peer, seen: &Seen, turns: u64) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for seed in 0..turns {
            let mut process = peer.new_process(0);
            let mut state = PeerState::default();
            let mut rng = fastrand::Rng::with_seed(seed);
            for i in 0.. {
                state.attempts += 1;
                let Some(d) = peer.decide(seen, &mut state, &mut rng, &mut process, 0) else {
                    break;
                };
                if i == ranges.len() {
                    ranges.push((d, d));
                }
                let r = &mut ranges[i];
                *r = (r.0.min(d), r.1.max(d));
            }
        }
        ranges
    }

    #[test]
    fn python_genai_with_retry_options_makes_five_attempts_after_2_pow_n_plus_up_to_a_second() {
        let peer = Peer::GenaiPython;
        let ranges = delay_ranges(peer, &http_seen_by(peer, 503, None, None), 500);
        // tenacity's wait_exponential_jitter(initial=1, max=60, exp_base=2, jitter=1):
        // 2^(n-1) + U(0, 1) s after attempt n; stop_after_attempt(5): four retries.
        assert_eq!(ranges.len(), 4, "{ranges:?}");
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            let base = 1_000u64 << i;
            assert!(
                (base..base + 20).contains(&lo) && (base + 980..=base + 1_000).contains(&hi),
                "retry {i}: {lo}..{hi}"
            );
        }
    }

    #[test]
    fn python_genai_retries_its_six_statuses_and_transient_httpx_errors_only() {
        let peer = Peer::GenaiPython;
        for status in [408, 429, 500, 502, 503, 504, 529] {
            let d = delays(peer, &http_seen_by(peer, status, None, None));
            assert_eq!(d.len(), 4, "{status}: {d:?}");
        }
        for status in [400, 404, 409, 424, 499, 501] {
            assert!(
                delays(peer, &http_seen_by(peer, status, None, None)).is_empty(),
                "{status}"
            );
        }
        // httpx.ConnectError and httpx.TimeoutException; not a reset, not a broken stream.
        for (timeout, reset, retried) in [
            (false, false, true),
            (true, false, true),
            (false, true, false),
        ] {
            let d = delays(peer, &Seen::NoResponse { timeout, reset });
            assert_eq!(
                d.len() == 4,
                retried,
                "timeout {timeout}, reset {reset}: {d:?}"
            );
        }
        assert!(delays(peer, &Seen::MidStream).is_empty());
        // The default client (`retry_options=None`) is `stop_after_attempt(1)`.
        assert!(delays(Peer::NoRetries, &http_seen_by(peer, 503, None, None)).is_empty());
    }

    #[test]
    fn python_genai_ignores_retry_after() {
        let peer = Peer::GenaiPython;
        for hint in ["5", "90", "600"] {
            let seen = http_seen_by(peer, 429, Some(hint), None);
            assert_eq!(
                seen,
                http_seen_by(peer, 429, None, None),
                "{hint}: not even read"
            );
            let d = delays(peer, &seen);
            assert_eq!(d.len(), 4, "{hint}: {d:?}");
            assert!((1_000..=2_000).contains(&d[0]), "{hint}: {d:?}");
        }
    }

    #[test]
    fn gemini_cli_makes_ten_attempts_after_5_10_20_then_30_seconds_within_30_percent() {
        let peer = Peer::GeminiCli;
        for status in [429, 499, 500, 503, 529] {
            let ranges = delay_ranges(peer, &http_seen_by(peer, status, None, None), 300);
            assert_eq!(ranges.len(), 9, "{status}: {ranges:?}");
            let bases = [
                5_000, 10_000, 20_000, 30_000, 30_000, 30_000, 30_000, 30_000, 30_000,
            ];
            for (&(lo, hi), base) in ranges.iter().zip(bases) {
                let (least, most) = (base * 7 / 10, base * 13 / 10);
                assert!(
                    (least..least + base / 20).contains(&lo)
                        && (most - base / 20..=most).contains(&hi),
                    "{status}, base {base}: {lo}..{hi}"
                );
            }
        }
        // Failures without a response are retried on the same backoff.
        for (timeout, reset) in [(false, false), (true, false), (false, true)] {
            assert_eq!(delays(peer, &Seen::NoResponse { timeout, reset }).len(), 9);
        }
        // 400, 404 (ModelNotFoundError, nowhere to fall back to), 408 and other 4xx: thrown.
        for status in [400, 404, 408, 409, 424] {
            assert!(
                delays(peer, &http_seen_by(peer, status, None, None)).is_empty(),
                "{status}"
            );
        }
    }

    #[test]
    fn gemini_cli_ignores_retry_after_and_reads_a_delay_from_the_message() {
        let peer = Peer::GeminiCli;
        // Only the header: a RetryableQuotaError without a delay, on the 5 s backoff.
        let seen = http_seen_by(peer, 429, Some("90"), None);
        assert_eq!(seen, http_seen_by(peer, 429, None, None));
        let d = delays(peer, &seen);
        assert_eq!(d.len(), 9);
        assert!((3_500..=6_500).contains(&d[0]), "{d:?}");
        // "Please retry in 12s": at least the server's delay, plus up to 20 %; the backoff
        // doubles from it (24 s), and the larger of the two wins the next wait.
        let hinted = http_seen_by(
            peer,
            429,
            None,
            Some("Quota exceeded. Please retry in 12s."),
        );
        let ranges = delay_ranges(peer, &hinted, 300);
        assert_eq!(ranges.len(), 9);
        assert!(ranges[0].0 >= 12_000 && ranges[0].1 <= 14_400, "{ranges:?}");
        assert!(ranges[1].0 >= 24_000 && ranges[1].1 <= 28_800, "{ranges:?}");
        assert!(ranges[2].0 >= 30_000 && ranges[2].1 <= 36_000, "{ranges:?}");
        let ms = http_seen_by(peer, 503, None, Some("Please retry in 6500ms"));
        assert!(delay_ranges(peer, &ms, 50)[0].0 >= 6_500);
        // Above 300 s it is a TerminalQuotaError: no retry, and no model to fall back to.
        let long = http_seen_by(peer, 429, None, Some("Please retry in 301s"));
        assert!(delays(peer, &long).is_empty());
        // parseFloat reads the longest number: "1.5.2s" is 1.5 s.
        assert_eq!(please_retry_in_s("Please retry in 1.5.2s"), Some(1.5));
        assert_eq!(please_retry_in_s("Please retry in 34.07s."), Some(34.07));
        assert_eq!(please_retry_in_s("Please retry in s"), None);
    }

    #[test]
    fn gemini_cli_retries_a_broken_stream_three_times_each_with_fresh_request_retries() {
        let peer = Peer::GeminiCli;
        assert_eq!(delays(peer, &Seen::MidStream), [1_000, 2_000, 4_000]);
        // After a stream retry the new call starts over: nine more request retries, from 5 s.
        let mut seen = vec![http(503, None); 9];
        seen.push(Seen::MidStream);
        seen.extend(vec![http(503, None); 10]);
        let mut process = peer.new_process(0);
        let d = failing_turn(peer, &seen, &mut process);
        assert_eq!(d.len(), 19, "{d:?}");
        assert_eq!(d[9], 1_000, "{d:?}");
        assert!((3_500..=6_500).contains(&d[10]), "{d:?}");
        // Codex's turn loop retries a broken stream too; the others never.
        assert!(delays(Peer::GenaiPython, &Seen::MidStream).is_empty());
    }

    #[test]
    fn aws_retries_twice_with_full_jitter_below_one_then_two_seconds() {
        for status in [503, 529, 429, 500, 502, 504] {
            let d = delays(Peer::AwsStandard, &http(status, None));
            assert_eq!(d.len(), 2, "{status}: {d:?}");
            assert!(d[0] < 1_000 && d[1] < 2_000, "{status}: {d:?}");
        }
        // Full jitter: over many turns the first delay spans [0, 1 s), the second [0, 2 s).
        let (mut max0, mut max1) = (0, 0);
        for seed in 0..200 {
            let mut process = Peer::AwsStandard.new_process(0);
            let mut state = PeerState::default();
            let mut rng = fastrand::Rng::with_seed(seed);
            for max in [&mut max0, &mut max1] {
                state.attempts += 1;
                let d = Peer::AwsStandard
                    .decide(&http(503, None), &mut state, &mut rng, &mut process, 0)
                    .expect("retried");
                *max = (*max).max(d);
            }
        }
        assert!((900..1_000).contains(&max0) && (1_800..2_000).contains(&max1));
        // `retry-after` is not read; other statuses and broken streams are not retried.
        assert!(delays(Peer::AwsStandard, &http(429, Some("5")))[0] < 1_000);
        assert!(delays(Peer::AwsStandard, &http(400, None)).is_empty());
        assert!(delays(Peer::AwsStandard, &Seen::MidStream).is_empty());
    }

    #[test]
    fn aws_quota_costs_five_per_retry_ten_after_a_timeout_and_refunds_on_success() {
        let mut process = Peer::AwsStandard.new_process(0);
        assert_eq!(
            delays_in(Peer::AwsStandard, &http(503, None), &mut process).len(),
            2
        );
        assert_eq!(quota(&process), 490, "two retries at 5, none refunded");
        let timeout = Seen::NoResponse {
            timeout: true,
            reset: false,
        };
        assert_eq!(
            delays_in(Peer::AwsStandard, &timeout, &mut process).len(),
            2
        );
        assert_eq!(quota(&process), 470, "two retries at 10");
        // A retried success gives back its last retry's cost; a first-try success, 1.
        turn_succeeding_after(Peer::AwsStandard, &[http(503, None), timeout], &mut process);
        assert_eq!(quota(&process), 470 - 15 + 10);
        turn_succeeding_after(Peer::AwsStandard, &[], &mut process);
        assert_eq!(quota(&process), 466);
    }

    #[test]
    fn aws_refuses_a_retry_the_quota_cannot_pay() {
        let mut process = Peer::AwsStandard.new_process(0);
        // 50 failed turns of three attempts spend 2 * 5 each: 500 tokens.
        for _ in 0..50 {
            delays_in(Peer::AwsStandard, &http(503, None), &mut process);
        }
        assert_eq!(quota(&process), 0);
        assert!(delays_in(Peer::AwsStandard, &http(503, None), &mut process).is_empty());
        // Five first-try successes pay for one retry again.
        for _ in 0..5 {
            turn_succeeding_after(Peer::AwsStandard, &[], &mut process);
        }
        assert_eq!(
            delays_in(Peer::AwsStandard, &http(503, None), &mut process).len(),
            1
        );
    }

    #[test]
    fn grpc_retries_three_times_with_a6_backoff_and_counts_every_retryable_failure() {
        let mut process = Peer::GrpcThrottled.new_process(0);
        let d = delays_in(Peer::GrpcThrottled, &http(503, None), &mut process);
        assert_eq!(d.len(), 3, "maxAttempts 4: {d:?}");
        for (i, ms) in d.iter().enumerate() {
            let base = 100.0 * 2f64.powi(i as i32);
            assert!(
                (*ms as f64) >= base * 0.8 - 0.5 && (*ms as f64) <= base * 1.2 + 0.5,
                "{d:?}"
            );
        }
        assert_eq!(grpc_tokens(&process), 6_000, "four failures counted");
        // 500 maps to UNKNOWN: neither retried nor counted; nor is a committed stream.
        assert!(delays_in(Peer::GrpcThrottled, &http(500, None), &mut process).is_empty());
        assert!(delays_in(Peer::GrpcThrottled, &Seen::MidStream, &mut process).is_empty());
        assert_eq!(grpc_tokens(&process), 6_000);
        // 6 - 1 = 5 <= maxTokens / 2: throttled, and the failure still counts.
        assert!(delays_in(Peer::GrpcThrottled, &http(429, None), &mut process).is_empty());
        assert_eq!(grpc_tokens(&process), 5_000);
        // A success adds 0.1; 5.1 is above the threshold, but the next failure counts first.
        turn_succeeding_after(Peer::GrpcThrottled, &[], &mut process);
        assert!(delays_in(Peer::GrpcThrottled, &http(503, None), &mut process).is_empty());
    }

    #[test]
    fn grpc_honours_pushback_exactly_and_then_restarts_its_backoff() {
        let seen = [
            http(503, None),
            http(429, Some("5")),
            http(503, None),
            http(503, None),
        ];
        let mut process = Peer::GrpcThrottled.new_process(0);
        let d = failing_turn(Peer::GrpcThrottled, &seen, &mut process);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!((80..=120).contains(&d[0]), "{d:?}");
        assert_eq!(d[1], 5_000);
        assert!(
            (80..=120).contains(&d[2]),
            "backoff restarts after pushback: {d:?}"
        );
        // A negative pushback means "do not retry", and counts as a failure.
        let mut process = Peer::GrpcThrottled.new_process(0);
        assert!(delays_in(Peer::GrpcThrottled, &http(503, Some("-1")), &mut process).is_empty());
        assert_eq!(grpc_tokens(&process), 9_000);
    }

    #[test]
    fn aws_and_grpc_backoffs_stop_growing_at_their_caps() {
        // Beyond the attempts the default loops make: AWS caps at 20 s, gRPC at 1 s.
        let mut rng = fastrand::Rng::with_seed(5);
        let aws: Vec<u64> = (0..2_000).map(|_| aws_backoff_ms(6, &mut rng)).collect();
        let grpc: Vec<u64> = (0..2_000).map(|_| grpc_backoff_ms(6, &mut rng)).collect();
        let aws_max = aws.iter().max().copied().unwrap_or(0);
        assert!((19_000..20_000).contains(&aws_max), "{aws_max}");
        let (lo, hi) = (grpc.iter().min(), grpc.iter().max());
        assert!(
            lo.is_some_and(|&l| (800..850).contains(&l))
                && hi.is_some_and(|&h| (1_150..=1_200).contains(&h)),
            "{lo:?}..{hi:?}"
        );
    }

    #[test]
    fn finagle_retries_twice_after_5_then_5_to_15_ms() {
        for status in [503, 529, 500, 429] {
            let d = delays(Peer::FinagleBudget, &http(status, Some("5")));
            assert_eq!(d.len(), 2, "{status}: {d:?}");
            assert_eq!(d[0], 5, "{status}: {d:?}");
            assert!((5..=15).contains(&d[1]), "{status}: {d:?}");
        }
        assert!(delays(Peer::FinagleBudget, &http(400, None)).is_empty());
        assert!(delays(Peer::FinagleBudget, &Seen::MidStream).is_empty());
    }

    #[test]
    fn finagle_budget_funds_a_hundred_retries_plus_a_fifth_of_its_deposits() {
        let mut process = Peer::FinagleBudget.new_process(0);
        // 503s deposit nothing (the client calls 5xx failures): the reserve alone pays.
        for _ in 0..50 {
            assert_eq!(
                delays_in(Peer::FinagleBudget, &http(503, None), &mut process).len(),
                2
            );
        }
        assert!(delays_in(Peer::FinagleBudget, &http(503, None), &mut process).is_empty());
        // A 429 is a "successful" response to the stack's RequeueFilter: five of them pay
        // for one retry.
        let mut state = PeerState::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut granted = 0;
        for _ in 0..20 {
            state.attempts = 1;
            state.finagle_backoff_us = None;
            if Peer::FinagleBudget
                .decide(&http(429, None), &mut state, &mut rng, &mut process, 0)
                .is_some()
            {
                granted += 1;
            }
        }
        assert_eq!(granted, 4);
        // Requests deposit when they start: five new requests, one more retry.
        for _ in 0..5 {
            let state = PeerState::default();
            assert_eq!(
                Peer::FinagleBudget.admit(&mut process, &state, &mut rng, 0, 0),
                Admission::Send
            );
        }
        assert_eq!(
            delays_in(Peer::FinagleBudget, &http(503, None), &mut process).len(),
            1
        );
    }

    #[test]
    fn sre_throttle_rejects_locally_counts_the_rejection_and_the_loop_retries_it() {
        let mut process = Peer::SreAdaptive.new_process(0);
        let mut rng = fastrand::Rng::with_seed(3);
        let state = PeerState::default();
        // 429s are not accepts: after a hundred failed turns most attempts are rejected.
        for _ in 0..100 {
            failing_turn(Peer::SreAdaptive, &[http(429, None)], &mut process);
        }
        let rejected = (0..100)
            .filter(|_| {
                Peer::SreAdaptive.admit(&mut process, &state, &mut rng, 0, 0) == Admission::Reject
            })
            .count();
        assert!(rejected > 90, "{rejected}");
        // The rejection fails like a 503 without a hint: retried after 0.5 s backoff, and
        // counted as a request that was not accepted.
        let d = delays(Peer::SreAdaptive, &Seen::LOCAL_REJECTION);
        assert_eq!(d.len(), 2);
        assert!((375..=500).contains(&d[0]), "{d:?}");
        failing_turn(Peer::SreAdaptive, &[Seen::LOCAL_REJECTION], &mut process);
        // Successes and answered-but-broken streams are accepts; 5xx are not.
        turn_succeeding_after(Peer::SreAdaptive, &[], &mut process);
        failing_turn(Peer::SreAdaptive, &[Seen::MidStream], &mut process);
        failing_turn(Peer::SreAdaptive, &[http(503, None)], &mut process);
        let Process::Sre(throttle) = &mut process else {
            unreachable!("an SRE process")
        };
        assert_eq!(throttle.counts(0), (104, 2));
        assert_eq!(
            throttle.counts(120_000),
            (0, 0),
            "two minutes later: forgotten"
        );
    }

    fn envoy_open(process: &Process) -> (u64, u64) {
        match process {
            Process::Envoy(b) => b.open(),
            other => panic!("not an Envoy process: {other:?}"),
        }
    }

    #[test]
    fn linkerd_retries_5xx_at_once_while_its_budget_lasts_and_never_429() {
        let mut process = Peer::LinkerdBudget.new_process(0);
        // No count limit: the reserve of 100 retries is the only bound.
        let d = delays_in(Peer::LinkerdBudget, &http(503, None), &mut process);
        assert_eq!(
            d, [0; 20],
            "every retry immediate, as long as the test's failures last"
        );
        let mut spent = 20;
        loop {
            let more = delays_in(Peer::LinkerdBudget, &http(529, None), &mut process).len();
            if more == 0 {
                break;
            }
            spent += more;
        }
        assert_eq!(spent, 100);
        // 429 and a broken stream are not failures of the default response classes: they
        // end the request and deposit, five deposits paying one retry.
        for _ in 0..5 {
            assert!(delays_in(Peer::LinkerdBudget, &http(429, Some("5")), &mut process).is_empty());
        }
        assert_eq!(
            delays_in(Peer::LinkerdBudget, &http(503, None), &mut process).len(),
            1
        );
        for _ in 0..5 {
            assert!(delays_in(Peer::LinkerdBudget, &Seen::MidStream, &mut process).is_empty());
        }
        assert_eq!(
            failing_turn(
                Peer::LinkerdBudget,
                &[http(503, None), http(503, None)],
                &mut process
            )
            .len(),
            1
        );
        // A failure without a response is not retried either.
        let mut fresh = Peer::LinkerdBudget.new_process(0);
        assert!(delays_in(
            Peer::LinkerdBudget,
            &Seen::NoResponse {
                timeout: false,
                reset: true,
            },
            &mut fresh
        )
        .is_empty());
    }

    #[test]
    fn envoy_retries_once_after_at_most_24_ms_on_5xx_429_and_resets_not_mid_stream() {
        for seen in [
            http(503, None),
            http(529, None),
            http(500, None),
            http(429, Some("5")),
            Seen::NoResponse {
                timeout: true,
                reset: false,
            },
        ] {
            let d = delays(Peer::EnvoyBudget, &seen);
            assert_eq!(d.len(), 1, "{seen:?}: {d:?}");
            assert!(d[0] < 25, "{seen:?}: {d:?}");
        }
        assert!(delays(Peer::EnvoyBudget, &http(400, None)).is_empty());
        assert!(delays(Peer::EnvoyBudget, &Seen::MidStream).is_empty());
        // Over many requests the jitter spans [0, 25) ms.
        let mut rng = fastrand::Rng::with_seed(9);
        let first: Vec<u64> = (0..500)
            .map(|_| envoy_backoff_ms(&mut 0, &mut rng))
            .collect();
        assert!(first.iter().all(|&ms| ms < 25) && first.contains(&0) && first.contains(&24));
        // Later retries (num_retries above 1) would double the range up to the 250 ms cap.
        let mut step = 0;
        let ranges: Vec<u64> = (0..6)
            .map(|_| {
                let before = step;
                envoy_backoff_ms(&mut step, &mut rng);
                ((1u64 << (before + 1)) - 1) * 25
            })
            .collect();
        assert_eq!(ranges, [25, 75, 175, 375, 375, 375]);
    }

    #[test]
    fn envoy_holds_a_retry_open_until_the_retried_attempt_is_decided() {
        let mut process = Peer::EnvoyBudget.new_process(0);
        let mut rng = fastrand::Rng::with_seed(4);
        let mut states: Vec<PeerState> = (0..4).map(|_| PeerState::default()).collect();
        // Four requests fail at once: three retries fit the minimum concurrency of 3.
        for state in &mut states {
            send(Peer::EnvoyBudget, &mut process, state);
        }
        assert_eq!(envoy_open(&process), (4, 0));
        let retried: Vec<bool> = states
            .iter_mut()
            .map(|state| {
                Peer::EnvoyBudget
                    .decide(&http(503, None), state, &mut rng, &mut process, 0)
                    .is_some()
            })
            .collect();
        assert_eq!(retried, [true, true, true, false], "the fourth overflows");
        assert_eq!(
            envoy_open(&process),
            (0, 3),
            "retries stay open through the backoff"
        );
        // The first retry succeeds: its retry closes with it.
        send(Peer::EnvoyBudget, &mut process, &mut states[0]);
        Peer::EnvoyBudget.on_success(&mut process, &states[0], 0);
        assert_eq!(envoy_open(&process), (0, 2));
        // The second fails again: its retry closes, and its one retry was spent.
        send(Peer::EnvoyBudget, &mut process, &mut states[1]);
        assert!(Peer::EnvoyBudget
            .decide(&http(503, None), &mut states[1], &mut rng, &mut process, 0)
            .is_none());
        assert_eq!(envoy_open(&process), (0, 1));
        // With 25 requests open, a fifth of them may be retries at once.
        let mut crowd: Vec<PeerState> = (0..25).map(|_| PeerState::default()).collect();
        for state in &mut crowd {
            send(Peer::EnvoyBudget, &mut process, state);
        }
        let granted = crowd
            .iter_mut()
            .map(|state| {
                Peer::EnvoyBudget
                    .decide(&http(503, None), state, &mut rng, &mut process, 0)
                    .is_some()
            })
            .filter(|&retried| retried)
            .count();
        // Decided one after another, each failed stream closing after its decision, with
        // one retry already open: 25 open allow 5, 24 and 23 allow 4, then no more.
        assert_eq!(granted, 3);
        assert_eq!(envoy_open(&process), (0, 4));
    }

    #[test]
    fn aws_adaptive_retries_like_standard_and_slows_every_request_after_a_429() {
        // The retry loop and quota are the standard mode's.
        let d = delays(Peer::AwsAdaptive, &http(503, None));
        assert_eq!(d, delays(Peer::AwsStandard, &http(503, None)));
        let mut process = Peer::AwsAdaptive.new_process(0);
        let mut rng = fastrand::Rng::with_seed(2);
        let state = PeerState::default();
        // Before any throttling error nothing is held; 503s do not switch the limiter on.
        for who in 0..10 {
            assert_eq!(
                Peer::AwsAdaptive.admit(&mut process, &state, &mut rng, 10, who),
                Admission::Send
            );
        }
        failing_turn(Peer::AwsAdaptive, &[http(503, None)], &mut process);
        assert_eq!(
            Peer::AwsAdaptive.admit(&mut process, &state, &mut rng, 20, 10),
            Admission::Send
        );
        // A 429 does: the next first attempt waits for a token, and the process says when.
        failing_turn(Peer::AwsAdaptive, &[http(429, None)], &mut process);
        assert_eq!(
            Peer::AwsAdaptive.admit(&mut process, &state, &mut rng, 30, 11),
            Admission::Wait
        );
        let at = process.next_grant(30).expect("request 11 waits");
        assert!(at > 30);
        assert!(process.grant(at.saturating_sub(1)).is_empty());
        let mut granted = process.grant(at);
        if granted.is_empty() {
            granted = process.grant(at + 1);
        }
        assert_eq!(granted, [11]);
        assert_eq!(process.next_grant(at + 1), None);
    }
}
