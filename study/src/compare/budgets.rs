//! The retry budgets other stacks deploy: state that every request of one process shares.
//!
//! Each type here is the arithmetic of one library's budget, ported from its source (cited
//! on the type) and kept in exact integers, as `rebound_core::RetryBudget` is, so that no
//! float drift can grant a retry the library would refuse. Time is an argument (virtual
//! milliseconds); nothing here reads a clock or draws a random number except
//! [`AdaptiveThrottle::admit`], which takes the caller's RNG.
//!
//! The retry loops that spend these budgets are in [`super::peers`]; the fleet that shares
//! one budget among the agents of a process is in [`super::fleet`].

use std::collections::VecDeque;

/// The AWS SDKs' retry quota (standard retry mode): a bucket of 500 tokens that retries
/// draw from and successes refill.
///
/// boto/botocore, botocore/retries/quota.py (commit 40454eaa): `RetryQuota` starts full at
/// `INITIAL_CAPACITY = 500`, which is also its maximum; `acquire(n)` fails, taking nothing,
/// when `n` exceeds what is available; `release(n)` adds at most what is missing.
/// botocore/retries/standard.py (commit 0719e795), `RetryQuotaChecker`: a retry costs
/// `_RETRY_COST = 5`, or `_TIMEOUT_RETRY_REQUEST = 10` after a `ConnectTimeoutError` or
/// `ReadTimeoutError`; a 2xx response releases `_NO_RETRY_INCREMENT = 1` when the call was
/// never retried, else the amount of the last acquisition. aws/aws-sdk-go-v2,
/// aws/retry/standard.go (commit 1489ddb2) and aws/ratelimit/token_bucket.go have the same
/// constants (`DefaultRetryRateTokens = 500`, `DefaultRetryCost = 5`,
/// `DefaultRetryTimeoutCost = 10`, `DefaultNoRetryIncrement = 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryQuota {
    available: u32,
    max: u32,
}

impl RetryQuota {
    /// Tokens at the start, and the most the quota holds.
    pub(crate) const INITIAL_CAPACITY: u32 = 500;
    /// What a retry costs.
    pub(crate) const RETRY_COST: u32 = 5;
    /// What a retry after a timeout costs.
    pub(crate) const TIMEOUT_RETRY_COST: u32 = 10;
    /// What a success on the first attempt gives back.
    pub(crate) const NO_RETRY_INCREMENT: u32 = 1;

    /// A full quota.
    pub(crate) fn new() -> Self {
        RetryQuota {
            available: Self::INITIAL_CAPACITY,
            max: Self::INITIAL_CAPACITY,
        }
    }

    /// Takes `cost` tokens if there are that many; otherwise takes nothing and says no.
    pub(crate) fn acquire(&mut self, cost: u32) -> bool {
        if cost > self.available {
            return false;
        }
        self.available -= cost;
        true
    }

    /// Gives back `amount` tokens, never past the maximum.
    pub(crate) fn release(&mut self, amount: u32) {
        self.available = self.available.saturating_add(amount).min(self.max);
    }

    /// Tokens available now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> u32 {
        self.available
    }
}

/// gRPC's retry throttling (gRFC A6): a token count per server name that failures lower and
/// successes raise; no retry while it is at or below half its maximum.
///
/// grpc/proposal, A6-client-retries.md (commit 1fd061ad), "Throttling Retry Attempts and
/// Hedged RPCs": `token_count` starts at `maxTokens` and stays in `[0, maxTokens]`; every
/// RPC that fails with a retryable status (or with pushback saying not to retry) takes 1,
/// every successful RPC adds `tokenRatio`; RPCs are not retried while
/// `token_count <= maxTokens / 2`. grpc/grpc-go, clientconn.go (commit 4793ad04),
/// `retryThrottler.throttle` decrements first, clamps at 0, then answers
/// `tokens <= thresh`; `successfulRPC` adds `ratio`, clamped at `max`. The configuration
/// is A6's example, `"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}`. Kept in
/// thousandths of a token, as grpc-java's `Throttle` does (A6: "Decimal places beyond 3 are
/// ignored").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryThrottle {
    /// In thousandths of a token.
    milli_tokens: u32,
}

impl RetryThrottle {
    /// `maxTokens = 10`, in thousandths.
    pub(crate) const MAX_MILLI_TOKENS: u32 = 10_000;
    /// `tokenRatio = 0.1`, in thousandths.
    pub(crate) const RATIO_MILLI_TOKENS: u32 = 100;
    /// `maxTokens / 2`, in thousandths.
    pub(crate) const THRESHOLD_MILLI_TOKENS: u32 = Self::MAX_MILLI_TOKENS / 2;

    /// A full count.
    pub(crate) fn new() -> Self {
        RetryThrottle {
            milli_tokens: Self::MAX_MILLI_TOKENS,
        }
    }

    /// Counts one failure and answers whether retries are now throttled (disallowed).
    pub(crate) fn throttle(&mut self) -> bool {
        self.milli_tokens = self.milli_tokens.saturating_sub(1_000);
        self.milli_tokens <= Self::THRESHOLD_MILLI_TOKENS
    }

    /// Counts one successful RPC.
    pub(crate) fn success(&mut self) {
        self.milli_tokens =
            (self.milli_tokens + Self::RATIO_MILLI_TOKENS).min(Self::MAX_MILLI_TOKENS);
    }

    /// The token count, in thousandths.
    #[cfg(test)]
    pub(crate) fn milli_tokens(&self) -> u32 {
        self.milli_tokens
    }
}

