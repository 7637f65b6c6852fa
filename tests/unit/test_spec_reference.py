"""Graphs as data, against the reference: its spec documents load, run and round-trip unchanged.

Each test ports a case of the reference's ``spec.test.ts``, ``boundaries.test.ts``
("fromSpec — malformed documents", "declarative predicates route as
documented", "fromSpec — reducers") or the .NET port's ``SpecTests.cs``, named
in its docstring, with the spec written exactly as the reference writes it.
Python's JSON-strict comparisons (a boolean is never a number) are tested
here too, since they exist so that one document routes alike everywhere.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from ilmek import END, START, GraphError, channel, graph, run
from ilmek.predicates import Predicate, json_equal, truthy
from ilmek.spec import from_spec, to_spec
from tests.support.reference import SUPPORT_REGISTRY, SUPPORT_SPEC

pytestmark = pytest.mark.timeout(60)

NodeFactory = Callable[[Mapping[str, Any]], Callable[..., Any]]

# spec.test.ts's DOC: "exactly the kind of document a drag-and-drop builder would store in a row".
DOC = SUPPORT_SPEC
REGISTRY: dict[str, NodeFactory] = SUPPORT_REGISTRY


def doc() -> dict[str, Any]:
    """A fresh copy of DOC, which tests may edit."""
    return copy.deepcopy(DOC)


def test_round_trip_of_the_reference_document() -> None:
    """spec.test.ts "§12.6 compile(spec) |> toSpec() round-trips", also through JSON text."""
    assert DOC == to_spec(from_spec(doc(), REGISTRY))
    assert DOC == to_spec(from_spec(json.loads(json.dumps(DOC)), REGISTRY))


def test_a_spec_built_graph_runs_and_its_predicate_routes() -> None:
    """spec.test.ts "a spec-built graph runs, and its declarative predicate routes"."""
    result = run(from_spec(doc(), REGISTRY), {})
    assert "done" == result.status
    assert {"messages": ["bought"], "intent": "buy"} == result.state


def test_flipping_one_config_value_reroutes_the_graph() -> None:
    """spec.test.ts "flipping one config value in the document reroutes the graph"."""
    browsing = doc()
    browsing["nodes"][0]["config"] = {"intent": "browse"}
    assert ["browsed"] == run(from_spec(browsing, REGISTRY), {}).state["messages"]


# --- refusals: what a document cannot honestly hold (spec.test.ts) --------------------


def test_a_code_defined_router_will_not_serialize() -> None:
    """spec.test.ts "a code-defined router will not serialize"."""
    g = (
        graph("coded")
        .channel("x", channel.last_write())
        .node("a", lambda s: {}, type="noop")
        .edge(START, "a")
        .router("a", lambda s: END)
        .compile()
    )
    with pytest.raises(GraphError, match="router on 'a' is code"):
        to_spec(g)


def test_a_node_with_no_type_will_not_serialize() -> None:
    """spec.test.ts "a node with no type will not serialize"."""
    g = graph("anon").channel("x", channel.last_write()).node("a", lambda s: {}).edge(START, "a").compile()
    with pytest.raises(GraphError, match="node 'a' has no type"):
        to_spec(g)


def test_a_hand_written_guard_will_not_serialize() -> None:
    """spec.test.ts "a hand-written guard with no declarative equivalent will not serialize"."""
    g = (
        graph("guarded")
        .channel("x", channel.last_write())
        .node("a", lambda s: {}, type="noop")
        .edge(START, "a")
        .edge("a", END, when=lambda state: state.get("x") == 1)
        .compile()
    )
    with pytest.raises(GraphError, match="guarded by a Python function"):
        to_spec(g)


def test_a_custom_reducer_will_not_serialize() -> None:
    """spec.test.ts "a custom reducer will not serialize"."""
    g = (
        graph("custom")
        .channel("total", channel.reduce(lambda current, incoming: (current or 0) + incoming, 0))
        .node("a", lambda s: {}, type="noop")
        .edge(START, "a")
        .compile()
    )
    with pytest.raises(GraphError, match="folds with a Python function"):
        to_spec(g)


def test_an_unknown_node_type_names_what_the_registry_knows() -> None:
    """spec.test.ts "an unknown node type names what the registry does know"."""
    spec = {**doc(), "nodes": [{"id": "x", "type": "nope", "config": {}}]}
    with pytest.raises(GraphError, match=r"unknown node type 'nope' \(registered: say, set_intent\)"):
        from_spec(spec, REGISTRY)


def test_a_predicate_may_only_reference_a_declared_channel() -> None:
    """spec.test.ts "a predicate may only reference a declared channel"."""
    spec = {
        **doc(),
        "edges": [
            {"from": "__start__", "to": "classify"},
            {"from": "classify", "to": "buy", "when": {"channel": "ghost", "eq": 1}},
        ],
    }
    with pytest.raises(GraphError, match="channel 'ghost' is not declared"):
        from_spec(spec, REGISTRY)


def test_a_stored_graph_may_not_name_an_unknown_reducer() -> None:
    """spec.test.ts "a stored graph may not name an unknown reducer"."""
    spec = {**doc(), "channels": {"messages": {"reducer": "eval_this"}}}
    with pytest.raises(GraphError, match="unknown reducer 'eval_this'"):
        from_spec(spec, REGISTRY)


# --- fromSpec — malformed documents (boundaries.test.ts) ------------------------------

NOOP: dict[str, NodeFactory] = {"noop": lambda config: lambda state: {}}
BASE: dict[str, Any] = {
    "name": "doc",
    "channels": {"intent": {"reducer": "last_write"}},
    "nodes": [{"id": "a", "type": "noop"}],
    "edges": [{"from": START, "to": "a"}],
}


def base(**changes: Any) -> dict[str, Any]:
    """boundaries.test.ts's base document with some keys replaced."""
    return {**copy.deepcopy(BASE), **changes}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (base(channels={"intent": None}), "spec.channels.intent: expected an object, got null"),
        (base(nodes=[None]), r"spec.nodes\[0\]: expected an object, got null"),
        (base(nodes=[{"type": "noop"}]), r"spec.nodes\[0\].id: required"),
        (base(nodes=[{"id": "", "type": "noop"}]), r"spec.nodes\[0\].id: expected a non-empty string"),
        (base(nodes=[{"id": "a"}]), r"spec.nodes\[0\].type: required"),
        (base(edges=["a->b"]), r"spec.edges\[0\]: expected an object, got string"),
        (base(edges=[*BASE["edges"], {"from": "a", "to": "ghost"}]), "unknown node 'ghost'"),
        (base(edges=[*BASE["edges"], {"to": "a"}]), r"spec.edges\[1\].from: required"),
        (base(edges=[*BASE["edges"], {"from": "a"}]), r"spec.edges\[1\].to: required"),
        (base(edges=[{"from": START, "to": "a", "when": {"eq": 1}}]), "expected a channel name"),
        (
            base(edges=[{"from": START, "to": "a", "when": {"channel": "intent", "like": "%x"}}]),
            "unknown operator 'like'",
        ),
        (
            base(edges=[{"from": START, "to": "a", "when": {"channel": "intent", "in": "buy"}}]),
            r"spec.edges\[0\].when.in: expected a list",
        ),
        ({"name": None}, "has no edge from START"),
    ],
    ids=[
        "a channel config that is not an object",
        "a node that is not an object",
        "a node with no id",
        "a node with an empty id",
        "a node with no type",
        "an edge that is not an object",
        "an edge to a node the document does not define",
        "an edge with no from",
        "an edge with no to",
        "a predicate with no channel key is malformed",
        "a predicate with no known operator is refused",
        "an in predicate whose operand is not a list is refused",
        "a document missing channels, nodes and edges will not compile",
    ],
)
def test_a_malformed_document_is_a_graph_error(spec: dict[str, Any], message: str) -> None:
    """boundaries.test.ts "fromSpec — malformed documents": a GraphError naming the bad part."""
    with pytest.raises(GraphError, match=message):
        from_spec(spec, NOOP)


