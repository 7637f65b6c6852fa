"""Ported from the reference's ``ts/packages/core/test/replay.edge.test.ts``.

Journal replay under the cycles that stress it: many pause/resume rounds,
crashes before and after steps, retries, forks onto a paused superstep,
cancellation and concurrent threads. The invariant is always the same: a
completed step's function runs exactly once. Tests that keep a thread run on
memory, a SQLite file and Postgres.

Not ported: three of the four "cancellation" reason cases (an object reason
reported as JSON, a reason JSON cannot serialize, a function reason) test how
JavaScript turns an ``AbortSignal.reason`` into text, and
"ILMEK_DEBUG_BREAK_ON_INTERRUPT=1 without a debugger" is a Node debugger hook.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    InterruptSignal,
    NondeterminismError,
    ResumeError,
    RetryPolicy,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
    send,
    stream,
    thread_state,
)
from ilmek.context import NodeContext, TaskJournal
from tests.support.helpers import Calls
from tests.support.reference_edge import done, linear, pending

pytestmark = pytest.mark.timeout(60)

ITEMS = {"items": channel.last_write([])}


def first_task_id(events: Any) -> str:
    """The task id of the first ``node_start`` event."""
    return next(e.task_id for e in events if e.type == "node_start")


def cancelled(reason: Any = None) -> threading.Event:
    """A set cancel event; ``reason`` (the TS ``AbortSignal.reason``) is set as an attribute if given."""
    event = threading.Event()
    if reason is not None:
        event.reason = reason  # type: ignore[attr-defined]
    event.set()
    return event


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


# --- cancellation ---------------------------------------------------------------------------------


def test_an_exception_reason_reports_its_message() -> None:
    """replay.edge · "an Error reason reports its message" (the reason is an exception)."""
    result = run(linear(lambda state: {}, **ITEMS), {}, cancel=cancelled(RuntimeError("deadline")))

    assert ("aborted", "deadline") == (result.status, result.abort_reason)


def test_a_cancel_event_without_a_reason_reports_aborted() -> None:
    """replay.edge · "a signal whose reason is undefined reports 'aborted'" (an Event with no reason)."""
    result = run(linear(lambda state: {}, **ITEMS), {}, cancel=cancelled())

    assert ("aborted", "aborted") == (result.status, result.abort_reason)


def test_cancelling_during_a_retry_backoff_ends_with_the_last_error() -> None:
    """replay.edge · "an abort during a retry backoff stops the retry loop with the last error".

    Issue #8: the run ends ``status="error"`` with the node's last error.
    """
    cancel = threading.Event()
    cancel.reason = "stop"  # type: ignore[attr-defined]
    attempts: list[int] = []

    def work(state: dict[str, Any]) -> None:
        attempts.append(len(attempts) + 1)
        threading.Timer(0.01, cancel.set).start()
        raise RuntimeError(f"attempt {len(attempts)}")

    g = (
        graph("backoff", {"log": channel.append()})
        .node("work", work, retry=RetryPolicy(max_attempts=5, backoff=10.0))
        .edge(START, "work")
        .compile()
    )
    started = time.monotonic()

    result = run(g, {}, cancel=cancel)

    assert "error" == result.status
    assert [1] == attempts
    assert "attempt 1" == str(result.errors[0][1])
    assert time.monotonic() - started < 5.0, "sat out the 10 s backoff"


def test_a_retry_with_a_backoff_waits_before_the_next_attempt() -> None:
    """replay.edge · "a retry with a backoff waits before the next attempt"."""
    stamps: list[float] = []

    def work(state: dict[str, Any]) -> dict[str, Any]:
        stamps.append(time.monotonic())
        if len(stamps) < 2:
            raise RuntimeError("again")
        return {"log": ["ok"]}

    g = (
        graph("wait", {"log": channel.append()})
        .node("work", work, retry=RetryPolicy(max_attempts=2, backoff=0.04))
        .edge(START, "work")
        .compile()
    )

    assert "done" == run(g).status
    assert stamps[1] - stamps[0] >= 0.03, f"waited {stamps[1] - stamps[0]:.3f} s"


def test_a_cancel_set_by_the_failing_node_stops_its_retries() -> None:
    """replay.edge · "an already-aborted signal does not retry a failing node"."""
    cancel = threading.Event()
    attempts: list[int] = []

    def work(state: dict[str, Any]) -> None:
        attempts.append(1)
        cancel.set()
        raise RuntimeError("x")

    g = (
        graph("no-retry", {"log": channel.append()})
        .node("work", work, retry=RetryPolicy(max_attempts=4, backoff=0.0))
        .edge(START, "work")
        .compile()
    )

    run(g, {}, cancel=cancel)

    assert [1] == attempts


# --- concurrent runs -------------------------------------------------------------------------------


def test_concurrent_threads_of_one_checkpointer_never_share_journals(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "concurrent runs on different threads of one checkpointer never share journals"."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def own() -> str:
            time.sleep(0.01 * (hash(ctx.thread_id) % 10) / 10)
            return str(state["items"][0])

        mine = ctx.step("own", own)
        answer = ctx.interrupt({"mine": mine})
        return {"log": [f"{mine}:{answer}"]}

    g = linear(work, **ITEMS)
    threads = [f"conc-{i}" for i in range(12)]

    with ThreadPoolExecutor(len(threads)) as pool:
        paused = list(
            pool.map(lambda t: run(g, {"items": [t]}, thread_id=t, checkpointer=ref_checkpointer), threads)
        )
        finished = list(
            pool.map(lambda t: resume(g, f"ans-{t}", thread_id=t, checkpointer=ref_checkpointer), threads)
        )

    assert [{"mine": t} for t in threads] == [p.pending[0].payload for p in paused]
    assert [[f"{t}:ans-{t}"] for t in threads] == [f.state["log"] for f in finished]


def test_tasks_of_one_superstep_see_the_checkpoint_not_a_siblings_write() -> None:
    """replay.edge · "concurrent tasks in one superstep each see the checkpoint state, not a sibling's …"."""

    def node_a(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.015)
        return {"seen": [f"a saw {state['n']}"], "n": 1}

    g = (
        graph("siblings", {"n": channel.last_write(0), "seen": channel.append()})
        .node("a", node_a)
        .node("b", lambda state: {"seen": [f"b saw {state['n']}"], "n": 2})
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )

    result = run(g, {"n": 0})

    assert ["a saw 0", "b saw 0"] == result.state["seen"]
    assert 2 == result.state["n"]


# --- context surface --------------------------------------------------------------------------------


def test_remaining_steps_is_the_limit_minus_the_superstep_index() -> None:
    """replay.edge · "remainingSteps is the recursion limit minus the superstep index"."""
    seen: list[tuple[int, int]] = []

    def loop(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append((ctx.step_index, ctx.remaining_steps))
        return {"i": 1}

    g = (
        graph("loop", {"i": channel.reduce(lambda current, more: (current or 0) + more, 0)})
        .node("loop", loop)
        .edge(START, "loop")
        .router("loop", lambda state: "loop" if state["i"] < 3 else END)
        .compile()
    )

    run(g, {}, recursion_limit=3)

    assert [(0, 3), (1, 2), (2, 1)] == seen


def test_meta_and_the_thread_id_reach_nodes_and_routers(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "meta and the thread id reach both nodes and routers".

    A router's context has no ``node`` in Python (the reference gives it ``""``).
    """
    seen: list[tuple[Any, ...]] = []

    def node_a(state: dict[str, Any], ctx: Any) -> None:
        seen.append(("node", ctx.meta["tenant"], ctx.thread_id, ctx.node))

    def route(state: dict[str, Any], ctx: Any) -> str:
        seen.append(("router", ctx.meta["tenant"], ctx.thread_id))
        return END

    g = graph("meta").node("a", node_a).edge(START, "a").router("a", route).compile()

    run(g, {}, thread_id="t-meta", checkpointer=ref_checkpointer, meta={"tenant": "acme"})

    assert [("node", "acme", "t-meta", "a"), ("router", "acme", "t-meta")] == seen