/// A port of twitter/util's `WindowedAdder` (util-core/src/main/scala/com/twitter/util/
/// WindowedAdder.scala, commit 17c8187d): a sum over the last `range` of time, kept in
/// `slices` slices, the current one plus `slices - 1` finished ones.
///
/// Its quirks are kept, because they decide when a deposit expires: a slice ends `window`
/// after the *first touch* that found the previous slice over (`old = now()`), not on a
/// fixed grid; slices skipped while nobody touched the adder are zeroed, at most `N` of
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WindowedAdder {
    /// `range / slices`, in ms.
    window: u64,
    /// The finished slices (`slices - 1` of them).
    buf: Vec<i64>,
    /// The current slice.
    writer: i64,
    /// Where the current slice goes when it ends.
    i: usize,
    /// When the current slice began.
    old: u64,
}

impl WindowedAdder {
    fn new(range_ms: u64, slices: usize, now: u64) -> Self {
        assert!(slices > 1, "a windowed adder needs more than one slice");
        WindowedAdder {
            window: range_ms / slices as u64,
            buf: vec![0; slices - 1],
            writer: 0,
            i: 0,
            old: now,
        }
    }

    fn expire_if_due(&mut self, now: u64) {
        if now.saturating_sub(self.old) < self.window {
            return;
        }
        let n = self.buf.len();
        self.buf[self.i] = std::mem::take(&mut self.writer);
        self.i = (self.i + 1) % n;
        // `nskip = min((now - old) / window - 1, N)`: slices nobody touched.
        let elapsed = now.saturating_sub(self.old) / self.window;
        let nskip = usize::try_from(elapsed.saturating_sub(1))
            .unwrap_or(usize::MAX)
            .min(n);
        if nskip > 0 {
            let r = nskip.min(n - self.i);
            self.buf[self.i..self.i + r].fill(0);
            self.buf[..nskip - r].fill(0);
            self.i = (self.i + nskip) % n;
        }
        self.old = now;
    }

    fn add(&mut self, now: u64, x: i64) {
        self.expire_if_due(now);
        self.writer += x;
    }

    fn sum(&mut self, now: u64) -> i64 {
        self.expire_if_due(now);
        self.writer + self.buf.iter().sum::<i64>()
    }
}

/// Finagle's default `RetryBudget`: deposits that expire after about 10 s, retries that
/// withdraw, and a reserve of 10 retries a second.
///
/// twitter/finagle, finagle-core/src/main/scala/com/twitter/finagle/service/RetryBudget.scala
/// (commit 4feb34cb): `RetryBudget()` is `RetryBudget(ttl = 10.seconds,
/// minRetriesPerSec = 10, percentCanRetry = 0.2)`, a `TokenRetryBudget` over
/// `TokenBucket.newLeakyBucket(ttl, reserve)` where a deposit puts `ScaleFactor = 1000`
/// tokens, a withdrawal takes `(1000 / percentCanRetry).toInt = 5000`, and
/// `reserve = minRetriesPerSec * ttl.inSeconds * withdrawalAmount = 500_000`.
/// twitter/util, TokenBucket.scala (commit 17c8187d): the leaky bucket is a
/// `WindowedAdder(ttl, 10 slices)`; `count = w.sum() + reserve`; `tryGet(n)` succeeds, and
/// adds `-n`, when `count >= n`. So in any 10 s, retries are at most 20 % of the deposits
/// plus 100.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FinagleRetryBudget {
    tokens: WindowedAdder,
}

impl FinagleRetryBudget {
    /// `ttl = 10.seconds`.
    pub(crate) const TTL_MS: u64 = 10_000;
    /// Tokens a deposit puts in.
    pub(crate) const DEPOSIT: i64 = 1_000;
    /// Tokens a retry takes out.
    pub(crate) const WITHDRAWAL: i64 = 5_000;
    /// `minRetriesPerSec * ttl.inSeconds * WITHDRAWAL`.
    pub(crate) const RESERVE: i64 = 10 * 10 * Self::WITHDRAWAL;

    /// An empty budget (the reserve only), created at `now`.
    pub(crate) fn new(now: u64) -> Self {
        FinagleRetryBudget {
            tokens: WindowedAdder::new(Self::TTL_MS, 10, now),
        }
    }

    /// One request's credit.
    pub(crate) fn deposit(&mut self, now: u64) {
        self.tokens.add(now, Self::DEPOSIT);
    }

    /// Takes one retry's worth if the balance allows, and says whether it did.
    pub(crate) fn try_withdraw(&mut self, now: u64) -> bool {
        let ok = self.tokens.sum(now) + Self::RESERVE >= Self::WITHDRAWAL;
        if ok {
            self.tokens.add(now, -Self::WITHDRAWAL);
        }
        ok
    }

    /// Retries that may be made now (`RetryBudget.balance`).
    #[cfg(test)]
    pub(crate) fn balance(&mut self, now: u64) -> i64 {
        (self.tokens.sum(now) + Self::RESERVE) / Self::WITHDRAWAL
    }
}

/// Client-side adaptive throttling from Google's SRE book: reject a request locally with
/// probability `max(0, (requests - K * accepts) / (requests + 1))` over the last two
/// minutes.
///
/// Beyer, Jones, Petoff, Murphy (eds.), *Site Reliability Engineering* (O'Reilly, 2016),
/// chapter 21 "Handling Overload", section "Client-Side Throttling", equation 21-1: each
/// client task keeps, for the last two minutes, `requests` ("the number of requests
/// attempted by the application layer", those the throttle itself rejected included) and
/// `accepts` ("the number of requests accepted by the backend"); `K = 2` is the book's
/// example value.
///
/// The book does not say *when* a request is counted. Counted when attempted, every
/// request still in flight looks like a rejection: with LLM calls that take seconds, a
/// process that starts 100 requests a second would see `p` near 1 before its first answer
/// and shed nearly everything. So a request is counted when its outcome is known — its
/// response, or its local rejection — as go-kratos/aegis does (circuitbreaker/sre/sre.go,
/// commit 37a53fd5: `MarkSuccess` and `MarkFailed` add to the window; "when client reject
/// request locally, continue to add counter"). That implementation's extra gate (no
/// throttling below 100 requests in the window) is not the book's and is not modelled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AdaptiveThrottle {
    /// When each request of the window was counted.
    requests: VecDeque<u64>,
    /// When each accepted request of the window was counted.
    accepts: VecDeque<u64>,
}

