"""Building graphs: every structural mistake is a GraphError at compile time, naming the culprit.

Cases ported from the reference's ``boundaries.test.ts`` ("GraphBuilder —
structural errors", "routers") name their reference case in the docstring.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    GraphError,
    InMemoryCheckpointer,
    RetryPolicy,
    channel,
    command,
    graph,
    run,
    send,
)
from ilmek.graph import UnreachableNodeWarning


def noop(state: Any) -> None:
    return None


def test_a_valid_graph_compiles_and_keeps_declaration_order() -> None:
    """Nodes keep the order they were declared in: that is the task order."""
    g = (
        graph("ok", {"x": channel.last_write()})
        .node("b", noop)
        .node("a", noop)
        .edge(START, "b")
        .edge(START, "a")
        .edge("a", END)
        .compile()
    )
    assert ["b", "a"] == list(g.nodes)
    assert {"x"} == set(g.channels)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda g: g.node("a", noop).edge(START, "b"), "edge '__start__' -> 'b' names unknown node 'b'"),
        (lambda g: g.node("a", noop).edge(START, "a").edge("ghost", "a"), "names unknown node 'ghost'"),
        (lambda g: g.node("a", noop).node("a", noop).edge(START, "a"), "node 'a' is declared twice"),
        (lambda g: g.node(START, noop).edge(START, END), "'__start__' is reserved"),
        (lambda g: g.node(END, noop).edge(START, END), "'__end__' is reserved"),
        (lambda g: g.node("a", noop), "has no edge from START"),
        (lambda g: g.node("a", noop).edge(START, "a").edge(END, "a"), "nothing can leave END"),
        (lambda g: g.node("a", noop).edge(START, "a").edge("a", START), "nothing can enter START"),
        (lambda g: g.node("a\0b", noop).edge(START, "a\0b"), "contains NUL, which databases cannot store"),
        (lambda g: g.node("", noop).edge(START, END), "non-empty strings"),
        (lambda g: g.node(None, noop).edge(START, END), "non-empty strings, got None"),
        (lambda g: g.node(42, noop).edge(START, END), "non-empty strings, got 42"),
        (lambda g: g.node({}, noop).edge(START, END), "non-empty strings, got {}"),
        (lambda g: g.node("a", "not callable").edge(START, "a"), "must be callable"),
        (lambda g: g.node("a", noop, retry=3).edge(START, "a"), "retry= must be a RetryPolicy"),
        (
            lambda g: g.node("a", noop).edge(START, "a").router("a", lambda s: END, destinations=["zz"]),
            "router on 'a' names unknown node 'zz'",
        ),
        (
            lambda g: g.node("a", noop, destinations=["nope"]).edge(START, "a"),
            "destinations of node 'a' names unknown node 'nope'",
        ),
    ],
)
def test_structural_mistakes_are_graph_errors_naming_the_culprit(build: Any, message: str) -> None:
    """compile() refuses the graph and says what is wrong with which part."""
    builder = build(graph("g", {"x": channel.last_write()}))
    with pytest.raises(GraphError) as caught:
        builder.compile()
    assert message in str(caught.value)


def test_a_schema_that_is_not_channels_is_refused() -> None:
    """A schema value that is not a channel, or a schema that is neither map nor attrs class, fails early."""
    with pytest.raises(GraphError, match=r"channel 'x' must be declared with ilmek\.channel"):
        graph("g", {"x": []})
    with pytest.raises(GraphError, match="a schema is a dict of channels, an attrs class or a TypedDict"):
        graph("g", 42)  # type: ignore[call-overload]
    with pytest.raises(GraphError, match="must be an attrs class"):
        graph("g", dict)


def test_router_destinations_and_node_destinations_make_nodes_reachable() -> None:
    """A node reached only by a router or a command compiles once that route is declared."""
    (
        graph("r", {"x": channel.last_write()})
        .node("a", noop)
        .node("b", noop)
        .edge(START, "a")
        .router("a", lambda s: "b", destinations=["b", END])
        .compile()
    )
    (
        graph("c", {"x": channel.last_write()})
        .node("a", lambda s: command(goto="b"), destinations=["b"])
        .node("b", noop)
        .edge(START, "a")
        .compile()
    )
    # A router without declared destinations may go anywhere, so nothing is unreachable.
    (
        graph("any", {"x": channel.last_write()})
        .node("a", noop)
        .node("b", noop)
        .edge(START, "a")
        .router("a", lambda s: send("b", {}))
        .compile()
    )


def test_a_router_straying_outside_its_destinations_raises_a_graph_error() -> None:
    """At run time a router may only go where it said it would; straying rejects the run (reference)."""
    g = (
        graph("stray", {"x": channel.last_write()})
        .node("a", noop)
        .node("b", noop)
        .edge(START, "a")
        .router("a", lambda s: "a", destinations=["b", END])
        .compile()
    )
    with pytest.raises(GraphError, match="not among its destinations"):
        run(g, {})


def test_a_router_returning_garbage_is_a_graph_error() -> None:
    """A router returning something that is not a target names what it returned."""
    g = (
        graph("junk", {"x": channel.last_write()})
        .node("a", noop)
        .edge(START, "a")
        .router("a", lambda s: 42)
        .compile()
    )
    with pytest.raises(GraphError, match="returned 42"):
        run(g, {})


def test_a_node_runs_once_per_superstep_however_many_edges_point_at_it() -> None:
    """Two predecessors in one superstep schedule their common successor once."""
    calls: list[str] = []
    g = (
        graph("join", {"log": channel.append()})
        .node("a", lambda s: {"log": "a"})
        .node("b", lambda s: {"log": "b"})
        .node("c", lambda s: calls.append("c") or {"log": "c"})
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", "c")
        .edge("b", "c")
        .compile()
    )
    assert ["a", "b", "c"] == run(g, {}).state["log"]
    assert ["c"] == calls


def test_guards_see_the_state_and_the_context() -> None:
    """`when` may take (state) or (state, ctx); a predicate dict works as a guard."""
    seen: list[Any] = []

    def guard(state: Any, ctx: Any) -> bool:
        seen.append((ctx.thread_id, ctx.step_index))
        return bool(state["go"])

    g = (
        graph("guards", {"go": channel.last_write(False), "log": channel.append()})
        .node("a", lambda s: {"log": "a"})
        .node("b", lambda s: {"log": "b"})
        .node("c", lambda s: {"log": "c"})
        .edge(START, "a")
        .edge("a", "b", when=guard)
        .edge("a", "c", when={"channel": "go", "eq": False})
        .compile()
    )
    memory = InMemoryCheckpointer()
    assert ["a", "b"] == run(g, {"go": True}, thread_id="t1", checkpointer=memory).state["log"]
    assert ["a", "c"] == run(g, {"go": False}, thread_id="t2", checkpointer=memory).state["log"]
    assert [("t1", 1), ("t2", 1)] == seen


def test_retry_policy_validates_and_computes_bounded_backoff() -> None:
    """RetryPolicy refuses max_attempts < 1 and caps its waits at max_backoff."""
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        RetryPolicy(max_attempts=0)
    policy = RetryPolicy(max_attempts=10, backoff=1.0, factor=3.0, max_backoff=5.0)
    assert [1.0, 3.0, 5.0, 5.0] == [policy.delay(n) for n in range(1, 5)]
    jittered = RetryPolicy(backoff=1.0, jitter=0.5)
    assert all(0.5 <= jittered.delay(1) <= 1.0 for _ in range(50))


def test_a_node_reached_only_by_a_goto_compiles_with_a_warning_naming_the_fix() -> None:
    """MODEL §15 / scenario 12.10: no destinations= is needed; the unreachable node is a warning."""
    builder = (
        graph("goto", {"log": channel.append()})
        .node("agent", lambda s: command(update={"log": "agent"}, goto="tools"))
        .node("tools", lambda s: {"log": "tools"})
        .edge(START, "agent")
    )
    with pytest.warns(UnreachableNodeWarning) as caught:
        g = builder.compile()
    (warning,) = caught
    message = str(warning.message)
    assert "node 'tools' of graph 'goto' cannot be reached from START" in message
    assert "add destinations=['tools'] to the node or router that routes there" in message
    assert issubclass(UnreachableNodeWarning, UserWarning)
    assert {"log": ["agent", "tools"]} == run(g, {}).state


def test_each_unreachable_node_gets_its_own_warning() -> None:
    """Two nodes nothing declares a way to reach are named one warning each, in declaration order."""
    builder = graph("g", {"x": channel.last_write()}).node("a", noop).node("b", noop).node("c", noop)
    with pytest.warns(UnreachableNodeWarning) as caught:
        builder.edge(START, "a").compile()
    assert ["node 'b'", "node 'c'"] == [str(w.message)[:8] for w in caught]


@pytest.mark.parametrize("bad", ["", None, 42, {}, "a\0b"])
def test_a_channel_name_must_be_a_non_empty_string_without_nul(bad: Any) -> None:
    """boundaries.test.ts "channel name ... is refused"; NUL too, which Postgres cannot store."""
    with pytest.raises(GraphError, match="channel name"):
        graph("g").channel(bad, channel.last_write())
    if isinstance(bad, Hashable):
        with pytest.raises(GraphError, match="channel name"):
            graph("g", {bad: channel.last_write()})


def test_a_duplicate_channel_is_refused() -> None:
    """boundaries.test.ts "a duplicate channel is refused", also over a channel of the schema dict."""
    with pytest.raises(GraphError, match="channel 'x' is declared twice"):
        graph("g").channel("x", channel.last_write(0)).channel("x", channel.append())
    with pytest.raises(GraphError, match="channel 'x' is declared twice"):
        graph("g", {"x": channel.last_write()}).channel("x", channel.append())


def test_a_router_that_is_not_a_function_is_refused_at_declaration() -> None:
    """boundaries.test.ts "a router that is not a function is refused at declaration"."""
    with pytest.raises(GraphError, match="router on 'a' must be a function"):
        graph("g").node("a", noop).router("a", {"to": "b"})  # type: ignore[arg-type]


def test_a_compiled_graph_is_frozen() -> None:
    """boundaries.test.ts "a compiled graph is frozen": nothing in it can change, the builder included."""
    builder = (
        graph("frozen", {"x": channel.last_write()})
        .node("a", noop, type="t", config={"nested": {"k": 1}})
        .edge(START, "a")
    )
    g = builder.compile()
    builder.channel("late", channel.append()).node("b", noop).edge("a", "b").router("a", lambda s: END)
    assert ["x"] == list(g.channels)
    assert ["a"] == list(g.nodes)
    assert 1 == len(g.edges)
    assert () == g.routers
    with pytest.raises(TypeError):
        g.nodes["b"] = g.nodes["a"]  # type: ignore[index]
    with pytest.raises(TypeError):
        g.channels["late"] = channel.append()  # type: ignore[index]
    with pytest.raises(TypeError):
        g.nodes["a"].config["more"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        g.edges = ()  # type: ignore[misc]
    assert isinstance(g.edges, tuple)
    assert isinstance(g.routers, tuple)


def test_a_nodes_config_is_copied_when_declared() -> None:
    """Changing the dict passed as config= afterwards does not change the node."""
    config = {"k": 1}
    g = graph("copy").node("a", noop, config=config).edge(START, "a").compile()
    config["k"] = 2
    config["more"] = 3
    assert {"k": 1} == g.nodes["a"].config


@pytest.mark.parametrize(
    ("route", "who"),
    [
        (lambda g: g.router(START, lambda s: "ghost"), "the router on '__start__'"),
        (lambda g: g.router(START, lambda s: send("ghost", {})), "the router on '__start__'"),
        (lambda g: g.edge(START, "a"), None),
    ],
    ids=["name", "send", "goto"],
)
def test_routing_to_an_unknown_node_lists_the_known_nodes(route: Any, who: str | None) -> None:
    """boundaries.test.ts "a router naming an unknown node rejects the run with a GraphError listing …"."""
    builder = graph("g", {"x": channel.last_write()}).node("a", lambda s: command(goto="ghost"))
    with pytest.raises(GraphError) as raised:
        run(route(builder).compile(), {})
    assert "routed to unknown node 'ghost'; known nodes: 'a'" in str(raised.value)
    assert (who or "the goto of node 'a'") in str(raised.value)


def test_a_router_may_return_an_empty_list_which_ends_the_run() -> None:
    """boundaries.test.ts "a router may return an empty list, which ends the run"."""
    g = (
        graph("empty", {"log": channel.append()})
        .node("a", lambda s: {"log": "a"})
        .edge(START, "a")
        .router("a", lambda s: [])
        .compile()
    )
    result = run(g, {})
    assert ("done", {"log": ["a"]}) == (result.status, result.state)


def test_duplicate_targets_from_several_routers_run_the_node_once() -> None:
    """boundaries.test.ts "duplicate targets from several routers run the node once"."""
    runs: list[str] = []
    g = (
        graph("dupes", {"x": channel.last_write()})
        .node("t", lambda s: runs.append("t"))
        .router(START, lambda s: ["t", "t"])
        .router(START, lambda s: "t")
        .edge(START, "t")
        .compile()
    )
    assert "done" == run(g, {}).status
    assert ["t"] == runs
