"""Graphs as data: ``to_spec`` / ``from_spec`` round trips, validation paths and refusals."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ilmek import END, START, Checkpointer, GraphError, RetryPolicy, channel, graph, run, thread_state
from ilmek.graph import UnreachableNodeWarning
from ilmek.spec import from_spec, to_spec

pytestmark = pytest.mark.timeout(60)


def _classify(config: Mapping[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An "llm" that reads the last message and writes an intent."""
    keyword = config.get("keyword", "buy")

    def node(state: dict[str, Any]) -> dict[str, Any]:
        last = state["messages"][-1] if state["messages"] else ""
        return {"intent": "buy" if keyword in last else "chat"}

    return node


def _reply(config: Mapping[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An "http" call whose reply is its configured text."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [config["text"]]}

    return node


def _noop(config: Mapping[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda state: None


REGISTRY: dict[str, Callable[[Mapping[str, Any]], Callable[..., Any]]] = {
    "llm": _classify,
    "http": _reply,
    "noop": _noop,
}


def support_spec() -> dict[str, Any]:
    """SPEC §5's example, made runnable: buy goes to checkout, anything else to chat."""
    return {
        "name": "support",
        "channels": {
            "messages": {"reducer": "append"},
            "intent": {"reducer": "last_write"},
        },
        "nodes": [
            {"id": "agent", "type": "llm", "config": {"keyword": "buy"}},
            {"id": "checkout", "type": "http", "config": {"text": "order placed"}},
            {"id": "chat", "type": "http", "config": {"text": "how can I help?"}},
        ],
        "edges": [
            {"from": START, "to": "agent"},
            {"from": "agent", "to": "checkout", "when": {"channel": "intent", "eq": "buy"}},
            {"from": "agent", "to": "chat", "when": {"not": {"channel": "intent", "eq": "buy"}}},
            {"from": "checkout", "to": END},
            {"from": "chat", "to": END},
        ],
    }


def guards_spec() -> dict[str, Any]:
    """Every predicate form on guarded edges, and defaults of every JSON kind."""
    return {
        "name": "guards",
        "channels": {
            "score": {"reducer": "last_write", "default": 0},
            "tags": {"reducer": "last_write", "default": []},
            "profile": {"reducer": "last_write", "default": {"tier": "gold", "since": 2020}},
            "note": {"reducer": "last_write", "default": None},
            "ratio": {"reducer": "last_write", "default": 0.5},
            "flags": {"reducer": "merge"},
        },
        "nodes": [{"id": name, "type": "noop", "config": {}} for name in ("start", "a", "b", "c", "d")],
        "edges": [
            {"from": START, "to": "start"},
            {
                "from": "start",
                "to": "a",
                "when": {"all": [{"channel": "score", "ge": 10}, {"channel": "score", "lt": 100}]},
            },
            {
                "from": "start",
                "to": "b",
                "when": {"any": [{"channel": "note", "exists": True}, {"channel": "ratio", "gt": 0.9}]},
            },
            {"from": "start", "to": "c", "when": {"channel": "tags", "in": [["x"], ["y", "z"]]}},
            {
                "from": "start",
                "to": "d",
                "when": {"not": {"channel": "profile", "not_in": [{"tier": "gold", "since": 2020}]}},
            },
            {"from": "start", "to": END, "when": {"channel": "flags", "neq": {}}},
            {"from": "b", "to": END, "when": {"channel": "tags", "truthy": False}},
            {"from": "a", "to": END, "when": {"channel": "score", "le": 50}},
        ],
    }


def max_of(current: Any, incoming: Any) -> Any:
    """The "max" reducer the specs name: the first write (current None) is kept as it is."""
    return incoming if current is None else max(current, incoming)


def control_spec() -> dict[str, Any]:
    """Retry policies, command destinations and a reduce channel resolved by name."""
    return {
        "name": "control",
        "channels": {
            "best": {"reducer": "reduce", "fn": "max", "default": 0},
            "seen": {"reducer": "reduce", "fn": "max"},
            "log": {"reducer": "append"},
        },
        "nodes": [
            {
                "id": "router",
                "type": "noop",
                "config": {},
                "destinations": ["left", "right", END],
            },
            {
                "id": "left",
                "type": "noop",
                "config": {"nested": {"list": [1, 2.5, "three", None, True]}},
                "retry": {
                    "max_attempts": 5,
                    "backoff": 0.1,
                    "factor": 3.0,
                    "max_backoff": 2.0,
                    "jitter": 0.25,
                },
            },
            {"id": "right", "type": "noop", "config": {}, "destinations": []},
        ],
        "edges": [{"from": START, "to": "router"}],
    }


ROUND_TRIPS = {"support": support_spec, "guards": guards_spec, "control": control_spec}


@pytest.mark.parametrize("make", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_a_canonical_spec_round_trips_exactly(make: Callable[[], dict[str, Any]]) -> None:
    """to_spec(from_spec(s)) == s, and s survives JSON on the way through."""
    spec = make()
    rebuilt = from_spec(json.loads(json.dumps(spec)), REGISTRY, reducers={"max": max_of})
    exported = to_spec(rebuilt)
    assert spec == exported
    assert exported == json.loads(json.dumps(exported))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
NAMES = st.text("abcdefgh_", min_size=1, max_size=6)


def predicates(channel_names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Every predicate form over the given channels, nested."""
    names = st.sampled_from(channel_names)
    equality = st.builds(
        lambda channel, op, value: {"channel": channel, op: value},
        names,
        st.sampled_from(["eq", "neq"]),
        JSON,
    )
    numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    ordering = st.builds(
        lambda channel, op, value: {"channel": channel, op: value},
        names,
        st.sampled_from(["gt", "ge", "lt", "le"]),
        numbers,
    )
    membership = st.builds(
        lambda channel, op, values: {"channel": channel, op: values},
        names,
        st.sampled_from(["in", "not_in"]),
        st.lists(JSON, max_size=3),
    )
    flags = st.builds(
        lambda channel, op, flag: {"channel": channel, op: flag},
        names,
        st.sampled_from(["exists", "truthy"]),
        st.booleans(),
    )
    return st.recursive(
        equality | ordering | membership | flags,
        lambda inner: (
            st.builds(lambda parts: {"all": parts}, st.lists(inner, min_size=1, max_size=3))
            | st.builds(lambda parts: {"any": parts}, st.lists(inner, min_size=1, max_size=3))
            | st.builds(lambda part: {"not": part}, inner)
        ),
        max_leaves=4,
    )


@st.composite
def canonical_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid specs in canonical form: every node reachable straight from START."""
    channel_names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    specs_channels: dict[str, Any] = {}
    for name in channel_names:
        entry = draw(
            st.sampled_from(
                [
                    {"reducer": "last_write"},
                    {"reducer": "append"},
                    {"reducer": "merge"},
                    {"reducer": "reduce", "fn": "max"},
                ]
            )
        )
        if entry["reducer"] in ("last_write", "reduce") and draw(st.booleans()):
            entry = {**entry, "default": draw(JSON)}
        specs_channels[name] = entry
    ids = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    nodes = []
    for node_id in ids:
        node: dict[str, Any] = {
            "id": node_id,
            "type": draw(st.sampled_from(sorted(REGISTRY))),
            "config": draw(st.dictionaries(st.text(max_size=5), JSON, max_size=3)),
        }
        if draw(st.booleans()):
            wait = st.floats(min_value=0, max_value=60) | st.integers(min_value=0, max_value=60)
            node["retry"] = {
                "max_attempts": draw(st.integers(min_value=1, max_value=9)),
                "backoff": draw(wait),
                "factor": draw(wait),
                "max_backoff": draw(wait),
                "jitter": draw(st.floats(min_value=0, max_value=1)),
            }
        if draw(st.booleans()):
            node["destinations"] = draw(st.lists(st.sampled_from([*ids, END]), max_size=3))
        nodes.append(node)
    edges: list[dict[str, Any]] = [{"from": START, "to": node_id} for node_id in ids]
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        edge: dict[str, Any] = {
            "from": draw(st.sampled_from([START, *ids])),
            "to": draw(st.sampled_from([*ids, END])),
        }
        if draw(st.booleans()):
            edge["when"] = draw(predicates(channel_names))
        edges.append(edge)
    draw(st.randoms()).shuffle(edges)
    return {"name": draw(NAMES), "channels": specs_channels, "nodes": nodes, "edges": edges}


@settings(max_examples=60, deadline=None)
@given(canonical_specs())
def test_every_canonical_spec_round_trips_exactly(spec: dict[str, Any]) -> None:
    """Property: for generated specs of every shape, to_spec(from_spec(s)) == s."""
    assert spec == to_spec(from_spec(spec, REGISTRY, reducers={"max": max_of}))


def test_round_trip_keeps_the_order_of_nodes_and_edges() -> None:
    """Lists keep their order: nodes in declaration order, edges as listed."""
    spec = support_spec()
    spec["nodes"].reverse()
    spec["edges"].reverse()
    exported = to_spec(from_spec(spec, REGISTRY))
    assert ["chat", "checkout", "agent"] == [node["id"] for node in exported["nodes"]]
    assert spec["edges"] == exported["edges"]


def test_a_node_without_config_is_exported_with_an_empty_one() -> None:
    """Normalization: config is optional on input and always present on output."""
    spec = support_spec()
    spec["nodes"].append({"id": "idle", "type": "noop"})
    spec["edges"].append({"from": START, "to": "idle"})
    exported = to_spec(from_spec(spec, REGISTRY))
    assert {"id": "idle", "type": "noop", "config": {}} == exported["nodes"][-1]


def test_a_partial_retry_is_exported_with_every_field() -> None:
    """Normalization: missing retry fields take RetryPolicy's defaults and are written out."""
    spec = support_spec()
    spec["nodes"][0]["retry"] = {}
    spec["nodes"][1]["retry"] = {"max_attempts": 4}
    agent, checkout, _ = to_spec(from_spec(spec, REGISTRY))["nodes"]
    defaults = {"max_attempts": 3, "backoff": 0.2, "factor": 2.0, "max_backoff": 30.0, "jitter": 0.0}
    assert defaults == agent["retry"]
    assert {**defaults, "max_attempts": 4} == checkout["retry"]


def test_from_spec_passes_config_and_builds_the_declared_retry_policy() -> None:
    """Each factory gets its node's config; the retry dict becomes an equal RetryPolicy."""
    received: list[Mapping[str, Any]] = []

    def factory(config: Mapping[str, Any]) -> Callable[..., Any]:
        received.append(config)
        return lambda state: None

    g = from_spec(control_spec(), {"noop": factory}, reducers={"max": max_of})
    assert [{}, {"nested": {"list": [1, 2.5, "three", None, True]}}, {}] == received
    expected = RetryPolicy(max_attempts=5, backoff=0.1, factor=3.0, max_backoff=2.0, jitter=0.25)
    assert expected == g.nodes["left"].retry
    assert ("left", "right", END) == g.nodes["router"].destinations


def test_the_graph_and_the_exported_spec_share_nothing_with_the_input() -> None:
    """Editing the input spec, a factory's config or the exported spec changes nothing else."""

    def greedy(config: Mapping[str, Any]) -> Callable[..., Any]:
        config["text"] = "tampered"  # type: ignore[index]
        return _reply(config)

    spec = support_spec()
    original = copy.deepcopy(spec)
    g = from_spec(spec, {**REGISTRY, "http": greedy})
    spec["nodes"][0]["config"]["keyword"] = "changed"
    spec["edges"][1]["when"]["eq"] = "changed"
    exported = to_spec(g)
    assert original == exported
    exported["nodes"][0]["config"]["keyword"] = "again"
    exported["edges"][1]["when"]["eq"] = "again"
    assert original == to_spec(g)


@pytest.mark.parametrize(
    ("message", "expected_state"),
    [
        ("I want to buy a mug", {"messages": ["I want to buy a mug", "order placed"], "intent": "buy"}),
        ("hello", {"messages": ["hello", "how can I help?"], "intent": "chat"}),
    ],
)
def test_a_spec_graph_runs_end_to_end(
    checkpointer: Checkpointer, message: str, expected_state: dict[str, Any]
) -> None:
    """The support spec routes by its declarative guards on every backend, and still round-trips."""
    spec = support_spec()
    g = from_spec(spec, REGISTRY)
    result = run(g, {"messages": [message]}, thread_id="support-1", checkpointer=checkpointer)
    assert "done" == result.status
    assert expected_state == result.state
    assert expected_state == thread_state(g, checkpointer, "support-1")
    assert spec == to_spec(g)


def test_a_spec_reduce_channel_folds_with_the_named_function(checkpointer: Checkpointer) -> None:
    """A reduce channel resolved through reducers= folds writes with that function."""

    def bid(config: Mapping[str, Any]) -> Callable[..., Any]:
        return lambda state: {"best": config["amount"]}

    spec = {
        "name": "auction",
        "channels": {"best": {"reducer": "reduce", "fn": "max", "default": 0}},
        "nodes": [
            {"id": "low", "type": "bid", "config": {"amount": 3}},
            {"id": "high", "type": "bid", "config": {"amount": 9}},
            {"id": "mid", "type": "bid", "config": {"amount": 5}},
        ],
        "edges": [{"from": START, "to": name} for name in ("low", "high", "mid")],
    }
    seen: list[Any] = []

    def record(current: Any, incoming: Any) -> Any:
        seen.append(current)
        return max_of(current, incoming)

    g = from_spec(spec, {"bid": bid}, reducers={"max": record})
    assert {"best": 9} == run(g, {}, thread_id="auction", checkpointer=checkpointer).state
    # Called on every write, with None (not the default 0) as the first current value.
    assert [None, 3, 9] == seen


def _without(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        target: Any = spec
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


def _setting(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        target: Any = spec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _appending(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(spec: dict[str, Any]) -> None:
        target: Any = spec
        for key in path:
            target = target[key]
        target.append(value)

    return edit


INVALID = {
    "name not a string": (_setting(("name",), 7), "spec.name: expected a non-empty string, got 7"),
    "empty name": (_setting(("name",), ""), "spec.name: expected a non-empty string, got ''"),
    "unknown top-level key": (_setting(("version",), 2), "spec.version: unknown key"),
    "channels not an object": (_setting(("channels",), []), "spec.channels: expected an object, got array"),
    "channel not an object": (
        _setting(("channels", "intent"), "last_write"),
        "spec.channels.intent: expected an object, got string",
    ),
    "channel null": (
        _setting(("channels", "intent"), None),
        "spec.channels.intent: expected an object, got null",
    ),
    "unknown reducer": (
        _setting(("channels", "intent", "reducer"), "sum"),
        "spec.channels.intent.reducer: unknown reducer 'sum' "
        "(known: last_write, append, merge, reduce, messages)",
    ),
    "reducer not a string": (
        _setting(("channels", "intent", "reducer"), ["append"]),
        "spec.channels.intent.reducer: unknown reducer ['append']",
    ),
    "default on append": (
        _setting(("channels", "messages", "default"), []),
        "spec.channels.messages.default: unknown key",
    ),
    "typo in a channel": (
        _setting(("channels", "intent", "defualt"), "x"),
        "spec.channels.intent.defualt: unknown key",
    ),
    "default not JSON": (
        _setting(("channels", "intent", "default"), ("a", "b")),
        "spec.channels.intent.default: a tuple is not a JSON value",
    ),
    "default not finite": (
        _setting(("channels", "intent", "default"), {"limit": float("inf")}),
        "spec.channels.intent.default.limit: inf is not a JSON number",
    ),
    "reduce without fn": (
        _setting(("channels", "intent"), {"reducer": "reduce"}),
        "spec.channels.intent.fn: required",
    ),
    "reduce with an unregistered fn": (
        _setting(("channels", "intent"), {"reducer": "reduce", "fn": "max"}),
        "spec.channels.intent.fn: unknown reducer function 'max' (registered: none; pass reducers=",
    ),
    "nodes not a list": (_setting(("nodes",), {}), "spec.nodes: expected an array, got object"),
    "node not an object": (
        _setting(("nodes", 1), "checkout"),
        "spec.nodes[1]: expected an object, got string",
    ),
    "missing id": (_without(("nodes", 0, "id")), "spec.nodes[0].id: required"),
    "empty id": (_setting(("nodes", 2, "id"), ""), "spec.nodes[2].id: expected a non-empty string, got ''"),
    "duplicate id": (_setting(("nodes", 2, "id"), "agent"), "spec.nodes[2].id: duplicate node id 'agent'"),
    "reserved id": (
        _setting(("nodes", 2, "id"), END),
        "spec.nodes[2].id: '__end__' is reserved for the virtual entry and exit",
    ),
    "missing type": (_without(("nodes", 1, "type")), "spec.nodes[1].type: required"),
    "type not a string": (
        _setting(("nodes", 1, "type"), 7),
        "spec.nodes[1].type: expected a non-empty string",
    ),
    "unknown type": (
        _setting(("nodes", 2, "type"), "htp"),
        "spec.nodes[2].type: unknown node type 'htp' (registered: http, llm, noop)",
    ),
    "config not an object": (
        _setting(("nodes", 0, "config"), ["model"]),
        "spec.nodes[0].config: expected an object, got array",
    ),
    "config not JSON": (
        _setting(("nodes", 0, "config", "tools"), {"search"}),
        "spec.nodes[0].config.tools: a set is not a JSON value",
    ),
    "typo in a node": (_setting(("nodes", 0, "confg"), {}), "spec.nodes[0].confg: unknown key"),
    "retry not an object": (
        _setting(("nodes", 1, "retry"), 3),
        "spec.nodes[1].retry: expected an object, got number",
    ),
    "retry with retry_on": (
        _setting(("nodes", 1, "retry"), {"retry_on": "ConnectionError"}),
        "spec.nodes[1].retry.retry_on: unknown key",
    ),
    "retry with no attempts": (
        _setting(("nodes", 1, "retry"), {"max_attempts": 0}),
        "spec.nodes[1].retry.max_attempts: expected an integer of at least 1, got 0",
    ),
    "retry with a negative backoff": (
        _setting(("nodes", 1, "retry"), {"backoff": -1}),
        "spec.nodes[1].retry.backoff: expected a number of at least 0, got -1",
    ),
    "retry with jitter above 1": (
        _setting(("nodes", 1, "retry"), {"jitter": 1.5}),
        "spec.nodes[1].retry.jitter: expected a number from 0 to 1, got 1.5",
    ),
    "destinations not a list": (
        _setting(("nodes", 0, "destinations"), "chat"),
        "spec.nodes[0].destinations: expected an array, got string",
    ),
    "unknown destination": (
        _setting(("nodes", 0, "destinations"), ["chat", "nowhere"]),
        "spec.nodes[0].destinations[1]: unknown node 'nowhere' (nodes: agent, chat, checkout)",
    ),
    "edges not a list": (_setting(("edges",), "a->b"), "spec.edges: expected an array, got string"),
    "edge not an object": (_setting(("edges", 3), ["checkout", END]), "spec.edges[3]: expected an object"),
    "from not a string": (
        _setting(("edges", 0, "from"), [START]),
        "spec.edges[0].from: expected a non-empty",
    ),
    "missing from": (_without(("edges", 0, "from")), "spec.edges[0].from: required"),
    "missing to": (_without(("edges", 4, "to")), "spec.edges[4].to: required"),
    "unknown from": (
        _setting(("edges", 3, "from"), "chekout"),
        "spec.edges[3].from: unknown node 'chekout' (nodes: agent, chat, checkout, or '__start__')",
    ),
    "unknown to": (
        _setting(("edges", 1, "to"), "chekout"),
        "spec.edges[1].to: unknown node 'chekout' (nodes: agent, chat, checkout, or '__end__')",
    ),
    "edge out of END": (
        _setting(("edges", 3, "from"), END),
        "spec.edges[3].from: nothing can leave '__end__'",
    ),
    "edge into START": (
        _setting(("edges", 3, "to"), START),
        "spec.edges[3].to: nothing can enter '__start__'",
    ),
    "typo in an edge": (_setting(("edges", 1, "if"), {}), "spec.edges[1].if: unknown key"),
    "when not an object": (
        _setting(("edges", 1, "when"), "intent == 'buy'"),
        "spec.edges[1].when: a predicate is an object, got str",
    ),
    "when with an unknown operator": (
        _setting(("edges", 1, "when"), {"channel": "intent", "equals": "buy"}),
        "spec.edges[1].when: unknown operator 'equals'",
    ),
    "when on an undeclared channel": (
        _setting(("edges", 1, "when"), {"channel": "mood", "eq": "happy"}),
        "spec.edges[1].when.channel: channel 'mood' is not declared",
    ),
    "nested when without operator": (
        _setting(
            ("edges", 2, "when"),
            {"all": [{"channel": "intent", "eq": "buy"}, {"not": {"channel": "intent"}}]},
        ),
        "spec.edges[2].when.all[1].not: a predicate takes exactly one operator, got 0",
    ),
    "when without a channel": (
        _setting(("edges", 1, "when"), {"eq": 1}),
        "spec.edges[1].when.channel: expected a channel name",
    ),
    "when with two operators": (
        _setting(("edges", 1, "when"), {"channel": "intent", "gt": 1, "lt": 5}),
        "spec.edges[1].when: a predicate takes exactly one operator, got 2",
    ),
    "in not a list": (
        _setting(("edges", 1, "when"), {"channel": "intent", "in": "buy"}),
        "spec.edges[1].when.in: expected a list",
    ),
    "gt not a number": (
        _setting(("edges", 1, "when"), {"channel": "intent", "gt": "5"}),
        "spec.edges[1].when.gt: expected a number, got '5'",
    ),
    "lt a boolean": (
        _setting(("edges", 1, "when"), {"channel": "intent", "lt": True}),
        "spec.edges[1].when.lt: expected a number, got True",
    ),
    "truthy not a boolean": (
        _setting(("edges", 1, "when"), {"channel": "intent", "truthy": "yes"}),
        "spec.edges[1].when.truthy: expected true or false",
    ),
    "when operand not JSON": (
        _setting(("edges", 1, "when"), {"channel": "intent", "eq": ("buy",)}),
        "spec.edges[1].when.eq: a tuple is not a JSON value",
    ),
}


@pytest.mark.parametrize(("edit", "message"), INVALID.values(), ids=INVALID.keys())
def test_an_invalid_spec_is_refused_naming_the_path(
    edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    """Each mistake is a GraphError whose message starts at the offending path."""
    spec = support_spec()
    edit(spec)
    with pytest.raises(GraphError) as caught:
        from_spec(spec, REGISTRY)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize("document", [[], "spec", None, 42])
def test_a_spec_that_is_not_an_object_is_refused(document: Any) -> None:
    """The document itself must be an object."""
    with pytest.raises(GraphError) as caught:
        from_spec(document, REGISTRY)
    assert str(caught.value).startswith("spec: expected an object, got ")


def test_a_factory_that_raises_is_reported_at_its_node_and_chained() -> None:
    """A registry factory's error becomes a GraphError naming the node path, raised from it."""

    def broken(config: Mapping[str, Any]) -> Callable[..., Any]:
        raise KeyError("url")

    with pytest.raises(GraphError) as caught:
        from_spec(support_spec(), {**REGISTRY, "http": broken})
    assert str(caught.value).startswith(
        "spec.nodes[1]: the registry's factory for type 'http' raised KeyError"
    )
    assert "checkout" == caught.value.node
    assert isinstance(caught.value.__cause__, KeyError)


def test_a_factory_that_returns_no_function_is_refused() -> None:
    """A factory must hand back something callable."""
    with pytest.raises(GraphError) as caught:
        from_spec(support_spec(), {**REGISTRY, "llm": lambda config: "not a function"})
    assert str(caught.value).startswith("spec.nodes[0]: the registry's factory for type 'llm' returned")


def test_the_compilers_structural_checks_still_apply() -> None:
    """A node nothing leads to is a warning from compile(); no edge out of START is refused."""
    unreachable = support_spec()
    unreachable["nodes"].append({"id": "orphan", "type": "noop"})
    with pytest.warns(UnreachableNodeWarning, match="node 'orphan' of graph 'support' cannot be reached"):
        from_spec(unreachable, REGISTRY)
    headless = support_spec()
    del headless["edges"][0]
    with pytest.raises(GraphError, match="has no edge from START"):
        from_spec(headless, REGISTRY)


def test_to_spec_refuses_a_router() -> None:
    """A router is code: the refusal names it and points at predicates or commands."""
    g = (
        graph("routed", {"x": channel.last_write()})
        .node("a", lambda s: None, type="noop")
        .router(START, lambda s: "a", destinations=["a"])
        .compile()
    )
    with pytest.raises(GraphError) as caught:
        to_spec(g)
    assert "the router on '__start__' is code" in str(caught.value)
    assert "when= predicates" in str(caught.value)


def test_to_spec_refuses_a_function_guard_naming_the_edge() -> None:
    """A Python guard cannot be exported; the message names the edge and the predicate fix."""
    g = (
        graph("guarded", {"intent": channel.last_write()})
        .node("agent", lambda s: None, type="noop")
        .node("checkout", lambda s: None, type="noop")
        .edge(START, "agent")
        .edge("agent", "checkout", when=lambda s: s["intent"] == "buy")
        .compile()
    )
    with pytest.raises(GraphError) as caught:
        to_spec(g)
    assert "edge 'agent' -> 'checkout' is guarded by a Python function" in str(caught.value)
    assert "pass when= a predicate dict" in str(caught.value)


def test_to_spec_exports_a_code_built_graph_with_types_and_predicates() -> None:
    """A graph written in code exports when its nodes have types and its guards are predicates."""
    g = (
        graph("coded", {"intent": channel.last_write("chat")})
        .node("agent", lambda s: None, type="llm", config={"model": "m"})
        .node("checkout", lambda s: None, type="http", retry=RetryPolicy(max_attempts=2))
        .edge(START, "agent")
        .edge("agent", "checkout", when={"channel": "intent", "eq": "buy"})
        .compile()
    )
    assert {
        "name": "coded",
        "channels": {"intent": {"reducer": "last_write", "default": "chat"}},
        "nodes": [
            {"id": "agent", "type": "llm", "config": {"model": "m"}},
            {
                "id": "checkout",
                "type": "http",
                "config": {},
                "retry": {
                    "max_attempts": 2,
                    "backoff": 0.2,
                    "factor": 2.0,
                    "max_backoff": 30.0,
                    "jitter": 0.0,
                },
            },
        ],
        "edges": [
            {"from": START, "to": "agent"},
            {"from": "agent", "to": "checkout", "when": {"channel": "intent", "eq": "buy"}},
        ],
    } == to_spec(g)


def _one_node(**node_options: Any) -> Any:
    return (
        graph("one", {"x": channel.last_write()})
        .node("work", lambda s: None, **node_options)
        .edge(START, "work")
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _one_node(), "graph 'one', node 'work' has no type"),
        (
            lambda: _one_node(type="noop", retry=RetryPolicy(retry_on=lambda e: True)),
            "graph 'one', node 'work': its RetryPolicy has retry_on=",
        ),
        (
            lambda: _one_node(type="noop", config={"hosts": ("a", "b")}),
            "graph 'one', node 'work': config.hosts: a tuple is not a JSON value",
        ),
        (
            lambda: _one_node(type="noop").channel("best", channel.reduce(max)),
            "graph 'one', channel 'best' folds with a Python function (reduce)",
        ),
        (
            lambda: _one_node(type="noop").channel("when", channel.last_write({1, 2})),
            "graph 'one', channel 'when': default: a set is not a JSON value",
        ),
        (
            lambda: _one_node(type="noop").edge("work", END, when={"channel": "mood", "eq": "happy"}),
            "graph 'one': edge 'work' -> '__end__': when.channel: channel 'mood' is not declared",
        ),
        (
            lambda: _one_node(type="noop", retry=RetryPolicy(backoff=-1)),
            "graph 'one', node 'work': retry.backoff: expected a number of at least 0, got -1",
        ),
    ],
    ids=[
        "no type",
        "retry_on",
        "config not JSON",
        "reduce from code",
        "default not JSON",
        "when on an undeclared channel",
        "negative backoff",
    ],
)
def test_to_spec_refuses_what_a_spec_cannot_carry(make: Callable[[], Any], message: str) -> None:
    """Code, or what from_spec would refuse, is not exported; the message names where it is."""
    with pytest.raises(GraphError) as caught:
        to_spec(make().compile())
    assert str(caught.value).startswith(message), str(caught.value)


def test_to_spec_wants_a_compiled_graph() -> None:
    """A builder is a TypeError that says to compile first."""
    with pytest.raises(TypeError, match=r"call \.compile\(\) first"):
        to_spec(_one_node(type="noop"))  # type: ignore[arg-type]


def test_mermaid_of_a_spec_graph_draws_every_node_and_the_guard() -> None:
    """The drawing names each node and labels the guarded edges with their predicates."""
    drawing = from_spec(support_spec(), REGISTRY).to_mermaid()
    lines = drawing.splitlines()
    assert ["---", 'title: "support"', "---", "flowchart TD"] == lines[:4]
    for node in ("agent", "checkout", "chat"):
        assert f'  {node}["{node}"]' in lines, node
    assert '  agent -->|"intent == #quot;buy#quot;"| checkout' in lines
    assert '  agent -->|"not (intent == #quot;buy#quot;)"| chat' in lines
    assert 5 == sum("-->" in line for line in lines)


# --- subgraphs ------------------------------------------------------------------------


def _review_graph() -> Any:
    return (
        graph("review", {"log": channel.append()})
        .node("note", lambda state: {"log": ["reviewed"]}, type="note", config={})
        .edge(START, "note")
        .edge("note", END)
        .compile()
    )


SUBGRAPH_SPEC: dict[str, Any] = {
    "name": "shop",
    "channels": {"log": {"reducer": "append"}},
    "nodes": [{"id": "review", "type": "subgraph", "config": {"graph": "review"}}],
    "edges": [{"from": "__start__", "to": "review"}, {"from": "review", "to": "__end__"}],
}


def test_a_subgraph_node_resolves_its_graph_by_name_runs_and_round_trips() -> None:
    """``{"type": "subgraph", "config": {"graph": NAME}}`` runs ``registry[NAME]`` and exports unchanged."""
    built = from_spec(SUBGRAPH_SPEC, {"review": _review_graph()})

    assert SUBGRAPH_SPEC == to_spec(built)
    assert {"log": ["in", "reviewed"]} == run(built, {"log": ["in"]}).state


def test_a_subgraph_node_built_in_code_exports_as_a_subgraph_spec() -> None:
    """``.node(name, compiled)`` exports ``type: subgraph`` naming the child graph."""
    built = (
        graph("shop", {"log": channel.append()})
        .node("review", _review_graph())
        .edge(START, "review")
        .edge("review", END)
        .compile()
    )

    assert SUBGRAPH_SPEC == to_spec(built)


def test_a_subgraph_spec_naming_an_unknown_graph_is_refused_with_its_path() -> None:
    """A name the registry does not map to a compiled graph is a GraphError naming the node's path."""
    with pytest.raises(GraphError, match=r"spec.nodes\[0\].config.graph: no compiled graph 'review'"):
        from_spec(SUBGRAPH_SPEC, {"review": lambda config: None})
