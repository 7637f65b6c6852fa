"""What a graph is made of, as declared: nodes, edges, routers and the checks on them.

Frozen values the builder collects and the compiled graph keeps; no
planning and no execution here. :mod:`ilmek.graph` re-exports them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import attrs

from . import checks
from .control import RetryPolicy
from .errors import GraphError

__all__ = ["END", "START", "Callback", "EdgeSpec", "NodeSpec", "RouterSpec"]

START: Final = "__start__"
"""The virtual entry node."""
END: Final = "__end__"
"""The virtual exit node."""


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` accepts a second positional argument (the context)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    positional = 0
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            positional += 1
    return positional >= 2


@attrs.frozen
class Callback:
    """A user function called as ``fn(state, ctx)`` or ``fn(state)``."""

    fn: Callable[..., Any]
    takes_context: bool

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Callback:
        return cls(fn, _takes_context(fn))

    def __call__(self, state: Any, ctx: Any) -> Any:
        if self.takes_context:
            return self.fn(state, ctx)
        return self.fn(state)


def _frozen_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # A read-only copy: adding to the caller's dict, or to the compiled graph's,
    # must not change the node. Shallow, since a config built in code may hold
    # objects that cannot be copied; to_spec deep-copies what it exports.
    return MappingProxyType(dict(config))


@attrs.frozen(kw_only=True)
class NodeSpec:
    """A node as declared: its body, retry policy and what the spec exports."""

    name: str
    body: Callback
    retry: RetryPolicy | None = None
    destinations: tuple[str, ...] | None = None
    type: str | None = None
    config: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_config)
    #: The compiled graph the node runs, for a node that is a subgraph.
    subgraph: Any = attrs.field(default=None, eq=False)


@attrs.frozen(kw_only=True)
class EdgeSpec:
    """A static edge, optionally guarded."""

    source: str
    target: str
    guard: Callback | None = None
    predicate: Mapping[str, Any] | None = None


@attrs.frozen(kw_only=True)
class RouterSpec:
    """A routing function attached to a node (or ``START``)."""

    source: str
    route: Callback
    destinations: tuple[str, ...] | None = None


def destinations_tuple(value: Iterable[str] | None) -> tuple[str, ...] | None:
    """``destinations=`` as the declarations keep it: one name, or several, as a tuple."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def check_node(spec: NodeSpec, seen: Mapping[str, NodeSpec]) -> None:
    """Refuse a node with a bad, reserved or duplicate name, a body that is not callable, a bad retry."""
    name = spec.name
    if not isinstance(name, str) or not name:
        raise GraphError(f"node names are non-empty strings, got {name!r}")
    if name in (START, END):
        raise GraphError(f"{name!r} is reserved for the virtual entry and exit", node=name)
    problem = checks.name_problem(name)
    if problem is not None:
        raise GraphError(f"node name {name!r} {problem}; rename the node", node=name)
    if name in seen:
        raise GraphError(f"node {name!r} is declared twice", node=name)
    if not callable(spec.body.fn):
        raise GraphError(f"node {name!r}: its body must be callable, got {spec.body.fn!r}", node=name)
    if spec.retry is not None and not isinstance(spec.retry, RetryPolicy):
        raise GraphError(f"node {name!r}: retry= must be a RetryPolicy", node=name)


def check_endpoint(name: str, known: set[str], where: str, *, as_source: bool) -> None:
    """Refuse an edge or router end that names no node, leaves END or enters START."""
    if as_source and name == END:
        raise GraphError(f"{where}: nothing can leave END")
    if not as_source and name == START:
        raise GraphError(f"{where}: nothing can enter START")
    if name in (START, END) or name in known:
        return
    raise GraphError(f"{where} names unknown node {name!r}", node=name if isinstance(name, str) else None)


def checked_structure(
    graph_name: str, nodes: Sequence[NodeSpec], edges: Sequence[EdgeSpec], routers: Sequence[RouterSpec]
) -> dict[str, NodeSpec]:
    """The nodes by name, once every node, edge, router and destination is checked.

    Raises:
        GraphError: naming the culprit (see ``GraphBuilder.compile``), or a
            graph with no way out of ``START``.
    """
    by_name: dict[str, NodeSpec] = {}
    for spec in nodes:
        check_node(spec, by_name)
        by_name[spec.name] = spec
    known = set(by_name)
    for edge in edges:
        where = f"edge {edge.source!r} -> {edge.target!r}"
        check_endpoint(edge.source, known, where, as_source=True)
        check_endpoint(edge.target, known, where, as_source=False)
    for router in routers:
        where = f"router on {router.source!r}"
        check_endpoint(router.source, known, where, as_source=True)
        for target in router.destinations or ():
            check_endpoint(target, known, where, as_source=False)
    for spec in by_name.values():
        for target in spec.destinations or ():
            check_endpoint(target, known, f"destinations of node {spec.name!r}", as_source=False)
    if not any(e.source == START for e in edges) and not any(r.source == START for r in routers):
        raise GraphError(f"graph {graph_name!r} has no edge from START; add .edge(START, <first node>)")
    return by_name