def test_ctx_journal_is_a_read_only_snapshot_of_the_entries_so_far() -> None:
    """replay.edge · "ctx.journal is a read-only snapshot of this task's entries so far"."""
    snapshots: list[Any] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        snapshots.append(ctx.journal)
        ctx.step("a", lambda: 1)
        snapshots.append(ctx.journal)
        with pytest.raises(TypeError):
            ctx.journal["b#0"] = done("b#0", 2)
        return {}

    assert "done" == run(linear(work, **ITEMS)).status
    assert [{}, {"a#0": done("a#0", 1)}] == [dict(snapshot) for snapshot in snapshots]


def test_a_routers_emit_and_emit_token_are_inert() -> None:
    """replay.edge · "a router's emit and emitToken are inert"."""

    def route(state: dict[str, Any], ctx: Any) -> str:
        ctx.emit("from router")
        ctx.emit_token("tok")
        return END

    g = graph("inert").node("a", lambda state: {}).edge(START, "a").router("a", route).compile()

    result = run(g)

    assert "done" == result.status
    assert [] == [e for e in result.events if e.type == "custom"]


def test_ctx_interrupt_in_a_router_is_refused_like_ctx_step() -> None:
    """replay.edge · "ctx.interrupt in a router is refused like ctx.step"."""

    def route(state: dict[str, Any], ctx: Any) -> str:
        ctx.interrupt()
        return END

    g = graph("router-pause").node("a", lambda state: {}).edge(START, "a").router("a", route).compile()

    with pytest.raises(GraphError, match="router"):
        run(g)


