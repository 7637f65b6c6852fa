"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/StreamTests.cs``.

The event stream and its projections (MODEL §10, §10.1, §10.2), then the
retry arithmetic (§16). The .NET ``Streaming.Project``/``StreamModes`` are
Python's ``stream_modes(events, modes)``; ``StreamEvents`` is ``stream``.

A Python run commits its start before any node runs (README, "The input is
durable"), and tells it with a ``state`` and a ``checkpoint`` event right
after ``run_start``; the cases about event order and ``values`` parts count
those two. ``RetryPolicy.BackoffFor(n)`` is the wait before attempt ``n``;
Python's ``RetryPolicy.delay(n)`` is the wait after failed attempt ``n``, in
seconds, and Python's defaults differ on purpose (SPEC §5:
``max_attempts=3, backoff=0.2, factor=2.0``), so each case spells out the
fields the reference leaves at its defaults (one attempt, no backoff).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    RetryPolicy,
    channel,
    graph,
    resume_stream,
    run,
    stream,
    stream_modes,
)
from ilmek.events import (
    CheckpointEvent,
    CustomEvent,
    NodeEnd,
    NodeError,
    NodeStart,
    RunEnd,
    RunStart,
    StateEvent,
    StepStart,
)
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)


def _two_steps() -> CompiledGraph:
    """Graph "two": ``a`` emits ``hello`` and a token ``tok`` with ``{"i": 1}``, then ``b``; both log."""

    def a(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit("hello")
        ctx.emit_token("tok", {"i": 1})
        return {"log": ["a"]}

    return (
        graph("two", {"log": channel.append()})
        .node("a", a)
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )


def _after_first_node(events: tuple[Any, ...]) -> tuple[Any, ...]:
    """The events from the first ``node_start`` on: what follows the run's committed start."""
    first = next(i for i, e in enumerate(events) if isinstance(e, NodeStart))
    return events[first:]


def test_every_event_carries_a_gap_free_seq_a_root_ns_and_the_runs_ids(
    ref_checkpointer: Checkpointer,
) -> None:
    """StreamTests.Envelope: "every event carries a 1-based, gap-free seq, a root ns, and the run's ids"."""
    result = run(_two_steps(), None, thread_id="t-env", checkpointer=ref_checkpointer)

    assert list(range(1, len(result.events) + 1)) == [e.seq for e in result.events]
    assert {((), "t-env", result.run_id)} == {(e.ns, e.thread_id, e.run_id) for e in result.events}


def test_events_arrive_in_the_catalog_order() -> None:
    """StreamTests.CatalogOrder: "events arrive in the catalog order: run_start, step_start, node_start,
    custom, node_end, state, checkpoint, run_end"."""
    types = [type(e) for e in run(_two_steps()).events]

    assert [
        RunStart,
        StateEvent,
        CheckpointEvent,
        *(StepStart, NodeStart, CustomEvent, CustomEvent, NodeEnd, StateEvent, CheckpointEvent),
        *(StepStart, NodeStart, NodeEnd, StateEvent, CheckpointEvent),
        RunEnd,
    ] == types


def test_a_failed_run_ends_with_node_error_then_run_end_and_no_state_after_the_node() -> None:
    """StreamTests.ErrorOrder: "an errored run ends node_error then run_end with the errors, and no state
    event"."""

    def x(state: Any) -> None:
        raise RuntimeError("bad")

    events = run(graph("g").node("x", x).edge(START, "x").compile()).events

    *_, error, end = events
    assert isinstance(error, NodeError)
    assert "x" == error.node
    assert isinstance(end, RunEnd)
    assert "error" == end.status
    assert ["bad"] == [str(e) for _, e in end.errors]
    assert [] == [e for e in _after_first_node(events) if isinstance(e, StateEvent)]


def test_a_custom_event_reaches_the_reader_while_its_sibling_still_runs() -> None:
    """StreamTests.EmitIsLive: "a custom event reaches the consumer while its sibling is still running"."""
    release = threading.Event()

    def talker(state: Any, ctx: Any) -> None:
        ctx.emit("early")

    def slow(state: Any) -> None:
        if not release.wait(10):
            raise RuntimeError("never released: the custom event did not arrive while this node ran")

    g = (
        graph("g")
        .node("talker", talker)
        .node("slow", slow)
        .edge(START, "talker")
        .edge(START, "slow")
        .compile()
    )
    saw_early_before_slow_ended = False

    for event in stream(g):
        if isinstance(event, CustomEvent) and event.payload == "early":
            saw_early_before_slow_ended = True
            release.set()  # only now may the slow sibling finish
        if isinstance(event, RunEnd):
            assert "done" == event.status

    assert saw_early_before_slow_ended


# --- projection ---------------------------------------------------------------------------------


def test_each_mode_projects_its_events_keeping_their_seq() -> None:
    """StreamTests.ProjectionModes: "updates, values, custom and messages modes project the right events,
    carrying seq".

    ``values`` has one part more than the reference's two: the committed
    start's.
    """
    events = run(_two_steps()).events

    def parts(mode: str) -> list[Any]:
        return list(stream_modes(events, [mode]))

    updates, values, custom = parts("updates"), parts("values"), parts("custom")
    assert [["a"], ["b"]] == [list(p.data) for p in updates]
    assert 3 == len(values)
    assert ["a", "b"] == values[-1].data["log"]
    assert "hello" == custom[0].data
    assert "token" == custom[1].data["type"]
    (message,) = parts("messages")
    assert ("tok", {"i": 1}) == (message.data["text"], message.data["meta"])
    assert len(events) == len(parts("debug"))
    seqs = {e.seq for e in events}
    assert all(p.seq in seqs for p in updates + values + custom)


def test_several_modes_share_one_pass_in_seq_order_and_no_mode_yields_nothing() -> None:
    """StreamTests.Multiplex: "several modes multiplex through one pass in seq order; no modes yields
    nothing"."""
    multiplexed = list(stream_modes(stream(_two_steps()), ["updates", "messages"]))

    assert ["messages", "updates", "updates"] == [p.mode for p in multiplexed]
    assert sorted(p.seq for p in multiplexed) == [p.seq for p in multiplexed]
    assert [] == list(stream_modes(run(_two_steps()).events, []))


def test_tokens_are_not_journaled_so_a_resumed_node_streams_them_again(
    ref_checkpointer: Checkpointer,
) -> None:
    """StreamTests.TokensReStreamOnResume: "tokens are not journaled: a resumed node re-streams them while its
    steps do not re-run"."""
    calls = Calls()

    def n(state: Any, ctx: Any) -> None:
        ctx.emit_token("thinking")
        ctx.step("llm", calls.hit, "llm")
        ctx.interrupt()

    g = graph("g").node("n", n).edge(START, "n").compile()
    opts: dict[str, Any] = {"thread_id": "t-tok", "checkpointer": ref_checkpointer}

    first = list(stream_modes(stream(g, None, **opts), ["messages"]))
    second = list(stream_modes(resume_stream(g, "go", **opts), ["messages"]))

    assert (1, 1) == (len(first), len(second))
    assert 1 == calls["llm"]


# --- the retry policy ---------------------------------------------------------------------------


def _wait_before(policy: RetryPolicy, attempt: int) -> float:
    """Seconds slept before ``attempt`` (2 is the first retry): the reference's ``BackoffFor``."""
    return policy.delay(attempt - 1)


def test_the_wait_before_an_attempt() -> None:
    """StreamTests.BackoffArithmetic: "BackoffFor: zero without backoff; exact on the first retry; geometric
    after; capped by MaxBackoff"."""
    assert 0 == _wait_before(RetryPolicy(backoff=0), 2)
    assert 0 == _wait_before(RetryPolicy(backoff=-0.005), 2)

    policy = RetryPolicy(backoff=0.1, factor=2)
    assert [0.1, 0.2, 0.4] == pytest.approx([_wait_before(policy, n) for n in (2, 3, 4)])

    capped = RetryPolicy(backoff=0.1, factor=2, max_backoff=0.25)
    assert 0.25 == pytest.approx(_wait_before(capped, 4))
    assert 0.05 == pytest.approx(_wait_before(RetryPolicy(backoff=0.1, factor=2, max_backoff=0.05), 2))

    assert 0.1 == pytest.approx(_wait_before(RetryPolicy(backoff=0.1, factor=1), 5))
    assert 0.05 == pytest.approx(_wait_before(RetryPolicy(backoff=0.1, factor=0.5), 3))


def test_n_attempts_are_n_minus_one_retries_and_retry_on_filters_within_them() -> None:
    """StreamTests.ShouldRetryRules: "ShouldRetry: N attempts means N-1 retries, and RetryOn filters without
    extending the budget"."""
    boom = RuntimeError("transient")
    assert not RetryPolicy(max_attempts=1).should_retry(1, boom)

    three = RetryPolicy(max_attempts=3)
    assert [True, True, False, False] == [three.should_retry(n, boom) for n in (1, 2, 3, 9)]

    picky = RetryPolicy(max_attempts=3, retry_on=lambda error: "transient" in str(error))
    assert picky.should_retry(1, boom)
    assert not picky.should_retry(1, RuntimeError("fatal"))
    assert not picky.should_retry(3, boom)


def test_exhausted_attempts_end_the_run_with_the_last_error_and_retry_on_may_decline() -> None:
    """StreamTests.RetryExhaustion: "exhausting attempts ends the run in error with the last error; RetryOn
    can decline"."""
    calls = Calls()

    def failing(state: Any) -> None:
        calls.hit("x")
        raise RuntimeError(f"fail {calls['x']}")

    g = graph("g").node("x", failing, retry=RetryPolicy(max_attempts=3, backoff=0)).edge(START, "x").compile()

    result = run(g)

    assert "error" == result.status
    assert ["fail 3"] == [str(e) for _, e in result.errors]

    declined = Calls()

    def fatal(state: Any) -> None:
        declined.hit("x")
        raise RuntimeError(f"fatal {declined['x']}")

    never = RetryPolicy(max_attempts=5, backoff=0, retry_on=lambda error: not str(error).startswith("fatal"))
    g = graph("g").node("x", fatal, retry=never).edge(START, "x").compile()

    assert "error" == run(g).status
    assert 1 == declined["x"]
