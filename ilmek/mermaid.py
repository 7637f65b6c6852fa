"""Drawing a graph, compiled or stored as a spec, as a Mermaid flowchart.

The drawing must parse in Mermaid whatever the graph is called and whatever
its nodes are named, so names never become Mermaid syntax: a node keeps its
name as its id only when that is a plain identifier and no Mermaid keyword
(``end``, ``subgraph``, ``style``... in any case); any other node gets a
generated id, and every label is quoted with Mermaid's entity codes for the
characters that would end or reinterpret it. The graph's name is the
drawing's title, in YAML front matter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .errors import GraphError
from .graph import END, START, CompiledGraph, RouterSpec
from .predicates import Predicate, describe

__all__ = ["DIRECTIONS", "to_mermaid"]

DIRECTIONS: Final = ("TD", "TB", "BT", "LR", "RL")
"""The flowchart directions Mermaid knows: top-down, bottom-top, left-right, right-left."""

# Words the flowchart grammar claims for itself (compared case-insensitively):
# a node id spelled like one breaks the parse, so such a node gets a generated id.
_KEYWORDS: Final = frozenset(
    {
        "end",
        "graph",
        "flowchart",
        "flowchart-elk",
        "subgraph",
        "style",
        "class",
        "classdef",
        "click",
        "linkstyle",
        "direction",
        "default",
        "call",
        "href",
        "interpolate",
        "acctitle",
        "accdescr",
        *(d.lower() for d in DIRECTIONS),
    }
)
_PLAIN_ID: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_START_ID: Final = "__start__"
_END_ID: Final = "__end__"

# Mermaid reads "#name;" and "#code;" inside a quoted label as an entity. "#"
# itself is escaped so that a name holding "#quot;" is drawn as written; the
# others would end the label ("), open HTML (< > &), start a markdown string
# (`), or end an edge label (|). A line break would end the statement.
_LABEL_ESCAPES: Final = str.maketrans(
    {
        "#": "#35;",
        '"': "#quot;",
        "<": "#lt;",
        ">": "#gt;",
        "&": "#38;",
        "`": "#96;",
        "|": "#124;",
        "%": "#37;",
        "\n": " ",
        "\r": " ",
    }
)


def _label(text: str) -> str:
    return text.translate(_LABEL_ESCAPES)


def _yaml_string(text: str) -> str:
    # JSON with only ASCII is a valid YAML double-quoted scalar: every control
    # and non-ASCII character becomes a \u escape YAML reads back the same.
    return json.dumps(text, ensure_ascii=True)


@attrs.frozen
class _Line:
    """One drawn connection: ``kind`` is static, predicate, guard, router or goto."""

    kind: str
    source: str
    targets: tuple[str, ...] | None
    label: str = ""


def _from_graph(graph: CompiledGraph) -> tuple[str | None, list[str], list[_Line]]:
    lines: list[_Line] = []
    # In declaration order, edges and routers interleaved, as the reference draws them.
    for connection in graph.declared:
        if isinstance(connection, RouterSpec):
            lines.append(_Line("router", connection.source, connection.destinations))
        elif connection.predicate is not None:
            lines.append(
                _Line("predicate", connection.source, (connection.target,), describe(connection.predicate))
            )
        elif connection.guard is not None:
            lines.append(_Line("guard", connection.source, (connection.target,), "guard"))
        else:
            lines.append(_Line("static", connection.source, (connection.target,)))
    for name, spec in graph.nodes.items():
        if spec.destinations:
            lines.append(_Line("goto", name, spec.destinations, "goto"))
    return (graph.name if graph.named else None), list(graph.nodes), lines


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise GraphError(f"{path}: expected a non-empty string, got {value!r}")
    return value


def _from_spec(spec: Mapping[str, Any]) -> tuple[str | None, list[str], list[_Line]]:
    # Only what a picture needs is read; from_spec validates a spec fully.
    name = spec.get("name")
    nodes: list[str] = []
    lines: list[_Line] = []
    for index, node in enumerate(spec.get("nodes") or ()):
        if not isinstance(node, Mapping):
            raise GraphError(f"spec.nodes[{index}]: expected an object")
        node_id = _text(node.get("id"), f"spec.nodes[{index}].id")
        nodes.append(node_id)
        destinations = node.get("destinations")
        if destinations:
            targets = tuple(_text(t, f"spec.nodes[{index}].destinations") for t in destinations)
            lines.append(_Line("goto", node_id, targets, "goto"))
    edges: list[_Line] = []
    for index, edge in enumerate(spec.get("edges") or ()):
        path = f"spec.edges[{index}]"
        if not isinstance(edge, Mapping):
            raise GraphError(f"{path}: expected an object")
        source, target = _text(edge.get("from"), f"{path}.from"), _text(edge.get("to"), f"{path}.to")
        if edge.get("when") is not None:
            label = describe(Predicate(edge["when"]).spec)
            edges.append(_Line("predicate", source, (target,), label))
        else:
            edges.append(_Line("static", source, (target,)))
    return (name if isinstance(name, str) and name else None), nodes, edges + lines


def _nodes_named(items: Iterable[Any]) -> set[str]:
    named: set[str] = set()
    for item in items:
        node = item.get("node") if isinstance(item, Mapping) else getattr(item, "node", None)
        if isinstance(node, str):
            named.add(node)
    return named


def _part(highlight: Any, key: str) -> Iterable[Any]:
    part = highlight.get(key) if isinstance(highlight, Mapping) else getattr(highlight, key, None)
    return part or ()


def _node_ids(order: list[str], lines: list[_Line]) -> tuple[dict[str, str], list[str]]:
    """Each node's Mermaid id, and one fresh id per ``?`` a router without destinations leads to."""

    def plain(name: str) -> bool:
        return _PLAIN_ID.fullmatch(name) is not None and name.lower() not in _KEYWORDS

    used = {_START_ID, _END_ID, *(name for name in order if plain(name))}

    def fresh(base: str) -> str:
        candidate = base
        while candidate in used:
            candidate += "_"
        used.add(candidate)
        return candidate

    ids = {START: _START_ID, END: _END_ID}
    for index, name in enumerate(order):
        ids[name] = name if plain(name) else fresh(f"n{index}")
    # One "?" per router that declared no destinations: it may go anywhere.
    anywhere = [fresh(f"r{i}") for i in range(sum(line.targets is None for line in lines))]
    return ids, anywhere


