"""Ported from the reference's ``ts/packages/core/test/replay.edge.test.ts``: replay and crashes.

Journal replay under the cycles that stress it: many pause/resume rounds,
crashes before and after steps, forks onto a paused superstep and strict
mode. The invariant is always the same: a completed step's function runs
exactly once. Tests that keep a thread run on memory, a SQLite file and
Postgres. The file's other cases are ``test_replay_edge_runs.py``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    NondeterminismError,
    ResumeError,
    RetryPolicy,
    channel,
    graph,
    pending_interrupts,
    resume,
    run,
    send,
)
from tests.support.helpers import Calls
from tests.support.reference_edge import ITEMS, done, linear, pending

pytestmark = pytest.mark.timeout(60)


def first_task_id(events: Any) -> str:
    """The task id of the first ``node_start`` event."""
    return next(e.task_id for e in events if e.type == "node_start")


# --- steps across many pause/resume rounds ----------------------------------------------------


def test_three_pauses_with_a_step_before_each_run_each_step_once(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "three pauses with a step before each: every step runs once in total"."""
    options: dict[str, Any] = {"thread_id": "t-three", "checkpointer": ref_checkpointer}
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answers = []
        for stage in ("one", "two", "three"):
            ctx.step(f"prep:{stage}", calls.hit, stage)
            answers.append(ctx.interrupt({"stage": stage}, key=f"ask:{stage}"))
        ctx.step("finish", calls.hit, "finish")
        return {"log": answers}

    g = linear(work, **ITEMS)
    result = run(g, {}, **options)
    for answer in ("A", "B", "C"):
        assert "interrupted" == result.status
        result = resume(g, answer, **options)

    assert "done" == result.status
    assert ["A", "B", "C"] == result.state["log"]
    assert {"one": 1, "two": 1, "three": 1, "finish": 1} == dict(calls)


