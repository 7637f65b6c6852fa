"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/ReplayTests.cs``: replay determinism.

However a node body runs again — a resume, a crash replay, a retry — each
completed step ran exactly once (MODEL §5, §6, §16). Every case that stores
anything runs on memory, SQLite and Postgres.

The reference seeds a journal before the thread's first run, under the task
id its engine will use (``<thread>:root:work``). A Python task's journal is
scoped by the checkpoint it runs from, and a run commits its start before
any node runs, so the seeded cases first let the node fail once before it
touches its journal (leaving the plan in place), then seed the journal of
that planned task (``task_id_for(thread, checkpoint, "work")``) and continue
with ``run(g, None)``.

Where a case depends on a documented difference it follows the README and
says so: a run's start is committed before any node runs ("The input is
durable"), and a superstep that commits drops its tasks' journals "except
under a pause, whose answers stay readable" ("Journals are rows"). The
reference's pause is an exception a blanket ``catch`` swallows; Python's
``InterruptSignal`` is a ``BaseException`` that ``except Exception:`` lets
through (SPEC §4), so that case pins Python's behaviour instead.

Not ported: "an answer of the wrong type for InterruptAsync<T> fails the node
with InvalidCastException" — Python's ``ctx.interrupt`` is untyped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    InterruptSignal,
    JournalEntry,
    NondeterminismError,
    ResumeError,
    RetryPolicy,
    channel,
    graph,
    resume,
    run,
)
from ilmek.events import NodeEnd, NodeRetry
from ilmek.types import task_id_for
from tests.support.helpers import Calls
from tests.support.reference_edge import keys_of, pending

pytestmark = pytest.mark.timeout(120)


def _opts(checkpointer: Checkpointer, thread_id: str, *, strict: bool = True) -> dict[str, Any]:
    """The .NET suite's ``Opts(cp, thread, strict)``."""
    return {"thread_id": thread_id, "checkpointer": checkpointer, "strict": strict}


