//! Identifiers that tie answers to the commands that asked for them.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// Names one provider request; answered by `ProviderSucceeded` / `ProviderFailed`.
    RequestId,
    "req"
);
id_type!(
    /// Names one sleep; answered by `TimerFired`.
    TimerId,
    "timer"
);
id_type!(
    /// Names one batch of tool calls; answered by `ToolsFinished`.
    BatchId,
    "batch"
);
id_type!(
    /// Names one compaction; answered by `CompactionFinished`.
    CompactionId,
    "compaction"
);
id_type!(
    /// Names one retry-permit request; answered by `PermitAnswered`.
    PermitId,
    "permit"
);
