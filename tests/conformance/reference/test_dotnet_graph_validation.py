"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/GraphValidationTests.cs``.

Malformed graphs: what ``compile()`` refuses, then the routing and node-return
mistakes that only a run can find. Python's builder records nodes and checks
them all in ``compile()`` (SPEC §3: every structural mistake is a
``GraphError`` raised there), where the .NET builder refuses a bad node as
soon as ``.Node()`` is called; the channel checks happen at ``.channel()`` in
both. Messages are Python's (names quoted with ``'``), so each test checks
that the culprit is named rather than the reference's wording.

Node-return and write mistakes are a ``ReducerError`` in Python where the
reference uses ``GraphException``; both are node errors ending the run
``error``. Every case that touches storage runs on memory, SQLite and
Postgres.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    IlmekError,
    InvalidArgumentError,
    RecursionLimitError,
    ReducerError,
    RetryPolicy,
    channel,
    command,
    graph,
    run,
    send,
)
from ilmek.events import CustomEvent
from tests.support.helpers import Calls
from tests.support.reference import compile_allowing_a_warning


def _noop(state: Any) -> None:
    return None


# --- the builder --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [START, END])
def test_the_reserved_names_cannot_be_nodes(name: str) -> None:
    """GraphValidationTests.ReservedNodeNames: "the reserved names __start__ and __end__ cannot be nodes"."""
    with pytest.raises(GraphError, match="reserved"):
        graph("g").node(name, _noop).edge(START, name).compile()


def test_a_duplicate_node_or_channel_is_refused_naming_it() -> None:
    """GraphValidationTests.Duplicates: "a duplicate node or channel is refused, naming it"."""
    with pytest.raises(GraphError, match="node 'a' is declared twice"):
        graph("g").node("a", _noop).node("a", _noop).edge(START, "a").compile()
    with pytest.raises(GraphError, match="channel 'c' is declared twice"):
        graph("g").channel("c", channel.append()).channel("c", channel.last_write())


@pytest.mark.parametrize("attempts", [0, -3])
def test_a_retry_policy_with_fewer_than_one_attempt_is_refused(attempts: int) -> None:
    """GraphValidationTests.RetryMaxAttemptsBelowOne: "a retry policy with MaxAttempts below 1 is refused".

    Python's policy refuses itself when it is made, with a ``ValueError``
    naming the field, before it can reach a node.
    """
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=attempts)


def test_a_none_node_or_channel_name_is_a_graph_error() -> None:
    """GraphValidationTests.NullNames: "a null node id or channel name is a GraphException at the builder,
    as in TS"."""
    with pytest.raises(GraphError, match="non-empty strings, got None"):
        graph("g").node(None, _noop).compile()  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="non-empty strings, got None"):
        graph("g").channel(None, channel.last_write())  # type: ignore[arg-type]


def test_an_empty_node_or_channel_name_is_a_graph_error() -> None:
    """GraphValidationTests.EmptyNamesRefused: "an empty-string node id or channel name is refused, as in TS
    (requireName)"."""
    with pytest.raises(GraphError, match="non-empty strings, got ''"):
        graph("g").node("", _noop).compile()
    with pytest.raises(GraphError, match="non-empty strings, got ''"):
        graph("g").channel("", channel.last_write())


def test_a_none_node_function_is_a_graph_error_naming_the_node() -> None:
    """GraphValidationTests.NullNodeFunction: "a null node function is a GraphException naming the node, as in
    TS"."""
    with pytest.raises(GraphError, match="node 'a': its body must be callable, got None"):
        graph("g").node("a", None).edge(START, "a").compile()  # type: ignore[arg-type]


def test_compile_refuses_an_edge_from_an_unknown_node_or_from_end() -> None:
    """GraphValidationTests.EdgeFromUnknown: "Compile refuses an edge from an unknown node, including from
    __end__"."""
    with pytest.raises(GraphError, match="unknown node 'ghost'"):
        graph("g").node("a", _noop).edge(START, "a").edge("ghost", "a").compile()
    with pytest.raises(GraphError):
        graph("g").node("a", _noop).edge(START, "a").edge(END, "a").compile()


def test_compile_refuses_an_edge_to_an_unknown_node_or_back_to_start() -> None:
    """GraphValidationTests.EdgeToUnknown: "Compile refuses an edge to an unknown node, including back to
    __start__"."""
    with pytest.raises(GraphError, match="unknown node 'ghost'"):
        graph("g").node("a", _noop).edge(START, "a").edge("a", "ghost").compile()
    with pytest.raises(GraphError):
        graph("g").node("a", _noop).edge(START, "a").edge("a", START).compile()


def test_compile_refuses_a_graph_with_no_entry_edge() -> None:
    """GraphValidationTests.NoEntryEdge: "Compile refuses a graph with no entry edge"."""
    with pytest.raises(GraphError, match="no edge from START"):
        graph("g").node("a", _noop).edge("a", END).compile()
    with pytest.raises(GraphError):
        graph("empty").compile()


