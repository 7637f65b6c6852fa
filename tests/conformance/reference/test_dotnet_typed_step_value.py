"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/TypedStepValueTests.cs``.

What ``ctx.step`` hands back on a replay pass. In the .NET port the in-memory
journal keeps the very object the step returned, and a durable store's JSON
is converted back to the step's type ``T``. Python's steps are untyped: the
value replays as the store's codec gives it back (SPEC §4: "a value must come
back from the journal equal to what the function returned"), and the
in-memory store keeps the same encoded JSON as the databases (README,
"Checkpointers"), so a replayed value is equal to the original, never the
same object. Both cases run on memory, SQLite and Postgres.

Not ported: "a value that cannot become T says which step and which type" —
a Python step has no ``T`` to convert to.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from typing import Any

import attrs

from ilmek import END, START, Checkpointer, CompiledGraph, graph, resume, run, serde


@serde.register
@attrs.frozen
class Order:
    """The .NET suite's ``Order`` record: an id, a decimal total and tags."""

    id: str
    total: decimal.Decimal
    tags: tuple[str, ...]


def _step_then_pause(make: Callable[[], Any], seen: list[Any]) -> CompiledGraph:
    """Graph "typed": ``work`` records ``make()`` in a step (appending what it got to ``seen``), then asks
    "go?"."""

    def work(state: Any, ctx: Any) -> None:
        seen.append(ctx.step("make", make))
        ctx.interrupt("go?")

    return graph("typed").node("work", work).edge(START, "work").edge("work", END).compile()


def test_a_replayed_step_value_equals_what_the_step_returned(ref_checkpointer: Checkpointer) -> None:
    """TypedStepValueTests.InMemoryReturnsTheSameInstance: "in memory, replay returns the very instance the
    step returned".

    Python replays an equal value of the same class (the reference's very
    instance is a property of its in-memory journal only).
    """
    order = Order("o-1", decimal.Decimal("1.10"), ("a",))
    orders = [order]
    seen_order: list[Any] = []
    seen_list: list[Any] = []

    for thread_id, make, seen in (("a", lambda: order, seen_order), ("b", lambda: orders, seen_list)):
        g = _step_then_pause(make, seen)
        opts: dict[str, Any] = {"thread_id": thread_id, "checkpointer": ref_checkpointer}
        run(g, None, **opts)
        resume(g, "yes", **opts)

    assert [order, order] == seen_order
    assert isinstance(seen_order[1], Order)
    assert [orders, orders] == seen_list


def test_a_store_hands_back_a_value_that_replays_exactly(ref_checkpointer: Checkpointer) -> None:
    """TypedStepValueTests.JsonElementJournalConverts: "a store that hands back raw JsonElements still replays
    typed values".

    The reference wraps a store so that its journal comes back as raw JSON
    and converts it to ``Order``; in Python the stores' codec restores the
    registered class, the exact decimal and the tuple, so the step does not
    run again and its value is the one recorded.
    """
    calls: list[int] = []
    seen: list[Any] = []

    def make() -> Order:
        calls.append(1)
        return Order("o-1", decimal.Decimal("12345678901234567890.123456789"), ("a", "b"))

    g = _step_then_pause(make, seen)
    opts: dict[str, Any] = {"thread_id": "t", "checkpointer": ref_checkpointer}

    run(g, None, **opts)
    finished = resume(g, "yes", **opts)

    assert "done" == finished.status
    assert [1] == calls
    assert ("o-1", decimal.Decimal("12345678901234567890.123456789"), ("a", "b")) == (
        seen[1].id,
        seen[1].total,
        seen[1].tags,
    )
