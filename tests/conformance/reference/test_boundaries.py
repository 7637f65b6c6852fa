"""Ported from the reference's ``ts/packages/core/test/boundaries.test.ts``: its running cases.

Malformed and hostile input at the boundaries a run crosses: run input, node
returns, routers, the recursion limit, and graphs loaded from a spec that then
run. Each must fail loudly with ilmek's own error, naming the bad part.

Left to the channel/spec port: "GraphBuilder — structural errors" and
"fromSpec — malformed documents" (building and validating only). Ported here
although they sit near the spec: "declarative predicates route as
documented" and "fromSpec — reducers", because they run graphs.

Not ported: "an input key set to undefined counts as not written" (``None`` is
a value in Python, there is no undefined), "a node that throws a non-Error
value" (Python raises only exceptions), and the predicate case "eq null does
not match an unset channel" (an unset channel reads ``None`` in Python, as it
reads null in .NET, where the reference says it matches).
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    IlmekError,
    RecursionLimitError,
    ReducerError,
    channel,
    from_spec,
    graph,
    history,
    run,
    send,
    stream,
    thread_state,
    to_spec,
)
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)

# The reference's names shadow Object.prototype members; Python's shadow dict and object attributes.
SHADOWING_NAMES = ["constructor", "toString", "hasOwnProperty", "__proto__", "__class__", "items"]


def total(current: Any, more: int) -> int:
    """A reducer summing what is written (``current`` is ``None`` on the first write)."""
    return (current or 0) + more


# --- channel names that shadow built-in members ------------------------------------------


@pytest.mark.parametrize("name", SHADOWING_NAMES)
def test_a_channel_with_a_shadowing_name_folds_like_any_other(name: str) -> None:
    """boundaries · "a channel named <name> declares, defaults and folds like any other"."""
    g = (
        graph("shadow", {name: channel.append()})
        .node("w", lambda state: {name: [1, 2]})
        .edge(START, "w")
        .edge("w", END)
        .compile()
    )

    result = run(g, {name: [0]})

    assert "done" == result.status
    assert {name: [0, 1, 2]} == result.state
    assert dict is type(result.state)


@pytest.mark.parametrize("name", SHADOWING_NAMES)
def test_writing_an_undeclared_shadowing_channel_is_a_node_error_naming_it(name: str) -> None:
    """boundaries · "writing an undeclared <name> channel is a GraphError naming it".

    SPEC §2: a node error naming node and channel (its class is ilmek's; the reference's is GraphError).
    """
    g = (
        graph("shadow", {"log": channel.append()})
        .node("w", lambda state: {name: 1})
        .edge(START, "w")
        .compile()
    )

    result = run(g)

    assert "error" == result.status
    node, error = result.errors[0]
    assert "w" == node
    assert isinstance(error, IlmekError)
    assert repr(name) in str(error)


def test_hostile_proto_input_is_refused_and_pollutes_nothing() -> None:
    """boundaries · "hostile __proto__ input does not pollute Object.prototype"."""
    g = graph("proto", {"log": channel.append()}).node("w", lambda state: {}).edge(START, "w").compile()

    with pytest.raises(IlmekError, match="__proto__"):
        run(g, {"__proto__": {"polluted": True}})

    assert not hasattr({}, "polluted")


def test_an_unwritten_channel_named_constructor_reads_its_default() -> None:
    """boundaries · "an unwritten channel named constructor reads its default, not Object"."""
    g = (
        graph("ctor", {"constructor": channel.last_write("default")})
        .node(
            "w",
            lambda state: {
                "constructor": f"saw {type(state['constructor']).__name__}:{state['constructor']}"
            },
        )
        .edge(START, "w")
        .edge("w", END)
        .compile()
    )

    assert "saw str:default" == run(g).state["constructor"]


# --- run input -----------------------------------------------------------------------------------


def test_input_to_an_undeclared_channel_is_refused_before_anything_runs() -> None:
    """boundaries · "input to an undeclared channel is refused before anything runs" (no event either)."""
    calls = Calls()
    g = (
        graph("input", {"a": channel.last_write(0)})
        .node("w", lambda state: calls.hit("w"))
        .edge(START, "w")
        .compile()
    )
    events: list[Any] = []

    with pytest.raises(IlmekError, match="'nope'"):
        events.extend(stream(g, {"nope": 1}))

    assert {} == dict(calls)
    assert [] == [event.type for event in events]


def test_input_a_reducer_rejects_is_a_reducer_error_naming_the_channel() -> None:
    """boundaries · "input whose reducer rejects it surfaces as a ReducerError naming the channel"."""

    def numbers_only(current: Any, more: Any) -> int:
        if not isinstance(more, int):
            raise TypeError("numbers only")
        return (current or 0) + more

    g = (
        graph("strict", {"sum": channel.reduce(numbers_only, 0)})
        .node("w", lambda state: {})
        .edge(START, "w")
        .compile()
    )

    with pytest.raises(ReducerError, match="'sum'") as raised:
        run(g, {"sum": "seven"})

    assert "sum" == raised.value.channel
    assert isinstance(raised.value.__cause__, TypeError)


# --- node return values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["done", 42, True, 10**30, object()], ids=["string", "number", "boolean", "bigint", "symbol"]
)
def test_returning_a_non_update_is_a_node_error(value: Any) -> None:
    """boundaries · "returning <a string, number, boolean, bigint, symbol> is a node error, not a crash"."""
    g = graph("returns", {"log": channel.append()}).node("w", lambda state: value).edge(START, "w").compile()

    result = run(g)

    assert "error" == result.status
    node, error = result.errors[0]
    assert "w" == node
    assert isinstance(error, IlmekError)
    assert type(value).__name__ in str(error)


def test_returning_a_list_is_refused() -> None:
    """boundaries · "returning an array is read as an update keyed by index, and refused"."""
    g = graph("returns", {"log": channel.append()}).node("w", lambda state: ["x"]).edge(START, "w").compile()

    result = run(g)

    assert "error" == result.status
    assert "w" == result.errors[0][0]
    assert isinstance(result.errors[0][1], IlmekError)


def test_a_failing_reduce_leaves_no_checkpoint_for_its_superstep(ref_checkpointer: Checkpointer) -> None:
    """boundaries · "a failing reduce leaves the checkpoint untouched (superstep atomicity)".

    Python commits the input first (beyond ilmek/1): the thread keeps exactly that checkpoint.
    """
    g = (
        graph("atomic", {"n": channel.last_write(0)})
        .node("good", lambda state: {"n": 1})
        .node("bad", lambda state: {"nope": 1})
        .edge(START, "good")
        .edge(START, "bad")
        .compile()
    )

    result = run(g, {"n": 5}, thread_id="t-atomic", checkpointer=ref_checkpointer)

    assert "error" == result.status
    assert "bad" == result.errors[0][0]
    assert {"n": 5} == thread_state(g, ref_checkpointer, "t-atomic")
    assert ["input"] == [c.metadata.get("source") for c in history(ref_checkpointer, "t-atomic")]


def test_every_failure_of_a_superstep_is_reported() -> None:
    """boundaries · "when several tasks fail in one superstep, every failure is reported"."""

    def broken(name: str) -> Any:
        def node(state: dict[str, Any]) -> None:
            raise RuntimeError(f"{name} broke")

        return node

    g = (
        graph("both", {"log": channel.append()})
        .node("a", broken("a"))
        .node("b", broken("b"))
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )

    result = run(g)

    assert [("a", "a broke"), ("b", "b broke")] == sorted((node, str(e)) for node, e in result.errors)


# --- routers -------------------------------------------------------------------------------------------


def test_a_router_naming_an_unknown_node_raises_listing_the_known_ones() -> None:
    """boundaries · "a router naming an unknown node rejects the run with a GraphError listing known …"."""
    g = (
        graph("ghost", {"log": channel.append()})
        .node("a", lambda state: {})
        .router(START, lambda s: "ghost")
        .compile()
    )

    with pytest.raises(GraphError, match="'ghost'") as raised:
        run(g)

    assert "'a'" in str(raised.value)


def test_a_router_returning_none_is_refused_as_an_unknown_target() -> None:
    """boundaries · "a router returning undefined is refused as an unknown target" (undefined is None)."""
    g = graph("none").node("a", lambda state: {}).router(START, lambda state: None).compile()

    with pytest.raises(GraphError, match="None"):
        run(g)


def test_a_send_to_an_unknown_node_is_refused() -> None:
    """boundaries · "a send to an unknown node is refused"."""
    g = graph("send").node("a", lambda state: {}).router(START, lambda state: send("ghost", {})).compile()

    with pytest.raises(GraphError, match="'ghost'"):
        run(g)


def test_a_router_may_return_an_empty_list_which_ends_the_run() -> None:
    """boundaries · "a router may return an empty list, which ends the run"."""
    g = (
        graph("empty", {"log": channel.append()})
        .node("a", lambda state: {"log": ["a"]})
        .edge(START, "a")
        .router("a", lambda state: [])
        .compile()
    )

    result = run(g)

    assert ("done", ["a"]) == (result.status, result.state["log"])


def test_duplicate_targets_of_several_routers_run_the_node_once() -> None:
    """boundaries · "duplicate targets from several routers run the node once"."""
    calls = Calls()
    g = (
        graph("dupes")
        .node("t", lambda state: calls.hit("t"))
        .router(START, lambda state: ["t", "t"])
        .router(START, lambda state: "t")
        .edge(START, "t")
        .compile()
    )

    run(g)

    assert {"t": 1} == dict(calls)


def test_a_cycle_hits_the_recursion_limit() -> None:
    """boundaries · "a cycle hits the recursion limit with a RecursionLimitError"."""
    g = (
        graph("cycle", {"n": channel.reduce(total, 0)})
        .node("loop", lambda state: {"n": 1})
        .edge(START, "loop")
        .edge("loop", "loop")
        .compile()
    )

    with pytest.raises(RecursionLimitError):
        run(g, {}, recursion_limit=3)


def test_a_recursion_limit_of_zero_refuses_even_the_first_superstep() -> None:
    """boundaries · "a recursion limit of zero refuses even the first superstep".

    The reference raises RecursionLimitError; SPEC §4 lets a bad argument raise before any node runs.
    """
    calls = Calls()
    g = graph("zero").node("a", lambda state: calls.hit("a")).edge(START, "a").compile()

    with pytest.raises((RecursionLimitError, ValueError)):
        run(g, {}, recursion_limit=0)

    assert {} == dict(calls)


def test_exactly_n_supersteps_fit_in_a_limit_of_n() -> None:
    """boundaries · "the recursion limit counts supersteps, so exactly N steps fit in a limit of N"."""
    g = (
        graph("three", {"n": channel.reduce(total, 0)})
        .node("a", lambda state: {"n": 1})
        .node("b", lambda state: {"n": 1})
        .node("c", lambda state: {"n": 1})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .compile()
    )

    assert 3 == run(g, {}, recursion_limit=3).state["n"]
    with pytest.raises(RecursionLimitError):
        run(g, {}, recursion_limit=2)


# --- declarative predicates route as documented ----------------------------------------------------

UNSET = object()


def routes_to_yes(when: dict[str, Any], value: Any) -> bool:
    """Run a spec graph whose START edge to ``yes`` is guarded by ``when``; whether ``yes`` ran."""

    def say(text: str) -> Any:
        return lambda config: lambda state: {"out": [text]}

    spec = {
        "name": "p",
        "channels": {"v": {"reducer": "last_write"}, "out": {"reducer": "append"}},
        "nodes": [{"id": "yes", "type": "yes"}, {"id": "no", "type": "no"}],
        "edges": [{"from": START, "to": "yes", "when": when}, {"from": START, "to": "no"}],
    }
    g = from_spec(spec, {"yes": say("yes"), "no": say("no")})
    result = run(g, {} if value is UNSET else {"v": value})
    assert "done" == result.status, result.errors
    return "yes" in result.state["out"]


@pytest.mark.parametrize(
    ("when", "value", "expected"),
    [
        pytest.param({"channel": "v", "eq": 1}, 1, True, id="eq matches strictly"),
        pytest.param({"channel": "v", "eq": 1}, "1", False, id="eq does not coerce"),
        pytest.param({"channel": "v", "neq": "x"}, "y", True, id="neq"),
        pytest.param({"channel": "v", "in": ["a", "b"]}, "b", True, id="in matches a member"),
        pytest.param({"channel": "v", "in": ["a", "b"]}, "c", False, id="in misses a non-member"),
        pytest.param({"channel": "v", "gt": 5}, 6, True, id="gt on a number"),
        pytest.param({"channel": "v", "gt": 5}, 5, False, id="gt is false at the boundary"),
        pytest.param({"channel": "v", "gt": 5}, "6", False, id="gt refuses a numeric string"),
        pytest.param({"channel": "v", "lt": 5}, 4, True, id="lt on a number"),
        pytest.param({"channel": "v", "lt": 5}, None, False, id="lt refuses null"),
        pytest.param({"channel": "v", "truthy": True}, [], False, id="truthy: an empty list is falsy"),
        pytest.param({"channel": "v", "truthy": True}, {}, False, id="truthy: an empty object is falsy"),
        pytest.param({"channel": "v", "truthy": True}, "", False, id="truthy: an empty string is falsy"),
        pytest.param({"channel": "v", "truthy": True}, 0, False, id="truthy: zero is falsy"),
        pytest.param(
            {"channel": "v", "truthy": True}, {"a": 1}, True, id="truthy: a non-empty object is truthy"
        ),
        pytest.param(
            {"channel": "v", "truthy": False}, UNSET, True, id="truthy: false matches an unset channel"
        ),
        pytest.param({"channel": "v", "eq": None}, None, True, id="eq null matches a null channel"),
        pytest.param({"channel": "v", "eq": None}, "x", False, id="eq null does not match a value"),
        pytest.param({"channel": "v", "eq": None}, 0, False, id="eq null does not match zero"),
        pytest.param({"channel": "v", "eq": None}, False, False, id="eq null does not match false"),
        pytest.param({"channel": "v", "neq": None}, "x", True, id="neq null matches a value"),
        pytest.param({"channel": "v", "neq": None}, 0, True, id="neq null matches zero"),
        pytest.param({"channel": "v", "neq": None}, None, False, id="neq null refuses a null channel"),
        pytest.param({"channel": "v", "in": ["a", None]}, None, True, id="in may hold null"),
        pytest.param({"channel": "v", "in": ["a"]}, None, False, id="in without null misses a null channel"),
    ],
)
def test_a_declarative_predicate_routes_as_documented(
    when: dict[str, Any], value: Any, expected: bool
) -> None:
    """boundaries · "declarative predicates route as documented" (one reference case per parameter)."""
    assert expected == routes_to_yes(when, value)


# --- fromSpec: reducers -----------------------------------------------------------------------------


def test_a_merge_channel_from_a_spec_merges_shallowly_and_round_trips() -> None:
    """boundaries · "a merge channel from a spec merges shallowly and round-trips"."""
    spec = {
        "name": "m",
        "channels": {"profile": {"reducer": "merge"}},
        "nodes": [
            {"id": "a", "type": "set", "config": {"patch": {"name": "ada"}}},
            {"id": "b", "type": "set", "config": {"patch": {"lang": "tr"}}},
        ],
        "edges": [{"from": START, "to": "a"}, {"from": "a", "to": "b"}],
    }
    g = from_spec(spec, {"set": lambda config: lambda state: {"profile": config["patch"]}})

    assert {"id": 1, "name": "ada", "lang": "tr"} == run(g, {"profile": {"id": 1}}).state["profile"]
    assert spec == to_spec(g)


def test_a_channel_with_no_reducer_named_is_last_write() -> None:
    """boundaries · "a channel with no reducer named defaults to last_write" (a Python graph needs a name)."""
    spec = {
        "name": "d",
        "channels": {"v": {}},
        "nodes": [{"id": "a", "type": "t"}],
        "edges": [{"from": START, "to": "a"}],
    }
    g = from_spec(spec, {"t": lambda config: lambda state: {"v": 2}})

    assert 2 == run(g, {"v": 1}).state["v"]
    assert {"v": {"reducer": "last_write"}} == to_spec(g)["channels"]