def test_an_entry_router_alone_is_an_entry() -> None:
    """GraphValidationTests.EntryRouterIsAnEntry: "an entry router alone is a valid entry edge"."""
    g = (
        graph("g", {"log": channel.append()})
        .node("a", lambda state: {"log": "a"})
        .router(START, lambda state: ["a"])
        .compile()
    )

    assert ["a"] == run(g).state["log"]


# --- routing at run time ------------------------------------------------------------------------


def _routed(router: Any) -> Any:
    """START -> a, then ``router`` after ``a``; ``a`` and ``b`` log their names."""
    return (
        graph("routed", {"log": channel.append()})
        .node("a", lambda state: {"log": "a"})
        .node("b", lambda state: {"log": "b"})
        .edge(START, "a")
        .router("a", router)
        .compile()
    )


def test_a_router_naming_an_unknown_node_fails_the_run_listing_the_known_nodes() -> None:
    """GraphValidationTests.RouterToUnknownNode: "a router naming an unknown node fails the run with a
    GraphException listing known nodes"."""
    with pytest.raises(GraphError) as raised:
        run(_routed(lambda state: ["nowhere"]))

    assert "'nowhere'" in str(raised.value)
    assert "'a', 'b'" in str(raised.value)


def test_a_router_yielding_a_none_target_fails_the_run() -> None:
    """GraphValidationTests.RouterNullTarget: "a router yielding a null target fails with a
    GraphException"."""
    with pytest.raises(GraphError, match="returned None"):
        run(_routed(lambda state: [None]))


def test_a_router_returning_none_fails_the_run() -> None:
    """GraphValidationTests.RouterReturningNull: "a router returning null itself fails with a GraphException,
    as in TS — not ArgumentNullException"."""
    with pytest.raises(GraphError, match="returned None"):
        run(_routed(lambda state: None))


def test_a_router_yielding_something_that_is_not_a_target_fails_naming_it() -> None:
    """GraphValidationTests.RouterWrongType: "a router yielding a non-string, non-Send value fails naming its
    type".

    Python's message names the value itself (``42``) rather than its type.
    """
    with pytest.raises(GraphError, match="returned 42"):
        run(_routed(lambda state: [42]))


def test_a_router_may_end_the_run_and_a_repeated_target_runs_once() -> None:
    """GraphValidationTests.RouterEndAndDedup: "a router may end the run, and duplicate targets run once"."""
    assert ["a"] == run(_routed(lambda state: [END])).state["log"]
    assert ["a"] == run(_routed(lambda state: [])).state["log"]
    assert ["a", "b"] == run(_routed(lambda state: ["b", "b", END, "b"])).state["log"]


def test_a_send_to_an_unknown_node_fails_the_run() -> None:
    """GraphValidationTests.SendToUnknownNode: "a send to an unknown node fails the run with a
    GraphException"."""
    with pytest.raises(GraphError, match="'ghost'"):
        run(_routed(lambda state: [send("ghost", None)]))


def test_a_goto_to_an_unknown_node_fails_the_run() -> None:
    """GraphValidationTests.CommandGotoUnknown: "a command goto to an unknown node fails the run with a
    GraphException"."""
    g = graph("g").node("a", lambda state: command(goto="ghost")).edge(START, "a").compile()

    with pytest.raises(GraphError, match="'ghost'"):
        run(g)


def test_two_predecessors_of_one_node_schedule_it_once() -> None:
    """GraphValidationTests.FanInDedups: "two predecessors pointing at one node schedule it once (fan-in
    dedup)"."""
    calls = Calls()
    g = (
        graph("g")
        .node("a", _noop)
        .node("b", _noop)
        .node("join", lambda state: calls.hit("join"))
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", "join")
        .edge("b", "join")
        .edge("a", "join")
        .compile()
    )

    run(g)

    assert 1 == calls["join"]


def test_a_node_without_outgoing_edges_ends_its_branch() -> None:
    """GraphValidationTests.NoOutgoingEdgeEnds: "a node with no outgoing edges simply ends its branch"."""
    g = graph("g", {"log": channel.append()}).node("a", lambda state: {"log": "a"}).edge(START, "a").compile()

    result = run(g)

    assert ("done", ["a"]) == (result.status, result.state["log"])


def test_a_raising_guard_propagates_out_of_the_run() -> None:
    """GraphValidationTests.ThrowingGuardPropagates: "a throwing guard propagates out of the run — routers and
    guards run at plan time"."""

    def guard(state: Any) -> bool:
        raise RuntimeError("guard broke")

    g = graph("g").node("a", _noop).node("b", _noop).edge(START, "a").edge("a", "b", when=guard).compile()

    with pytest.raises(RuntimeError, match=r"^guard broke$"):
        run(g)


