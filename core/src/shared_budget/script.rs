//! What crosses the wire between a process and the budget script in Redis: its operations,
//! its replies, and what can go wrong on the way. Encoding them (RESP, the script's
//! arguments) is the shell's; their meaning is here.

use crate::{BudgetStats, PermitKind};

/// The most requests one [`ScriptOp::Poll`] or [`ScriptOp::Cancel`] carries (Redis's Lua
/// unpacks at most 8,000 values; a process with more waiters calls several times).
pub const POLL_BATCH: usize = 1_000;

/// One operation of the budget script, with times relative to the script's clock. Requests
/// are named by a number the caller chooses, unique among its own asks; the script sees it
/// prefixed with the caller's random owner id. Not `non_exhaustive`: every shell that
/// encodes the operations must encode a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptOp {
    /// Ask for a permit. Asking again under the same `request` reads the answer already
    /// decided (or the place already taken) instead of deciding again.
    Ask {
        /// Names this ask.
        request: u64,
        /// What for.
        kind: PermitKind,
        /// The target asked for.
        target: usize,
        /// How long a charged permit may wait (its deadline minus now).
        wait_ms: u64,
        /// How old the request is (now minus its `since`).
        age_ms: u64,
    },
    /// Read this process's answers from the queue (and say it is still waiting), after
    /// acknowledging those it got from the previous read.
    Inbox {
        /// Requests whose answers this process got: forgotten now.
        acks: Vec<u64>,
    },
    /// Ask whether queued requests were decided, one by one (and say their process is still
    /// waiting).
    Poll {
        /// The requests, at most [`POLL_BATCH`].
        requests: Vec<u64>,
    },
    /// Withdraw requests: a queued one leaves the queue; a charged permit granted to one but
    /// never used is paid back.
    Cancel {
        /// The requests, at most [`POLL_BATCH`].
        requests: Vec<u64>,
    },
    /// A request to `target` succeeded.
    Succeeded {
        /// The target.
        target: usize,
    },
    /// A retry of a request to `target` is being answered (once a request).
    RetryAnswered {
        /// The target.
        target: usize,
    },
    /// `target` is rate-limited for `for_ms` from now.
    RateLimited {
        /// The target.
        target: usize,
        /// How long.
        for_ms: u64,
    },
    /// Read the budget's figures.
    Stats,
}

impl ScriptOp {
    /// Whether making the call again reads what the first one decided instead of deciding
    /// again: an ask under the same request, an inbox read (with the same acknowledgements),
    /// a poll.
    #[must_use]
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self,
            ScriptOp::Ask { .. } | ScriptOp::Inbox { .. } | ScriptOp::Poll { .. }
        )
    }
}

/// The script's answer to a [`ScriptOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptReply {
    /// Go ahead.
    Granted,
    /// Do not retry.
    Denied,
    /// The target is rate-limited for this many more ms.
    Wait(u64),
    /// Waiting in the queue: poll within `retry_in_ms`.
    Queued {
        /// When the script expects the answer may change, at the latest.
        retry_in_ms: u64,
    },
    /// This process's requests still waiting, and its answers not yet acknowledged.
    Inbox {
        /// When the script expects an answer may change, at the latest.
        retry_in_ms: u64,
        /// How many of this process's requests wait in the queue.
        waiting: u64,
        /// Answered requests (never [`PollAnswer::Queued`]).
        answers: Vec<(u64, PollAnswer)>,
    },
    /// The answers of the requests polled, in the order polled.
    Polled {
        /// When the script expects an answer may change, at the latest.
        retry_in_ms: u64,
        /// One per request polled.
        answers: Vec<PollAnswer>,
    },
    /// Done.
    Ok,
    /// The budget's figures.
    Stats(RedisBudgetStats),
}

/// What a poll says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollAnswer {
    /// Granted.
    Granted,
    /// Denied.
    Denied,
    /// The target is rate-limited for this many more ms.
    Wait(u64),
    /// Still waiting.
    Queued,
    /// Not known here (it went stale, or Redis restarted empty): ask again.
    Gone,
}

/// What the budget in Redis holds and did, shared by every process using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedisBudgetStats {
    /// Milli-tokens in the bucket.
    pub balance_milli: u64,
    /// The counters, as core's budget keeps them.
    pub stats: BudgetStats,
    /// Charged permits waiting in the queue.
    pub waiting: u64,
    /// The budget's clock (Redis's `TIME`, never going back, in ms).
    pub now_ms: u64,
}

