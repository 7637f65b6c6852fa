"""The console's graph drawing: a node that is a subgraph is a box holding its child's drawing."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from ilmek import END, START, CompiledGraph, channel, graph
from ilmek.web.graph_svg import draw_graph

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<b onmouseover="x">review & co</b>'


def nested(review: str = "review") -> CompiledGraph:
    """root: plan → outer (prep → ``review`` (ask → tell)) → send."""
    step = lambda state: {}  # noqa: E731
    inner = graph("inner", {"log": channel.append()}).node("ask", step).node("tell", step)
    inner = inner.edge(START, "ask").edge("ask", "tell").edge("tell", END).compile()
    outer = graph("outer", {"log": channel.append()}).node("prep", step).node(review, inner)
    outer = outer.edge(START, "prep").edge("prep", review).edge(review, END).compile()
    root = graph("root", {"log": channel.append()}).node("plan", step).node("outer", outer).node("send", step)
    return root.edge(START, "plan").edge("plan", "outer").edge("outer", "send").edge("send", END).compile()


def rect_of(
    svg: ET.Element, node: str, within: ET.Element | None = None
) -> tuple[float, float, float, float]:
    """The (left, top, right, bottom) of ``node``'s box drawn directly in ``within`` (default: the root)."""
    scope = svg.find(f"{SVG}g[@class='nodes']") if within is None else within.find(f"{SVG}g[@class='nodes']")
    assert scope is not None
    group = next(g for g in scope.findall(f"{SVG}g") if g.get("data-node") == node)
    rect = group.find(f"{SVG}rect")
    assert rect is not None
    x, y = float(rect.get("x", "")), float(rect.get("y", ""))
    return x, y, x + float(rect.get("width", "")), y + float(rect.get("height", ""))


def inside_of(scope: ET.Element, node: str) -> tuple[ET.Element, float, float]:
    """The group holding ``node``'s child drawing and its offset."""
    nodes = scope.find(f"{SVG}g[@class='nodes']")
    assert nodes is not None
    group = next(g for g in nodes.findall(f"{SVG}g") if g.get("data-inside") == node)
    found = re.fullmatch(r"translate\(([-\d.]+),([-\d.]+)\)", group.get("transform", ""))
    assert found is not None
    return group, float(found[1]), float(found[2])


def boxes_of(scope: ET.Element) -> list[Any]:
    """The names of the boxes drawn directly in ``scope``."""
    nodes = scope.find(f"{SVG}g[@class='nodes']")
    assert nodes is not None
    return [g.get("data-node") for g in nodes.findall(f"{SVG}g") if g.get("data-node") is not None]


def test_a_subgraph_node_holds_its_child_and_grandchild_drawn_within_its_box() -> None:
    """Every box of the child (and of the grandchild, two levels down) lies inside the box of its node."""
    svg = ET.fromstring(str(draw_graph(nested())))
    outer_box = rect_of(svg, "outer")
    child, dx, dy = inside_of(svg, "outer")
    assert {"prep", "review", START, END} <= set(boxes_of(child))
    for name in ("prep", "review", START, END):
        left, top, right, bottom = rect_of(svg, name, child)
        assert outer_box[0] < left + dx < right + dx < outer_box[2], name
        assert outer_box[1] < top + dy < bottom + dy < outer_box[3], name
    review_box = rect_of(svg, "review", child)
    grandchild, gx, gy = inside_of(child, "review")
    for name in ("ask", "tell"):
        left, top, right, bottom = rect_of(svg, name, grandchild)
        assert review_box[0] < left + gx < right + gx < review_box[2], name
        assert review_box[1] < top + gy < bottom + gy < review_box[3], name


def test_the_box_of_a_subgraph_node_pushes_the_next_layer_down_clear_of_it() -> None:
    """The node after a tall subgraph box starts below it, and its arrow leaves from the box's bottom."""
    svg = ET.fromstring(str(draw_graph(nested())))
    outer_box, send_box = rect_of(svg, "outer"), rect_of(svg, "send")
    assert send_box[1] > outer_box[3]
    arrows = svg.find(f"{SVG}g[@class='arrows']")
    assert arrows is not None
    leaving = next(p for p in arrows if p.get("data-source") == "outer" and p.get("data-target") == "send")
    first_y = float(leaving.get("d", "").split()[0].split(",")[1])
    assert outer_box[3] == first_y


def test_a_hostile_node_name_inside_a_subgraph_is_text() -> None:
    """A child's node named with markup stays text in the drawing (and the SVG still parses)."""
    drawn = str(draw_graph(nested(HOSTILE)))
    assert HOSTILE not in drawn
    svg = ET.fromstring(drawn)
    child, _, _ = inside_of(svg, "outer")
    assert HOSTILE in boxes_of(child)