def test_a_guard_cannot_step_or_interrupt_and_its_emits_go_nowhere() -> None:
    """GraphValidationTests.GuardHasNoJournal: "a guard cannot step or interrupt — it has no journal — and its
    Emit goes nowhere".

    The reference's guard context has an empty journal and an empty node
    name; Python's plan-time context has neither attribute.
    """
    seen: dict[str, Any] = {}

    def guard(state: Any, ctx: Any) -> bool:
        for name, call in (("step", lambda: ctx.step("s", lambda: 1)), ("interrupt", ctx.interrupt)):
            try:
                call()
            except GraphError as error:
                seen[name] = error
        ctx.emit("from a guard")
        ctx.emit_token("tok")
        seen["journal"] = hasattr(ctx, "journal")
        seen["node"] = hasattr(ctx, "node")
        return True

    g = graph("g").node("a", _noop).node("b", _noop).edge(START, "a").edge("a", "b", when=guard).compile()

    result = run(g)

    assert "done" == result.status
    assert "not available in a router or guard" in str(seen["step"])
    assert "interrupt" in str(seen["interrupt"])
    assert (False, False) == (seen["journal"], seen["node"])
    assert [] == [e for e in result.events if isinstance(e, CustomEvent)]


# --- what a node returns ------------------------------------------------------------------------


@pytest.mark.parametrize("returned", [42, "a string", True])
def test_a_node_returning_something_else_than_an_update_ends_the_run_in_error(returned: Any) -> None:
    """GraphValidationTests.NonDictionaryReturn: "a node returning something other than an update, null or a
    Command ends the run in error"."""
    g = graph("g").node("bad", lambda state: returned).edge(START, "bad").compile()

    result = run(g)

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "bad" == node
    assert isinstance(error, IlmekError)
    assert f"returned {type(returned).__name__}" in str(error)


def test_a_node_may_return_any_mapping_not_only_a_dict() -> None:
    """GraphValidationTests.MutableDictionaryReturn: "a node may return a mutable IDictionary, not only a
    read-only one".

    Python's counterpart: the usual return is a ``dict``, and any other
    mapping (here a ``UserDict``) is an update too.
    """
    g = (
        graph("g", {"v": channel.last_write()})
        .node("a", lambda state: collections.UserDict({"v": "ok"}))
        .edge(START, "a")
        .compile()
    )

    assert "ok" == run(g).state["v"]


def test_a_write_to_an_undeclared_channel_ends_the_run_in_error_and_commits_nothing(
    ref_checkpointer: Checkpointer,
) -> None:
    """GraphValidationTests.UndeclaredChannelWrite: "a write to an undeclared channel ends the run in error,
    naming node and channel, state untouched".

    The reference finds no checkpoint afterwards. Python commits a run's
    start before any node runs (README, "The input is durable"), so the
    thread holds exactly that checkpoint: ``ok``'s write was not committed
    either, and both tasks are still planned.
    """
    g = (
        graph("g", {"log": channel.append()})
        .node("ok", lambda state: {"log": "fine"})
        .node("rogue", lambda state: {"ghost": 1})
        .edge(START, "ok")
        .edge(START, "rogue")
        .compile()
    )

    result = run(g, None, thread_id="t", checkpointer=ref_checkpointer)

    assert "error" == result.status
    ((node, error),) = result.errors
    assert "rogue" == node
    assert "'ghost'" in str(error)
    assert "does not declare" in str(error)
    (start,) = ref_checkpointer.list("t")
    assert "log" not in start.channels
    assert ["ok", "rogue"] == [t.node for t in start.next]


def test_input_naming_an_undeclared_channel_is_refused_before_anything_runs() -> None:
    """GraphValidationTests.UndeclaredInput: "input naming an undeclared channel is refused before anything
    runs"."""
    calls = Calls()
    g = (
        graph("g", {"log": channel.append()})
        .node("a", lambda state: calls.hit("a"))
        .edge(START, "a")
        .compile()
    )

    with pytest.raises(ReducerError, match="'nope'"):
        run(g, {"nope": 1})

    assert 0 == calls["a"]


# --- the recursion limit ------------------------------------------------------------------------


def test_a_cycle_stops_after_exactly_recursion_limit_supersteps() -> None:
    """GraphValidationTests.RecursionLimit: "a cycle hits the recursion limit after exactly RecursionLimit
    supersteps".

    The reference's message also names the nodes still planned (``loop``);
    Python's names the thread and the checkpoint that stands.
    """
    remaining: list[int] = []

    def loop(state: Any, ctx: Any) -> None:
        remaining.append(ctx.remaining_steps)

    g = compile_allowing_a_warning(graph("g").node("loop", loop).edge(START, "loop").edge("loop", "loop"))

    with pytest.raises(RecursionLimitError, match="3 supersteps") as raised:
        run(g, recursion_limit=3)

    assert 3 == raised.value.limit
    assert [3, 2, 1] == remaining


def test_a_recursion_limit_of_zero_runs_nothing() -> None:
    """GraphValidationTests.RecursionLimitZero: "a recursion limit of zero refuses to run even one superstep".

    Python refuses the argument itself (SPEC §4: a bad argument raises
    before any node runs) with an ``InvalidArgumentError``, where the
    reference raises its recursion-limit error.
    """
    calls = Calls()
    g = graph("g").node("a", lambda state: calls.hit("a")).edge(START, "a").compile()

    with pytest.raises(InvalidArgumentError, match="recursion_limit"):
        run(g, recursion_limit=0)

    assert 0 == calls["a"]