impl AdaptiveThrottle {
    /// "the last two minutes".
    pub(crate) const WINDOW_MS: u64 = 120_000;
    /// The multiplier `K`.
    pub(crate) const K: u64 = 2;

    /// No history.
    pub(crate) fn new() -> Self {
        AdaptiveThrottle::default()
    }

    fn forget_before(&mut self, now: u64) {
        for times in [&mut self.requests, &mut self.accepts] {
            while times
                .front()
                .is_some_and(|&t| t.saturating_add(Self::WINDOW_MS) <= now)
            {
                times.pop_front();
            }
        }
    }

    /// `(requests, accepts)` in the window ending at `now`.
    pub(crate) fn counts(&mut self, now: u64) -> (u64, u64) {
        self.forget_before(now);
        (self.requests.len() as u64, self.accepts.len() as u64)
    }

    /// The probability that a request attempted at `now` is rejected locally.
    pub(crate) fn rejection_probability(&mut self, now: u64) -> f64 {
        let (requests, accepts) = self.counts(now);
        let excess = requests.saturating_sub(Self::K * accepts);
        excess as f64 / (requests + 1) as f64
    }

    /// Whether a request attempted at `now` may be sent (`false`: rejected locally; the
    /// caller then [`record`](Self::record)s it, not accepted). Draws from `rng` only when
    /// the probability is above zero.
    pub(crate) fn admit(&mut self, now: u64, rng: &mut fastrand::Rng) -> bool {
        let p = self.rejection_probability(now);
        p <= 0.0 || rng.f64() >= p
    }

    /// Counts a request whose outcome is known at `now`, and whether the backend accepted it.
    pub(crate) fn record(&mut self, now: u64, accepted: bool) {
        self.requests.push_back(now);
        if accepted {
            self.accepts.push_back(now);
        }
    }
}

/// tower's `retry::budget::TpsBudget`, as Linkerd configures it: deposits that expire
/// after 10 s, kept in ten one-second slots, a reserve of 10 retries a second, and one
/// retry for every five deposits.
///
/// tower-rs/tower, tower/src/retry/budget/tps_budget.rs (commit 6a3ab07b; the file is
/// unchanged at 8358ee71): `TpsBudget::new(ttl, min_per_sec, retry_percent)` with
/// `retry_percent <= 1.0` makes `deposit_amount = 1` and
/// `withdraw_amount = (1.0 / retry_percent) as isize` (in `f32`: 5 for 0.2), and
/// `reserve = min_per_sec * ttl.as_secs() * withdraw_amount`; the bucket has
/// `windows = 10` slots of `ttl / 10`. `TpsBucket::expire` commits the `writer` to the slot
/// of the current generation once `window` has passed since the generation began, zeroes
/// the following slots `while diff > window` (subtracting a window each time), and starts
/// the new generation *now* (not on a fixed grid); `sum` is `writer` + every slot +
/// `reserve`; `put` expires then adds; `try_get(amt)` expires, then takes `amt` from the
/// writer if `sum >= amt`. `TpsBudget::default()` is `new(10 s, 10, 0.2)`, which is also
/// Linkerd's ServiceProfile `retryBudget` default (`retryRatio: 0.2`,
/// `minRetriesPerSecond: 10`, `ttl: 10s`; linkerd/linkerd2-proxy builds its profile
/// budget with tower's budget). Kept in the same integers, so nothing is rounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TpsBudget {
    /// `TpsBucket::slots`, one per `window`.
    slots: [i64; Self::SLOTS],
    /// `TpsBucket::writer`: the current generation's changes, not yet committed.
    writer: i64,
    /// `Generation::index`: the slot the writer goes to.
    index: usize,
    /// `Generation::time`: when the current generation began, in ms.
    generation_ms: u64,
    /// `ttl / windows`, in ms.
    window_ms: u64,
    reserve: i64,
    deposit_amount: i64,
    withdraw_amount: i64,
}

impl TpsBudget {
    /// tower's `windows = 10u32`.
    const SLOTS: usize = 10;
    /// Linkerd's (and tower's default) `ttl = 10 s`.
    pub(crate) const LINKERD_TTL_MS: u64 = 10_000;
    /// Linkerd's (and tower's default) `min_per_sec = 10`.
    pub(crate) const LINKERD_MIN_PER_SEC: u32 = 10;
    /// Linkerd's (and tower's default) `retry_percent = 0.2`.
    pub(crate) const LINKERD_RETRY_PERCENT: f32 = 0.2;

    /// `TpsBudget::new(ttl, min_per_sec, retry_percent)`, created at `now`.
    ///
    /// # Panics
    ///
    /// On the arguments tower's own assertions refuse: `ttl` outside 1–60 s,
    /// `retry_percent` outside 0–1000.
    pub(crate) fn new(ttl_ms: u64, min_per_sec: u32, retry_percent: f32, now: u64) -> Self {
        assert!(
            (1_000..=60_000).contains(&ttl_ms) && (0.0..=1000.0).contains(&retry_percent),
            "invariant: tower's TpsBudget takes a ttl of 1-60 s and a retry_percent of 0-1000"
        );
        // tower's own `f32` arithmetic, cast as it casts: it decides the integer amounts.
        let (deposit_amount, withdraw_amount) = if retry_percent == 0.0 {
            (0, 1)
        } else if retry_percent <= 1.0 {
            (1, (1.0 / retry_percent) as i64)
        } else {
            (1000, (1000.0 / retry_percent) as i64)
        };
        TpsBudget {
            slots: [0; Self::SLOTS],
            writer: 0,
            index: 0,
            generation_ms: now,
            window_ms: ttl_ms / Self::SLOTS as u64,
            reserve: i64::from(min_per_sec)
                .saturating_mul((ttl_ms / 1_000) as i64)
                .saturating_mul(withdraw_amount),
            deposit_amount,
            withdraw_amount,
        }
    }

