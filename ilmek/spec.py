"""Graphs as data: a compiled graph to a JSON-able spec and back.

A spec names behaviour, it never carries it: nodes name a ``type`` that a
registry turns into a function, edges carry declarative ``when`` predicates
(see :mod:`ilmek.predicates`), ``reduce`` channels name a reducer that a
mapping resolves. :func:`from_spec` never imports or evaluates anything the
document holds, and :func:`to_spec` refuses a graph it cannot express rather
than export one that would rebuild differently.

The document is the reference's (MODEL §9), so a spec written by the
TypeScript or .NET builder loads, runs and exports unchanged. What
:func:`to_spec` emits, and what round-trips exactly::

    {"name": "support",
     "channels": {"messages": {"reducer": "append"},
                  "intent": {"reducer": "last_write"}},
     "nodes": [{"id": "agent", "type": "llm", "config": {"model": "m"}},
               {"id": "checkout", "type": "http", "config": {}}],
     "edges": [{"from": "__start__", "to": "agent"},
               {"from": "agent", "to": "checkout", "when": {"channel": "intent", "eq": "buy"}},
               {"from": "checkout", "to": "__end__"}]}

``name`` may be ``null`` (the graph is then named ``"unnamed"`` and exports
``null`` again). Every node carries ``config`` (``{}`` when it has none);
``when`` appears only when set. Predicates use the reference's operators
(see :mod:`ilmek.predicates`).

Python extensions, which the reference cannot load: a channel's ``default``
(``last_write`` and ``reduce``), a ``reduce`` channel naming its function
(``{"reducer": "reduce", "fn": "max"}``, resolved through ``reducers=``), a
``messages`` channel (``{"reducer": "messages"}``: a list kept by id),
a node's ``retry`` (all five fields) and ``destinations``, and the
predicate operators ``not_in``, ``ge``, ``le``, ``exists``, ``all``,
``any`` and ``not``; each appears only when used.

Looser input forms are accepted, as the reference accepts them, and exported
in the form above: a missing ``name`` (exported as ``null``); missing or
``null`` ``channels``, ``nodes`` or ``edges`` (exported as empty); a channel
``{}`` or ``{"reducer": null}`` (a ``last_write`` channel, exported with
``"reducer": "last_write"``); a node without ``config`` or with
``"config": null`` (exported with ``"config": {}``); a ``retry`` naming only
some fields (exported with all five, the rest at :class:`~ilmek.RetryPolicy`'s
defaults, so a stored spec does not change meaning if those defaults do); the
operator ``ne`` (exported as ``neq``). Unknown keys are refused rather than
dropped, so a typo cannot pass silently.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any, Never

from . import channel as channels
from .channel import UNSET, Channel
from .checkpoint.base import Checkpointer
from .control import RetryPolicy
from .errors import GraphError
from .graph import END, START, UNNAMED, CompiledGraph, EdgeSpec, GraphBuilder, NodeSpec, graph
from .predicates import check_predicate
from .subgraphs import SUBGRAPH_TYPE

__all__ = ["from_spec", "to_spec"]

NodeFactory = Callable[[Mapping[str, Any]], Callable[..., Any]]
"""What a registry maps a node ``type`` to: ``config -> node function``."""

_RETRY_FIELDS = ("max_attempts", "backoff", "factor", "max_backoff", "jitter")
# (required, optional) keys of a channel entry, by reducer. append and merge
# start from [] and {}: a spec cannot give them another default. A last_write
# entry may leave "reducer" out: it is the default kind, as in the reference.
_CHANNEL_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "last_write": ((), ("reducer", "default")),
    "append": (("reducer",), ()),
    "merge": (("reducer",), ()),
    "reduce": (("reducer", "fn"), ("default",)),
    "messages": (("reducer",), ()),
}


# The kinds whose channel takes no argument: a spec cannot give them a default.
_LIST_CHANNELS: dict[str, Callable[[], Channel]] = {
    "append": channels.append,
    "merge": channels.merge,
    "messages": channels.messages,
}


class _NamedReducer:
    """A reducer resolved from a spec by name; remembering the name lets it be exported."""

    __slots__ = ("fn", "name")

    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        self.name = name
        self.fn = fn

    def __call__(self, current: Any, incoming: Any) -> Any:
        return self.fn(current, incoming)

    def __repr__(self) -> str:
        return f"<reducer {self.name!r}: {self.fn!r}>"


# --- shared checks -------------------------------------------------------------------


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _json_problem(value: Any, path: str) -> str | None:
    """Where and why ``value`` is not plain JSON, or ``None`` when it is.

    Plain JSON survives ``json.dumps``/``json.loads`` unchanged and compares
    equal afterwards: no tuples, sets, non-string keys or non-finite floats.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value!r} is not a JSON number"
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: key {key!r} is not a string"
            problem = _json_problem(item, f"{path}.{key}")
            if problem is not None:
                return problem
        return None
    return f"{path}: a {type(value).__name__} is not a JSON value"


