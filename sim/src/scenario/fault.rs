//! One failed request attempt: what fails, when, and how a client classifies it.

use super::final_answer;
use super::render::{message_id, render, WireRequest};
use super::Timing;
use rebound_core::{FailureKind, ProviderFailure, ProviderKind, TransportFault};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// One failed request attempt.
///
/// In JSON, the [`FaultKind`]'s fields and `after_ms` sit in one object:
/// `{"type": "http", "status": 529, "after_ms": 40}`. Unknown fields are an error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    /// What fails.
    #[serde(flatten)]
    pub kind: FaultKind,
    /// When the failure surfaces after the request was sent, overriding [`Timing`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

impl<'de> Deserialize<'de> for Fault {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // By hand rather than `flatten`, which would accept unknown fields silently.
        let mut map = serde_json::Map::<String, Value>::deserialize(d)?;
        let after_ms = match map.remove("after_ms") {
            None | Some(Value::Null) => None,
            Some(v) => Some(u64::deserialize(v).map_err(D::Error::custom)?),
        };
        let kind = FaultKind::deserialize(Value::Object(map)).map_err(D::Error::custom)?;
        Ok(Fault { kind, after_ms })
    }
}

impl From<FaultKind> for Fault {
    fn from(kind: FaultKind) -> Self {
        Fault {
            kind,
            after_ms: None,
        }
    }
}

impl Fault {
    /// An HTTP error with `status` and no headers.
    #[must_use]
    pub fn http(status: u16) -> Self {
        FaultKind::Http {
            status,
            headers: BTreeMap::new(),
            error_type: None,
            message: None,
        }
        .into()
    }

    /// An HTTP error with `status` and one header.
    #[must_use]
    pub fn http_with(status: u16, header: &str, value: &str) -> Self {
        FaultKind::Http {
            status,
            headers: BTreeMap::from([(header.to_owned(), value.to_owned())]),
            error_type: None,
            message: None,
        }
        .into()
    }

    /// A transport fault.
    #[must_use]
    pub fn transport(fault: TransportFault) -> Self {
        FaultKind::Transport { fault }.into()
    }

    /// The failure a client classifies this fault as, for `provider`: what the runner's
    /// HTTP provider reports for the bytes [`render`](super::render) puts on the wire for a
    /// streamed request (the interrupted answer being [`final_answer`](super::final_answer)),
    /// through the same decoder and classifiers ([`Rendered::failure`](super::Rendered::failure)).
    ///
    /// A `context_overflow` is the provider's real "prompt is too long" 400; should the
    /// classifier not recognize it, the scenario's meaning wins (kind `ContextOverflow`). A
    /// `stall` is the idle timeout it causes when it is longer than the client's.
    #[must_use]
    pub fn failure(&self, provider: ProviderKind) -> ProviderFailure {
        self.played(provider).0
    }

    /// What the machine hears of this fault from `provider`: the failure
    /// ([`failure`](Self::failure)), and whether a piece of the answer arrives first (its
    /// rendered stream begins before it fails, as a cut stream does), when the runner tells
    /// the machine the answer began.
    #[must_use]
    pub fn played(&self, provider: ProviderKind) -> (ProviderFailure, bool) {
        let timing = Timing::default();
        let message_id = message_id(provider, "sim");
        let request = WireRequest {
            provider,
            stream: true,
            model: "scripted-model",
            message_id: &message_id,
            timing: &timing,
        };
        let interrupted = final_answer().response(0, false);
        let rendered = render(self, &request, &interrupted);
        let mut failure = rendered.failure(provider);
        if matches!(self.kind, FaultKind::ContextOverflow)
            && failure.kind != FailureKind::ContextOverflow
        {
            failure.kind = FailureKind::ContextOverflow;
        }
        (failure, rendered.answer_begins(provider))
    }