    /// The budget Linkerd gives a destination, created at `now`.
    pub(crate) fn linkerd(now: u64) -> Self {
        Self::new(
            Self::LINKERD_TTL_MS,
            Self::LINKERD_MIN_PER_SEC,
            Self::LINKERD_RETRY_PERCENT,
            now,
        )
    }

    fn expire(&mut self, now: u64) {
        let mut diff = now.saturating_sub(self.generation_ms);
        if diff < self.window_ms {
            return;
        }
        self.slots[self.index] = std::mem::take(&mut self.writer);
        let mut idx = (self.index + 1) % Self::SLOTS;
        while diff > self.window_ms {
            self.slots[idx] = 0;
            diff -= self.window_ms;
            idx = (idx + 1) % Self::SLOTS;
        }
        self.index = idx;
        self.generation_ms = now;
    }

    fn sum(&self) -> i64 {
        self.slots
            .iter()
            .fold(self.writer, |sum, slot| sum.saturating_add(*slot))
            .saturating_add(self.reserve)
    }

    /// `Budget::deposit`: one request's credit.
    pub(crate) fn deposit(&mut self, now: u64) {
        self.expire(now);
        self.writer += self.deposit_amount;
    }

    /// `Budget::withdraw`: takes one retry's worth if the balance allows, and says whether
    /// it did.
    pub(crate) fn withdraw(&mut self, now: u64) -> bool {
        self.expire(now);
        let ok = self.sum() >= self.withdraw_amount;
        if ok {
            self.writer -= self.withdraw_amount;
        }
        ok
    }

    /// Retries that may be made now.
    #[cfg(test)]
    pub(crate) fn retries_available(&mut self, now: u64) -> i64 {
        self.expire(now);
        self.sum() / self.withdraw_amount
    }
}

/// Envoy's retry budget (`envoy.config.cluster.v3.CircuitBreakers.Thresholds.RetryBudget`):
/// a limit on *concurrent* retries, a share of the requests active now.
///
/// envoyproxy/envoy, source/common/upstream/resource_manager_impl.h (commit 01c2c1fa),
/// `RetryBudgetImpl`: `canCreate()` is `count() < max()`, where `count()` is the retries
/// open now and `max()` is
/// `std::max<uint64_t>(budget_percent / 100.0 * (requests_.count() + pending_requests_.count()),
/// min_retry_concurrency)` with the defaults `budget_percent = 20.0` and
/// `min_retry_concurrency = 3`. `requests_` counts the upstream requests (streams) open on
/// the cluster, retries included (the connection pool's `requests().inc()` when a stream
/// is attached); nothing is pending here (no connection limit is reached). The `double`
/// product truncated to an integer is `active * 20 / 100` in integers for every count this
/// experiment can reach (tested). A retry is open from the moment the router decides it
/// (`RetryStateImpl::shouldRetry` calls `retries().inc()` before arming the backoff timer)
/// until the next `shouldRetry` for that request, or its end (`resetRetry`).
///
/// The Gateway API's GEP-3388 (kubernetes-sigs/gateway-api, geps/gep-3388/index.md,
/// commit 04c4b7bf) describes this threshold as Envoy's retry budget, but its proposed API
/// (`budgetPercent`, `budgetInterval`, `minRetryRate`) is a budget over an interval of
/// time, as Linkerd's ([`TpsBudget`]) is, not this concurrency limit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct EnvoyRetryBudget {
    /// `requests_.count()`: upstream requests open now, first attempts and retries.
    active_requests: u64,
    /// `count()`: retries open now.
    active_retries: u64,
}

impl EnvoyRetryBudget {
    /// `budget_percent`'s default, 20 %.
    pub(crate) const BUDGET_PERCENT: u64 = 20;
    /// `min_retry_concurrency`'s default.
    pub(crate) const MIN_RETRY_CONCURRENCY: u64 = 3;

    /// No request open.
    pub(crate) fn new() -> Self {
        EnvoyRetryBudget::default()
    }

    /// An upstream request (stream) opens.
    pub(crate) fn open_request(&mut self) {
        self.active_requests += 1;
    }

    /// An upstream request closes.
    ///
    /// # Panics
    ///
    /// When none is open: the fleet closed a request twice.
    pub(crate) fn close_request(&mut self) {
        self.active_requests = self
            .active_requests
            .checked_sub(1)
            .expect("invariant: an Envoy request closes once, after it opened");
    }

    /// `max()`: the retries that may be open at once now.
    pub(crate) fn max_retries(&self) -> u64 {
        (self.active_requests * Self::BUDGET_PERCENT / 100).max(Self::MIN_RETRY_CONCURRENCY)
    }

    /// `canCreate()` then `inc()`: opens a retry if fewer than [`max_retries`](Self::max_retries)
    /// are open, and says whether it did.
    pub(crate) fn try_open_retry(&mut self) -> bool {
        let ok = self.active_retries < self.max_retries();
        if ok {
            self.active_retries += 1;
        }
        ok
    }

    /// `resetRetry()`: the open retry of a request closes.
    ///
    /// # Panics
    ///
    /// When none is open: the fleet closed a retry twice.
    pub(crate) fn close_retry(&mut self) {
        self.active_retries = self
            .active_retries
            .checked_sub(1)
            .expect("invariant: an Envoy retry closes once, after it opened");
    }

    /// `(requests, retries)` open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> (u64, u64) {
        (self.active_requests, self.active_retries)
    }
}