@pytest.mark.parametrize("document", [None, "graph", 7, []])
def test_a_spec_that_is_not_an_object_is_a_graph_error(document: Any) -> None:
    """boundaries.test.ts "a spec that is ... is a GraphError"."""
    with pytest.raises(GraphError, match="spec: expected an object"):
        from_spec(document, NOOP)


def test_a_registry_factory_returning_a_non_function_is_a_graph_error() -> None:
    """boundaries.test.ts "a registry builder that returns a non-function is a GraphError"."""
    with pytest.raises(GraphError, match="factory for type 'noop' returned 'nope', not a node function"):
        from_spec(base(), {"noop": lambda config: "nope"})


def test_a_null_name_round_trips_as_null() -> None:
    """boundaries.test.ts "toSpec of a graph with an empty name round-trips the null name"."""
    g = from_spec(base(name=None), NOOP)
    assert "unnamed" == g.name
    assert not g.named
    exported = to_spec(g)
    assert exported["name"] is None
    assert exported == to_spec(from_spec(exported, NOOP))
    assert "unnamed" not in g.to_mermaid()


def test_missing_name_and_collections_read_as_null_and_empty() -> None:
    """GraphSpec's name and collections default like the reference's (`?? {}`); exported explicitly."""
    spec = {"edges": [{"from": START, "to": END}], "channels": None}
    assert {"name": None, "channels": {}, "nodes": [], "edges": [{"from": START, "to": END}]} == to_spec(
        from_spec(spec, NOOP)
    )


