"""A compiled graph drawn as SVG, top to bottom, without any JavaScript; no arrow crosses a box.

Nodes sit in layers by their distance from ``START`` (``END`` last); within
a layer they follow the average position of what leads to them, which keeps
most arrows from crossing. Arrows are drawn orthogonally, only in the free
space: each leaves its box from the bottom, runs along a track of its own in
the gap below that layer, and enters its target from the top through the
gap above the target's layer. An arrow that skips layers goes down a
corridor free of boxes in every layer it passes; one that goes back up (a
loop) goes up a lane right of every box it passes. So an arrow touches no
box but its own two ends.

Solid arrows are static edges (labelled with their predicate when
guarded); dashed ones are decided by code: a Python guard, a router, a
node's ``destinations`` for its commands. The nodes a checkpoint is about to
run, and those waiting on a pause, are marked. A node that is a subgraph is
a taller box holding its child's drawing (at every depth), under its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from ..graph import END, START, CompiledGraph
from ..predicates import describe
from .html import Markup, tag

__all__ = ["Marks", "draw_graph"]

_BOX_HEIGHT: Final = 34
_TRACK: Final = 9  # between two tracks of one gap
_GAP_BASE: Final = 40  # a gap's height before its tracks
_NODE_GAP: Final = 36
_MARGIN: Final = 20
_MAX_LABEL: Final = 26
_HEADER: Final = 28  # above the child's drawing, in the box of a node that is a subgraph
_PAD: Final = 8  # round the child's drawing, inside that box
_DEPTH: Final = 6  # how deep children of children are drawn inside their nodes
_LANE: Final = 12  # between two vertical lanes (corridors, loops)
_CLEAR: Final = 8  # the least room kept between an arrow and a box
# Node names cannot hold "#", so this prefix never meets a real node.
_ANYWHERE: Final = "#anywhere"

Point = tuple[float, float]


@attrs.frozen
class _Line:
    kind: str  # static, predicate, guard, router, goto
    source: str
    target: str
    label: str = ""


@attrs.frozen
class _Box:
    left: float
    top: float
    width: float
    height: float = _BOX_HEIGHT

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height


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
    # One arrow per pair and kind: a router declaring a target twice draws it once.
    return names, list(dict.fromkeys(lines))


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
    for name in names:
        if name not in layer and name != END:
            layer[name] = deepest + 1
    if END in names:
        layer[END] = max(layer.values()) + 1
    return layer


def _ordered(names: list[str], lines: list[_Line], layer_of: dict[str, int]) -> list[list[str]]:
    """The layers, each in barycentre order: a node goes under what leads to it."""
    layers: list[list[str]] = [[] for _ in range(max(layer_of.values()) + 1)]
    for name in names:
        layers[layer_of[name]].append(name)
    position: dict[str, float] = {name: index for index, name in enumerate(layers[0])}
    declared = {name: index for index, name in enumerate(names)}
    for row in layers[1:]:

        def weight(name: str) -> tuple[float, int]:
            sources = [
                position[line.source] for line in lines if line.target == name and line.source in position
            ]
            return (sum(sources) / len(sources) if sources else float(declared[name]), declared[name])

        row.sort(key=weight)
        for index, name in enumerate(row):
            position[name] = index
    return layers


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


def _label_width(text: str) -> float:
    return 6.6 * len(text) + 8


@attrs.define
class _Plan:
    """Where boxes go and how each arrow runs: the drawing's geometry, before any markup."""

    layers: list[list[str]]
    layer_of: dict[str, int]
    inside: dict[str, _Plan] = attrs.Factory(dict)  # the drawing of each node that is a subgraph
    box: dict[str, _Box] = attrs.Factory(dict)
    gap_top: list[float] = attrs.Factory(list)  # the y where the gap below each layer starts
    tracks: list[int] = attrs.Factory(list)  # how many tracks each gap holds
    routes: list[tuple[_Line, list[Point]]] = attrs.Factory(list)
    width: float = 0.0
    height: float = 0.0