/// What went wrong between this process and the budget in Redis. None of them stops a run:
/// each sends the process to its local budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisBudgetError {
    /// The client could not be set up from the URL.
    #[error("bad redis address: {message}")]
    Address {
        /// The client's reason (never the password).
        message: String,
    },
    /// No connection, or it broke.
    #[error("cannot reach redis: {message}")]
    Connection {
        /// The client's reason.
        message: String,
    },
    /// Redis refused this process's credentials: none where Redis asks for a password
    /// (`NOAUTH`), or a wrong user name or password (`WRONGPASS`, a refused `AUTH`). Asked
    /// again every `retry_redis_after`, in case the server's password changes.
    #[error("authentication failed: {message}")]
    Authentication {
        /// What Redis refused (never the password).
        message: String,
    },
    /// The Redis named is a read-only replica (`READONLY`): the budget's script writes.
    /// Asked again every `retry_redis_after`, in case a failover promotes it.
    #[error("read-only replica: this redis is a replica and the budget writes: name its master")]
    ReadOnly,
    /// No connection opened within the connect timeout (connecting, the handshake and
    /// reading what this Redis is).
    #[error("no connection to redis within {timeout_ms} ms")]
    ConnectTimeout {
        /// The bound that passed.
        timeout_ms: u64,
    },
    /// No answer within the call timeout.
    #[error("redis did not answer within {timeout_ms} ms")]
    Timeout {
        /// The bound that passed.
        timeout_ms: u64,
    },
    /// Redis answered with an error (the script failed, a command was refused).
    #[error("redis refused the budget script: {message}")]
    Script {
        /// Redis's error.
        message: String,
    },
    /// Redis answered something the budget does not understand.
    #[error("malformed reply from the budget script: {reply}")]
    MalformedReply {
        /// The reply, abridged.
        reply: String,
    },
    /// This Redis cannot keep the budget: a Redis Cluster, a Sentinel, or a version before
    /// 5. Not retried: the process decides locally for the rest of its life.
    #[error("{reason}")]
    Unsupported {
        /// What it is and what to do instead.
        reason: String,
    },
    /// The budget in Redis was made with other settings than this process's: processes
    /// sharing a budget must share its settings. Not retried, as [`Self::Unsupported`].
    #[error(
        "the budget in redis has other settings ({theirs}) than this process ({ours}): \
         processes sharing a budget must share its settings, or name another budget"
    )]
    OtherSettings {
        /// The budget's, as kept in Redis.
        theirs: String,
        /// This process's.
        ours: String,
    },
}

impl RedisBudgetError {
    /// A [`MalformedReply`](Self::MalformedReply) showing `reply`, abridged to 200 bytes.
    #[must_use]
    pub fn malformed(reply: &str) -> RedisBudgetError {
        let mut reply = reply.to_owned();
        if reply.len() > 200 {
            let mut end = 200;
            while !reply.is_char_boundary(end) {
                end -= 1;
            }
            reply.truncate(end);
            reply.push('…');
        }
        RedisBudgetError::MalformedReply { reply }
    }

    /// Whether asking again cannot help: this Redis cannot keep the budget, or the budget
    /// has other settings. The process decides locally for the rest of its life, and a
    /// command line stops at start.
    #[must_use]
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            RedisBudgetError::Unsupported { .. } | RedisBudgetError::OtherSettings { .. }
        )
    }

    /// Whether Redis answered but refused this process (its credentials, or a read-only
    /// replica): not an outage that ends by itself but a setting to fix, although Redis is
    /// asked again every `retry_redis_after` in case it changes.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            RedisBudgetError::Authentication { .. } | RedisBudgetError::ReadOnly
        )
    }

    /// Whether the reply to a call may have been lost on its way (a timeout, a broken
    /// connection): the call may have reached Redis, and an idempotent one is made once more.
    #[must_use]
    pub fn may_be_lost(&self) -> bool {
        matches!(
            self,
            RedisBudgetError::Timeout { .. } | RedisBudgetError::Connection { .. }
        )
    }

    /// A short stable name of what went wrong, for programs (the `error_kind` of
    /// `rebound run`'s `budget_fallback` event): `address`, `unreachable`,
    /// `authentication`, `read_only`, `connect_timeout`, `timeout`, `script`,
    /// `malformed_reply`, `unsupported`, `other_settings`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            RedisBudgetError::Address { .. } => "address",
            RedisBudgetError::Connection { .. } => "unreachable",
            RedisBudgetError::Authentication { .. } => "authentication",
            RedisBudgetError::ReadOnly => "read_only",
            RedisBudgetError::ConnectTimeout { .. } => "connect_timeout",
            RedisBudgetError::Timeout { .. } => "timeout",
            RedisBudgetError::Script { .. } => "script",
            RedisBudgetError::MalformedReply { .. } => "malformed_reply",
            RedisBudgetError::Unsupported { .. } => "unsupported",
            RedisBudgetError::OtherSettings { .. } => "other_settings",
        }
    }
}