/// The AWS SDKs' `adaptive` retry mode's client-side rate limiter: a token bucket every
/// request (first attempts too) takes a token from once a throttling error has been seen,
/// filled at a rate that throttling errors cut and a CUBIC curve raises again.
///
/// boto/botocore (commit 0e6e2404): botocore/client.py `_register_retries` registers, for
/// `mode = 'adaptive'`, the standard handler ([`RetryQuota`] and its retry loop) *and*
/// botocore/retries/adaptive.py's `register_retry_handler`: a `ClientRateLimiter` per
/// client whose `on_sending_request` (event `before-send`, every attempt) acquires one
/// token, blocking, once `_enabled`; and whose `on_receiving_response` (event
/// `needs-retry`, every response) records the `RateClocker`, then — for a response the
/// `ThrottlingErrorDetector` does not call throttling — takes
/// `CubicCalculator.success_received(now)`, or — for a throttling error — takes
/// `error_received(rate, now)` with `rate` the measured rate (the first time) or
/// `min(measured, bucket.max_rate)`, and sets `_enabled`; either way the bucket's
/// `max_rate` becomes `min(new_rate, _MAX_RATE_ADJUST_SCALE = 2.0 * measured)`.
/// - botocore/retries/throttling.py, `CubicCalculator`: `_SCALE_CONSTANT = 0.4`,
///   `_BETA = 0.7`, `starting_max_rate = 0`; `k = (w_max * (1 - beta) / scale) ** (1/3)`;
///   a success gives `scale * (t - last_fail - k) ** 3 + w_max`; an error sets
///   `w_max = rate`, recomputes `k`, `last_fail = t`, and gives `rate * beta`.
/// - botocore/retries/bucket.py, `TokenBucket(max_rate = 1)`: `_MIN_RATE = 0.5`; setting
///   `max_rate` refills first, then `fill_rate = max(value, 0.5)`,
///   `max_capacity = max(value, 1)` (1 below 1) and clamps the capacity; the capacity
///   starts at 0 and refills `(t - last) * fill_rate` up to `max_capacity`; `acquire`
///   takes a token when one is there, else sleeps `(1 - capacity) / fill_rate` on the
///   condition (which a change of rate notifies) and tries again.
/// - adaptive.py, `RateClocker`: `_DEFAULT_SMOOTHING = 0.8`, `_TIME_BUCKET_RANGE = 0.5`;
///   each record counts one, and when the half-second bucket `floor(t * 2) / 2` is past the
///   last one, `measured = 0.8 * count / (bucket - last_bucket) + 0.2 * measured`; the
///   first `last_bucket` is `floor(t)` of the client's creation (whole seconds, as written).
///
/// The arithmetic is botocore's, in `f64` seconds as Python's floats are; virtual
/// milliseconds come in. Python's condition variable wakes sleepers in no fixed order;
/// here the requests waiting for a token are served in the order they asked, each as soon
/// as the bucket holds a token, and a change of rate moves the next one's wake-up (the
/// `notify`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AdaptiveRateLimiter {
    enabled: bool,
    // `CubicCalculator`.
    w_max: f64,
    k: f64,
    last_fail_s: f64,
    // `RateClocker`.
    measured_rate: f64,
    last_bucket_s: f64,
    count: u64,
    // `TokenBucket`.
    fill_rate: f64,
    max_capacity: f64,
    capacity: f64,
    last_refill_s: f64,
    /// Requests waiting for a token, in the order they asked (caller's identifiers).
    waiting: VecDeque<usize>,
}

impl AdaptiveRateLimiter {
    /// `CubicCalculator._SCALE_CONSTANT`.
    pub(crate) const SCALE_CONSTANT: f64 = 0.4;
    /// `CubicCalculator._BETA`.
    pub(crate) const BETA: f64 = 0.7;
    /// `TokenBucket._MIN_RATE`, requests per second.
    pub(crate) const MIN_RATE: f64 = 0.5;
    /// `ClientRateLimiter._MAX_RATE_ADJUST_SCALE`.
    pub(crate) const MAX_RATE_ADJUST_SCALE: f64 = 2.0;
    /// `RateClocker._DEFAULT_SMOOTHING`.
    pub(crate) const SMOOTHING: f64 = 0.8;
    /// `RateClocker._TIME_BUCKET_RANGE`, in seconds.
    pub(crate) const TIME_BUCKET_RANGE_S: f64 = 0.5;

    /// The limiter of a client created at `now` (ms): disabled, `TokenBucket(max_rate=1)`.
    pub(crate) fn new(now: u64) -> Self {
        let t = seconds(now);
        let mut limiter = AdaptiveRateLimiter {
            enabled: false,
            w_max: 0.0,
            k: 0.0,
            last_fail_s: t,
            measured_rate: 0.0,
            last_bucket_s: t.floor(),
            count: 0,
            fill_rate: 0.0,
            max_capacity: 0.0,
            capacity: 0.0,
            last_refill_s: t,
            waiting: VecDeque::new(),
        };
        limiter.k = limiter.zero_point();
        limiter.set_max_rate(1.0, now);
        limiter
    }

    fn zero_point(&self) -> f64 {
        (self.w_max * (1.0 - Self::BETA) / Self::SCALE_CONSTANT).powf(1.0 / 3.0)
    }

    fn refill(&mut self, t: f64) {
        let fill = (t - self.last_refill_s) * self.fill_rate;
        self.capacity = self.max_capacity.min(self.capacity + fill);
        self.last_refill_s = t;
    }

    /// The `max_rate` setter.
    fn set_max_rate(&mut self, value: f64, now: u64) {
        self.refill(seconds(now));
        self.fill_rate = value.max(Self::MIN_RATE);
        self.max_capacity = if value >= 1.0 { value } else { 1.0 };
        self.capacity = self.capacity.min(self.max_capacity);
    }

