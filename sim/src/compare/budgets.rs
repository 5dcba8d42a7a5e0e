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
}
