"""Drawing a compiled graph as a Mermaid flowchart."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .graph import END, START

if TYPE_CHECKING:
    from .graph import CompiledGraph

__all__ = ["to_mermaid"]


def _label(text: str) -> str:
    # Mermaid reads entity codes inside quoted labels; quotes would end them.
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def to_mermaid(graph: CompiledGraph) -> str:
    """The graph as Mermaid ``flowchart TD`` text.

    Static edges are solid arrows; guarded edges are dotted and labelled
    with their predicate (or ``when``); a router's possible destinations are
    dotted arrows labelled with the router (``*`` when it may go anywhere);
    a node's declared ``destinations`` (for its commands) are dotted arrows
    labelled ``goto``.
    """
    ids = {START: "start", END: "end"}
    for index, name in enumerate(graph.nodes):
        ids[name] = f"n{index}"
    lines = [f"flowchart TD  %% {_label(graph.name)}", '    start(["START"])']
    lines.extend(f'    {ids[name]}["{_label(name)}"]' for name in graph.nodes)
    lines.append('    end(["END"])')
    for edge in graph.edges:
        source, target = ids[edge.source], ids[edge.target]
        if edge.guard is None:
            lines.append(f"    {source} --> {target}")
        else:
            text = json.dumps(edge.predicate, sort_keys=True) if edge.predicate is not None else "when"
            lines.append(f'    {source} -.->|"{_label(text)}"| {target}')
    for router in graph.routers:
        source = ids[router.source]
        if router.destinations is None:
            lines.append(f'    {source} -.->|"router"| anywhere{source}(("*"))')
            continue
        lines.extend(f'    {source} -.->|"router"| {ids[target]}' for target in router.destinations)
    for name, spec in graph.nodes.items():
        for target in spec.destinations or ():
            lines.append(f'    {ids[name]} -.->|"goto"| {ids[target]}')
    return "\n".join(lines) + "\n"