    /// `RateClocker.record`: counts a response at `now` and returns the measured rate.
    fn record(&mut self, now: u64) -> f64 {
        let scale = 1.0 / Self::TIME_BUCKET_RANGE_S;
        let bucket = (seconds(now) * scale).floor() / scale;
        self.count += 1;
        if bucket > self.last_bucket_s {
            let current_rate = self.count as f64 / (bucket - self.last_bucket_s);
            self.measured_rate =
                current_rate * Self::SMOOTHING + self.measured_rate * (1.0 - Self::SMOOTHING);
            self.count = 0;
            self.last_bucket_s = bucket;
        }
        self.measured_rate
    }

    /// `on_receiving_response`: a response arrived at `now`; `throttled` when botocore's
    /// `ThrottlingErrorDetector` calls it a throttling error.
    pub(crate) fn on_response(&mut self, now: u64, throttled: bool) {
        let measured = self.record(now);
        let t = seconds(now);
        let new_rate = if throttled {
            let rate = if self.enabled {
                measured.min(self.fill_rate)
            } else {
                measured
            };
            self.w_max = rate;
            self.k = self.zero_point();
            self.last_fail_s = t;
            self.enabled = true;
            rate * Self::BETA
        } else {
            Self::SCALE_CONSTANT * (t - self.last_fail_s - self.k).powf(3.0) + self.w_max
        };
        self.set_max_rate(new_rate.min(Self::MAX_RATE_ADJUST_SCALE * measured), now);
    }

    /// `on_sending_request` for request `who` at `now`: `true` when it may be sent now
    /// (the limiter is off, or a token was there and nobody waits before it); otherwise it
    /// waits, and [`grant`](Self::grant) sends it later.
    pub(crate) fn try_send(&mut self, who: usize, now: u64) -> bool {
        if !self.enabled {
            return true;
        }
        self.refill(seconds(now));
        if self.waiting.is_empty() && self.capacity >= 1.0 {
            self.capacity -= 1.0;
            return true;
        }
        self.waiting.push_back(who);
        false
    }

    /// The waiting requests the bucket has a token for at `now`, oldest first; each takes
    /// its token.
    pub(crate) fn grant(&mut self, now: u64) -> Vec<usize> {
        self.refill(seconds(now));
        let mut granted = Vec::new();
        while self.capacity >= 1.0 {
            let Some(who) = self.waiting.pop_front() else {
                break;
            };
            self.capacity -= 1.0;
            granted.push(who);
        }
        granted
    }

    /// When the oldest waiting request will have its token, in ms after `now` (at least 1),
    /// if one waits: `(1 - capacity) / fill_rate` seconds, rounded up.
    pub(crate) fn next_grant(&self, now: u64) -> Option<u64> {
        if self.waiting.is_empty() {
            return None;
        }
        let missing = (1.0 - self.capacity).max(0.0);
        let ms = (missing / self.fill_rate * 1000.0).ceil();
        Some(now.saturating_add((ms as u64).max(1)))
    }

    /// The bucket's fill rate (`TokenBucket.max_rate`), requests per second.
    #[cfg(test)]
    pub(crate) fn fill_rate(&self) -> f64 {
        self.fill_rate
    }

    /// The measured rate of responses (`RateClocker.measured_rate`).
    #[cfg(test)]
    pub(crate) fn measured_rate(&self) -> f64 {
        self.measured_rate
    }

    /// Whether a throttling error has switched the bucket on.
    #[cfg(test)]
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }
}

