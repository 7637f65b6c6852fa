"""The port suite, time: ``ThreadInfo.due_at`` and ``list_threads(due_before=)``, deadlines applied by
``tick`` exactly once (``by="deadline"``), durable timers (``ctx.sleep``), and the first answer winning
between a person and the sweep, on every backend.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    START,
    Checkpointer,
    ResumeError,
    answers,
    channel,
    graph,
    history,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
    tick,
)
from ilmek.types import utc_now

pytestmark = pytest.mark.timeout(60)

DUE = dt.datetime(2030, 6, 1, 12, 0, tzinfo=dt.UTC)
BEFORE = DUE - dt.timedelta(seconds=1)
AFTER = DUE + dt.timedelta(seconds=1)


def _approval(effects: list[str], deadline: dt.datetime = DUE) -> Any:
    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("order", effects.append, "order")
        ok = ctx.interrupt("Charge?", answers=answers.choice("yes", "no"), deadline=deadline, on_timeout="no")
        if ok == "yes":
            ctx.step("charge", effects.append, "charge")
        return {"log": [ok]}

    return (
        graph("approval", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    )


def _answered_by(checkpointer: Checkpointer, thread_id: str) -> list[Any]:
    return [
        c.metadata["answered_by"] for c in history(checkpointer, thread_id) if "answered_by" in c.metadata
    ]


def test_due_at_is_the_earliest_deadline_and_lists_by_due_before(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """A paused thread's due_at is its pauses' earliest deadline, read back by another checkpointer;
    due_before lists exactly the threads due by then, earliest first; a plain pause is never due."""
    later = DUE + dt.timedelta(hours=1)

    def two(state: dict[str, Any], ctx: Any) -> None:
        ctx.interrupt("a", key="a", deadline=later, on_timeout=1)

    def one(state: dict[str, Any], ctx: Any) -> None:
        ctx.interrupt("b", key="b", deadline=DUE, on_timeout=2)

    both = (
        graph("both", {"log": channel.append()})
        .node("two", two)
        .node("one", one)
        .edge(START, "two")
        .edge(START, "one")
        .compile()
    )
    run(both, {}, thread_id="both", checkpointer=checkpointer)
    run(_approval([], later + dt.timedelta(hours=1)), {}, thread_id="last", checkpointer=checkpointer)
    plain = graph("plain", {}).node("ask", lambda s, ctx: ctx.interrupt("?")).edge(START, "ask").compile()
    run(plain, {}, thread_id="plain", checkpointer=checkpointer)
    other = reopen()
    info = other.get_thread("both")
    assert info is not None
    assert DUE == info.due_at
    plain_info = other.get_thread("plain")
    assert plain_info is not None
    assert plain_info.due_at is None
    assert [] == other.list_threads(due_before=BEFORE)
    assert ["both"] == [t.id for t in other.list_threads(due_before=DUE)]
    assert ["both", "last"] == [t.id for t in other.list_threads(due_before=DUE + dt.timedelta(days=1))]


def test_a_deadline_is_applied_once_by_tick_and_recorded_by_deadline(checkpointer: Checkpointer) -> None:
    """Before the deadline tick does nothing; after it, the on_timeout answer runs the thread on,
    recorded by="deadline", the thread is no longer due, and a second tick finds nothing."""
    effects: list[str] = []
    g = _approval(effects)
    run(g, {}, thread_id="late", checkpointer=checkpointer)
    assert [] == tick(g, checkpointer, now=BEFORE)
    (result,) = tick(g, checkpointer, now=AFTER)
    assert ("done", ["no"], "late") == (result.status, result.state["log"], result.thread_id)
    assert [{"approve:interrupt#0": "deadline"}] == _answered_by(checkpointer, "late")
    info = checkpointer.get_thread("late")
    assert info is not None
    assert info.due_at is None
    assert [] == tick(g, checkpointer, now=AFTER + dt.timedelta(days=1))
    assert ["order"] == effects


def test_two_tickers_at_once_apply_a_deadline_once(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """Two sweeps on two checkpointers racing over the same due threads resume each thread once."""
    effects: list[str] = []
    g = _approval(effects)
    for n in range(3):
        run(g, {}, thread_id=f"race-{n}", checkpointer=checkpointer)
    stores = [checkpointer, reopen()]
    start = threading.Barrier(2)
    found: list[list[str]] = [[], []]

    def sweep(index: int) -> None:
        start.wait()
        found[index] = [r.thread_id for r in tick(g, stores[index], now=AFTER)]

    workers = [threading.Thread(target=sweep, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert ["race-0", "race-1", "race-2"] == sorted(found[0] + found[1])
    assert ["order"] * 3 == effects
    for n in range(3):
        assert [{"approve:interrupt#0": "deadline"}] == _answered_by(checkpointer, f"race-{n}")


def test_a_person_who_answers_first_stands(checkpointer: Checkpointer) -> None:
    """A person's answer before the sweep stands: tick, even after the deadline, leaves the thread."""
    effects: list[str] = []
    g = _approval(effects)
    run(g, {}, thread_id="first", checkpointer=checkpointer)
    assert ["yes"] == resume(g, "yes", thread_id="first", checkpointer=checkpointer).state["log"]
    assert [] == tick(g, checkpointer, now=AFTER)
    assert ["order", "charge"] == effects
    assert [{"approve:interrupt#0": "person"}] == _answered_by(checkpointer, "first")