def test_without_a_checkpointer_a_step_journals_in_memory_and_counts_repeats() -> None:
    """replay.edge · "without a checkpointer a step still journals in memory and suffixes repeats"."""
    seen: list[Any] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(ctx.step("x", lambda: 42))
        seen.append(dict(ctx.journal))
        seen.append(ctx.step("x", lambda: 43))
        return {}

    assert "done" == run(linear(work, **ITEMS)).status
    assert [42, {"x#0": done("x#0", 42)}, 43] == seen


def test_a_pending_entry_reached_again_raises_the_pause_without_persisting() -> None:
    """replay.edge · "a pending entry the replay reaches again re-raises the pause without persisting"."""
    persisted: list[str] = []
    journal = TaskJournal(
        "t:root:work",
        [pending("interrupt#0", {"q": "old"})],
        lambda task_id, entries: persisted.append(task_id),
    )
    ctx = NodeContext(
        node="work",
        task_id="t:root:work",
        journal=journal,
        emit=lambda payload: None,
        strict=True,
        graph=linear(lambda state: {}),
        thread_id="t",
        run_id="r",
        step_index=0,
        recursion_limit=25,
        remaining_steps=25,
        state={},
        meta={},
        cancel=threading.Event(),
    )

    with pytest.raises(InterruptSignal) as raised:
        ctx.interrupt({"q": "new"})

    assert "interrupt#0" == raised.value.key
    assert [] == persisted


# --- threadState --------------------------------------------------------------------------------------