/// Virtual milliseconds as Python's float seconds.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_quota_pays_a_hundred_retries_then_refuses_and_refills_to_500() {
        let mut q = RetryQuota::new();
        for i in 0..100 {
            assert!(q.acquire(RetryQuota::RETRY_COST), "retry {i}");
        }
        assert_eq!(q.available(), 0);
        assert!(!q.acquire(RetryQuota::RETRY_COST));
        assert_eq!(q.available(), 0, "a refused acquire takes nothing");
        q.release(RetryQuota::NO_RETRY_INCREMENT);
        q.release(RetryQuota::RETRY_COST);
        assert_eq!(q.available(), 6);
        assert!(!q.acquire(RetryQuota::TIMEOUT_RETRY_COST));
        assert!(q.acquire(RetryQuota::RETRY_COST));
        let mut full = RetryQuota::new();
        full.release(RetryQuota::NO_RETRY_INCREMENT);
        assert_eq!(full.available(), 500, "capped at the initial capacity");
        assert!(full.acquire(RetryQuota::TIMEOUT_RETRY_COST));
        assert_eq!(full.available(), 490);
    }

    #[test]
    fn grpc_throttle_allows_four_failures_then_needs_a_success_to_reopen() {
        let mut t = RetryThrottle::new();
        for failure in 1..=4 {
            assert!(
                !t.throttle(),
                "failure {failure} leaves {} > 5",
                t.milli_tokens()
            );
        }
        // The fifth failure brings the count to exactly 5 = maxTokens / 2: throttled.
        assert!(t.throttle());
        assert_eq!(t.milli_tokens(), 5_000);
        // Failures clamp at 0; it then takes 51 successes (0.1 each) to rise above 5.
        for _ in 0..20 {
            t.throttle();
        }
        assert_eq!(t.milli_tokens(), 0);
        for _ in 0..50 {
            t.success();
        }
        assert_eq!(t.milli_tokens(), 5_000);
        t.success();
        assert_eq!(t.milli_tokens(), 5_100);
        // Above the threshold means retries are allowed, but this failure counts first.
        assert!(t.throttle(), "5.1 - 1 = 4.1 <= 5");
        for _ in 0..200 {
            t.success();
        }
        assert_eq!(t.milli_tokens(), 10_000, "capped at maxTokens");
    }

    #[test]
    fn finagle_budget_reserve_is_a_hundred_retries_per_ten_seconds() {
        let mut b = FinagleRetryBudget::new(0);
        assert_eq!(b.balance(0), 100);
        for i in 0..100 {
            assert!(b.try_withdraw(i * 10), "retry {i}");
        }
        assert!(!b.try_withdraw(1_000));
        // Five deposits (requests) pay for one more retry: 20 %.
        for _ in 0..5 {
            b.deposit(1_000);
        }
        assert!(b.try_withdraw(1_000));
        assert!(!b.try_withdraw(1_000));
        // Ten seconds later every withdrawal has left the window: the reserve is back.
        assert_eq!(b.balance(12_000), 100);
    }

    #[test]
    fn finagle_deposits_expire_after_the_ttl_slice_by_slice() {
        let mut b = FinagleRetryBudget::new(0);
        for _ in 0..50 {
            b.deposit(500); // in the first slice, [0, 1000)
        }
        assert_eq!(b.balance(500), 110);
        b.deposit(1_500); // second slice, begins at 1500 (first touch after 1000)
        assert_eq!(b.balance(9_000), 110);
        assert_eq!(b.balance(10_600), 110);
        // The first slice is overwritten when the tenth slice after it ends: at 11.6 s, not
        // at 10 s, because slices begin at the first touch after the previous one ended.
        assert_eq!(b.balance(11_600), 100);
    }

    #[test]
    fn windowed_adder_zeroes_slices_nobody_touched() {
        let mut w = WindowedAdder::new(10_000, 10, 0);
        w.add(0, 7);
        w.add(3_500, 5); // ends [0, 1000); skips two slices
        assert_eq!(w.sum(3_500), 12);
        assert_eq!(w.sum(9_999), 12);
        // After a long silence every slice is zeroed.
        assert_eq!(w.sum(30_000), 0);
    }

    #[test]
    fn adaptive_throttle_rejects_with_the_books_probability_over_two_minutes() {
        let mut t = AdaptiveThrottle::new();
        assert_eq!(t.rejection_probability(0), 0.0);
        for i in 0..9 {
            t.record(0, i < 2);
        }
        // (9 - 2 * 2) / (9 + 1)
        assert!((t.rejection_probability(1_000) - 0.5).abs() < 1e-12);
        for _ in 0..5 {
            t.record(0, true);
        }
        assert_eq!(t.counts(1_000), (14, 7));
        assert_eq!(t.rejection_probability(1_000), 0.0, "never below zero");
        // Two minutes later the history is gone.
        for _ in 0..3 {
            t.record(60_000, false);
        }
        assert_eq!(t.counts(119_999), (17, 7));
        assert_eq!(t.counts(120_000), (3, 0));
        assert!((t.rejection_probability(120_000) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn adaptive_throttle_rejects_about_p_of_requests() {
        let mut t = AdaptiveThrottle::new();
        let mut rng = fastrand::Rng::with_seed(7);
        for i in 0..100 {
            t.record(0, i % 4 == 0); // p = (100 - 2 * 25) / 101
        }
        let rejected = (0..10_000).filter(|_| !t.admit(0, &mut rng)).count();
        assert!((4_750..5_150).contains(&rejected), "{rejected}");
        assert_eq!(t.counts(0), (100, 25), "asking does not count");
        // Without accepts, p = n / (n + 1).
        let mut cold = AdaptiveThrottle::new();
        cold.record(0, false);
        let rejected = (0..10_000).filter(|_| !cold.admit(0, &mut rng)).count();
        assert!((4_800..5_200).contains(&rejected), "{rejected}");
        assert!(
            AdaptiveThrottle::new().admit(0, &mut rng),
            "no history, no throttling"
        );
    }

    // tower's own tests of `TpsBudget` (tps_budget.rs, `mod tests`), on virtual time.
    #[test]
    fn tower_tps_budget_passes_towers_own_tests() {
        // tps_empty: no reserve, no deposit.
        assert!(!TpsBudget::new(1_000, 0, 1.0, 0).withdraw(0));
        // tps_leaky: a deposit leaves the window after the ttl.
        let mut leaky = TpsBudget::new(1_000, 0, 1.0, 0);
        leaky.deposit(0);
        assert!(!leaky.withdraw(3_000));
        // tps_slots: two deposits pay a withdrawal of 2 within the ttl; a blank slate after;
        // a deposit 1.1 s old has expired, one 0.8 s old has not.
        let mut slots = TpsBudget::new(1_000, 0, 0.5, 0);
        slots.deposit(0);
        slots.deposit(0);
        assert!(slots.withdraw(901));
        slots.deposit(2_902);
        slots.deposit(3_203);
        slots.deposit(4_004);
        assert!(slots.withdraw(4_004));
        // tps_reserve: 5 retries a second, for one second.
        let mut reserve = TpsBudget::new(1_000, 5, 1.0, 0);
        for i in 0..5 {
            assert!(reserve.withdraw(0), "retry {i}");
        }
        assert!(!reserve.withdraw(0));
    }

    #[test]
    fn linkerd_budget_reserves_a_hundred_retries_and_pays_one_per_five_deposits() {
        // tower's f32 arithmetic gives a withdrawal of exactly 5 for 20 %.
        assert_eq!((1.0 / TpsBudget::LINKERD_RETRY_PERCENT) as i64, 5);
        let mut b = TpsBudget::linkerd(0);
        assert_eq!(b.retries_available(0), 100);
        for i in 0..100 {
            assert!(b.withdraw(i * 10), "retry {i}");
        }
        assert!(!b.withdraw(1_000));
        for _ in 0..4 {
            b.deposit(1_000);
        }
        assert!(!b.withdraw(1_000), "four deposits are not a retry");
        b.deposit(1_000);
        assert!(b.withdraw(1_000));
        // The withdrawals of the first second leave the window ten slots later.
        assert_eq!(b.retries_available(9_500), 0);
        assert_eq!(b.retries_available(11_000), 100);
    }

    #[test]
    fn tps_budget_forgets_a_deposit_about_ten_seconds_after_it_was_made() {
        let mut b = TpsBudget::new(10_000, 0, 1.0, 0);
        b.deposit(500);
        b.deposit(1_700);
        assert_eq!(b.retries_available(2_700), 2);
        assert_eq!(
            b.retries_available(10_600),
            1,
            "the deposit at 0.5 s has left"
        );
        assert_eq!(
            b.retries_available(12_000),
            0,
            "the deposit at 1.7 s has left"
        );
    }

    #[test]
    fn envoy_budget_allows_a_fifth_of_open_requests_and_at_least_three() {
        let mut b = EnvoyRetryBudget::new();
        assert_eq!(b.max_retries(), 3);
        for _ in 0..19 {
            b.open_request();
        }
        assert_eq!(b.max_retries(), 3, "19 / 5 truncates to 3");
        b.open_request();
        assert_eq!(b.max_retries(), 4);
        for i in 0..4 {
            assert!(b.try_open_retry(), "retry {i}");
        }
        assert!(!b.try_open_retry(), "the fifth concurrent retry overflows");
        assert_eq!(b.open(), (20, 4));
        b.close_retry();
        assert!(b.try_open_retry());
        for _ in 0..20 {
            b.close_request();
        }
        assert_eq!(b.open(), (0, 4));
        assert!(
            !b.try_open_retry(),
            "open retries still count against the floor of 3"
        );
    }

    #[test]
    fn envoy_budget_integer_share_equals_envoys_double_arithmetic() {
        // `std::max<uint64_t>(budget_percent / 100.0 * current_active, 3)`.
        let percent = EnvoyRetryBudget::BUDGET_PERCENT as f64;
        for active in 0..200_000u64 {
            let envoy = (percent / 100.0 * active as f64) as u64;
            assert_eq!(
                envoy,
                active * EnvoyRetryBudget::BUDGET_PERCENT / 100,
                "{active}"
            );
        }
    }

    #[test]
    fn adaptive_limiter_follows_botocores_rates() {
        // botocore's ClientRateLimiter, CubicCalculator, TokenBucket and RateClocker
        // (commit 0e6e2404), driven by a fake clock through the same responses, printed
        // (fill rate, measured rate, capacity) after each; the client was created at 0.
        let expected: [(u64, bool, f64, f64, f64); 9] = [
            (150, true, 0.5, 0.0, 0.15),
            (300, true, 0.5, 0.0, 0.224_999_999_999_999_98),
            (450, true, 0.5, 0.0, 0.3),
            (600, false, 0.5, 6.4, 0.375),
            (1_200, true, 0.5, 2.88, 0.675),
            (1_700, false, 0.5, 2.176, 0.925),
            (
                2_600,
                false,
                0.625_149_711_000_287_5,
                1.235_199_999_999_999_9,
                1.0,
            ),
            (
                4_000,
                false,
                1.560_746_666_666_666_5,
                0.780_373_333_333_333_3,
                1.0,
            ),
            (
                6_500,
                false,
                0.952_149_333_333_333_3,
                0.476_074_666_666_666_65,
                1.0,
            ),
        ];
        let mut limiter = AdaptiveRateLimiter::new(0);
        assert!(!limiter.enabled());
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        for (now, throttled, fill_rate, measured, capacity) in expected {
            limiter.on_response(now, throttled);
            assert!(limiter.enabled());
            assert!(close(limiter.fill_rate(), fill_rate), "{now}: {limiter:?}");
            assert!(
                close(limiter.measured_rate(), measured),
                "{now}: {limiter:?}"
            );
            assert!(close(limiter.capacity, capacity), "{now}: {limiter:?}");
        }
    }

    #[test]
    fn adaptive_limiter_sends_freely_until_throttled_then_one_token_at_a_time_in_order() {
        let mut limiter = AdaptiveRateLimiter::new(0);
        for who in 0..50 {
            assert!(limiter.try_send(who, 10), "off until a throttling error");
        }
        // A throttling error with nothing measured yet: the floor of 0.5 per second.
        limiter.on_response(150, true);
        assert_eq!(limiter.fill_rate(), AdaptiveRateLimiter::MIN_RATE);
        // 0.15 s of refill at 1 per second since creation: 0.15 tokens; 1, 2 and 3 wait.
        for who in 1..=3 {
            assert!(!limiter.try_send(who, 150));
        }
        // The next grant, when the limiter says it is due; float rounding may leave the
        // bucket a hair short then, and botocore too sleeps again for the remainder.
        let next = |limiter: &mut AdaptiveRateLimiter, now: u64| {
            let mut at = now;
            for _ in 0..3 {
                at = limiter.next_grant(at).expect("a request waits");
                let granted = limiter.grant(at);
                if !granted.is_empty() {
                    return (at, granted);
                }
            }
            panic!("no grant near {at}: {limiter:?}")
        };
        // 0.85 tokens missing at 0.5 per second: 1.7 s.
        assert!(limiter.grant(1_840).is_empty());
        let (first, granted) = next(&mut limiter, 150);
        assert!((1_849..=1_852).contains(&first), "{first}");
        assert_eq!(granted, [1]);
        // A token every 2 s at 0.5 per second; a newcomer queues behind the others.
        assert!(!limiter.try_send(4, first + 100));
        let mut at = first;
        for who in [2, 3, 4] {
            let (then, granted) = next(&mut limiter, at);
            assert_eq!(granted, [who]);
            assert!((at + 1_999..=at + 2_002).contains(&then), "{at} -> {then}");
            at = then;
        }
        assert_eq!(limiter.next_grant(at), None);
    }
}