def _drawn_nodes(nodes: list[str], lines: list[_Line]) -> list[str]:
    """The nodes to draw, in order: a node an edge names but a spec forgot to declare is drawn too."""
    order = list(dict.fromkeys(nodes))
    for line in lines:
        for name in (line.source, *(line.targets or ())):
            if name not in (START, END) and name not in order:
                order.append(name)
    return order


def _children(source: Any) -> dict[str, CompiledGraph]:
    """The nodes of a compiled graph that are subgraphs, with the graph each runs."""
    if not isinstance(source, CompiledGraph):
        return {}
    return {name: spec.subgraph for name, spec in source.nodes.items() if spec.subgraph is not None}


def _block(child: CompiledGraph, block_id: str, label: str, indent: str) -> list[str]:
    """A subgraph node drawn as a Mermaid ``subgraph`` block holding the child's own flowchart.

    The child's ids are the block's id and ``_`` in front of its own, so no
    two levels collide; edges of the parent point at the block itself.
    """
    _, nodes, lines = _from_graph(child)
    order = _drawn_nodes(nodes, lines)
    own_ids, own_anywhere = _node_ids(order, lines)
    ids = {name: f"{block_id}_{node_id}" for name, node_id in own_ids.items()}
    anywhere = [f"{block_id}_{node_id}" for node_id in own_anywhere]
    inner = indent + "  "
    children = _children(child)
    out = [f'{indent}subgraph {block_id}["{_label(label)}"]', f"{inner}{ids[START]}([START])"]
    for name in order:
        if name in children:
            out += _block(children[name], ids[name], name, inner)
        else:
            out.append(f'{inner}{ids[name]}["{_label(name)}"]')
    out += [f'{inner}{node_id}{{"?"}}' for node_id in anywhere]
    if any(END in (line.targets or ()) for line in lines):
        out.append(f"{inner}{ids[END]}([END])")
    out += [f"{inner}{arrow.strip()}" for arrow in _arrows(lines, ids, anywhere)]
    out.append(f"{indent}end")
    return out