def _gap_tracks(lines: list[_Line], layer_of: dict[str, int], count: int) -> list[int]:
    """How many horizontal tracks each gap needs (the gap below layer ``i``)."""
    tracks = [0] * count
    for line in lines:
        source, target = layer_of[line.source], layer_of[line.target]
        tracks[source] += 1  # every arrow leaves through the gap below its source
        if target - 1 != source:
            tracks[max(target - 1, 0)] += 1  # and enters through the gap above its target
    return tracks


def _size(plan: _Plan, name: str) -> tuple[float, float]:
    """A box's width and height: a subgraph's holds its child's drawing under its name."""
    inside = plan.inside.get(name)
    if inside is None:
        return _box_width(name), _BOX_HEIGHT
    return max(_box_width(name), inside.width + 2 * _PAD), _HEADER + inside.height + _PAD


def _place(plan: _Plan, lines: list[_Line]) -> None:
    """Boxes centred in their layers (tops aligned); gaps tall enough for their tracks (and a label)."""
    sizes = {name: _size(plan, name) for row in plan.layers for name in row}
    widths = {name: size[0] for name, size in sizes.items()}
    gaps = []
    for row in plan.layers:
        labelled = [
            _label_width(_short_label(line.label)) - widths[line.target]
            for line in lines
            if line.label and line.target in row
        ]
        gaps.append(max([_NODE_GAP, *(width + 24 for width in labelled)]))
    row_widths = [
        sum(widths[name] for name in row) + gaps[i] * (len(row) - 1) for i, row in enumerate(plan.layers)
    ]
    inner = max(row_widths)
    plan.tracks = _gap_tracks(lines, plan.layer_of, len(plan.layers))
    top = float(_MARGIN)
    for depth, row in enumerate(plan.layers):
        left = _MARGIN + (inner - row_widths[depth]) / 2
        tallest = max(sizes[name][1] for name in row)
        for name in row:
            plan.box[name] = _Box(left, top, widths[name], sizes[name][1])
            left += widths[name] + gaps[depth]
        plan.gap_top.append(top + tallest)
        top += tallest + _GAP_BASE + _TRACK * plan.tracks[depth]
    plan.width = inner + 2 * _MARGIN
    last = plan.tracks[-1]
    plan.height = plan.gap_top[-1] + (_GAP_BASE / 2 + _TRACK * last if last else 0) + _MARGIN


def _ports(plan: _Plan, lines: list[_Line]) -> dict[tuple[_Line, str], float]:
    """Where each arrow leaves its source (bottom edge) and enters its target (top edge), spread out."""
    ports: dict[tuple[_Line, str], float] = {}
    for end, other in (("source", "target"), ("target", "source")):
        groups: dict[str, list[_Line]] = {}
        for line in lines:
            groups.setdefault(getattr(line, end), []).append(line)
        for name, members in groups.items():
            box = plan.box[name]
            members.sort(
                key=lambda m: plan.box[getattr(m, other)].left + plan.box[getattr(m, other)].width / 2
            )
            for index, line in enumerate(members):
                ports[(line, end)] = box.left + box.width * (index + 1) / (len(members) + 1)
    return ports


def _free_x(plan: _Plan, rows: range, near: float, taken: list[float]) -> float:
    """An x no box of layers ``rows`` comes near (nor another lane), as close to ``near`` as can be."""
    blocked = [
        (box.left - _CLEAR, box.right + _CLEAR)
        for depth in rows
        for box in (plan.box[name] for name in plan.layers[depth])
    ]
    blocked += [(x - _LANE / 2, x + _LANE / 2) for x in taken]
    candidates = [near] + [edge for low, high in blocked for edge in (low - 1, high + 1)]
    free = [x for x in candidates if x >= _MARGIN / 2 and all(not low < x < high for low, high in blocked)]
    if free:
        return min(free, key=lambda x: (abs(x - near), x))
    return max([plan.width, *(high for _, high in blocked)]) + _LANE