def test_each_resume_is_a_new_run_id_and_the_thread_id_is_stable(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "each resume is a new run id, the thread id is stable"."""
    options: dict[str, Any] = {"thread_id": "t-ids", "checkpointer": ref_checkpointer}
    run_ids: list[str] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        run_ids.append(ctx.run_id)
        ctx.interrupt()
        ctx.interrupt()
        return {}

    g = linear(work, **ITEMS)
    results = [run(g, {}, **options), resume(g, 1, **options), resume(g, 2, **options)]

    assert 3 == len({r.run_id for r in results})
    assert ["t-ids"] * 3 == [r.thread_id for r in results]
    assert [r.run_id for r in results] == run_ids


def test_a_repeated_key_is_counted_and_each_use_replays_its_value(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a repeated base key auto-suffixes, and replay hands each occurrence its own value"."""
    options: dict[str, Any] = {"thread_id": "t-suffix", "checkpointer": ref_checkpointer}
    rolls = iter(range(1, 100))

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        values = [ctx.step("roll", next, rolls) for _ in range(3)]
        ctx.interrupt()
        return {"log": values}

    g = linear(work, **ITEMS)
    run(g, {}, **options)

    assert [1, 2, 3] == resume(g, "ok", **options).state["log"]
    assert 4 == next(rolls)


def test_journaled_falsy_values_replay_as_themselves(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "journaled falsy values replay as themselves and are not recomputed".

    JavaScript's ``null`` and ``undefined`` are both ``None``; NaN compares by ``math.isnan``.
    """
    options: dict[str, Any] = {"thread_id": "t-falsy-steps", "checkpointer": ref_checkpointer}
    values = [0, "", False, None, None, math.nan]
    calls = Calls()
    seen: list[list[Any]] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(
            [ctx.step(f"v{i}", lambda i=i, v=v: calls.hit(f"v{i}") or v) for i, v in enumerate(values)]
        )
        ctx.interrupt()
        return {}

    g = linear(work, **ITEMS)
    run(g, {}, **options)
    resume(g, "go", **options)

    replayed = seen[1]
    assert values[:5] == replayed[:5]
    assert [int, str, bool] == [type(v) for v in replayed[:3]]
    assert math.isnan(replayed[5])
    assert {f"v{i}": 1 for i in range(len(values))} == dict(calls)


def test_a_steps_returned_value_is_what_gets_journaled(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "an async step's resolved value is what gets journaled" (Python steps are sync).

    The paused task's journal is read through the port, under the pause's task id.
    """
    options: dict[str, Any] = {"thread_id": "t-async", "checkpointer": ref_checkpointer}

    def fetch() -> dict[str, int]:
        time.sleep(0.005)
        return {"id": 7}

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        value = ctx.step("fetch", fetch)
        ctx.interrupt()
        return {"log": [value]}

    g = linear(work, **ITEMS)
    paused = run(g, {}, **options)

    journal = ref_checkpointer.get_journal(paused.pending[0].task_id)
    assert (done("fetch#0", {"id": 7}), pending("interrupt#0")) == journal
    assert [{"id": 7}] == resume(g, "x", **options).state["log"]


# --- crash replay --------------------------------------------------------------------------------


def test_a_step_that_raised_runs_again_and_earlier_steps_do_not(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a step whose function threw is not journaled, so it runs again; earlier … do not"."""
    options: dict[str, Any] = {"thread_id": "t-step-throws", "checkpointer": ref_checkpointer}
    calls = Calls()

    def flaky() -> str:
        calls.hit("flaky")
        if 1 == calls["flaky"]:
            raise RuntimeError("flaky failed")
        return "ok"

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("first", calls.hit, "first")
        ctx.step("flaky", flaky)
        return {"log": ["done"]}

    g = linear(work, **ITEMS)

    assert "error" == run(g, {}, **options).status
    assert "done" == run(g, {}, **options).status
    assert {"first": 1, "flaky": 2} == dict(calls)


def test_three_crashes_in_a_row_pay_for_each_step_once(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "three consecutive crashes still pay for each completed step once"."""
    options: dict[str, Any] = {"thread_id": "t-crash-x3", "checkpointer": ref_checkpointer}
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls.hit("attempt")
        for i in (1, 2, 3):
            ctx.step(f"s{i}", calls.hit, f"s{i}")
            if calls["attempt"] == i:
                raise RuntimeError(f"crash after s{i}")
        return {"log": ["survived"]}

    g = linear(work, **ITEMS)
    statuses = [run(g, {}, **options).status for _ in range(3)]
    finished = run(g, {}, **options)

    assert ["error"] * 3 == statuses
    assert ["survived"] == finished.state["log"]
    assert {"s1": 1, "s2": 1, "s3": 1} == {key: calls[key] for key in ("s1", "s2", "s3")}


def test_a_crash_in_a_later_superstep_replays_only_that_superstep(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a crash in a later superstep replays only that superstep's journal"."""
    options: dict[str, Any] = {"thread_id": "t-later", "checkpointer": ref_checkpointer}
    calls = Calls()
    crashes = ["b crashed"]

    def node_a(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("a", calls.hit, "a")
        return {"log": [f"a{calls['a']}"]}

    def node_b(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("b", calls.hit, "b")
        if crashes:
            raise RuntimeError(crashes.pop())
        return {"log": ["b"]}

    g = (
        graph("later", {"log": channel.append()})
        .node("a", node_a)
        .node("b", node_b)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    assert "error" == run(g, {}, **options).status
    assert ["a1", "b"] == run(g, {}, **options).state["log"]
    assert {"a": 1, "b": 1} == dict(calls)


def test_committed_journals_are_dropped(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "committed journals are dropped, so a completed superstep leaves no replay memory"."""
    g = linear(lambda state, ctx: {"log": [ctx.step("s", lambda: "v")]}, **ITEMS)

    finished = run(g, {}, thread_id="t-drop", checkpointer=ref_checkpointer)

    assert "done" == finished.status
    assert () == ref_checkpointer.get_journal(first_task_id(finished.events))


def test_a_crashed_fan_out_branch_replays_only_its_unfinished_steps(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a fan-out where one branch crashes replays only the steps that branch had not …"."""
    options: dict[str, Any] = {"thread_id": "t-fan-crash", "checkpointer": ref_checkpointer}
    calls = Calls()
    crashes = ["b crashed"]

    def worker(task_input: dict[str, str], ctx: Any) -> dict[str, Any]:
        ctx.step("work", calls.hit, task_input["item"])
        if task_input["item"] == "b" and crashes:
            raise RuntimeError(crashes.pop())
        return {"out": [task_input["item"]]}

    g = (
        graph("fan", {"out": channel.append()})
        .node("fan", lambda state: {})
        .node("worker", worker)
        .edge(START, "fan")
        .router("fan", lambda state: [send("worker", {"item": item}) for item in "abc"])
        .compile()
    )

    assert "error" == run(g, {}, **options).status
    assert ["a", "b", "c"] == run(g, {}, **options).state["out"]
    assert {"a": 1, "b": 1, "c": 1} == dict(calls)


# --- time travel onto a paused superstep ------------------------------------------------------


@pytest.mark.parametrize("fork_input", [None, {}], ids=["no-input", "empty-input"])
def test_forking_before_a_pause_raises_the_pause_again(
    ref_checkpointer: Checkpointer, fork_input: Any
) -> None:
    """replay.edge · "forking from the checkpoint before a pause re-raises the pause instead of re-running …".

    The reference forks with ``{}``; issue #8 states it for ``run(g, None, checkpoint_id=...)``: both run.
    """
    calls = Calls()

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("effect", calls.hit, "effect")
        return {"log": [ctx.interrupt({"q": "?"})]}

    g = (
        graph("fork", {"log": channel.append()})
        .node("first", lambda state: {"log": ["first"]})
        .node("ask", ask)
        .edge(START, "first")
        .edge("first", "ask")
        .edge("ask", END)
        .compile()
    )
    paused = run(g, {}, thread_id="t-fork", checkpointer=ref_checkpointer)
    assert "interrupted" == paused.status
    parked = ref_checkpointer.get("t-fork")
    assert parked is not None

    forked = run(
        g, fork_input, thread_id="t-fork", checkpointer=ref_checkpointer, checkpoint_id=parked.parent_id
    )

    assert "interrupted" == forked.status
    assert "interrupt#0" == forked.pending[0].key
    assert {"effect": 1} == dict(calls)


def test_a_step_reusing_a_pending_interrupts_key_is_nondeterminism(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a step that reuses the key of a still-pending interrupt is a NondeterminismError"."""
    as_step: list[bool] = []

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if as_step:
            ctx.step("gate", lambda: "computed")
        else:
            ctx.interrupt({}, key="gate")
        return {}

    g = (
        graph("collide", {"log": channel.append()})
        .node("first", lambda state: {})
        .node("ask", ask)
        .edge(START, "first")
        .edge("first", "ask")
        .compile()
    )
    run(g, {}, thread_id="t-collide", checkpointer=ref_checkpointer)
    parked = ref_checkpointer.get("t-collide")
    assert parked is not None
    as_step.append(True)

    forked = run(
        g, None, thread_id="t-collide", checkpointer=ref_checkpointer, checkpoint_id=parked.parent_id
    )

    assert "error" == forked.status
    error = forked.errors[0][1]
    assert isinstance(error, NondeterminismError)
    assert "gate#0" == error.key
    assert "gate#0" in str(error)


def test_resuming_from_a_checkpoint_that_is_not_paused_is_refused(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "resuming from an explicit checkpointId that is not interrupted is refused"."""
    g = (
        graph("ckid", {"log": channel.append()})
        .node("a", lambda state: {})
        .node("b", lambda state, ctx: {"log": [ctx.interrupt()]})
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )
    run(g, {}, thread_id="t-ckid", checkpointer=ref_checkpointer)
    parked = ref_checkpointer.get("t-ckid")
    assert parked is not None

    with pytest.raises(ResumeError):
        resume(g, "x", thread_id="t-ckid", checkpointer=ref_checkpointer, checkpoint_id=parked.parent_id)


def test_an_unknown_checkpoint_id_resumes_nothing(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "an unknown checkpointId resumes nothing"."""
    g = linear(lambda state, ctx: {"log": [ctx.interrupt()]}, **ITEMS)
    run(g, {}, thread_id="t-unknown-ck", checkpointer=ref_checkpointer)

    with pytest.raises(ResumeError, match="ckpt-nope"):
        resume(g, "x", thread_id="t-unknown-ck", checkpointer=ref_checkpointer, checkpoint_id="ckpt-nope")

    assert 1 == len(pending_interrupts(ref_checkpointer, "t-unknown-ck"))


# --- strict mode --------------------------------------------------------------------------------


def test_a_step_asked_more_often_on_replay_is_not_a_violation(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a step requested more times on replay than journaled is not a violation"."""
    options: dict[str, Any] = {"thread_id": "t-more", "checkpointer": ref_checkpointer}
    extra: list[bool] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("s", lambda: 1)
        if extra:
            ctx.step("s", lambda: 2)
        ctx.interrupt()
        return {}

    g = linear(work, **ITEMS)
    run(g, {}, **options)
    extra.append(True)

    assert "done" == resume(g, "ok", **options).status


def test_a_strict_violation_in_a_retried_node_is_retried_then_reported() -> None:
    """replay.edge · "a strict violation inside a retried node is reported, not retried into silence".

    "A nondeterminism error is just an error to the retry policy": three attempts.
    """
    passes: list[int] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        passes.append(len(passes) + 1)
        if 1 == len(passes):
            ctx.step("only-first", lambda: "x")
            raise RuntimeError("transient")
        return {}

    g = (
        graph("strict-retry", {"log": channel.append()})
        .node("work", work, retry=RetryPolicy(max_attempts=3, backoff=0.0))
        .edge(START, "work")
        .compile()
    )

    result = run(g, {})

    assert "error" == result.status
    assert isinstance(result.errors[0][1], NondeterminismError)
    assert [1, 2, 3] == passes
