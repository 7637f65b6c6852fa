"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/TypedGraphTests.cs``.

The .NET typed facade (``Graph.Create<TState>``, ``[Append]``, a
``.Channel()`` override for a custom reducer) is Python's ``attrs`` state
class (SPEC §2): ``graph(name, SomeClass)``, ``append_field()``,
``reduce_field(fn)``. Not ported: "a read-only property cannot be overridden
as a channel" — an attrs field is always settable, and Python declares
reducers on the fields themselves, so there is no override to refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ilmek import (
    END,
    START,
    Checkpointer,
    append_field,
    graph,
    reduce_field,
    resume,
    run,
    thread_state,
)
from tests.support.helpers import Calls
from tests.support.reference import counted


@attrs.define
class CheckoutState:
    """The .NET suite's ``CheckoutState``: a list, an append list and a string."""

    cart: list[str] = attrs.field(factory=list)
    log: list[str] = append_field()
    intent: str = ""


def _add(current: int | None, incoming: int) -> int:
    return (current or 0) + incoming


@attrs.define
class SumState:
    """The .NET suite's ``SumState``, its custom reducer declared on the field."""

    total: int = reduce_field(_add, default=0)


def test_a_node_reads_and_writes_the_typed_state() -> None:
    """TypedGraphTests.cs · "a node reads and writes the typed state"."""

    def checkout(state: CheckoutState) -> dict[str, Any]:
        return {"intent": "buy", "log": [f"saw {state.cart[0]}"]}

    g = (
        graph("checkout", CheckoutState)
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )

    result = run(g, {"cart": ["kahve"]})

    assert "done" == result.status
    assert isinstance(result.state, CheckoutState)
    assert "buy" == result.state.intent
    assert ["saw kahve"] == result.state.log


def test_a_typed_graph_runs_the_interrupt_resume_cycle_step_once(ref_checkpointer: Checkpointer) -> None:
    """TypedGraphTests.cs · "a typed graph runs the §12.1 interrupt/resume cycle, step-once"."""
    calls = Calls()

    def checkout(state: CheckoutState, ctx: Any) -> dict[str, Any]:
        ctx.step("create_order", counted(calls, "create", "order-1"))
        return {"log": [ctx.interrupt({"q": "charge?"})]}

    g = (
        graph("checkout", CheckoutState)
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )
    opts: dict[str, Any] = {"thread_id": "typed-1", "checkpointer": ref_checkpointer}

    paused = run(g, None, **opts)
    assert "interrupted" == paused.status
    assert 1 == calls["create"]

    done = resume(g, "yes", **opts)
    assert "done" == done.status
    assert isinstance(done.state, CheckoutState)
    assert ["yes"] == done.state.log
    assert 1 == calls["create"]


def test_a_typed_guard_routes_on_the_typed_state() -> None:
    """TypedGraphTests.cs · "a typed guard routes on the typed state"."""
    g = (
        graph("route", CheckoutState)
        .node("classify", lambda state: {"intent": "buy"})
        .node("buy", lambda state: {"log": ["bought"]})
        .node("browse", lambda state: {"log": ["browsed"]})
        .edge(START, "classify")
        .edge("classify", "buy", when=lambda state: state.intent == "buy")
        .edge("classify", "browse", when=lambda state: state.intent != "buy")
        .edge("buy", END)
        .edge("browse", END)
        .compile()
    )

    assert ["bought"] == run(g).state.log


def test_the_typed_state_materializes_after_a_round_trip_through_storage(
    ref_checkpointer: Checkpointer, ref_reopen: Callable[[], Checkpointer]
) -> None:
    """TypedGraphTests.cs · "the state type materializes correctly even after a JSON round-trip".

    .NET coerces loosely decoded lists back to the property types; in Python
    the state read back from any store is an instance of the class with its
    values (SPEC §2), read here through a second checkpointer on the store.
    """
    g = (
        graph("loose", CheckoutState)
        .node("n", lambda state: {"log": ["a", "b"], "cart": ["x"]})
        .edge(START, "n")
        .edge("n", END)
        .compile()
    )

    result = run(g, None, thread_id="typed-json", checkpointer=ref_checkpointer)
    assert "done" == result.status
    assert (["a", "b"], ["x"]) == (result.state.log, result.state.cart)

    stored = thread_state(g, ref_reopen(), "typed-json")
    assert isinstance(stored, CheckoutState)
    assert (["a", "b"], ["x"], "") == (stored.log, stored.cart, stored.intent)


def test_channels_are_derived_from_the_class_with_no_channel_calls() -> None:
    """TypedGraphTests.cs · "channels are derived from the class with no .Channel() calls"."""
    g = (
        graph("derived", CheckoutState)
        .node("a", lambda state: {"log": ["a"], "intent": "x"})
        .node("b", lambda state: {"log": ["b"], "intent": "y"})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    result = run(g)
    assert ["a", "b"] == result.state.log
    assert "y" == result.state.intent


def test_a_field_declares_a_custom_reducer() -> None:
    """TypedGraphTests.cs · ".Channel() overrides a channel with a custom reducer" (``reduce_field``)."""
    g = (
        graph("sum", SumState)
        .node("a", lambda state: {"total": 3})
        .node("b", lambda state: {"total": 4})
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )

    assert 7 == run(g).state.total