def test_a_null_config_reads_as_an_empty_one() -> None:
    """SpecNode.Config is null when a .NET document leaves it out; it exports as {}."""
    spec = base(nodes=[{"id": "a", "type": "noop", "config": None}])
    assert [{"id": "a", "type": "noop", "config": {}}] == to_spec(from_spec(spec, NOOP))["nodes"]


# --- declarative predicates route as documented (boundaries.test.ts, SpecTests.cs) ---

MISSING = object()


def routes(when: Mapping[str, Any] | None, value: Any) -> bool:
    """Whether boundaries.test.ts's two-way document takes its guarded edge for channel value ``value``."""

    def say(text: str) -> NodeFactory:
        return lambda config: lambda state: {"out": [text]}

    edge: dict[str, Any] = {"from": START, "to": "yes"}
    if when is not None:
        edge["when"] = when
    spec = {
        "name": "p",
        "channels": {"v": {"reducer": "last_write"}, "out": {"reducer": "append"}},
        "nodes": [{"id": "yes", "type": "yes"}, {"id": "no", "type": "no"}],
        "edges": [edge, {"from": START, "to": "no"}],
    }
    g = from_spec(spec, {"yes": say("yes"), "no": say("no")})
    state = run(g, {} if value is MISSING else {"v": value}).state
    return "yes" in state["out"]