def _route(plan: _Plan, lines: list[_Line]) -> None:
    """Each arrow as an orthogonal polyline through the gaps, corridors and loop lanes."""
    ports = _ports(plan, lines)
    used = [0] * len(plan.layers)
    lanes: list[float] = []

    def track(gap: int) -> float:
        used[gap] += 1
        return plan.gap_top[gap] + _GAP_BASE / 2 + _TRACK * (used[gap] - 1)

    for line in lines:
        source, target = plan.box[line.source], plan.box[line.target]
        s_layer, t_layer = plan.layer_of[line.source], plan.layer_of[line.target]
        x0, x1 = ports[(line, "source")], ports[(line, "target")]
        out = track(s_layer)
        if t_layer == s_layer + 1:
            points = [(x0, source.bottom), (x0, out), (x1, out), (x1, target.top)]
        else:
            # A corridor down past the layers between, or a lane up beside every box it passes.
            rows = range(s_layer + 1, t_layer) if t_layer > s_layer else range(t_layer, s_layer + 1)
            if t_layer > s_layer:
                lane = _free_x(plan, rows, (x0 + x1) / 2, lanes)
            else:
                right = max(plan.box[name].right for depth in rows for name in plan.layers[depth])
                lane = max([right + 2 * _CLEAR, *(x + _LANE for x in lanes if x > right)])
            lanes.append(lane)
            inn = track(max(t_layer - 1, 0))
            points = [(x0, source.bottom), (x0, out), (lane, out), (lane, inn), (x1, inn), (x1, target.top)]
        plan.routes.append((line, points))
    widest = max([plan.width - _MARGIN, *lanes]) + _MARGIN
    plan.width = widest


def _path(points: list[Point]) -> str:
    # Repeated points (a straight run) are dropped: every segment has a length.
    kept = [points[0]]
    for point in points[1:]:
        if point != kept[-1]:
            kept.append(point)
    return "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in kept)


def _label_markup(line: _Line, points: list[Point]) -> Markup:
    """A guard's label on the arrow's last run into its target, where arrows to other boxes have parted."""
    (x, y_from), (_, y_to) = points[-2], points[-1]
    mx, my = x, (y_from + y_to) / 2
    text = _short_label(line.label)
    width = _label_width(text)
    return tag(
        "g",
        {"class": "edge-label"},
        tag("title", {}, line.label),
        tag(
            "rect",
            {
                "x": f"{mx - width / 2:.1f}",
                "y": f"{my - 8:.1f}",
                "width": f"{width:.1f}",
                "height": 16,
                "rx": 3,
            },
        ),
        tag("text", {"x": f"{mx:.1f}", "y": f"{my + 4:.1f}"}, text),
    )


def _arrows(plan: _Plan) -> tuple[list[Markup], list[Markup]]:
    arrows, labels = [], []
    for line, points in plan.routes:
        dynamic = line.kind in ("router", "guard", "goto")
        arrows.append(
            tag(
                "path",
                {
                    "d": _path(points),
                    "class": "arrow dynamic" if dynamic else "arrow",
                    "marker-end": "url(#ilmek-arrow)",
                    "data-source": line.source,
                    "data-target": line.target,
                },
            )
        )
        if line.label:
            labels.append(_label_markup(line, points))
    return arrows, labels


@attrs.frozen
class Marks:
    """The nodes of one graph about to run and those waiting on a pause."""

    upcoming: frozenset[str] = frozenset()
    paused: frozenset[str] = frozenset()