def _arrows(lines: list[_Line], ids: Mapping[str, str], anywhere: list[str]) -> list[str]:
    """The flowchart's arrow statements, one per target of each line, in the lines' order."""
    out: list[str] = []
    unknown = iter(anywhere)
    for line in lines:
        source_id = ids[line.source]
        if line.targets is None:
            out.append(f"  {source_id} -.-> {next(unknown)}")
            continue
        for target in line.targets:
            if line.kind == "static":
                out.append(f"  {source_id} --> {ids[target]}")
            elif line.kind == "predicate":
                out.append(f'  {source_id} -->|"{_label(line.label)}"| {ids[target]}')
            elif line.kind == "router":
                out.append(f"  {source_id} -.-> {ids[target]}")
            else:
                out.append(f'  {source_id} -.->|"{line.label}"| {ids[target]}')
    return out


def to_mermaid(
    source: CompiledGraph | Mapping[str, Any],
    *,
    direction: str = "TD",
    include_routers: bool = True,
    highlight: Any = None,
) -> str:
    """A compiled graph, or a spec (see :func:`~ilmek.to_spec`), as Mermaid flowchart text.

    A spec is drawn as the graph built from it would be, without a registry.
    Solid arrows are static edges, and guarded edges labelled with their
    predicate (``intent == "buy"``); dotted arrows are decided by code: a
    Python guard (labelled ``guard``), a router (to each of its declared
    destinations, or to one ``?`` per router that declared none), and a
    node's declared ``destinations`` for its commands (labelled ``goto``).
    ``END`` is drawn only when something leads there.

    Args:
        source: The compiled graph or its spec.
        direction: ``TD`` (the default), ``TB``, ``BT``, ``LR`` or ``RL``.
        include_routers: ``False`` leaves routers' arrows out.
        highlight: Where a thread stands: a :class:`~ilmek.Checkpoint` (or any
            object or mapping with ``next`` and ``pending``, whose items have a
            ``node``). Nodes about to run are drawn bold (class ``next``),
            nodes waiting on a pause dashed with a ⏸ (class ``pending``).

    Raises:
        ValueError: an unknown direction.
        GraphError: a spec too malformed to draw (a node or edge that is not
            an object, a missing name, an invalid predicate).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown Mermaid direction {direction!r}; use one of {', '.join(DIRECTIONS)}")
    if isinstance(source, CompiledGraph):
        title, nodes, lines = _from_graph(source)
    elif isinstance(source, Mapping):
        title, nodes, lines = _from_spec(source)
    else:
        raise TypeError(f"to_mermaid() draws a compiled graph or a spec dict, got {type(source).__name__}")
    if not include_routers:
        lines = [line for line in lines if line.kind != "router"]

    order = _drawn_nodes(nodes, lines)
    ids, anywhere = _node_ids(order, lines)
    pending = _nodes_named(_part(highlight, "pending")) if highlight is not None else set()
    upcoming = _nodes_named(_part(highlight, "next")) - pending if highlight is not None else set()
    children = _children(source)

    out: list[str] = []
    if title is not None:
        out += ["---", f"title: {_yaml_string(title)}", "---"]
    out += [f"flowchart {direction}", f"  {_START_ID}([START])"]
    for name in order:
        if name in children:
            out += _block(children[name], ids[name], f"⏸ {name}" if name in pending else name, "  ")
        else:
            out.append(f'  {ids[name]}["{_label(f"⏸ {name}" if name in pending else name)}"]')
    out += [f'  {node_id}{{"?"}}' for node_id in anywhere]
    if any(END in (line.targets or ()) for line in lines):
        out.append(f"  {_END_ID}([END])")
    out += _arrows(lines, ids, anywhere)
    for css_class, marked, style in (
        ("next", upcoming, "stroke-width:3px"),
        ("pending", pending, "stroke-width:3px,stroke-dasharray:5 3"),
    ):
        members = [ids[name] for name in order if name in marked]
        if members:
            out += [f"  classDef {css_class} {style}", f"  class {','.join(members)} {css_class}"]
    return "\n".join(out) + "\n"