PREDICATE_CASES: list[tuple[str, dict[str, Any], Any, bool]] = [
    # boundaries.test.ts, in its order.
    ("eq matches strictly", {"channel": "v", "eq": 1}, 1, True),
    ("eq does not coerce", {"channel": "v", "eq": 1}, "1", False),
    ("neq", {"channel": "v", "neq": "x"}, "y", True),
    ("in matches a member", {"channel": "v", "in": ["a", "b"]}, "b", True),
    ("in misses a non-member", {"channel": "v", "in": ["a", "b"]}, "c", False),
    ("gt on a number", {"channel": "v", "gt": 5}, 6, True),
    ("gt is false at the boundary", {"channel": "v", "gt": 5}, 5, False),
    ("gt refuses a numeric string", {"channel": "v", "gt": 5}, "6", False),
    ("lt on a number", {"channel": "v", "lt": 5}, 4, True),
    ("lt refuses null", {"channel": "v", "lt": 5}, None, False),
    ("truthy: an empty list is falsy", {"channel": "v", "truthy": True}, [], False),
    ("truthy: an empty object is falsy", {"channel": "v", "truthy": True}, {}, False),
    ("truthy: an empty string is falsy", {"channel": "v", "truthy": True}, "", False),
    ("truthy: zero is falsy", {"channel": "v", "truthy": True}, 0, False),
    ("truthy: a non-empty object is truthy", {"channel": "v", "truthy": True}, {"a": 1}, True),
    ("truthy: false matches an unset channel", {"channel": "v", "truthy": False}, MISSING, True),
    ("eq null matches a null channel", {"channel": "v", "eq": None}, None, True),
    ("eq null does not match a value", {"channel": "v", "eq": None}, "x", False),
    ("eq null does not match zero", {"channel": "v", "eq": None}, 0, False),
    ("eq null does not match false", {"channel": "v", "eq": None}, False, False),
    ("eq null does not match an unset channel", {"channel": "v", "eq": None}, MISSING, False),
    ("neq null matches a value", {"channel": "v", "neq": None}, "x", True),
    ("neq null matches zero", {"channel": "v", "neq": None}, 0, True),
    ("neq null refuses a null channel", {"channel": "v", "neq": None}, None, False),
    ("in may hold null", {"channel": "v", "in": ["a", None]}, None, True),
    ("in without null misses a null channel", {"channel": "v", "in": ["a"]}, None, False),
    # SpecTests.cs: a JSON document has one number type; a boolean is not a number.
    ("eq on a number matches across int and float", {"channel": "v", "eq": 3}, 3.0, True),
    ("neq on numbers is numeric", {"channel": "v", "neq": 3}, 3.0, False),
    ("in is numeric", {"channel": "v", "in": [1, 2, 3]}, 2.0, True),
    ("gt refuses a bool channel", {"channel": "v", "gt": 0}, True, False),
    ("lt on a float", {"channel": "v", "lt": 3}, 2.5, True),
    ("truthy: false is falsy", {"channel": "v", "truthy": True}, False, False),
    ("truthy: 0.0 is falsy", {"channel": "v", "truthy": True}, 0.0, False),
    ("truthy: NaN is falsy", {"channel": "v", "truthy": True}, math.nan, False),
    ("truthy: a non-empty string is truthy", {"channel": "v", "truthy": True}, "x", True),
    ("truthy: -1 is truthy", {"channel": "v", "truthy": True}, -1, True),
    ("truthy: a non-empty list is truthy", {"channel": "v", "truthy": True}, [1], True),
    ("truthy false matches zero", {"channel": "v", "truthy": False}, 0, True),
    # Python's bool is an int; JSON's is not.
    ("eq 1 does not match true", {"channel": "v", "eq": 1}, True, False),
    ("eq true does not match 1", {"channel": "v", "eq": True}, 1, False),
    ("eq false does not match 0", {"channel": "v", "eq": False}, 0, False),
    ("eq 0 does not match false", {"channel": "v", "eq": 0}, False, False),
    ("neq 1 matches true", {"channel": "v", "neq": 1}, True, True),
    ("in [1, 2] misses true", {"channel": "v", "in": [1, 2]}, True, False),
    ("in [false] misses 0", {"channel": "v", "in": [False]}, 0, False),
    ("gt 0 refuses true", {"channel": "v", "gt": 0}, True, False),
    ("lt 1 refuses false", {"channel": "v", "lt": 1}, False, False),
    ("eq compares lists item by item", {"channel": "v", "eq": [1, True]}, [1, True], True),
    ("eq on lists keeps bool apart", {"channel": "v", "eq": [1, True]}, [1, 1], False),
    ("eq on dicts is structural", {"channel": "v", "eq": {"a": [1]}}, {"a": [1.0]}, True),
    ("eq on dicts keeps bool apart", {"channel": "v", "eq": {"a": 0}}, {"a": False}, False),
    ("eq on dicts wants the same keys", {"channel": "v", "eq": {"a": 1}}, {"a": 1, "b": 2}, False),
    ("in holds lists", {"channel": "v", "in": [[1, 2], [3]]}, [1, 2], True),
    ("a string never equals a list", {"channel": "v", "eq": "ab"}, ["a", "b"], False),
]


@pytest.mark.parametrize(
    ("when", "value", "expected"),
    [case[1:] for case in PREDICATE_CASES],
    ids=[case[0] for case in PREDICATE_CASES],
)
def test_declarative_predicates_route_as_documented(when: dict[str, Any], value: Any, expected: bool) -> None:
    """boundaries.test.ts "declarative predicates route as documented" and SpecTests.cs predicates."""
    assert expected == routes(when, value)