def _boxes(
    plan: _Plan,
    graph: CompiledGraph,
    marks: Mapping[tuple[str, ...], Marks],
    path: tuple[str, ...] = (),
) -> list[Markup]:
    """The boxes of ``graph`` (reached by the subgraph nodes ``path``), marked as ``marks[path]`` says."""
    mark = marks.get(path, Marks())
    upcoming, paused = mark.upcoming, mark.paused
    boxes = []
    for row in plan.layers:
        for name in row:
            box = plan.box[name]
            inside = plan.inside.get(name)
            classes = ["gnode"]
            if name in (START, END):
                classes.append("terminal")
            elif name not in graph.nodes:
                classes.append("anywhere")
            elif inside is not None:
                classes.append("subgraph")
            if name in paused:
                classes.append("paused")
            elif name in upcoming:
                classes.append("upcoming")
            boxes.append(
                tag(
                    "g",
                    {"class": " ".join(classes), "data-node": name},
                    tag("title", {}, name),
                    tag(
                        "rect",
                        {
                            "x": f"{box.left:.1f}",
                            "y": f"{box.top:.1f}",
                            "width": f"{box.width:.1f}",
                            "height": f"{box.height:.1f}",
                            "rx": _BOX_HEIGHT // 2 if name in (START, END) else 6,
                        },
                    ),
                    tag(
                        "text",
                        {"x": f"{box.left + box.width / 2:.1f}", "y": f"{box.top + _BOX_HEIGHT / 2 + 4:.1f}"},
                        _text(name),
                    ),
                )
            )
            if inside is not None:
                boxes.append(_inside(name, box, inside, graph, marks, (*path, name)))
    return boxes


def _inside(
    name: str,
    box: _Box,
    inside: _Plan,
    graph: CompiledGraph,
    marks: Mapping[tuple[str, ...], Marks],
    path: tuple[str, ...],
) -> Markup:
    """The child's drawing in its node's box, beside that box's group (so its rules do not reach in)."""
    child = graph.nodes[name].subgraph
    assert child is not None
    arrows, labels = _arrows(inside)
    left, top = box.left + (box.width - inside.width) / 2, box.top + _HEADER
    return tag(
        "g",
        {
            "class": "inside",
            "data-inside": name,
            "transform": f"translate({left:.1f},{top:.1f})",
        },
        tag("g", {"class": "arrows"}, arrows),
        tag("g", {"class": "nodes"}, _boxes(inside, child, marks, path)),
        tag("g", {"class": "labels"}, labels),
    )


def _plan(graph: CompiledGraph, depth: int = 0) -> _Plan:
    """Where everything of ``graph`` goes, the drawings of its subgraph nodes inside theirs."""
    names, lines = _lines(graph)
    layer_of = _layers(names, lines)
    plan = _Plan(layers=_ordered(names, lines, layer_of), layer_of=layer_of)
    if depth < _DEPTH:
        plan.inside = {
            name: _plan(spec.subgraph, depth + 1)
            for name, spec in graph.nodes.items()
            if spec.subgraph is not None
        }
    drawn = [line for line in lines if line.source in layer_of and line.target in layer_of]
    _place(plan, drawn)
    _route(plan, drawn)
    return plan


def draw_graph(
    graph: CompiledGraph,
    *,
    upcoming: Iterable[str] = (),
    paused: Iterable[str] = (),
    inside: Mapping[tuple[str, ...], Marks] | None = None,
) -> Markup:
    """The graph as an inline ``<svg>``.

    Args:
        graph: The compiled graph.
        upcoming: Nodes about to run (drawn bold).
        paused: Nodes waiting on a pause (drawn amber).
        inside: The marks of the graphs drawn inside subgraph nodes, by the
            path of node names leading to them (``("outer", "review")``).
    """
    marks = {**(inside or {}), (): Marks(frozenset(upcoming), frozenset(paused))}
    plan = _plan(graph)
    arrows, labels = _arrows(plan)
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
    width, height = f"{plan.width:.0f}", f"{plan.height:.0f}"
    return tag(
        "svg",
        {
            "class": "graph",
            "xmlns": "http://www.w3.org/2000/svg",
            "width": width,
            "height": height,
            "viewBox": f"0 0 {width} {height}",
            "role": "img",
            "aria-label": f"graph {graph.name}: {len(plan.box)} nodes, {len(plan.routes)} arrows",
        },
        tag("defs", {}, marker),
        tag("g", {"class": "arrows"}, arrows),
        tag("g", {"class": "nodes"}, _boxes(plan, graph, marks)),
        tag("g", {"class": "labels"}, labels),
    )
