//! The machine's door for secrets: what of an event is masked (see [`Secrets`]).

use super::Event;
use crate::compaction::CompactionError;
use crate::secrets::Secrets;
use crate::tool::BatchOutcome;

impl Secrets {
    /// `event` with every text it tells of a failure redacted: a provider failure's message,
    /// error type and request id, a host failure's message, tool failures' messages, a
    /// compactor's error. What the conversation holds (the person's messages, the model's
    /// answers, tool outputs) is the conversation's and is left as it is.
    #[must_use]
    pub fn redact_event(&self, event: Event) -> Event {
        if self.is_empty() {
            return event;
        }
        match event {
            Event::ProviderFailed { request, failure } => Event::ProviderFailed {
                request,
                failure: self.redact_failure(failure),
            },
            Event::HostFailed { failure } => Event::HostFailed {
                failure: self.redact_host(failure),
            },
            Event::ToolsFinished { batch, outcome } => Event::ToolsFinished {
                batch,
                outcome: match outcome {
                    BatchOutcome::WholeBatch(failure) => {
                        BatchOutcome::WholeBatch(self.redact_tool(failure))
                    }
                    BatchOutcome::PerCall(outcomes) => BatchOutcome::PerCall(
                        outcomes
                            .into_iter()
                            .map(|call| self.redact_outcome(call))
                            .collect(),
                    ),
                },
            },
            Event::CompactionFinished {
                compaction,
                result: Err(CompactionError::Compactor { mut message }),
            } => {
                self.scrub(&mut message);
                Event::CompactionFinished {
                    compaction,
                    result: Err(CompactionError::Compactor { message }),
                }
            }
            other => other,
        }
    }
}