def test_an_unguarded_edge_is_always_taken() -> None:
    """The document's control: without when, both edges are taken."""
    assert routes(None, "anything")


def test_json_equal_and_truthy_follow_json() -> None:
    """The two primitives behind the predicates, on values a run can hold but a document cannot."""
    assert json_equal((1, 2), [1.0, 2])
    assert not json_equal((True,), [1])
    assert not json_equal(None, MISSING)
    assert truthy({1})
    assert not truthy(())
    assert truthy(object())


# --- ne, an alias of neq, and the Python extensions ------------------------------------


def test_ne_is_an_alias_of_neq_exported_as_neq() -> None:
    """`ne` routes like `neq`; a spec or a builder predicate written with it exports `neq`."""
    assert routes({"channel": "v", "ne": "x"}, "y")
    assert not routes({"channel": "v", "ne": None}, None)
    written = doc()
    written["edges"][2]["when"] = {"channel": "intent", "ne": "buy"}
    assert DOC == to_spec(from_spec(written, REGISTRY))
    nested = Predicate({"not": {"any": [{"channel": "x", "ne": 1}, {"all": [{"channel": "y", "ne": 2}]}]}})
    expected = {"not": {"any": [{"channel": "x", "neq": 1}, {"all": [{"channel": "y", "neq": 2}]}]}}
    assert expected == nested.spec
    g = (
        graph("alias", {"intent": channel.last_write()})
        .node("a", lambda s: None, type="noop")
        .edge(START, "a", when={"channel": "intent", "ne": "buy"})
        .compile()
    )
    assert {"channel": "intent", "neq": "buy"} == to_spec(g)["edges"][0]["when"]


def test_python_extensions_follow_the_same_json_rules() -> None:
    """not_in, ge and le compare as eq/in/gt do: a boolean is never a number."""
    assert routes({"channel": "v", "not_in": [1, 2]}, True)
    assert not routes({"channel": "v", "not_in": [1, 2]}, 1.0)
    assert routes({"channel": "v", "ge": 5}, 5)
    assert not routes({"channel": "v", "ge": 0}, True)
    assert routes({"channel": "v", "le": 5}, 5.0)
    assert not routes({"channel": "v", "le": 5}, "4")
    assert routes({"channel": "v", "not_in": ["a"]}, MISSING)
    assert routes({"channel": "v", "exists": False}, MISSING)


# --- fromSpec — reducers (boundaries.test.ts) -----------------------------------------


def test_a_merge_channel_from_a_spec_merges_shallowly_and_round_trips() -> None:
    """boundaries.test.ts "a merge channel from a spec merges shallowly and round-trips"."""
    spec = {
        "name": "m",
        "channels": {"profile": {"reducer": "merge"}},
        "nodes": [
            {"id": "a", "type": "set", "config": {"patch": {"name": "ada"}}},
            {"id": "b", "type": "set", "config": {"patch": {"lang": "tr"}}},
        ],
        "edges": [
            {"from": START, "to": "a"},
            {"from": "a", "to": "b"},
        ],
    }
    g = from_spec(spec, {"set": lambda config: lambda state: {"profile": config["patch"]}})
    assert {"id": 1, "name": "ada", "lang": "tr"} == run(g, {"profile": {"id": 1}}).state["profile"]
    assert spec == to_spec(g)


@pytest.mark.parametrize("entry", [{}, {"reducer": None}], ids=["no reducer", "null reducer"])
def test_a_channel_with_no_reducer_named_defaults_to_last_write(entry: dict[str, Any]) -> None:
    """boundaries.test.ts "a channel with no reducer named defaults to last_write" (and SpecTests' null)."""
    g = from_spec(
        {
            "name": None,
            "channels": {"v": entry},
            "nodes": [{"id": "a", "type": "t"}],
            "edges": [{"from": START, "to": "a"}],
        },
        {"t": lambda config: lambda state: {"v": 2}},
    )
    assert 2 == run(g, {"v": 1}).state["v"]
    assert {"v": {"reducer": "last_write"}} == to_spec(g)["channels"]
