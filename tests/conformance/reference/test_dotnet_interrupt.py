"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/InterruptTests.cs``: the resume surface.

Every wrong way to resume is refused without harming the thread, answers of
every shape are answers, time travel forks, and cancelling leaves the last
commit standing (MODEL §6, §6.1, §10.3). The .NET ``CancellationToken`` is a
``threading.Event`` passed as ``cancel=``; an event set without a ``reason``
attribute reports ``"aborted"``, as the TypeScript reference reports an
abort without a reason (the .NET token's fixed text is ``"cancelled"``).
Python's run and thread ids are opaque hex, without the reference's
``run-`` and ``thread-`` prefixes (SPEC fixes none).

Where a case depends on a documented difference it follows the README and
says so: a run commits its start before any node runs ("The input is
durable"), a thread is held by one run at a time ("One run per thread at a
time"), and the in-memory store keeps encoded JSON, as the databases do.

Not ported: "the CancellationToken argument and RunOptions.CancellationToken
are linked" — Python has one ``cancel=`` argument, nothing to link.

Every case runs on memory, SQLite and Postgres.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    InvalidArgumentError,
    ResumeError,
    RetryPolicy,
    ThreadBusyError,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
    thread_state,
)
from ilmek.events import CheckpointEvent, InterruptEvent, NodeEnd, NodeStart, RunEnd, RunStart, StateEvent
from tests.support.helpers import Calls
from tests.support.reference import dotnet_opts

pytestmark = pytest.mark.timeout(120)


def _ask(before_pause: Callable[[], None] | None = None) -> CompiledGraph:
    """Graph "ask": ``work`` runs a ``before`` step, asks ``{"q": "ok?"}``, and logs the answer."""

    def before() -> int:
        if before_pause is not None:
            before_pause()
        return 0

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("before", before)
        answer = ctx.interrupt({"q": "ok?"})
        return {"log": [answer]}

    return (
        graph("ask", {"log": channel.append()})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


# --- refusals -----------------------------------------------------------------------------------


def test_resuming_a_finished_thread_is_refused(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.DoubleResumeRefused: "resuming a thread that already completed is refused: it is not
    interrupted"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-double")
    run(g, None, **opts)
    assert "done" == resume(g, "yes", **opts).status

    with pytest.raises(ResumeError, match="not interrupted"):
        resume(g, "again", **opts)
    with pytest.raises(ResumeError, match="not interrupted"):
        resume_keyed(g, {"work:interrupt#0": "again"}, **opts)


@pytest.mark.parametrize("wrong", ["interrupt#0", "work", "other:interrupt#0", ""])
def test_a_keyed_resume_with_an_unknown_id_is_refused_and_the_right_id_still_works(
    ref_checkpointer: Checkpointer, wrong: str
) -> None:
    """InterruptTests.WrongIdRefusedThreadSurvives: "a keyed resume with an unknown id is refused, and the
    thread stays resumable by the right id"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-wrong-id")
    run(g, None, **opts)

    with pytest.raises(ResumeError, match="work:interrupt#0"):
        resume_keyed(g, {wrong: "x"}, **opts)

    assert ["right"] == resume_keyed(g, {"work:interrupt#0": "right"}, **opts).state["log"]


def test_an_empty_set_of_keyed_answers_is_refused(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.EmptyKeyedRefused: "an empty keyed answer set is refused without touching the
    journal"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-empty")
    run(g, None, **opts)

    with pytest.raises(ResumeError):
        resume_keyed(g, {}, **opts)

    assert "done" == resume(g, "fine", **opts).status


def test_resuming_a_thread_without_a_checkpoint_is_refused(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.ResumeWithoutCheckpoint: "resuming a thread with no checkpoint is refused — with or
    without a checkpointer".

    Without a checkpointer Python refuses a ``thread_id`` outright (SPEC §4:
    a thread id with no checkpointer to keep it is a bad argument), so the
    second refusal is a resume with neither.
    """
    g = _ask()

    with pytest.raises(ResumeError, match="has no checkpoint"):
        resume(g, "x", **dotnet_opts(ref_checkpointer, "never-ran"))
    with pytest.raises(ResumeError, match="has no checkpoint"):
        resume(g, "x")
    with pytest.raises(InvalidArgumentError, match="without a checkpointer"):
        resume(g, "x", thread_id="t")


def test_new_input_on_a_paused_thread_is_refused_and_the_pause_survives(
    ref_checkpointer: Checkpointer,
) -> None:
    """InterruptTests.NewInputOnParkedThread: "new input on a parked thread is refused, the input is not
    folded, and the pause survives"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-parked")
    run(g, None, **opts)

    with pytest.raises(ResumeError, match="waiting for") as refused:
        run(g, {"log": "sneaky"}, **opts)

    assert "resume()" in str(refused.value)
    assert [] == thread_state(g, ref_checkpointer, "t-parked")["log"]
    assert ["yes"] == resume(g, "yes", **opts).state["log"]


# --- what an answer may be ----------------------------------------------------------------------


def test_a_dict_answer_to_a_single_pause_is_the_answer(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.ObjectAnswerIsTheAnswer: "an object answer to a single pause is the answer — even one
    keyed exactly like the pending id".

    The number of open pauses decides, not the answer's type. The reference
    gets the very instance back; Python's stores (memory included) keep
    encoded JSON, so the answer comes back equal.
    """
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-object")
    run(g, None, **opts)
    answer = {"work:interrupt#0": "decoy"}

    done = resume(g, answer, **opts)

    assert [answer] == done.state["log"]


def test_none_is_an_answer(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.NullAnswer: "null is a legal answer"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-null")
    run(g, None, **opts)

    done = resume(g, None, **opts)

    assert ("done", [None]) == (done.status, done.state["log"])


def test_resume_keyed_answers_a_single_pause_too(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.KeyedSinglePause: "ResumeKeyed works for a single pause, so a generic UI needs no
    special case"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-keyed-single")
    paused = run(g, None, **opts)

    done = resume_keyed(g, {pause.id: "k" for pause in paused.pending}, **opts)

    assert ["k"] == done.state["log"]


def test_introspection_of_an_unknown_thread_reports_nothing(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.IntrospectionUnknownThread: "PendingInterruptsAsync and ThreadStateAsync report nothing
    for an unknown thread"."""
    assert () == pending_interrupts(ref_checkpointer, "nobody")
    assert None is thread_state(_ask(), ref_checkpointer, "nobody")


def test_a_paused_run_ends_with_checkpoint_interrupt_and_run_end(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.InterruptEventShape: "an interrupted run emits checkpoint, interrupt, run_end — and no
    node_end for the paused task".

    The reference sees no ``state`` event at all. Python commits the run's
    start before any node runs (README, "The input is durable"), and tells
    it with one ``state`` event before the first ``node_start``; none
    follows the paused task.
    """
    result = run(_ask(), None, **dotnet_opts(ref_checkpointer, "t-events"))

    checkpoint, interrupt, end = result.events[-3:]
    assert isinstance(checkpoint, CheckpointEvent)
    assert isinstance(interrupt, InterruptEvent)
    assert isinstance(end, RunEnd)
    assert "interrupted" == end.status
    assert interrupt.pending == end.pending
    assert [] == [e for e in result.events if isinstance(e, NodeEnd)]
    first_node = next(i for i, e in enumerate(result.events) if isinstance(e, NodeStart))
    assert [] == [e for e in result.events[first_node:] if isinstance(e, StateEvent)]
    assert "ok?" == interrupt.pending[0].payload["q"]


def test_the_run_id_changes_across_a_resume_and_the_thread_id_does_not(
    ref_checkpointer: Checkpointer,
) -> None:
    """InterruptTests.RunIdChangesAcrossResume: "the run id changes across an interrupt/resume boundary; the
    thread id does not"."""
    g = _ask()
    opts = dotnet_opts(ref_checkpointer, "t-ids")

    first = run(g, None, **opts)
    second = resume(g, "x", **opts)

    assert ("t-ids", "t-ids") == (first.thread_id, second.thread_id)
    assert first.run_id != second.run_id


def test_a_run_without_a_thread_id_gets_a_generated_one() -> None:
    """InterruptTests.GeneratedThreadId: "a run without a ThreadId gets a generated one"."""
    g = graph("g").node("a", lambda state: None).edge(START, "a").compile()

    a, b = run(g), run(g)

    assert a.thread_id
    assert a.thread_id != b.thread_id


# --- time travel --------------------------------------------------------------------------------


def test_running_from_an_older_checkpoint_forks_and_keeps_the_history(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.ForkFromOlderCheckpoint: "running from an older CheckpointId forks a branch; the
    original history stays intact"."""
    g = (
        graph("fork", {"log": channel.append()})
        .node("a", lambda state: {"log": "a"})
        .node("b", lambda state: {"log": "b"})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )
    run(g, None, **dotnet_opts(ref_checkpointer, "t-fork"))
    (after_a,) = [c for c in ref_checkpointer.list("t-fork") if c.step == 1]

    forked = run(g, {"log": "edited"}, **dotnet_opts(ref_checkpointer, "t-fork", checkpoint_id=after_a.id))

    assert ["a", "edited", "b"] == forked.state["log"]
    assert 2 == len([c for c in ref_checkpointer.list("t-fork") if c.parent_id == after_a.id])


def test_resuming_from_an_unknown_checkpoint_id_is_refused(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.ResumeUnknownCheckpointId: "resuming from an unknown CheckpointId is refused as having
    no checkpoint"."""
    g = _ask()
    run(g, None, **dotnet_opts(ref_checkpointer, "t-unknown-ckpt"))

    with pytest.raises(ResumeError):
        resume(g, "x", **dotnet_opts(ref_checkpointer, "t-unknown-ckpt", checkpoint_id="ckpt-nope"))


# --- cancelling (§10.3) -------------------------------------------------------------------------


def test_a_run_cancelled_before_it_starts_runs_no_node(ref_checkpointer: Checkpointer) -> None:
    """InterruptTests.PreCancelled: "an already-cancelled run stops before any node runs and writes nothing".

    No node runs and the run ends ``aborted``. The reference writes nothing
    at all; Python has committed the run's start by then (README, "The input
    is durable"), so the thread holds that one checkpoint, still planning
    ``a``, and the events are the start's ``state`` and ``checkpoint``
    between ``run_start`` and ``run_end``.
    """
    calls = Calls()
    g = graph("g").node("a", lambda state: calls.hit("a")).edge(START, "a").compile()
    cancel = threading.Event()
    cancel.set()

    result = run(g, None, **dotnet_opts(ref_checkpointer, "t-pre", cancel=cancel))

    assert ("aborted", "aborted") == (result.status, result.abort_reason)
    assert 0 == calls["a"]
    assert [RunStart, StateEvent, CheckpointEvent, RunEnd] == [type(e) for e in result.events]
    (start,) = ref_checkpointer.list("t-pre")
    assert ["a"] == [t.node for t in start.next]


def _pipeline(
    cancel: threading.Event, calls: Calls, cancel_in_first: bool, seen: list[bool]
) -> CompiledGraph:
    """Graph "pipeline": ``first`` (which may set ``cancel``) then ``second``, both logging their names.

    ``first`` records in ``seen`` whether its ``ctx.cancel`` was set.
    """

    def first(state: Any, ctx: Any) -> dict[str, Any]:
        calls.hit("first")
        if cancel_in_first:
            cancel.set()
        seen.append(ctx.cancel.is_set())
        return {"log": ["first"]}

    def second(state: Any) -> dict[str, Any]:
        calls.hit("second")
        return {"log": ["second"]}

    return (
        graph("pipeline", {"log": channel.append()})
        .node("first", first)
        .node("second", second)
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
    )


def test_cancelling_mid_run_stops_at_the_superstep_boundary_and_the_thread_continues(
    ref_checkpointer: Checkpointer,
) -> None:
    """InterruptTests.CancelMidRunThenContinue: "cancelling mid-run stops at the superstep boundary; the
    committed superstep stands and the thread continues"."""
    calls = Calls()
    cancel = threading.Event()
    seen: list[bool] = []

    aborted = run(
        _pipeline(cancel, calls, True, seen), None, **dotnet_opts(ref_checkpointer, "t-mid", cancel=cancel)
    )

    assert "aborted" == aborted.status
    assert 0 == calls["second"]
    latest = ref_checkpointer.get("t-mid")
    assert latest is not None
    assert ["second"] == [t.node for t in latest.next]

    resumed = run(_pipeline(cancel, calls, False, seen), None, **dotnet_opts(ref_checkpointer, "t-mid"))

    assert "done" == resumed.status
    assert [True] == seen  # the cancelled run's node saw it; the continuation did not re-run it
    assert {"first": 1, "second": 1} == dict(calls)
    assert ["first", "second"] == resumed.state["log"]


def test_cancelling_during_a_retry_backoff_ends_the_retries_promptly_in_error() -> None:
    """InterruptTests.CancelDuringBackoff: "cancelling during a retry backoff ends the retry loop promptly, in
    error, without another attempt"."""
    calls = Calls()
    cancel = threading.Event()

    def flaky(state: Any) -> None:
        calls.hit("flaky")
        threading.Timer(0.05, cancel.set).start()
        raise RuntimeError("transient")

    g = (
        graph("g")
        .node("flaky", flaky, retry=RetryPolicy(max_attempts=5, backoff=30.0))
        .edge(START, "flaky")
        .compile()
    )
    started = time.monotonic()

    result = run(g, cancel=cancel)

    assert "error" == result.status
    assert "transient" == str(result.errors[0][1])
    assert 1 == calls["flaky"]
    assert time.monotonic() - started < 10, "sat out the 30 s backoff"


def test_a_resume_aborted_before_its_superstep_resumes_cleanly_afterwards(
    ref_checkpointer: Checkpointer,
) -> None:
    """InterruptTests.AbortThenResume: "a run aborted while parked work is pending resumes cleanly
    afterwards"."""
    calls = Calls()
    g = _ask(lambda: calls.hit("before"))
    run(g, None, **dotnet_opts(ref_checkpointer, "t-abort-resume"))
    cancel = threading.Event()
    cancel.set()

    assert (
        "aborted" == resume(g, "yes", **dotnet_opts(ref_checkpointer, "t-abort-resume", cancel=cancel)).status
    )
    done = resume(g, "yes", **dotnet_opts(ref_checkpointer, "t-abort-resume"))

    assert "done" == done.status
    assert 1 == calls["before"]


# --- concurrency --------------------------------------------------------------------------------


def test_concurrent_runs_on_distinct_threads_sharing_one_checkpointer_are_isolated(
    ref_checkpointer: Checkpointer,
) -> None:
    """InterruptTests.ConcurrentThreadsIsolated: "concurrent runs on distinct threads sharing one checkpointer
    are isolated".

    32 threads, at most 8 runs at a time (the Postgres pool has 12
    connections, and a run holds one for its whole length).
    """

    def w(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        who = state["who"]
        greeting = ctx.step("greet", lambda: f"hi {who}")
        ok = ctx.interrupt(who)
        return {"log": [f"{greeting}:{ok}"]}

    g = (
        graph("per-thread", {"who": channel.last_write(""), "log": channel.append()})
        .node("w", w)
        .edge(START, "w")
        .edge("w", END)
        .compile()
    )
    names = [f"u{i}" for i in range(32)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        paused = list(pool.map(lambda n: run(g, {"who": n}, **dotnet_opts(ref_checkpointer, n)), names))
        finished = list(pool.map(lambda n: resume(g, f"ok-{n}", **dotnet_opts(ref_checkpointer, n)), names))

    assert [[n] for n in names] == [[p.payload for p in r.pending] for r in paused]
    assert [[f"hi {n}:ok-{n}"] for n in names] == [r.state["log"] for r in finished]


def test_concurrent_resumes_of_one_pause_never_re_run_the_step_before_it(
    ref_checkpointer: Checkpointer,
) -> None:
    """InterruptTests.ConcurrentResumesOfOnePause: "concurrent resumes of one pause never re-run the pre-pause
    step".

    A resume that loses the race is refused: with ``ThreadBusyError`` while
    the winner holds the thread (README, "One run per thread at a time"),
    with ``ResumeError`` once the winner has finished it.
    """
    calls = Calls()
    g = _ask(lambda: calls.hit("before"))
    opts = dotnet_opts(ref_checkpointer, "t-race")
    run(g, None, **opts)
    barrier = threading.Barrier(8)

    def attempt(_: int) -> str:
        barrier.wait()
        try:
            return resume(g, "same", **opts).status
        except (ThreadBusyError, ResumeError) as lost:
            return type(lost).__name__

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(attempt, range(8)))

    assert 1 == calls["before"]
    assert "done" in outcomes
    assert set(outcomes) <= {"done", "ThreadBusyError", "ResumeError"}
    assert () == pending_interrupts(ref_checkpointer, "t-race")