def test_thread_state_is_none_for_an_unknown_thread_else_the_channels(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "threadState is null for an unknown thread and the materialized channels otherwise"."""
    g = (
        graph("state", {"a": channel.last_write("default-a"), "b": channel.append()})
        .node("w", lambda state: {"b": [1]})
        .edge(START, "w")
        .compile()
    )

    assert None is thread_state(g, ref_checkpointer, "nobody")
    run(g, {}, thread_id="t-state", checkpointer=ref_checkpointer)
    assert {"a": "default-a", "b": [1]} == thread_state(g, ref_checkpointer, "t-state")


def test_a_parked_threads_state_is_the_state_before_the_paused_superstep(
    ref_checkpointer: Checkpointer,
) -> None:
    """replay.edge · "a parked thread's state is the state before the paused superstep"."""
    g = linear(lambda state, ctx: {"log": [ctx.interrupt()]}, **ITEMS)

    run(g, {"log": ["input"]}, thread_id="t-parked-state", checkpointer=ref_checkpointer)

    assert ["input"] == thread_state(g, ref_checkpointer, "t-parked-state")["log"]


# --- event stream ---------------------------------------------------------------------------------------


def test_an_interrupted_run_ends_checkpoint_interrupt_run_end(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "an interrupted run emits checkpoint → interrupt → run_end, and no node_end for …".

    Python first commits the input (``state`` and ``checkpoint`` events after ``run_start``, beyond ilmek/1).
    """
    g = linear(lambda state, ctx: {"log": [ctx.interrupt({"q": 1})]}, **ITEMS)

    events = list(stream(g, {}, thread_id="t-ev", checkpointer=ref_checkpointer))

    types = [e.type for e in events]
    assert ["run_start", "state", "checkpoint"] == types[:3]
    assert ["step_start", "node_start", "checkpoint", "interrupt", "run_end"] == types[3:]
    assert list(range(1, len(events) + 1)) == [e.seq for e in events]


def test_an_erroring_run_ends_node_error_run_end_with_no_checkpoint() -> None:
    """replay.edge · "an erroring run ends with node_error then run_end status error, and writes no …".

    Python first commits the input (beyond ilmek/1); the failed superstep writes no checkpoint.
    """

    def work(state: dict[str, Any]) -> None:
        raise RuntimeError("x")

    events = list(stream(linear(work, **ITEMS)))

    types = [e.type for e in events]
    assert ["run_start", "state", "checkpoint"] == types[:3]
    assert ["step_start", "node_start", "node_error", "run_end"] == types[3:]
    assert "error" == events[-1].status


def test_a_consumer_that_stops_reading_leaves_the_thread_resumable(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "a consumer that stops reading mid-run leaves the last committed checkpoint resumable".

    It stops at the checkpoint of ``a``'s superstep (the first one is the input's, beyond ilmek/1).
    """
    calls = Calls()

    def node_a(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("a", calls.hit, "a")
        return {"log": [f"a{calls['a']}"]}

    g = (
        graph("walkaway", {"log": channel.append()})
        .node("a", node_a)
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )
    stepped = False
    with contextlib.closing(stream(g, {}, thread_id="t-walkaway", checkpointer=ref_checkpointer)) as events:
        for event in events:
            stepped = stepped or event.type == "step_start"
            if stepped and event.type == "checkpoint":
                break

    finished = run(g, {}, thread_id="t-walkaway", checkpointer=ref_checkpointer)

    assert ["a1", "b"] == finished.state["log"]
    assert {"a": 1} == dict(calls)


def test_each_send_branch_of_a_fan_out_is_answered_by_its_own_id(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "resumeKeyed over a fan-out: each send branch is answered by its own id"."""
    options: dict[str, Any] = {"thread_id": "t-fan-pause", "checkpointer": ref_checkpointer}
    g = (
        graph("fan-pause", {"out": channel.append()})
        .node("fan", lambda state: {})
        .node(
            "w",
            lambda task_input, ctx: {"out": [f"{task_input['n']}={ctx.interrupt({'n': task_input['n']})}"]},
        )
        .edge(START, "fan")
        .router("fan", lambda state: [send("w", {"n": n}) for n in (1, 2, 3)])
        .compile()
    )

    paused = run(g, {}, **options)
    assert ["w#0:interrupt#0", "w#1:interrupt#0", "w#2:interrupt#0"] == [p.id for p in paused.pending]

    answers = {"w#0:interrupt#0": "x", "w#1:interrupt#0": "y", "w#2:interrupt#0": "z"}
    assert ["1=x", "2=y", "3=z"] == resume_keyed(g, answers, **options).state["out"]


# --- damaged or unusual environments --------------------------------------------------------------------


def test_a_pause_whose_journal_was_dropped_is_never_silently_rerun(ref_checkpointer: Checkpointer) -> None:
    """replay.edge · "resuming a pause whose journal was lost is refused with unknown_key, not … re-run".

    Python keeps a paused task's journal in its checkpoint, so dropping the
    journal stored under the pause's task id may lose nothing: then the resume
    completes without running the paid-for step again; otherwise it is refused.
    """
    options: dict[str, Any] = {"thread_id": "t-lost", "checkpointer": ref_checkpointer}
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("paid", calls.hit, "paid")
        return {"log": [ctx.interrupt()]}

    g = linear(work, **ITEMS)
    paused = run(g, {}, **options)
    ref_checkpointer.drop_journal(paused.pending[0].task_id)

    outcome: Any
    try:
        outcome = resume(g, "x", **options)
    except ResumeError as refused:
        outcome = refused

    if isinstance(outcome, ResumeError):
        assert "interrupt#0" in str(outcome)
    else:
        assert ("done", ["x"]) == (outcome.status, outcome.state["log"])
    assert {"paid": 1} == dict(calls)