def test_a_person_answering_after_the_sweep_gets_a_resume_error(checkpointer: Checkpointer) -> None:
    """Once tick applied the deadline, a person's late answer is a ResumeError and changes nothing."""
    effects: list[str] = []
    g = _approval(effects)
    run(g, {}, thread_id="too-late", checkpointer=checkpointer)
    assert 1 == len(tick(g, checkpointer, now=AFTER))
    with pytest.raises(ResumeError, match="too-late"):
        resume(g, "yes", thread_id="too-late", checkpointer=checkpointer)
    assert ["order"] == effects


def _mixed(deadline: dt.datetime) -> Any:
    """Two pauses in one superstep: ``timed`` (due at ``deadline``) and ``person`` (never due)."""

    def timed(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("t", deadline=deadline, on_timeout="timeout")]}

    def person(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("p")]}

    return (
        graph("mixed", {"log": channel.append()})
        .node("timed", timed)
        .node("person", person)
        .edge(START, "timed")
        .edge(START, "person")
        .compile()
    )


def test_a_pause_not_yet_due_keeps_its_thread_waiting(checkpointer: Checkpointer) -> None:
    """With two open pauses, one due and one waiting for a person, tick answers neither (a resume
    answers all of a thread's pauses); the person's answers then finish it."""

    g = _mixed(DUE)
    run(g, {}, thread_id="mixed", checkpointer=checkpointer)
    assert [] == tick(g, checkpointer, now=AFTER)
    assert 2 == len(pending_interrupts(checkpointer, "mixed"))
    done = resume_keyed(
        g, {"timed:interrupt#0": "a", "person:interrupt#0": "b"}, thread_id="mixed", checkpointer=checkpointer
    )
    assert ["a", "b"] == done.state["log"]


def _sleeper(effects: list[str], **when: Any) -> Any:
    def wait(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", effects.append, "before")
        assert ctx.sleep("nap", **when) is None
        ctx.step("after", effects.append, "after")
        return {"log": ["woke"]}

    return graph("sleeper", {"log": channel.append()}).node("wait", wait).edge(START, "wait").compile()


def test_a_timer_ends_the_run_and_tick_continues_it_once_due(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """ctx.sleep(until=) ends the run interrupted with a timer pause due then; tick before that does
    nothing, after it continues the thread (by="timer"); the step before the sleep ran once."""
    effects: list[str] = []
    g = _sleeper(effects, until=DUE)
    paused = run(g, {}, thread_id="nap", checkpointer=checkpointer)
    (pause,) = paused.pending
    assert ("interrupted", "timer", DUE, "wait:nap#0") == (
        paused.status,
        pause.kind,
        pause.deadline,
        pause.id,
    )
    info = checkpointer.get_thread("nap")
    assert info is not None
    assert ("interrupted", DUE) == (info.status, info.due_at)
    assert [] == tick(g, reopen(), now=BEFORE)
    (woke,) = tick(g, reopen(), now=AFTER)
    assert ("done", ["woke"]) == (woke.status, woke.state["log"])
    assert ["before", "after"] == effects
    assert [{"wait:nap#0": "timer"}] == _answered_by(checkpointer, "nap")


def test_a_timer_in_seconds_counts_from_the_pause(checkpointer: Checkpointer) -> None:
    """ctx.sleep(seconds=) is due that long after the pause was made; tick with the clock wakes it."""
    effects: list[str] = []
    g = _sleeper(effects, seconds=0)
    before = utc_now()
    (pause,) = run(g, {}, thread_id="zero", checkpointer=checkpointer).pending
    assert pause.deadline is not None
    assert before <= pause.deadline <= utc_now()
    assert ["zero"] == [r.thread_id for r in tick(g, checkpointer)]
    assert ["before", "after"] == effects


@pytest.mark.parametrize(
    "when",
    [{}, {"seconds": 1, "until": DUE}, {"seconds": -1}, {"until": dt.datetime(2030, 1, 1)}, {"seconds": "1"}],
    ids=["neither", "both", "negative", "naive", "text"],
)
def test_a_malformed_sleep_fails_the_node(checkpointer: Checkpointer, when: dict[str, Any]) -> None:
    """Neither or both of seconds/until, a negative or non-number seconds, a naive until: the node fails
    with InvalidArgumentError and no timer is made."""
    result = run(_sleeper([], **when), {}, thread_id="bad", checkpointer=checkpointer)
    assert "error" == result.status
    assert "InvalidArgumentError" == type(result.errors[0][1]).__name__
    assert () == pending_interrupts(checkpointer, "bad")


@pytest.mark.parametrize("page", [1, 100])
def test_a_limited_tick_looks_past_threads_that_cannot_be_woken(
    checkpointer: Checkpointer, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    """Threads whose due pause waits beside a person's stay due and are the most overdue; tick's limit
    counts the threads it continues, so it reaches a wakeable thread behind them (read a page of one
    thread at a time, or all in one page)."""
    monkeypatch.setattr("ilmek.sweep._PAGE", page)

    mixed = _mixed(DUE - dt.timedelta(hours=1))
    effects: list[str] = []
    approval = _approval(effects)
    for number in range(3):
        run(mixed, {}, thread_id=f"mixed-{number}", checkpointer=checkpointer)
    run(approval, {}, thread_id="wakeable", checkpointer=checkpointer)
    due = [t.id for t in checkpointer.list_threads(due_before=AFTER)]
    assert ["mixed-0", "mixed-1", "mixed-2", "wakeable"] == sorted(due)
    assert "wakeable" == due[-1]  # the least overdue
    woken = tick({"mixed": mixed, "approval": approval}, checkpointer, now=AFTER, limit=1)
    assert ["wakeable"] == [r.thread_id for r in woken]
    assert ["done"] == [r.status for r in woken]
    assert 2 == len(pending_interrupts(checkpointer, "mixed-0"))
