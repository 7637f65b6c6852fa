"""Ported from the reference's ``ts/packages/core/test/replay.edge.test.ts``: runs around replay.

Cancellation, concurrent threads, what a node's context offers, ``threadState``,
the event stream and damaged environments; still, a completed step's function
runs exactly once. Tests that keep a thread run on memory, a SQLite file and
Postgres. Replay and crashes themselves are ``test_replay_edge.py``.

Not ported: three of the four "cancellation" reason cases (an object reason
reported as JSON, a reason JSON cannot serialize, a function reason) test how
JavaScript turns an ``AbortSignal.reason`` into text, and
"ILMEK_DEBUG_BREAK_ON_INTERRUPT=1 without a debugger" is a Node debugger hook.
"""

from __future__ import annotations

import contextlib
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
    ResumeError,
    RetryPolicy,
    channel,
    graph,
    resume,
    resume_keyed,
    run,
    send,
    stream,
    thread_state,
)
from ilmek.context import NodeContext, TaskJournal
from tests.support.helpers import Calls
from tests.support.reference_edge import ITEMS, done, linear, pending

pytestmark = pytest.mark.timeout(60)


def cancelled(reason: Any = None) -> threading.Event:
    """A set cancel event; ``reason`` (the TS ``AbortSignal.reason``) is set as an attribute if given."""
    event = threading.Event()
    if reason is not None:
        event.reason = reason  # type: ignore[attr-defined]
    event.set()
    return event


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
