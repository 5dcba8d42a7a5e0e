"""Properties of the machine, checked from Python with hypothesis: whatever the providers
do, a retry sends exactly what the first attempt sent, a failed attempt adds no message,
and every retry delay is within the policy's bounds."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from conftest import READ_TOOL, drive, failure, text_response, tool_response
from rebound_agent import AgentMachine, commands as c, events as e, request_body

RETRYABLE = [
    ("unavailable", 529),
    ("unavailable", 503),
    ("server_error", 500),
    ("rate_limited", 429),
    ("transport", None),
    ("stream_malformed", None),
]
FATAL = [("auth_failed", 401), ("bad_request", 400), ("quota_exhausted", 429)]

outcome = st.one_of(
    st.tuples(st.just("fail"), st.sampled_from(RETRYABLE), st.none() | st.integers(0, 5_000)),
    st.tuples(st.just("fail"), st.sampled_from(FATAL), st.none()),
    st.tuples(st.just("text"), st.none(), st.none()),
    st.tuples(st.just("tool"), st.none(), st.none()),
)

policy = st.fixed_dictionaries(
    {
        "max_attempts": st.integers(1, 6),
        "initial_delay_ms": st.integers(0, 3_000),
        "max_delay_ms": st.integers(0, 20_000),
        # Exactly representable, so the bound below is exact.
        "multiplier": st.sampled_from([1.0, 1.5, 2.0, 3.0]),
        "jitter": st.booleans(),
    }
)


def run_with(script, retry, seed):
    m = AgentMachine(config={"tools": [READ_TOOL], "retry": retry}, seed=seed)
    outcomes = iter(script)
    failures: dict[int, dict] = {}
    counter = iter(range(10_000))

    def answer(request: c.SendRequest) -> e.Event:
        kind, fault, hint = next(outcomes, ("text", None, None))
        if kind == "text":
            return e.ProviderSucceeded(request.request, text_response())
        if kind == "tool":
            return e.ProviderSucceeded(request.request, tool_response(f"call_{next(counter)}", "a.txt"))
        name, status = fault
        f = failure(name, status)
        if hint is not None:
            f["retry_after_ms"] = hint
        if name in ("transport", "stream_malformed"):
            f["transport"] = "reset" if name == "transport" else "stream_cut"
        failures[request.request] = f
        return e.ProviderFailed(request.request, f)

    return m, drive(m, answer, max_steps=2_000), failures


@settings(max_examples=150, deadline=None)
@given(st.lists(outcome, max_size=25), policy, st.integers(0, 2**64 - 1))
def test_every_retry_sends_the_same_conversation_as_the_first_attempt(script, retry, seed):
    _, run, _ = run_with(script, retry, seed)
    first: c.SendRequest | None = None
    for cmd in run.commands():
        if isinstance(cmd, c.AppendMessage | c.ReplaceConversation):
            first = None
        elif isinstance(cmd, c.SendRequest):
            if cmd.attempt == 1 or first is None:
                assert cmd.attempt == 1, "a retry without a first attempt"
                first = cmd
            else:
                assert cmd.attempt > first.attempt or cmd.target != first.target
                assert cmd.conversation == first.conversation
                assert cmd.conversation.digest == first.conversation.digest
                assert cmd.conversation.messages() == first.conversation.messages()
                for provider in ("anthropic", "openai", "openai_responses"):
                    body = request_body(provider, cmd.conversation, "m", tools=[READ_TOOL])
                    assert body == request_body(provider, first.conversation, "m", tools=[READ_TOOL])


@settings(max_examples=150, deadline=None)
@given(st.lists(outcome, max_size=25), policy, st.integers(0, 2**64 - 1))
def test_a_failed_attempt_appends_no_message(script, retry, seed):
    _, run, _ = run_with(script, retry, seed)
    for (_, event, cmds), (before, after) in zip(run.steps, run.lengths):
        if isinstance(event, e.ProviderFailed):
            assert not any(isinstance(x, c.AppendMessage) for x in cmds)
            assert after == before


@settings(max_examples=200, deadline=None)
@given(st.lists(outcome, max_size=25), policy, st.integers(0, 2**64 - 1))
def test_every_retry_delay_is_within_the_policys_bounds(script, retry, seed):
    m, run, failures = run_with(script, retry, seed)
    config = m.config()["retry"]
    for _, event, cmds in run.steps:
        if not isinstance(event, e.ProviderFailed):
            continue
        notices = [x for x in cmds if isinstance(x, c.NotifyRetry)]
        sleeps = [x for x in cmds if isinstance(x, c.Sleep)]
        if not sleeps:
            continue
        [notice], [sleep] = notices, sleeps
        assert notice.info["delay_ms"] == sleep.delay_ms
        assert notice.info["attempt"] <= max(1, retry["max_attempts"])
        hint = failures[event.request].get("retry_after_ms")
        if hint is not None:
            assert hint <= config["max_retry_after_ms"]
            assert sleep.delay_ms == hint
            continue
        n = notice.info["attempt"] - 1  # the first retry is retry 1
        base = int(min(float(retry["max_delay_ms"]), retry["initial_delay_ms"] * retry["multiplier"] ** (n - 1)))
        if retry["jitter"]:
            assert base - base // 2 <= sleep.delay_ms <= base
        else:
            assert sleep.delay_ms == base
