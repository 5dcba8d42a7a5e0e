-- rebound's retry budget, shared by processes through Redis.
--
-- The rules are those of `rebound_core::budget::RetryBudget` (core/src/budget.rs), function
-- for function: `advance`, `settle`, `expire`, `deposit`, `request`, `record`, `cancel`,
-- `next_wakeup`. A change to one is a change to both: the parity test
-- (effects/tests/redis_budget.rs, `the_script_decides_as_core_does`) drives both with the same
-- random operations and compares every answer.
--
-- One call is one decision, atomic (Redis runs a script alone). The clock is Redis's own
-- (`TIME`), so processes on machines whose clocks disagree agree on the budget's time; every
-- time that crosses the wire is a duration relative to "now" (a wait, an age, a remaining
-- delay), never a timestamp of the caller's clock.
--
-- Tokens are integer milli-tokens, as in core. Lua numbers are doubles: integers are exact up
-- to 2^53, and the caller clamps the configuration well below that.
--
-- KEYS: 1 state (hash), 2 rate limits (hash target -> end of the window), 3 queue (sorted set: ticket
-- scored by its request's age), 4 waiters (hash ticket -> "deadline target seen"),
-- 5 decided (hash ticket -> "decision at"). All share one hash tag, so the script also runs on
-- a Redis Cluster, and all expire together after `idle_ms` without a call.
--
-- ARGV: 1 op, 2 now (empty: Redis TIME; a number: tests only), 3 capacity, 4 initial,
-- 5 deposit per request, 6 deposit per success, 7 refill per second (all milli-tokens),
-- 8 idle_ms, 9 stale_ms (a waiter that has not polled for this long is gone: its process
-- died), then the op's own arguments:
--   ask     kind ("first" | "hinted" | "charged"), target, wait_ms (deadline - now),
--           age_ms (now - since)
--   poll    ticket
--   cancel  ticket
--   success target
--   limited target, for_ms (end of the window - now)
--   stats
--
-- Replies: {"granted"}, {"denied"}, {"wait", ms}, {"queued", ticket, retry_in_ms},
-- {"gone"} (poll of a ticket this budget no longer knows), {"ok"},
-- {"stats", balance, granted, denied, queued, deposited, waiting, now}.

local STATE, RL, QUEUE, WAITERS, DECIDED = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ONE = 1000

local function int(value)
    local n = tonumber(value)
    if n == nil or n ~= n or n < 0 then
        return 0
    end
    return math.floor(n)
end

local op = ARGV[1]
local capacity = int(ARGV[3])
local initial = math.min(int(ARGV[4]), capacity)
local deposit_request = int(ARGV[5])
local deposit_success = int(ARGV[6])
local refill_per_sec = int(ARGV[7])
local idle_ms = math.max(int(ARGV[8]), 1000)
local stale_ms = math.max(int(ARGV[9]), 1)

local clock
if ARGV[2] ~= nil and ARGV[2] ~= '' then
    clock = int(ARGV[2])
else
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The state, or a new budget starting now with `initial` tokens.
local saved = redis.call('HMGET', STATE, 'now', 'balance', 'carry', 'granted', 'denied',
    'queued', 'deposited', 'ticket')
local now, balance, carry, granted, denied, queued, deposited, ticket
if saved[1] then
    now = int(saved[1])
    balance = math.min(int(saved[2]), capacity)
    carry = int(saved[3])
    granted = int(saved[4])
    denied = int(saved[5])
    queued = int(saved[6])
    deposited = int(saved[7])
    ticket = int(saved[8])
else
    now, balance, carry = clock, initial, 0
    granted, denied, queued, deposited, ticket = 0, 0, 0, 0, 0
end

local function member(t)
    return string.format('%016d', t)
end

-- A waiter: deadline, target, last poll.
local function waiter(m)
    local w = redis.call('HGET', WAITERS, m)
    if not w then
        return nil
    end
    local deadline, target, seen = string.match(w, '^(%d+) (%d+) (%d+)$')
    if not deadline then
        return nil
    end
    return { deadline = tonumber(deadline), target = tonumber(target), seen = tonumber(seen) }
end

local function leave(m)
    redis.call('ZREM', QUEUE, m)
    redis.call('HDEL', WAITERS, m)
end

local function decide(m, decision)
    leave(m)
    redis.call('HSET', DECIDED, m, decision .. ' ' .. now)
end

local function can_ever_pay()
    return capacity >= ONE
        and (refill_per_sec > 0 or deposit_request > 0 or deposit_success > 0)
end

local function deposit(milli)
    deposited = deposited + milli
    balance = math.min(balance + milli, capacity)
end

local function rate_limited_until(target)
    local ends = tonumber(redis.call('HGET', RL, tostring(target)))
    if ends and ends > now then
        return ends
    end
    return nil
end

-- Moves the clock to `t` (never back) and refills.
local function advance(t)
    if t <= now then
        return
    end
    local elapsed = t - now
    now = t
    local limits = redis.call('HGETALL', RL)
    for i = 1, #limits, 2 do
        if int(limits[i + 1]) <= t then
            redis.call('HDEL', RL, limits[i])
        end
    end
    if refill_per_sec == 0 then
        return
    end
    -- Exact: what does not make a whole milli-token is carried to the next step. A refill
    -- too large to count exactly fills the bucket anyway.
    local earned = elapsed * refill_per_sec + carry
    if earned >= 2 ^ 52 then
        balance, carry = capacity, 0
    else
        carry = earned % 1000
        balance = math.min(balance + (earned - carry) / 1000, capacity)
    end
    if balance == capacity then
        carry = 0
    end
end

local function expire(strict)
    for _, m in ipairs(redis.call('ZRANGE', QUEUE, 0, -1)) do
        local w = waiter(m)
        if w and ((strict and w.deadline < now) or (not strict and w.deadline <= now)) then
            denied = denied + 1
            decide(m, 'denied')
        end
    end
end

-- What core does on `cancel`, for the waiters whose process stopped polling (it died), and
-- the forgetting of answers nobody collected.
local function forget_the_gone()
    for _, m in ipairs(redis.call('ZRANGE', QUEUE, 0, -1)) do
        local w = waiter(m)
        if not w or w.seen + stale_ms < now then
            leave(m)
        end
    end
    local answers = redis.call('HGETALL', DECIDED)
    for i = 1, #answers, 2 do
        local at = tonumber(string.match(answers[i + 1], ' (%d+)$'))
        if not at or at + stale_ms < now then
            redis.call('HDEL', DECIDED, answers[i])
        end
    end
end

-- Grants waiters in order while tokens last, then denies those whose deadline came; a
-- waiter whose deadline passed before now is denied first (see core's `settle`).
local function settle()
    forget_the_gone()
    expire(true)
    while balance >= ONE do
        local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
        if not head then
            break
        end
        balance = balance - ONE
        granted = granted + 1
        decide(head, 'granted')
    end
    expire(false)
end

-- When a tick next changes something: refill paying the head, or the earliest deadline.
local function next_wakeup()
    local earliest = nil
    for _, m in ipairs(redis.call('ZRANGE', QUEUE, 0, -1)) do
        local w = waiter(m)
        if w and (earliest == nil or w.deadline < earliest) then
            earliest = w.deadline
        end
    end
    if earliest == nil then
        return nil
    end
    if refill_per_sec > 0 then
        local missing = math.max(ONE - balance, 0)
        local needed = math.max(missing * 1000 - carry, 0)
        local at = now + math.max(math.ceil(needed / refill_per_sec), 1)
        earliest = math.min(earliest, at)
    end
    return earliest
end

-- The answer decided for ticket `m`, taken out of the decided hash.
local function collect(m)
    local answer = redis.call('HGET', DECIDED, m)
    if not answer then
        return nil
    end
    redis.call('HDEL', DECIDED, m)
    local decision = string.match(answer, '^(%S+)')
    if decision == 'granted' then
        return { 'granted' }
    elseif decision == 'denied' then
        return { 'denied' }
    end
    local ends = tonumber(string.match(decision, '^wait:(%d+)$')) or now
    return { 'wait', math.max(ends - now, 0) }
end

local function still_queued(m, t)
    local at = next_wakeup() or (now + 1)
    return { 'queued', t, math.max(at - now, 1) }
end

local reply
if op == 'ask' then
    local kind, target = ARGV[10], int(ARGV[11])
    local deadline, since = clock + int(ARGV[12]), clock - int(ARGV[13])
    advance(clock)
    local ends = rate_limited_until(target)
    if ends then
        settle()
        reply = { 'wait', ends - now }
    elseif kind == 'first' then
        deposit(deposit_request)
        settle()
        reply = { 'granted' }
    elseif kind == 'hinted' then
        settle()
        reply = { 'granted' }
    elseif redis.call('ZCARD', QUEUE) == 0 and balance >= ONE then
        balance = balance - ONE
        granted = granted + 1
        settle()
        reply = { 'granted' }
    elseif deadline <= now or not can_ever_pay() then
        denied = denied + 1
        settle()
        reply = { 'denied' }
    else
        queued = queued + 1
        ticket = ticket + 1
        local m = member(ticket)
        -- Ordered by the request's own arrival; equal ages in order of asking (tickets grow).
        redis.call('ZADD', QUEUE, since, m)
        redis.call('HSET', WAITERS, m, deadline .. ' ' .. target .. ' ' .. now)
        settle()
        reply = collect(m) or still_queued(m, ticket)
    end
elseif op == 'poll' then
    local m = member(int(ARGV[10]))
    advance(clock)
    settle()
    reply = collect(m)
    if not reply then
        local w = waiter(m)
        if w then
            redis.call('HSET', WAITERS, m, w.deadline .. ' ' .. w.target .. ' ' .. now)
            reply = still_queued(m, int(ARGV[10]))
        else
            reply = { 'gone' }
        end
    end
elseif op == 'cancel' then
    local m = member(int(ARGV[10]))
    leave(m)
    redis.call('HDEL', DECIDED, m)
    reply = { 'ok' }
elseif op == 'success' then
    advance(clock)
    deposit(deposit_success)
    settle()
    reply = { 'ok' }
elseif op == 'limited' then
    local target = int(ARGV[10])
    local ends = clock + int(ARGV[11])
    advance(clock)
    if ends > now then
        local known = tonumber(redis.call('HGET', RL, tostring(target)))
        if known and known > ends then
            ends = known
        end
        redis.call('HSET', RL, tostring(target), ends)
        for _, m in ipairs(redis.call('ZRANGE', QUEUE, 0, -1)) do
            local w = waiter(m)
            if w and w.target == target then
                decide(m, 'wait:' .. ends)
            end
        end
    end
    settle()
    reply = { 'ok' }
elseif op == 'stats' then
    advance(clock)
    settle()
    reply = { 'stats', balance, granted, denied, queued, deposited,
        redis.call('ZCARD', QUEUE), now }
else
    return redis.error_reply('rebound budget: unknown operation ' .. tostring(op))
end

redis.call('HSET', STATE, 'now', now, 'balance', balance, 'carry', carry, 'granted', granted,
    'denied', denied, 'queued', queued, 'deposited', deposited, 'ticket', ticket)
for _, key in ipairs(KEYS) do
    redis.call('PEXPIRE', key, idle_ms)
end
return reply
