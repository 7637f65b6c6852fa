"""A compiled graph drawn as SVG, top to bottom, without any JavaScript.

Nodes sit in layers by their distance from ``START`` (``END`` last); within
a layer they follow the average position of what leads to them, which keeps
most arrows from crossing. Arrows that go down are drawn straight through
the gap between layers; arrows that go back up (a loop) bend out to the
right. Solid arrows are static edges (labelled with their predicate when
guarded); dashed ones are decided by code: a Python guard, a router, a
node's ``destinations`` for its commands. The nodes a checkpoint is about to
run, and those waiting on a pause, are marked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from ..graph import END, START, CompiledGraph
from ..predicates import describe
from .html import Markup, tag

__all__ = ["draw_graph"]

_BOX_HEIGHT: Final = 34
_LAYER_GAP: Final = 64
_NODE_GAP: Final = 28
_MARGIN: Final = 20
_MAX_LABEL: Final = 26
_LOOP_ROOM: Final = 90
# Node names cannot hold "#", so this prefix never meets a real node.
_ANYWHERE: Final = "#anywhere"


@attrs.frozen
class _Line:
    kind: str  # static, predicate, guard, router, goto
    source: str
    target: str
    label: str = ""


def _lines(graph: CompiledGraph) -> tuple[list[str], list[_Line]]:
    lines: list[_Line] = []
    for edge in graph.edges:
        if edge.predicate is not None:
            lines.append(_Line("predicate", edge.source, edge.target, describe(edge.predicate)))
        elif edge.guard is not None:
            lines.append(_Line("guard", edge.source, edge.target, "guard"))
        else:
            lines.append(_Line("static", edge.source, edge.target))
    extra: list[str] = []
    for index, router in enumerate(graph.routers):
        if router.destinations is None:
            # A router that declared no destinations may go anywhere: one "?" each.
            anywhere = f"{_ANYWHERE}{index}"
            extra.append(anywhere)
            lines.append(_Line("router", router.source, anywhere))
        else:
            lines.extend(_Line("router", router.source, target) for target in router.destinations)
    for name, spec in graph.nodes.items():
        for target in spec.destinations or ():
            lines.append(_Line("goto", name, target, "goto"))
    names = [START, *graph.nodes, *extra]
    if any(line.target == END for line in lines):
        names.append(END)
    return names, lines


def _layers(names: list[str], lines: list[_Line]) -> dict[str, int]:
    layer = {START: 0}
    frontier = [START]
    while frontier:
        following = []
        for source in frontier:
            for line in lines:
                if line.source == source and line.target not in layer and line.target != END:
                    layer[line.target] = layer[source] + 1
                    following.append(line.target)
        frontier = following
    # Nodes nothing declared a way to reach: a layer of their own below the rest.
    deepest = max(layer.values())
    stray = [name for name in names if name not in layer and name != END]
    for name in stray:
        layer[name] = deepest + 1
    if END in names:
        layer[END] = max(layer.values()) + 1
    return layer


def _text(name: str) -> str:
    if name == START:
        return "START"
    if name == END:
        return "END"
    if name.startswith(_ANYWHERE):
        return "?"
    return name if len(name) <= _MAX_LABEL else name[: _MAX_LABEL - 1] + "…"


def _short_label(label: str) -> str:
    return label if len(label) <= 40 else label[:39] + "…"


def _box_width(name: str) -> int:
    return max(72, min(240, 8 * len(_text(name)) + 28))


def _point(points: Iterable[tuple[float, float]], t: float) -> tuple[float, float]:
    """The point at ``t`` (0 to 1) along a cubic Bézier curve."""
    p0, p1, p2, p3 = points
    weights = ((1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3)
    return (
        sum(w * p[0] for w, p in zip(weights, (p0, p1, p2, p3), strict=True)),
        sum(w * p[1] for w, p in zip(weights, (p0, p1, p2, p3), strict=True)),
    )


def _label_width(text: str) -> float:
    return 6.6 * len(text) + 8


def draw_graph(graph: CompiledGraph, *, upcoming: Iterable[str] = (), paused: Iterable[str] = ()) -> Markup:
    """The graph as an inline ``<svg>``.

    Args:
        graph: The compiled graph.
        upcoming: Nodes about to run (drawn bold).
        paused: Nodes waiting on a pause (drawn amber).
    """
    names, lines = _lines(graph)
    layer_of = _layers(names, lines)
    count = max(layer_of.values()) + 1
    layers: list[list[str]] = [[] for _ in range(count)]
    for name in names:
        layers[layer_of[name]].append(name)
    # One pass of barycentre ordering: a node goes under what leads to it.
    position: dict[str, float] = {name: index for index, name in enumerate(layers[0])}
    declared = {name: index for index, name in enumerate(names)}
    for depth in range(1, count):

        def weight(name: str) -> tuple[float, int]:
            sources = [
                position[line.source] for line in lines if line.target == name and line.source in position
            ]
            return (sum(sources) / len(sources) if sources else float(declared[name]), declared[name])

        layers[depth].sort(key=weight)
        for index, name in enumerate(layers[depth]):
            position[name] = index

    widths = {name: _box_width(name) for name in names}
    # Boxes whose incoming arrows carry labels stand far enough apart for the labels.
    gaps = []
    for row in layers:
        labelled = [
            _label_width(_short_label(line.label)) - widths[line.target]
            for line in lines
            if line.label and line.target in row and layer_of[line.target] > layer_of[line.source]
        ]
        gaps.append(max([_NODE_GAP, *(width + 24 for width in labelled)]))
    row_widths = [
        sum(widths[name] for name in row) + gaps[depth] * (len(row) - 1) for depth, row in enumerate(layers)
    ]
    inner = max(row_widths)
    width = inner + 2 * _MARGIN + _LOOP_ROOM
    height = count * _BOX_HEIGHT + (count - 1) * _LAYER_GAP + 2 * _MARGIN
    box: dict[str, tuple[float, float, int]] = {}  # name -> (left, top, width)
    for depth, row in enumerate(layers):
        left = _MARGIN + (inner - row_widths[depth]) / 2
        top = _MARGIN + depth * (_BOX_HEIGHT + _LAYER_GAP)
        for name in row:
            box[name] = (left, top, widths[name])
            left += widths[name] + gaps[depth]

    upcoming_set, paused_set = set(upcoming), set(paused)
    drawn = [line for line in lines if line.source in box and line.target in box]
    forward = [line for line in drawn if layer_of[line.target] > layer_of[line.source]]
    # Several arrows leaving (or entering) one box spread along its edge, in
    # the order of the boxes at their other ends, so they neither overlap
    # nor cross right at the box.
    leaving: dict[str, list[_Line]] = {}
    entering: dict[str, list[_Line]] = {}
    for line in forward:
        leaving.setdefault(line.source, []).append(line)
        entering.setdefault(line.target, []).append(line)

    def port(name: str, line: _Line, group: dict[str, list[_Line]], other: str) -> float:
        left, _, box_width = box[name]
        members = sorted(group[name], key=lambda m: box[getattr(m, other)][0])
        index = members.index(line)
        return left + box_width * (index + 1) / (len(members) + 1)

    arrows: list[Markup] = []
    labels: list[Markup] = []
    loops = 0
    for line in drawn:
        sl, st, sw = box[line.source]
        tl, tt, tw = box[line.target]
        if line in forward:
            p0 = (port(line.source, line, leaving, "target"), st + _BOX_HEIGHT)
            p3 = (port(line.target, line, entering, "source"), tt)
            bend = _LAYER_GAP * 0.6
            p1, p2 = (p0[0], p0[1] + bend), (p3[0], p3[1] - bend)
        else:
            # Back up (or sideways): out of the source's right side and into the target's.
            loops += 1
            reach = max(sl + sw, tl + tw) + 36 + 12 * (loops % 4)
            p0 = (sl + sw, st + _BOX_HEIGHT - 8)
            p3 = (tl + tw, tt + 8)
            p1, p2 = (reach, p0[1]), (reach, p3[1])
        dynamic = line.kind in ("router", "guard", "goto")
        path = "M{:.1f},{:.1f} C{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}".format(*p0, *p1, *p2, *p3)
        arrows.append(
            tag(
                "path",
                {
                    "d": path,
                    "class": "arrow dynamic" if dynamic else "arrow",
                    "marker-end": "url(#ilmek-arrow)",
                },
            )
        )
        if line.label:
            # Near the target, where arrows into different boxes have parted.
            mx, my = _point((p0, p1, p2, p3), 0.72 if line in forward else 0.5)
            text = _short_label(line.label)
            labels.append(
                tag(
                    "g",
                    {"class": "edge-label"},
                    tag("title", {}, line.label),
                    tag(
                        "rect",
                        {
                            "x": f"{mx - _label_width(text) / 2:.1f}",
                            "y": f"{my - 9:.1f}",
                            "width": f"{_label_width(text):.1f}",
                            "height": 16,
                            "rx": 3,
                        },
                    ),
                    tag("text", {"x": f"{mx:.1f}", "y": f"{my + 3:.1f}"}, text),
                )
            )

    boxes: list[Markup] = []
    for name in names:
        box_left, box_top, box_width = box[name]
        classes = ["gnode"]
        if name in (START, END):
            classes.append("terminal")
        elif name not in graph.nodes:
            classes.append("anywhere")
        if name in paused_set:
            classes.append("paused")
        elif name in upcoming_set:
            classes.append("upcoming")
        label = _text(name)
        boxes.append(
            tag(
                "g",
                {"class": " ".join(classes)},
                tag("title", {}, name),
                tag(
                    "rect",
                    {
                        "x": f"{box_left:.1f}",
                        "y": f"{box_top:.1f}",
                        "width": box_width,
                        "height": _BOX_HEIGHT,
                        "rx": _BOX_HEIGHT // 2 if name in (START, END) else 6,
                    },
                ),
                tag(
                    "text",
                    {"x": f"{box_left + box_width / 2:.1f}", "y": f"{box_top + _BOX_HEIGHT / 2 + 4:.1f}"},
                    label,
                ),
            )
        )
    marker = tag(
        "marker",
        {
            "id": "ilmek-arrow",
            "viewBox": "0 0 10 10",
            "refX": 9,
            "refY": 5,
            "markerWidth": 7,
            "markerHeight": 7,
            "orient": "auto-start-reverse",
        },
        tag("path", {"d": "M0,0 L10,5 L0,10 z", "class": "arrowhead"}),
    )
    return tag(
        "svg",
        {
            "class": "graph",
            "xmlns": "http://www.w3.org/2000/svg",
            "width": f"{width:.0f}",
            "height": height,
            "viewBox": f"0 0 {width:.0f} {height}",
            "role": "img",
            "aria-label": f"graph {graph.name}",
        },
        tag("defs", {}, marker),
        tag("g", {"class": "arrows"}, arrows),
        tag("g", {"class": "nodes"}, boxes),
        tag("g", {"class": "labels"}, labels),
    )
