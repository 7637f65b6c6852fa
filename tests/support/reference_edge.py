"""Graphs and records shared by the ported edge-case and checkpointer tests.

The reference suites build the same few shapes again and again (a one-node
graph, the checkout that charges once across a pause, a bare checkpoint); they
live here once. Nothing here asserts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from ilmek import (
    END,
    START,
    Checkpoint,
    Checkpointer,
    CompiledGraph,
    JournalEntry,
    channel,
    graph,
    resume,
    run,
)
from ilmek.types import new_checkpoint_id
from tests.support.helpers import Calls

ITEMS = {"items": channel.last_write([])}
"""One last-write channel ``items``: the state of the replay edge-case graphs."""


def linear(fn: Callable[..., Any], **more_channels: Any) -> CompiledGraph:
    """One node ``work`` between START and END, with an append channel ``log``."""
    channels = {"log": channel.append(), **more_channels}
    return graph("linear", channels).node("work", fn).edge(START, "work").edge("work", END).compile()


def checkout_graph(calls: Calls) -> CompiledGraph:
    """The reference's §12.1 shape: create an order, pause for a person, then charge."""

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("create_order", lambda: calls.hit("create_order") or "order-1")
        answer = ctx.interrupt({"q": "charge?"})
        ctx.step("charge", lambda: calls.hit("charge") or "charged")
        return {"log": [answer]}

    return (
        graph("checkout", {"log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


def chain_graph() -> CompiledGraph:
    """``a`` then ``b``, each writing ``n``: a run leaves several checkpoints."""
    return (
        graph("chain", {"n": channel.last_write(0)})
        .node("a", lambda state: {"n": 1})
        .node("b", lambda state: {"n": 2})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )


def greet_graph() -> CompiledGraph:
    """Graph "greet": a ``hello`` step greeting ``who``, then a pause asking ``{"hello": ...}``; logs both."""

    def greet(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        hello = ctx.step("hello", lambda: f"hello {state['who']}")
        return {"log": [f"{hello}/{ctx.interrupt({'hello': hello})}"]}

    return (
        graph("greet", {"who": channel.last_write(""), "log": channel.append()})
        .node("greet", greet)
        .edge(START, "greet")
        .edge("greet", END)
        .compile()
    )


def make_checkpoint(thread_id: str, **fields: Any) -> Checkpoint:
    """A bare checkpoint of ``thread_id`` with a fresh id; keywords set any other field."""
    return Checkpoint(id=fields.pop("id", None) or new_checkpoint_id(), thread_id=thread_id, **fields)


def done(key: str, value: Any) -> JournalEntry:
    """A completed step of a journal (the reference's ``putDone``)."""
    return JournalEntry(key=key, kind="step", value=value)


def pending(key: str, payload: Any = None) -> JournalEntry:
    """An unanswered interrupt of a journal (the reference's ``putPending``)."""
    return JournalEntry(key=key, kind="interrupt", payload=payload)


def keys_of(entries: Iterable[JournalEntry]) -> list[str]:
    """The keys of a journal, in order."""
    return [entry.key for entry in entries]


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Start every call at once on its own thread; each outcome is its result or its exception."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def attempt(index: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            outcomes[index] = call()
        except Exception as error:  # reported as the outcome
            outcomes[index] = error

    threads = [threading.Thread(target=attempt, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def assert_a_step_runs_once_across_a_pause(checkpointer: Checkpointer, thread_id: str) -> None:
    """The §12.1 case every store suite of the reference repeats: pause, answer, each effect once."""
    calls = Calls()
    g = checkout_graph(calls)

    paused = run(g, {}, thread_id=thread_id, checkpointer=checkpointer)
    assert "interrupted" == paused.status
    assert {"create_order": 1} == dict(calls)

    finished = resume(g, "yes", thread_id=thread_id, checkpointer=checkpointer)
    assert ("done", ["yes"]) == (finished.status, finished.state["log"])
    assert {"create_order": 1, "charge": 1} == dict(calls)


def assert_history_reads_and_delete(checkpointer: Checkpointer, thread_id: str) -> None:
    """get by id, list newest first with a limit, then delete_thread leaves nothing."""
    run(chain_graph(), {}, thread_id=thread_id, checkpointer=checkpointer)

    listed = checkpointer.list(thread_id)
    assert len(listed) >= 2
    assert listed[0].id > listed[-1].id
    assert [listed[0].id] == [c.id for c in checkpointer.list(thread_id, limit=1)]
    assert listed[0] == checkpointer.get(thread_id, listed[0].id)

    checkpointer.delete_thread(thread_id)
    assert None is checkpointer.get(thread_id)
    assert [] == checkpointer.list(thread_id)