def _one_node(fn: Callable[..., Any], retry: RetryPolicy | None = None) -> CompiledGraph:
    """The .NET suite's ``OneNode``: START -> work -> END with an append channel ``log``."""
    return (
        graph("one", {"log": channel.append()})
        .node("work", fn, retry=retry)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def test_every_step_between_three_pauses_runs_once_over_four_runs(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.SequentialPausesStepsOnce: "three sequential pauses in one node: every step between them
    runs exactly once over four runs"."""
    calls = Calls()

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("s1", calls.hit, "s1")
        a = ctx.interrupt("q1")
        ctx.step("s2", calls.hit, "s2")
        b = ctx.interrupt("q2")
        ctx.step("s3", calls.hit, "s3")
        c = ctx.interrupt("q3")
        ctx.step("s4", calls.hit, "s4")
        return {"log": [f"{a}{b}{c}"]}

    g = _one_node(work)
    opts = _opts(ref_checkpointer, "t-seq")

    result = run(g, None, **opts)
    payloads = [p.payload for p in result.pending]
    for answer in ("A", "B"):
        result = resume(g, answer, **opts)
        assert "interrupted" == result.status
        payloads += [p.payload for p in result.pending]
    finished = resume(g, "C", **opts)

    assert ["q1", "q2", "q3"] == payloads
    assert ["ABC"] == finished.state["log"]
    assert {"s1": 1, "s2": 1, "s3": 1, "s4": 1} == dict(calls)


def test_a_repeated_key_is_counted_and_each_occurrence_replays_its_own_value(
    ref_checkpointer: Checkpointer,
) -> None:
    """ReplayTests.AutoSuffixedKeysReplayInOrder: "a repeated base key auto-suffixes charge#0, charge#1,
    charge#2 and each replays its own value"."""
    calls = Calls()
    journals: list[list[str]] = []

    def charge() -> int:
        calls.hit("charge")
        return calls["charge"] * 100

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        got = [ctx.step("charge", charge) for _ in range(3)]
        ok = ctx.interrupt()
        journals.append(list(ctx.journal))
        return {"log": [f"{','.join(map(str, got))}:{ok}"]}

    g = _one_node(work)
    opts = _opts(ref_checkpointer, "t-suffix")

    paused = run(g, None, **opts)
    assert 3 == calls["charge"]
    assert ["charge#0", "charge#1", "charge#2", "interrupt#0"] == keys_of(
        ref_checkpointer.get_journal(paused.pending[0].task_id)
    )
    finished = resume(g, "ok", **opts)

    assert 3 == calls["charge"]
    assert ["100,200,300:ok"] == finished.state["log"]
    assert [["charge#0", "charge#1", "charge#2", "interrupt#0"]] == journals


def test_a_committed_supersteps_journals_are_spent(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.JournalsDroppedAfterCommit: "the committed superstep's journals are spent: dropped once its
    update is reduced".

    A superstep without a pause drops its tasks' journals when it commits.
    Under a pause Python keeps them, answer included, once the resumed
    superstep commits (README, "Journals are rows": "except under a pause,
    whose answers stay readable").
    """

    def plain(state: Any, ctx: Any) -> None:
        ctx.step("s", lambda: 1)

    g = _one_node(plain)
    opts = _opts(ref_checkpointer, "t-plain")
    run(g, None, **opts)
    ran_from = ref_checkpointer.list("t-plain")[-1]

    assert () == ref_checkpointer.get_journal(task_id_for("t-plain", ran_from.id, "work"))

    def pausing(state: Any, ctx: Any) -> None:
        ctx.step("s", lambda: 1)
        ctx.interrupt()

    g = _one_node(pausing)
    opts = _opts(ref_checkpointer, "t-drop")
    paused = run(g, None, **opts)
    task_id = paused.pending[0].task_id
    assert ["s#0", "interrupt#0"] == keys_of(ref_checkpointer.get_journal(task_id))

    resume(g, "x", **opts)

    kept = ref_checkpointer.get_journal(task_id)
    assert ["s#0", "interrupt#0"] == keys_of(kept)
    assert (True, "x") == (kept[1].answered, kept[1].value)


def _seeded(
    checkpointer: Checkpointer, thread_id: str, entries: list[JournalEntry], body: Callable[[Any], Any]
) -> CompiledGraph:
    """A one-node graph whose planned task's journal holds ``entries`` before ``body(ctx)`` first runs.

    The node fails once without touching its journal, so the thread keeps
    ``work`` planned; its journal is then seeded, and the caller continues.
    """
    failed: list[bool] = []

    def work(state: Any, ctx: Any) -> Any:
        if not failed:
            failed.append(True)
            raise RuntimeError("the crash that left the journal behind")
        return body(ctx)

    g = _one_node(work)
    assert "error" == run(g, None, **_opts(checkpointer, thread_id)).status
    planned = checkpointer.get(thread_id)
    assert planned is not None
    checkpointer.put_journal(task_id_for(thread_id, planned.id, "work"), entries)
    return g


def test_a_step_whose_key_holds_an_open_pause_is_nondeterminism(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.StepCollidesWithPendingInterrupt: "a step colliding with a pending interrupt's key raises
    NondeterminismException".

    The journal an earlier pass left holds ``x#0`` as a pause never
    answered; a body that now asks for a step ``x`` took another path and
    must fail without running the effect.
    """
    calls = Calls()
    g = _seeded(
        ref_checkpointer, "t-collide", [pending("x#0", "who?")], lambda ctx: ctx.step("x", calls.hit, "x")
    )

    result = run(g, None, **_opts(ref_checkpointer, "t-collide"))

    assert "error" == result.status
    ((_, error),) = result.errors
    assert isinstance(error, NondeterminismError)
    assert "x#0" == error.key
    assert "'x#0'" in str(error)
    assert "holds an interrupt" in str(error)
    assert 0 == calls["x"]


def test_an_interrupt_that_finds_its_pause_still_open_halts_again(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.PendingInterruptReHalts: "an interrupt that finds its own entry still pending re-halts
    instead of re-asking".

    As in the .NET port, the journaled payload is the one reported (the
    TypeScript reference reports the current pass's; for a deterministic
    node they are equal).
    """
    g = _seeded(
        ref_checkpointer,
        "t-rehalt",
        [pending("interrupt#0", "original question")],
        lambda ctx: {"log": [ctx.interrupt("new question")]},
    )

    result = run(g, None, **_opts(ref_checkpointer, "t-rehalt"))

    assert "interrupted" == result.status
    (pause,) = result.pending
    assert ("interrupt#0", "original question") == (pause.key, pause.payload)
    assert ["interrupt#0"] == keys_of(ref_checkpointer.get_journal(pause.task_id))


def test_a_crash_in_one_task_replays_the_superstep_without_re_running_its_siblings_steps(
    ref_checkpointer: Checkpointer,
) -> None:
    """ReplayTests.CrashReplaysWholeSuperstep: "a crash in one task replays the whole superstep: siblings'
    steps do not re-run, nothing reduces twice".

    The reference finds no checkpoint after the crash. Python committed the
    run's start first (README, "The input is durable"): that checkpoint, with
    nothing of ``a`` reduced, is all there is.
    """
    calls = Calls()
    b_fails = [True]

    def a(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("effect", calls.hit, "a")
        return {"log": ["a"]}

    def b(state: Any) -> dict[str, Any]:
        if b_fails[0]:
            b_fails[0] = False
            raise RuntimeError("crash")
        return {"log": ["b"]}

    g = (
        graph("crash", {"log": channel.append()})
        .node("a", a)
        .node("b", b)
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )
    opts = _opts(ref_checkpointer, "t-crash")

    crashed = run(g, None, **opts)

    assert "error" == crashed.status
    assert ["a"] == [e.node for e in crashed.events if isinstance(e, NodeEnd)]
    (start,) = ref_checkpointer.list("t-crash")
    assert "log" not in start.channels

    again = run(g, None, **opts)

    assert "done" == again.status
    assert 1 == calls["a"]
    assert ["a", "b"] == again.state["log"]


def test_a_crash_in_a_later_superstep_resumes_from_the_last_commit(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.CrashInLaterSuperstep: "a crash in a later superstep resumes from the last commit; earlier
    nodes do not run again"."""
    calls = Calls()
    fail = [True]

    def first(state: Any) -> dict[str, Any]:
        calls.hit("first")
        return {"log": ["first"]}

    def second(state: Any) -> dict[str, Any]:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("boom")
        return {"log": ["second"]}

    g = (
        graph("later", {"log": channel.append()})
        .node("first", first)
        .node("second", second)
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
    )
    opts = _opts(ref_checkpointer, "t-later")

    assert "error" == run(g, None, **opts).status
    finished = run(g, None, **opts)

    assert "done" == finished.status
    assert 1 == calls["first"]
    assert ["first", "second"] == finished.state["log"]


def test_new_input_on_a_crashed_thread_is_folded_in_before_the_replay(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.CrashReplayWithNewInput: "new input on a crashed thread folds in before the replay"."""
    fail = [True]

    def b(state: Any) -> dict[str, Any]:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("boom")
        return {"log": [f"n={state['n']}"]}

    g = (
        graph("input-after-crash", {"n": channel.last_write(0), "log": channel.append()})
        .node("a", lambda state: {"n": 1})
        .node("b", b)
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )
    opts = _opts(ref_checkpointer, "t-input")

    run(g, None, **opts)
    finished = run(g, {"n": 41}, **opts)

    assert ["n=41"] == finished.state["log"]


def _divergent_retry(passes: list[int]) -> CompiledGraph:
    """``work`` steps ``only-first-time`` and fails on its first attempt, then returns without the step."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        passes.append(len(passes) + 1)
        if len(passes) == 1:
            ctx.step("only-first-time", lambda: "x")
            raise RuntimeError("flaky")
        return {"log": ["done"]}

    return _one_node(work, RetryPolicy(max_attempts=3, backoff=0))


def test_strict_mode_refuses_a_retry_that_skips_a_recorded_step(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.StrictCatchesDivergentRetry: "strict mode: a step skipped on a retry attempt is a
    NondeterminismException"."""
    result = run(_divergent_retry([]), None, **_opts(ref_checkpointer, "t-strict-retry"))

    assert "error" == result.status
    error = result.errors[0][1]
    assert isinstance(error, NondeterminismError)
    assert "only-first-time#0" in str(error)


def test_without_strict_mode_the_same_divergent_retry_completes(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.LaxAllowsDivergentRetry: "strict mode off: the same divergent retry completes"."""
    passes: list[int] = []

    result = run(_divergent_retry(passes), None, **_opts(ref_checkpointer, "t-lax-retry", strict=False))

    assert "done" == result.status
    assert [1, 2] == passes


def test_strict_mode_names_the_occurrence_a_replay_lost(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.StrictCatchesLostOccurrence: "strict mode: one fewer occurrence of an auto-suffixed key on
    replay names the lost ordinal"."""
    times = [2]

    def work(state: Any, ctx: Any) -> None:
        for i in range(times[0]):
            ctx.step("charge", lambda i=i: i)
        ctx.interrupt()

    g = _one_node(work)
    opts = _opts(ref_checkpointer, "t-ordinal")
    run(g, None, **opts)
    times[0] = 1

    result = resume(g, "go", **opts)

    ((_, error),) = result.errors
    assert isinstance(error, NondeterminismError)
    assert "charge#1" in str(error)


def test_a_retried_step_then_a_pause_then_the_answer_runs_the_step_once(
    ref_checkpointer: Checkpointer,
) -> None:
    """ReplayTests.RetryThenPauseThenResume: "a retry after a pre-pause step, then a pause, then resume: the
    step ran once in total"."""
    calls = Calls()

    def flaky() -> str:
        calls.hit("flaky")
        if calls["flaky"] < 2:
            raise RuntimeError("t")
        return "ok"

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("charge", calls.hit, "charge")
        ctx.step("flaky", flaky)
        return {"log": [ctx.interrupt()]}

    g = _one_node(work, RetryPolicy(max_attempts=2, backoff=0))
    opts = _opts(ref_checkpointer, "t-retry-pause")

    paused = run(g, None, **opts)

    assert "interrupted" == paused.status
    assert 1 == len([e for e in paused.events if isinstance(e, NodeRetry)])
    assert "done" == resume(g, "yes", **opts).status
    assert {"charge": 1, "flaky": 2} == dict(calls)


def test_without_a_checkpointer_steps_still_count_within_a_pass() -> None:
    """ReplayTests.StepsWithoutCheckpointer: "without a checkpointer steps still memoize within a pass, and
    nothing is persisted"."""
    calls = Calls()

    def step() -> int:
        calls.hit("s")
        return calls["s"]

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        a = ctx.step("s", step)
        b = ctx.step("s", step)  # s#1: a step of its own
        return {"log": [f"{a},{b}"]}

    assert ["1,2"] == run(_one_node(work)).state["log"]


def test_an_interrupt_without_a_checkpointer_ends_the_run_in_error_saying_why() -> None:
    """ReplayTests.InterruptWithoutCheckpointer: "an interrupt without a checkpointer ends the run in error
    with an explanation"."""
    result = run(_one_node(lambda state, ctx: {"log": [ctx.interrupt()]}))

    assert "error" == result.status
    ((_, error),) = result.errors
    assert isinstance(error, ResumeError)
    assert "without a checkpointer" in str(error)


def test_a_blanket_except_exception_does_not_swallow_a_pause(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.BlanketCatchSwallowsPause: "a blanket catch(Exception) swallows a pause — the documented
    .NET caveat, pinned".

    Python has no such caveat (SPEC §4): ``except Exception:`` lets the
    pause through and the run pauses. A node that does swallow it (``except
    BaseException:``) and returns fails with a ``NondeterminismError`` rather
    than finishing as though it had been answered.
    """

    def catches_exception(state: Any, ctx: Any) -> dict[str, Any]:
        try:
            ctx.interrupt()
        except Exception:
            return {"log": ["swallowed"]}
        return {"log": ["unreachable"]}

    def catches_everything(state: Any, ctx: Any) -> dict[str, Any]:
        try:
            ctx.interrupt()
        except BaseException:
            return {"log": ["swallowed"]}
        return {"log": ["unreachable"]}

    paused = run(_one_node(catches_exception), None, **_opts(ref_checkpointer, "t-swallow"))
    swallowed = run(_one_node(catches_everything), None, **_opts(ref_checkpointer, "t-swallow-all"))

    assert "interrupted" == paused.status
    assert "error" == swallowed.status
    assert isinstance(swallowed.errors[0][1], NondeterminismError)


def test_re_raising_the_interrupt_signal_keeps_the_pause(ref_checkpointer: Checkpointer) -> None:
    """ReplayTests.RethrowKeepsPause: "rethrowing when IsInterrupt says so keeps the pause"."""

    def work(state: Any, ctx: Any) -> None:
        try:
            ctx.interrupt()
        except BaseException as error:
            if isinstance(error, InterruptSignal):
                raise
            return None
        return None

    assert "interrupted" == run(_one_node(work), None, **_opts(ref_checkpointer, "t-rethrow")).status
