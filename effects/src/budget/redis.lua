-- rebound's retry budget, shared by processes through Redis.
--
-- The rules are those of `rebound_core::budget::RetryBudget` (core/src/budget.rs), function
-- for function: `advance`, `settle`, `expire`, `deposit`, `request`, `record`, `cancel`. A
-- change to one is a change to both: the parity test
-- (effects/tests/it/redis_budget.rs, `the_script_decides_as_core_does`) drives both with the same
-- random operations and compares every answer.
--
-- One call is one decision, atomic (Redis runs a script alone). Needs Redis 5 or later: the
-- script writes after reading `TIME`, which only effects replication (the default from 5 on)
-- allows.
--
-- # The budget's own clock
--
-- The clock is Redis's (`TIME`), so processes on machines whose clocks disagree agree on the
-- budget's time; every time that crosses the wire is a duration relative to "now" (a wait,
-- an age, a remaining delay), never a timestamp of a caller's clock. The budget's clock is
-- `TIME + offset`, and a step of `TIME` moves the offset the other way, so the budget's time
-- goes on from the last time it saw, at `TIME`'s pace:
--
-- - `TIME` behind the last time the budget saw (an NTP step back, a failover to a host whose
--   clock is behind): the clock never goes back.
-- - `TIME` ahead by more than `stale_ms` while a retry waits in the queue for a process that
--   still polls (an NTP step forward, a failover to a host whose clock is ahead): the clock
--   does not jump. Such a process calls at least every `stale_ms / 2` (its inbox read), so
--   while it lives no two calls are that far apart in real time: a longer gap is a step, and
--   taken as real it would deny every waiter at once and drop every live process as stale.
--   The budget then counts no time for the gap: it falls behind real time by what passed
--   between the two calls (at most `stale_ms / 2`), so its deadlines come that much late,
--   its refill and rate-limit windows too. Each process ends its own waits at their
--   deadlines on its own monotonic clock (and a grace of a second), so neither that nor a
--   gap that was real after all (every process stalled, or Redis paused) makes a retry wait
--   much longer than it was allowed to.
--
-- A budget nobody waits on takes any gap as time: a bucket refills to capacity and a
-- rate-limit window ends however long the silence. Every time the script stores or compares
-- is on that clock.
--
-- # Cost
--
-- Nothing walks the queue. With n waiting retries a decision costs O(log n) plus what it
-- decides: the queue is a sorted set, deadlines are a second one (expiring is a range up to
-- now), answers are read by field and forgotten by a third sorted set of their times, and a
-- waiter whose process stopped polling is dropped lazily, when it reaches the head of the
-- queue or its deadline. The one exception is a rate limit starting for a target (see
-- `limited`), which visits every waiter once to send those for that target to wait.
--
-- A process polls with `inbox`: O(log n) plus the answers it reads, whatever the number of
-- its waiters. Only when the count of its waiting requests is lower than it expects (a
-- request went stale or Redis forgot it) does it `poll` them one by one.
--
-- # Requests and owners
--
-- Every ask carries a request id chosen by its process: 32 hex digits, the process's random
-- owner id (16) then its own counter (16). It names the request everywhere (queue, answers),
-- so it cannot collide across a flush or a failover to a lagging replica (the state's
-- counters restart, the ids do not), and asking again with the same id reads the answer
-- already decided instead of deciding twice (a reply lost to the caller's timeout). A
-- process polls the answers of all its waiters in one call, which also says the owner is
-- alive; a waiter whose owner has not polled for `stale_ms` has left (its process died).
--
-- Tokens are integer milli-tokens, as in core. Lua numbers are doubles: integers are exact up
-- to 2^53, and the caller clamps the configuration well below that.
--
-- KEYS (one hash tag, so the script also runs on one Redis Cluster slot; all expire together
-- after `idle_ms` without a call):
--   1 state     hash: now, offset, balance, carry, counters, seq, refreshed (when every
--               key last got its idle expiry)
--   2 limits    hash: target -> end of its rate-limit window
--   3 queue     sorted set: seq(16 digits) .. request, scored by the request's `since`
--               (oldest turn first; equal ages in order of asking: seq grows)
--   4 deadlines sorted set: request -> deadline
--   5 waiters   hash: request -> "seq deadline target"
--   6 decided   hash: request -> "decision at" (decision: granted (a token was taken) |
--               free (granted without a token) | denied | wait:END)
--   7 answered  sorted set: request -> when it was decided (answers live `stale_ms`)
--   8 owners    sorted set: owner -> when it last asked or polled
--  10 paced     sorted set: request -> when its permit was asked for (the last second's)
--  11 sent      sorted set: request -> when its permit was granted (the last second's)
--  12 seconds   hash: second -> permits asked for in it (the last ten seconds')
--  13 served    hash: second -> requests that succeeded in it (the last ten seconds that
--               had one)
--   9 mine      sorted set, every score 0, read by range of member: OWNER q COUNTER for
--               each waiting request, OWNER a COUNTER for each answer from the queue its
--               process has not yet acknowledged (a process's inbox)
--
-- ARGV: 1 op, 2 now (empty: Redis TIME; a number: tests only), 3 capacity, 4 initial,
-- 5 deposit per request, 6 deposit per success, 7 refill per second, 8 deposit per request
-- whose retry is answered (all milli-tokens), 9 idle_ms, 10 stale_ms, 11 owner (16 hex
-- digits), then the op's own arguments:
--   ask     request, kind ("first" | "hinted" | "charged"), target, wait_ms (deadline -
--           now), age_ms (now - since)
--   inbox   request...   (answers the caller acknowledges: it got them)
--   poll    request...   (any number, the caller's waiters)
--   cancel  request...   (withdraw; an answer granted but never collected is paid back)
--   success target
--   answered target   (a retry of a request is being answered: once a request)
--   limited target, for_ms (end of the window - now)
--   stats
--
-- Replies: {"granted"}, {"denied"}, {"wait", ms}, {"queued", retry_in_ms},
-- {"inbox", retry_in_ms, waiting, counter, answer, counter, answer...}: the caller's
-- requests still waiting, and its unacknowledged answers from the queue (at most 1,000),
-- {"polled", retry_in_ms, answer...} with one answer per request polled: "g" (granted),
-- "d" (denied), "w<ms>" (wait), "q" (still queued), "x" (gone: unknown here),
-- {"ok"}, {"stats", balance, granted, denied, queued, deposited, waiting, now}.

local STATE, RL, QUEUE, DEADLINES, WAITERS, DECIDED, ANSWERED, OWNERS, MINE =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local PACED, SENT, SECONDS, SERVED = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
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
local deposit_answered = int(ARGV[8])
local idle_ms = math.max(int(ARGV[9]), 1000)
local stale_ms = math.max(int(ARGV[10]), 1)
local owner = ARGV[11]
if type(owner) ~= 'string' or not string.match(owner, '^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$') then
    return redis.error_reply('rebound budget: bad owner id')
end

local function request_at(i)
    local r = ARGV[i]
    if type(r) ~= 'string' or #r ~= 32 or not string.match(r, '^%x+$') then
        return nil
    end
    return r
end

local raw
if ARGV[2] ~= nil and ARGV[2] ~= '' then
    raw = int(ARGV[2])
else
    local t = redis.call('TIME')
    raw = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether a retry waits in the queue for a process that still polled at `t` (within
-- `stale_ms` before it): that process calls again within `stale_ms / 2`. Visits the live
-- processes, not the queue; asked only after a long gap between two calls.
local function awaited(t)
    if redis.call('ZCARD', QUEUE) == 0 then
        return false
    end
    for _, o in ipairs(redis.call('ZRANGEBYSCORE', OWNERS, t - stale_ms, '+inf')) do
        if redis.call('ZLEXCOUNT', MINE, '[' .. o .. 'q', '(' .. o .. 'r') > 0 then
            return true
        end
    end
    return false
end

-- The state, or a new budget starting now with `initial` tokens.
local saved = redis.call('HMGET', STATE, 'now', 'offset', 'balance', 'carry', 'granted',
    'denied', 'queued', 'deposited', 'seq', 'refreshed', 'settings')

-- One budget, one set of rules: the settings it was made with are kept with it, and a caller
-- with other settings is refused (naming both) rather than mixing two sets of rules. A
-- budget that expired (idle) starts again with its next caller's.
local settings = table.concat({ capacity, initial, deposit_request, deposit_success,
    refill_per_sec, deposit_answered }, ' ')
if saved[1] and saved[11] and saved[11] ~= settings then
    return redis.error_reply('REBOUND_SETTINGS ' .. saved[11] .. ' / ' .. settings)
end
local now, offset, balance, carry, granted, denied, queued, deposited, seq
if saved[1] then
    now = int(saved[1])
    -- Negative after a step forward.
    offset = math.floor(tonumber(saved[2]) or 0)
    balance = math.min(int(saved[3]), capacity)
    carry = int(saved[4])
    granted = int(saved[5])
    denied = int(saved[6])
    queued = int(saved[7])
    deposited = int(saved[8])
    seq = int(saved[9])
    -- The budget's clock never goes back, nor jumps while retries wait (see the top of this
    -- file).
    if raw + offset < now or (raw + offset - now > stale_ms and awaited(now)) then
        offset = now - raw
    end
else
    now, offset, balance, carry = raw, 0, initial, 0
    granted, denied, queued, deposited, seq = 0, 0, 0, 0, 0
end
local clock = raw + offset

-- The keys this call wrote: each gets its idle expiry again (see the end).
local written = { [STATE] = true }

local function member(s, request)
    return string.format('%016d', s) .. request
end

-- A waiter: its place in the queue, deadline, target.
local function waiter(request)
    local w = redis.call('HGET', WAITERS, request)
    if not w then
        return nil
    end
    local s, deadline, target = string.match(w, '^(%d+) (%d+) (%d+)$')
    if not s then
        return nil
    end
    return { seq = tonumber(s), deadline = tonumber(deadline), target = tonumber(target) }
end

-- A request's entry in its process's inbox: `q` while it waits, `a` once answered.
local function mine(request, what)
    return string.sub(request, 1, 16) .. what .. string.sub(request, 17)
end

local function leave(request, w)
    redis.call('ZREM', QUEUE, member(w.seq, request))
    redis.call('ZREM', DEADLINES, request)
    redis.call('HDEL', WAITERS, request)
    redis.call('ZREM', MINE, mine(request, 'q'))
end

local function remember(request, decision)
    redis.call('HSET', DECIDED, request, decision .. ' ' .. now)
    redis.call('ZADD', ANSWERED, now, request)
    written[DECIDED], written[ANSWERED] = true, true
end

-- The processes to wake at the end of this call (see the end of this file).
local wake = {}

-- Answers a waiting request: out of the queue, into its process's inbox. A grant or a wait
-- wakes its process; a denial does not: a waiter is denied at its deadline, which its
-- process knows and polls for itself.
local function decide(request, w, decision)
    leave(request, w)
    remember(request, decision)
    redis.call('ZADD', MINE, 0, mine(request, 'a'))
    written[MINE] = true
    if decision ~= 'denied' then
        wake[string.sub(request, 1, 16)] = true
    end
end

-- Forgets answers: the requests' own, and their inbox entries.
local function unremember(requests)
    if #requests == 0 then
        return
    end
    local entries = {}
    for i, request in ipairs(requests) do
        entries[i] = mine(request, 'a')
    end
    redis.call('HDEL', DECIDED, unpack(requests))
    redis.call('ZREM', ANSWERED, unpack(requests))
    redis.call('ZREM', MINE, unpack(entries))
end

-- Whether the process that asked `request` still polls.
local function alive(request)
    return redis.call('ZSCORE', OWNERS, string.sub(request, 1, 16)) ~= false
end

local function can_ever_pay()
    return capacity >= ONE
        and (refill_per_sec > 0 or deposit_request > 0 or deposit_success > 0
            or deposit_answered > 0)
end

-- The pace (core's `Pace`): a charged permit is granted only while the permits granted in
-- the last second are fewer than the most asked for in one second of the last ten, or than
-- the most successes in one of the last ten seconds that had any (or than the bucket
-- holds). `paced` and `sent` keep the last second's asks and grants by request, `seconds`
-- the count of asks in each of the last ten seconds, `served` the count of successes in
-- each of the last ten seconds that had one (an outage, in which nothing succeeds, does not
-- push them out).
local PACE_WINDOW_MS, PACE_MEMORY_S = 1000, 10

local function pace_ask(request)
    redis.call('ZADD', PACED, now, request)
    redis.call('HINCRBY', SECONDS, math.floor(now / 1000), 1)
    written[PACED], written[SECONDS] = true, true
end

local function pace_grant(request)
    redis.call('ZADD', SENT, now, request)
    written[SENT] = true
end

local function pace_serve()
    local second = math.floor(now / 1000)
    written[SERVED] = true
    if redis.call('HINCRBY', SERVED, second, 1) ~= 1 then
        return
    end
    -- A new second (the clock never goes back, so the newest): keep the ten newest.
    local seconds = redis.call('HKEYS', SERVED)
    if #seconds > PACE_MEMORY_S then
        local oldest, field
        for _, s in ipairs(seconds) do
            local n = tonumber(s)
            if not n or not oldest or n < oldest then
                oldest, field = n, s
            end
        end
        redis.call('HDEL', SERVED, field)
    end
end

local function may_grant()
    redis.call('ZREMRANGEBYSCORE', PACED, '-inf', now - PACE_WINDOW_MS)
    redis.call('ZREMRANGEBYSCORE', SENT, '-inf', now - PACE_WINDOW_MS)
    local second = math.floor(now / 1000)
    local busiest = redis.call('ZCARD', PACED)
    local counts = redis.call('HGETALL', SECONDS)
    for i = 1, #counts, 2 do
        if tonumber(counts[i]) + PACE_MEMORY_S <= second then
            redis.call('HDEL', SECONDS, counts[i])
        else
            busiest = math.max(busiest, int(counts[i + 1]))
        end
    end
    for _, count in ipairs(redis.call('HVALS', SERVED)) do
        busiest = math.max(busiest, int(count))
    end
    return redis.call('ZCARD', SENT) < math.max(busiest, math.floor(capacity / ONE))
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

-- Denies the waiters whose deadline is before now (strict) or not after now; a waiter whose
-- process is gone just leaves, as a canceled one does in core.
local function expire(strict)
    local upto = strict and ('(' .. now) or tostring(now)
    for _, request in ipairs(redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', upto)) do
        local w = waiter(request)
        if not w then
            redis.call('ZREM', DEADLINES, request)
        elseif alive(request) then
            denied = denied + 1
            decide(request, w, 'denied')
        else
            leave(request, w)
        end
    end
end

-- Forgets the answers nobody collected within `stale_ms`, and the owners that stopped
-- polling (their waiters leave lazily).
local function forget()
    local cutoff = '(' .. (now - stale_ms)
    unremember(redis.call('ZRANGEBYSCORE', ANSWERED, '-inf', cutoff, 'LIMIT', 0, 1000))
    redis.call('ZREMRANGEBYSCORE', OWNERS, '-inf', cutoff)
end

-- Grants waiters in order while tokens last, then denies those whose deadline came; a
-- waiter whose deadline passed before now is denied first (see core's `settle`).
local function settle()
    forget()
    expire(true)
    while balance >= ONE and redis.call('ZCARD', QUEUE) > 0 and may_grant() do
        local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
        if not head then
            break
        end
        local request = string.sub(head, 17)
        local w = waiter(request)
        if not w then
            redis.call('ZREM', QUEUE, head)
        elseif not alive(request) then
            leave(request, w)
        else
            balance = balance - ONE
            granted = granted + 1
            pace_grant(request)
            decide(request, w, 'granted')
        end
    end
    expire(false)
end

-- When a tick next changes something: refill paying the head, or the earliest deadline.
-- When refill alone could pay the head of the queue: the one answer that no call brings
-- about by itself (a deposit or a success is a call, which wakes the processes it answers;
-- a deadline is its own process's to poll for). Without a waiter or a refill: `stale_ms`.
local function retry_in()
    if redis.call('ZCARD', QUEUE) == 0 then
        return stale_ms
    end
    if balance >= ONE then
        -- Tokens wait for the pace: the oldest grant of the last second leaves it.
        local oldest = redis.call('ZRANGE', SENT, 0, 0, 'WITHSCORES')[2]
        return math.max((tonumber(oldest) or now) + PACE_WINDOW_MS - now, 1)
    end
    if refill_per_sec == 0 then
        return stale_ms
    end
    local missing = math.max(ONE - balance, 0)
    local needed = math.max(missing * 1000 - carry, 0)
    return math.max(math.ceil(needed / refill_per_sec), 1)
end

-- The answer decided for `request`, if any (read, not taken: asking again reads it again).
local function answer(request)
    local a = redis.call('HGET', DECIDED, request)
    if not a then
        return nil
    end
    local decision = string.match(a, '^(%S+)')
    if decision == 'granted' or decision == 'free' then
        return { 'granted' }
    elseif decision == 'denied' then
        return { 'denied' }
    end
    local ends = tonumber(string.match(decision or '', '^wait:(%d+)$')) or now
    return { 'wait', math.max(ends - now, 0) }
end

local function touch()
    redis.call('ZADD', OWNERS, now, owner)
    written[OWNERS] = true
end

local reply
if op == 'ask' then
    local request = request_at(12)
    if not request or string.sub(request, 1, 16) ~= owner then
        return redis.error_reply('rebound budget: bad request id')
    end
    local kind, target = ARGV[13], int(ARGV[14])
    advance(clock)
    touch()
    local deadline, since = now + int(ARGV[15]), now - int(ARGV[16])
    local known = answer(request)
    if known then
        settle()
        reply = known
    elseif waiter(request) then
        settle()
        reply = answer(request) or { 'queued', retry_in() }
    else
        local ends = rate_limited_until(target)
        if ends then
            settle()
            reply = { 'wait', ends - now }
            remember(request, 'wait:' .. ends)
        elseif kind == 'first' then
            pace_ask(request)
            pace_grant(request)
            deposit(deposit_request)
            settle()
            reply = { 'granted' }
            remember(request, 'free')
        elseif kind == 'hinted' then
            pace_ask(request)
            pace_grant(request)
            settle()
            reply = { 'granted' }
            remember(request, 'free')
        elseif (function()
            pace_ask(request)
            return redis.call('ZCARD', QUEUE) == 0 and balance >= ONE and may_grant()
        end)() then
            balance = balance - ONE
            granted = granted + 1
            pace_grant(request)
            settle()
            reply = { 'granted' }
            remember(request, 'granted')
        elseif deadline <= now or not can_ever_pay() then
            denied = denied + 1
            settle()
            reply = { 'denied' }
            remember(request, 'denied')
        else
            queued = queued + 1
            seq = seq + 1
            redis.call('ZADD', QUEUE, since, member(seq, request))
            redis.call('ZADD', DEADLINES, deadline, request)
            redis.call('HSET', WAITERS, request, seq .. ' ' .. deadline .. ' ' .. target)
            redis.call('ZADD', MINE, 0, mine(request, 'q'))
            written[QUEUE], written[DEADLINES], written[WAITERS], written[MINE] =
                true, true, true, true
            settle()
            reply = answer(request) or { 'queued', retry_in() }
        end
    end
elseif op == 'inbox' then
    advance(clock)
    touch()
    local acked = {}
    local i = 12
    while ARGV[i] do
        local request = request_at(i)
        if request and string.sub(request, 1, 16) == owner then
            acked[#acked + 1] = request
        end
        i = i + 1
    end
    unremember(acked)
    settle()
    local waiting = redis.call('ZLEXCOUNT', MINE, '[' .. owner .. 'q', '(' .. owner .. 'r')
    reply = { 'inbox', retry_in(), waiting }
    local answered = redis.call('ZRANGEBYLEX', MINE, '[' .. owner .. 'a', '(' .. owner .. 'b',
        'LIMIT', 0, 1000)
    for _, entry in ipairs(answered) do
        local request = owner .. string.sub(entry, 18)
        local a = answer(request)
        reply[#reply + 1] = string.sub(entry, 18)
        if not a then
            reply[#reply + 1] = 'x'
        elseif a[1] == 'granted' then
            reply[#reply + 1] = 'g'
        elseif a[1] == 'denied' then
            reply[#reply + 1] = 'd'
        else
            reply[#reply + 1] = 'w' .. a[2]
        end
    end
elseif op == 'poll' then
    advance(clock)
    touch()
    settle()
    reply = { 'polled', retry_in() }
    local i = 12
    while ARGV[i] do
        local request = request_at(i)
        local a = request and answer(request)
        if not request then
            reply[#reply + 1] = 'x'
        elseif a then
            if a[1] == 'granted' then
                reply[#reply + 1] = 'g'
            elseif a[1] == 'denied' then
                reply[#reply + 1] = 'd'
            else
                reply[#reply + 1] = 'w' .. a[2]
            end
        elseif redis.call('HEXISTS', WAITERS, request) == 1 then
            reply[#reply + 1] = 'q'
        else
            reply[#reply + 1] = 'x'
        end
        i = i + 1
    end
elseif op == 'cancel' then
    local repaid = false
    local i = 12
    while ARGV[i] do
        local request = request_at(i)
        if request then
            local w = waiter(request)
            if w then
                leave(request, w)
            elseif string.match(redis.call('HGET', DECIDED, request) or '', '^granted ') then
                -- A charged permit granted, but its process stopped waiting before it heard
                -- (or lost the reply and decided locally): the token was never used, so it
                -- goes back (to the next waiter, if any).
                granted = granted - 1
                balance = math.min(balance + ONE, capacity)
                repaid = true
            end
            unremember({ request })
        end
        i = i + 1
    end
    if repaid then
        advance(clock)
        settle()
    end
    reply = { 'ok' }
elseif op == 'success' then
    advance(clock)
    pace_serve()
    deposit(deposit_success)
    settle()
    reply = { 'ok' }
elseif op == 'answered' then
    advance(clock)
    deposit(deposit_answered)
    settle()
    reply = { 'ok' }
elseif op == 'limited' then
    local target = int(ARGV[12])
    advance(clock)
    local ends = now + int(ARGV[13])
    if ends > now then
        local known = rate_limited_until(target)
        if known and known > ends then
            ends = known
        end
        redis.call('HSET', RL, tostring(target), ends)
        written[RL] = true
        -- While a window is on, no retry for its target joins the queue (it is told to
        -- wait), so only a window that starts can find waiters to send away: the one walk
        -- over the queue, once per window.
        if not known then
            for _, request in ipairs(redis.call('HKEYS', WAITERS)) do
                local w = waiter(request)
                if w and w.target == target then
                    decide(request, w, 'wait:' .. ends)
                end
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

-- Every key expires `idle_ms` after the last call. A key this call wrote gets that expiry
-- now (it may be new); the others every tenth of `idle_ms`, which keeps them alive while
-- calls come and costs most calls two PEXPIREs instead of nine.
local refreshed = int(saved[10])
local refresh_all = not saved[1] or now - refreshed >= math.floor(idle_ms / 10)
if refresh_all then
    refreshed = now
end
redis.call('HSET', STATE, 'now', now, 'offset', offset, 'balance', balance, 'carry', carry,
    'granted', granted, 'denied', denied, 'queued', queued, 'deposited', deposited, 'seq', seq,
    'refreshed', refreshed, 'settings', settings)
for _, key in ipairs(KEYS) do
    if refresh_all or written[key] then
        redis.call('PEXPIRE', key, idle_ms)
    end
end

-- Wakes each process whose queued request this call answered, once, on its channel
-- `rebound:budget:{NAME}:wake:OWNER`, so it reads its inbox now instead of at its next
-- poll. The caller of `inbox` reads its answers in this reply. A message lost (nobody
-- subscribed, a broken connection) costs only time: the process still polls.
local channel = string.sub(STATE, 1, #STATE - #'state') .. 'wake:'
for o in pairs(wake) do
    if not (op == 'inbox' and o == owner) then
        redis.call('PUBLISH', channel .. o, '1')
    end
end
return reply