def _check_json(value: Any, path: str) -> None:
    problem = _json_problem(value, path)
    if problem is not None:
        raise GraphError(problem)


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise GraphError(f"{path}: expected an object, got {_kind(value)}")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise GraphError(f"{path}: expected an array, got {_kind(value)}")
    return value


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise GraphError(f"{path}: expected a non-empty string, got {value!r}")
    return value


def _keys(value: Mapping[str, Any], path: str, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    """Refuse missing required keys and any key not listed, so a typo cannot pass silently."""
    for key in required:
        if key not in value:
            raise GraphError(f"{path}.{key}: required")
    known = required + optional
    for key in value:
        if key not in known:
            raise GraphError(f"{path}.{key}: unknown key (allowed here: {', '.join(known)})")


# --- from a spec ---------------------------------------------------------------------


def from_spec(
    spec: Mapping[str, Any],
    registry: Mapping[str, NodeFactory | CompiledGraph[Any]],
    *,
    reducers: Mapping[str, Callable[[Any, Any], Any]] | None = None,
    checkpointer: Checkpointer | None = None,
    recursion_limit: int | None = None,
    strict: bool | None = None,
    meta: Mapping[str, Any] | None = None,
    max_workers: int | None = None,
    **per_run: Never,
) -> CompiledGraph[dict[str, Any]]:
    """Build and compile a graph from its spec, binding run defaults as ``compile()`` does.

    Nothing in the spec is imported or evaluated: behaviour comes only from
    ``registry`` and ``reducers``, which the caller controls. The spec is
    copied, so changing it afterwards does not change the graph. A spec never
    carries a checkpointer or run options: bind them here (or with
    ``CompiledGraph.bind``); :func:`to_spec` leaves them out.

    Args:
        spec: A JSON-able dict (see the module docstring for its shape).
        registry: Maps each node ``type`` to a factory called once per node
            with a copy of the node's ``config``; it returns the node function
            ``fn(state, ctx)`` or ``fn(state)``, or a compiled graph to run
            as a subgraph. A node ``{"type": "subgraph", "config": {"graph":
            NAME}}`` with no ``"subgraph"`` factory runs ``registry[NAME]``,
            a compiled graph.
        reducers: Maps the names that ``{"reducer": "reduce", "fn": name}``
            channels use to ``fn(current, incoming)`` functions. As for any
            :func:`~ilmek.channel.reduce` channel, ``current`` is ``None`` on
            the first write.
        checkpointer: Bound to the graph: runs, resumes and host helpers
            use it unless given their own (see
            :meth:`~ilmek.GraphBuilder.compile`).
        recursion_limit: Bound likewise.
        strict: Bound likewise.
        meta: Bound likewise.
        max_workers: Bound likewise.
        per_run: Refused, as by :meth:`~ilmek.GraphBuilder.compile`.

    Returns:
        The compiled graph; :func:`to_spec` turns it back into ``spec``.

    Raises:
        GraphError: the spec is malformed, naming the offending path (for
            example ``spec.nodes[2].type: unknown node type 'htp' (registered:
            http, llm)``); a factory raised (chained from its error); or the
            graph fails :meth:`~ilmek.GraphBuilder.compile`'s structural checks.
        InvalidArgumentError: a bound option is of the wrong type or value,
            or names one run.
    """
    document = _object(spec, "spec")
    _keys(document, "spec", (), ("name", "channels", "nodes", "edges"))
    name = document.get("name")
    builder = graph(UNNAMED if name is None else _name(name, "spec.name"))
    # The reference reads a null name as "no name" and writes null back.
    builder.named = name is not None
    # Missing or null collections read as empty, as in the reference; the graph
    # then fails compile() if that leaves it without an edge from START.
    declared = _channels_from_spec(builder, _present(document, "channels", {}), reducers or {})
    nodes = _list(_present(document, "nodes", []), "spec.nodes")
    ids = _node_ids(nodes)
    for index, node in enumerate(nodes):
        _node_from_spec(builder, node, f"spec.nodes[{index}]", registry, ids)
    for index, edge in enumerate(_list(_present(document, "edges", []), "spec.edges")):
        _edge_from_spec(builder, edge, f"spec.edges[{index}]", ids, declared)
    return builder.compile(
        checkpointer,
        recursion_limit=recursion_limit,
        strict=strict,
        meta=meta,
        max_workers=max_workers,
        **per_run,
    )


def _present(entry: Mapping[str, Any], key: str, empty: Any) -> Any:
    """``entry[key]``, or ``empty`` when it is missing or null (as the reference reads ``?? {}``)."""
    value = entry.get(key)
    return empty if value is None else value


def _channels_from_spec(
    builder: GraphBuilder, value: Any, reducers: Mapping[str, Callable[[Any, Any], Any]]
) -> Mapping[str, Any]:
    declared = _object(value, "spec.channels")
    for name, entry in declared.items():
        if not isinstance(name, str) or not name:
            raise GraphError(f"spec.channels: channel names are non-empty strings, got {name!r}")
        path = f"spec.channels.{name}"
        entry = _object(entry, path)
        reducer = entry.get("reducer")
        if reducer is None:
            reducer = "last_write"
        if not isinstance(reducer, str) or reducer not in _CHANNEL_KEYS:
            raise GraphError(
                f"{path}.reducer: unknown reducer {reducer!r} (known: {', '.join(_CHANNEL_KEYS)})"
            )
        _keys(entry, path, *_CHANNEL_KEYS[reducer])
        default: Any = UNSET
        if "default" in entry:
            default = copy.deepcopy(entry["default"])
            _check_json(default, f"{path}.default")
        ch: Channel
        if reducer == "reduce":
            ch = channels.reduce(_reducer_from_spec(entry["fn"], f"{path}.fn", reducers), default)
        elif reducer == "last_write":
            ch = channels.last_write(default)
        else:
            ch = {"append": channels.append, "merge": channels.merge, "messages": channels.messages}[
                reducer
            ]()
        builder.channel(name, ch)
    return declared


def _reducer_from_spec(
    value: Any, path: str, reducers: Mapping[str, Callable[[Any, Any], Any]]
) -> _NamedReducer:
    fn_name = _name(value, path)
    if fn_name not in reducers:
        known = ", ".join(sorted(reducers)) or "none; pass reducers={name: fn} to from_spec"
        raise GraphError(f"{path}: unknown reducer function {fn_name!r} (registered: {known})")
    fn = reducers[fn_name]
    if not callable(fn):
        raise GraphError(f"{path}: reducers[{fn_name!r}] is not callable: {fn!r}")
    return _NamedReducer(fn_name, fn)


def _node_ids(nodes: list[Any]) -> set[str]:
    ids: set[str] = set()
    for index, node in enumerate(nodes):
        path = f"spec.nodes[{index}]"
        node = _object(node, path)
        if "id" not in node:
            raise GraphError(f"{path}.id: required")
        node_id = _name(node["id"], f"{path}.id")
        if node_id in ids:
            raise GraphError(f"{path}.id: duplicate node id {node_id!r}")
        if node_id in (START, END):
            raise GraphError(f"{path}.id: {node_id!r} is reserved for the virtual entry and exit")
        ids.add(node_id)
    return ids


def _node_from_spec(
    builder: GraphBuilder,
    node: Mapping[str, Any],
    path: str,
    registry: Mapping[str, Any],
    ids: set[str],
) -> None:
    _keys(node, path, ("id", "type"), ("config", "retry", "destinations"))
    node_type = _name(node["type"], f"{path}.type")
    config = copy.deepcopy(dict(_object(_present(node, "config", {}), f"{path}.config")))
    _check_json(config, f"{path}.config")
    factory = registry.get(node_type) or _subgraph_factory(node_type, config, registry, path)
    if factory is None:
        known = ", ".join(sorted(registry)) or "none"
        raise GraphError(f"{path}.type: unknown node type {node_type!r} (registered: {known})")
    retry = _retry_from_spec(node["retry"], f"{path}.retry") if "retry" in node else None
    destinations: list[str] | None = None
    if "destinations" in node:
        destinations = _list(node["destinations"], f"{path}.destinations")
        for index, target in enumerate(destinations):
            if _name(target, f"{path}.destinations[{index}]") not in ids and target != END:
                raise GraphError(
                    f"{path}.destinations[{index}]: unknown node {target!r} (nodes: {', '.join(sorted(ids))})"
                )
    try:
        fn = factory(copy.deepcopy(config))
    except Exception as error:
        raise GraphError(
            f"{path}: the registry's factory for type {node_type!r} raised {type(error).__name__}: {error}",
            node=node["id"],
        ) from error
    if not callable(fn) and not isinstance(fn, CompiledGraph):
        raise GraphError(
            f"{path}: the registry's factory for type {node_type!r} returned {fn!r}, not a node function",
            node=node["id"],
        )
    builder.node(node["id"], fn, retry=retry, destinations=destinations, type=node_type, config=config)


def _subgraph_factory(
    node_type: str, config: Mapping[str, Any], registry: Mapping[str, Any], path: str
) -> Callable[[Mapping[str, Any]], Any] | None:
    """For a ``subgraph`` node the registry has no factory for: the compiled graph it names.

    ``{"type": "subgraph", "config": {"graph": NAME}}`` runs the compiled
    graph ``registry[NAME]`` as a subgraph (a factory registered for
    ``"subgraph"`` wins, and may return a compiled graph itself).
    """
    if node_type != SUBGRAPH_TYPE:
        return None
    name = _name(config.get("graph"), f"{path}.config.graph")
    child = registry.get(name)
    if not isinstance(child, CompiledGraph):
        known = ", ".join(sorted(k for k, v in registry.items() if isinstance(v, CompiledGraph))) or "none"
        raise GraphError(f"{path}.config.graph: no compiled graph {name!r} in the registry (graphs: {known})")
    return lambda _config: child


def _retry_from_spec(value: Any, path: str) -> RetryPolicy:
    retry = _object(value, path)
    _keys(retry, path, (), _RETRY_FIELDS)
    _check_retry(retry, path)
    return RetryPolicy(**retry)


def _check_retry(retry: Mapping[str, Any], path: str) -> None:
    for key, number in retry.items():
        if key == "max_attempts":
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise GraphError(f"{path}.max_attempts: expected an integer of at least 1, got {number!r}")
            continue
        # An int is always finite (and math.isfinite would overflow on a huge one).
        finite = isinstance(number, int) or (isinstance(number, float) and math.isfinite(number))
        if isinstance(number, bool) or not finite or number < 0 or (key == "jitter" and number > 1):
            wanted = "a number from 0 to 1" if key == "jitter" else "a number of at least 0"
            raise GraphError(f"{path}.{key}: expected {wanted}, got {number!r}")


def _edge_from_spec(
    builder: GraphBuilder, edge: Any, path: str, ids: set[str], declared: Mapping[str, Any]
) -> None:
    edge = _object(edge, path)
    _keys(edge, path, ("from", "to"), ("when",))
    source, target = _name(edge["from"], f"{path}.from"), _name(edge["to"], f"{path}.to")
    if source == END:
        raise GraphError(f"{path}.from: nothing can leave {END!r}")
    if target == START:
        raise GraphError(f"{path}.to: nothing can enter {START!r}")
    for key, name, virtual in (("from", source, START), ("to", target, END)):
        if name not in ids and name != virtual:
            raise GraphError(
                f"{path}.{key}: unknown node {name!r} (nodes: {', '.join(sorted(ids))}, or {virtual!r})"
            )
    when = None
    if "when" in edge:
        when = copy.deepcopy(edge["when"])
        check_predicate(when, f"{path}.when", declared)
        _check_json(when, f"{path}.when")
    builder.edge(source, target, when=when)


# --- to a spec -----------------------------------------------------------------------


def to_spec(g: CompiledGraph[Any]) -> dict[str, Any]:
    """Export a compiled graph as a JSON-able spec that :func:`from_spec` rebuilds.

    The result shares nothing with the graph: changing it changes nothing. A
    graph whose state is an ``attrs`` class or a ``TypedDict`` exports its
    channels; the graph :func:`from_spec` rebuilds from them has a channel
    map (nodes get dicts). What the graph binds (a checkpointer, run
    defaults) is not part of it.

    Args:
        g: A compiled graph whose nodes were all given ``type=`` (and, where
            needed, ``config=``), whose guards are predicate dicts and whose
            channels are ``last_write``, ``append``, ``merge``, ``messages``,
            or ``reduce`` channels built by :func:`from_spec`.

    Returns:
        The spec in canonical form (see the module docstring).

    Raises:
        GraphError: the graph holds code a spec cannot carry, naming it and
            saying what to do instead: a router, an edge guarded by a Python
            function, a node without ``type``, a ``reduce`` channel built in
            code, a retry policy with ``retry_on``. Also anything
            :func:`from_spec` would refuse: a config, default or predicate
            operand that is not plain JSON, a predicate on an undeclared
            channel, a retry policy with a negative wait or ``jitter`` above 1.
        TypeError: ``g`` is not a compiled graph.
    """
    if not isinstance(g, CompiledGraph):
        raise TypeError(f"to_spec() takes a compiled graph, got {type(g).__name__}; call .compile() first")
    where = f"graph {g.name!r}"
    if g.routers:
        raise GraphError(
            f"{where}: the router on {g.routers[0].source!r} is code, which a spec cannot carry; "
            'express its branches as edges with declarative when= predicates, e.g. {"channel": "intent", '
            '"eq": "buy"}, or return command(goto=...) from the node and list its destinations=',
            node=g.routers[0].source,
        )
    return {
        "name": g.name if g.named else None,
        "channels": {
            name: _channel_to_spec(ch, f"{where}, channel {name!r}") for name, ch in g.channels.items()
        },
        "nodes": [_node_to_spec(node, f"{where}, node {name!r}") for name, node in g.nodes.items()],
        "edges": [_edge_to_spec(edge, where, g.channels) for edge in g.edges],
    }


def _channel_to_spec(ch: Channel, where: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"reducer": ch.kind}
    if ch.kind == "reduce":
        if not isinstance(ch.fn, _NamedReducer):
            raise GraphError(
                f"{where} folds with a Python function (reduce), which a spec cannot carry; "
                'build the graph with from_spec and a {"reducer": "reduce", "fn": "<name>"} channel '
                "resolved through reducers=, or use last_write, append or merge"
            )
        entry["fn"] = ch.fn.name
    if ch.kind in ("last_write", "reduce") and ch.default is not UNSET:
        _check_json(ch.default, f"{where}: default")
        entry["default"] = copy.deepcopy(ch.default)
    return entry


def _node_to_spec(node: NodeSpec, where: str) -> dict[str, Any]:
    if node.type is None:
        raise GraphError(
            f"{where} has no type, so no registry could rebuild it; declare it with "
            f".node({node.name!r}, fn, type='<registered type>', config={{...}})",
            node=node.name,
        )
    config = dict(node.config)
    _check_json(config, f"{where}: config")
    entry: dict[str, Any] = {"id": node.name, "type": node.type, "config": copy.deepcopy(config)}
    if node.retry is not None:
        if node.retry.retry_on is not None:
            raise GraphError(
                f"{where}: its RetryPolicy has retry_on=, a Python function a spec cannot carry; "
                "drop retry_on (every Exception is then retried) to export it",
                node=node.name,
            )
        entry["retry"] = {field: getattr(node.retry, field) for field in _RETRY_FIELDS}
        _check_retry(entry["retry"], f"{where}: retry")
    if node.destinations is not None:
        entry["destinations"] = list(node.destinations)
    return entry


def _edge_to_spec(edge: EdgeSpec, where: str, declared: Mapping[str, Channel]) -> dict[str, Any]:
    entry: dict[str, Any] = {"from": edge.source, "to": edge.target}
    if edge.guard is not None:
        if edge.predicate is None:
            raise GraphError(
                f"{where}: edge {edge.source!r} -> {edge.target!r} is guarded by a Python function, "
                "which a spec cannot carry; pass when= a predicate dict instead, e.g. "
                '{"channel": "intent", "eq": "buy"} (see ilmek.predicates)'
            )
        # The builder checks a predicate's shape but not its channels; a spec must rebuild.
        path = f"{where}: edge {edge.source!r} -> {edge.target!r}: when"
        check_predicate(edge.predicate, path, declared)
        _check_json(edge.predicate, path)
        entry["when"] = copy.deepcopy(edge.predicate)
    return entry