    /// For faults that only slow the stream down (`stall`, `slow_drip`): the longest silence
    /// the client sees, in ms. Shorter than the client's idle timeout, the fault delays what
    /// comes next by this much; longer, it fails the attempt as an idle timeout.
    #[must_use]
    pub fn silence_ms(&self) -> Option<u64> {
        match self.kind {
            FaultKind::Stall { ms } => Some(ms),
            FaultKind::SlowDrip { interval_ms } => Some(interval_ms),
            _ => None,
        }
    }

    /// When the failure surfaces after the request was sent, in virtual ms (for a stall: the
    /// client's idle timeout).
    #[must_use]
    pub fn delay_ms(&self, timing: &Timing, idle_timeout_ms: u64) -> u64 {
        if let Some(ms) = self.after_ms {
            return ms;
        }
        match &self.kind {
            FaultKind::Http { .. } | FaultKind::ContextOverflow => timing.error_ms,
            FaultKind::Transport { fault } => match fault {
                TransportFault::Timeout => timing.timeout_ms,
                TransportFault::IdleTimeout => idle_timeout_ms,
                TransportFault::Reset | TransportFault::StreamCut => timing.error_ms,
                _ => timing.connect_ms,
            },
            FaultKind::StreamCut { after_events } => timing
                .first_event_ms
                .saturating_add(u64::from(*after_events).saturating_mul(timing.event_ms)),
            FaultKind::StreamCutBytes { .. } => timing.first_event_ms,
            FaultKind::StreamError { after_deltas, .. } => timing.first_event_ms.saturating_add(
                u64::from(*after_deltas)
                    .saturating_add(1)
                    .saturating_mul(timing.event_ms),
            ),
            FaultKind::MalformedStream => timing.first_event_ms.saturating_add(timing.event_ms),
            FaultKind::EmptyMessage => timing.first_event_ms,
            FaultKind::Stall { .. } | FaultKind::SlowDrip { .. } => {
                timing.first_event_ms.saturating_add(idle_timeout_ms)
            }
        }
    }
}

/// What a [`Fault`] is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum FaultKind {
    /// An HTTP error response with a provider-shaped JSON error body.
    Http {
        /// The status, e.g. 529.
        status: u16,
        /// Response headers, e.g. `retry-after`.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// The provider's error type (default: the provider's usual one for the status).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_type: Option<String>,
        /// The error message (default: the provider's usual one for the status).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// No usable HTTP response: `connect`, `reset`, `timeout`, `dns`, `tls`.
    Transport {
        /// Which fault.
        fault: TransportFault,
    },
    /// The stream ends after `after_events` events, before the message completed.
    StreamCut {
        /// Events sent before the cut.
        #[serde(default)]
        after_events: u32,
    },
    /// An error event in the middle of the stream.
    StreamError {
        /// The provider's error type.
        #[serde(default = "overloaded_error")]
        error_type: String,
        /// The error message.
        #[serde(default = "overloaded")]
        message: String,
        /// How many text deltas of the answer come before the error event: 0 (the default)
        /// sends only the stream's first event; N, every event through the answer's N-th
        /// text delta (through its last when it has fewer). See [`render`].
        #[serde(default, skip_serializing_if = "is_zero")]
        after_deltas: u32,
    },
    /// The model answers with nothing.
    EmptyMessage,
    /// The prompt does not fit the context window.
    ContextOverflow,
    /// The stream is not valid SSE or JSON.
    MalformedStream,
    /// No bytes for `ms`.
    Stall {
        /// How long the stream is silent.
        ms: u64,
    },
    /// The stream ends after `after_bytes` bytes of the body (possibly inside an event),
    /// before the message completed.
    StreamCutBytes {
        /// Body bytes sent before the cut.
        after_bytes: u64,
    },
    /// What comes next is sent slowly: one event every `interval_ms`.
    SlowDrip {
        /// The silence before each event.
        interval_ms: u64,
    },
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn overloaded_error() -> String {
    "overloaded_error".to_owned()
}

fn overloaded() -> String {
    "Overloaded".to_owned()
}
