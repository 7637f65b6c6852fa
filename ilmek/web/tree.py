"""A thread's checkpoints drawn as a tree in SVG, newest at the top, forks as side branches.

Each checkpoint is one row; a branch keeps one lane (column) for its whole
length, and the first child of a checkpoint continues its parent's lane,
so a thread that never forked is a single straight line and each fork
opens a lane beside the branch it left. Lanes are reused once a branch
ends. Every row links to its checkpoint's page.

The lanes, edges and circles are an SVG; each row's label is an HTML link
beside it, one :data:`ROW` high (``console.css`` mirrors the geometry), so
a label longer than the box is cut there with an ellipsis instead of
running past it: the link's text and title hold the whole label, and the
checkpoint's page says it all.

A damaged store may hold parent links no run writes: a checkpoint that is
its own parent, parents that loop, a parent newer than its child (an id
rewritten). Every checkpoint is still drawn once; a link that does not lead
to an older checkpoint is not followed (the checkpoint starts a branch of
its own) and the row says ``damaged``, as ``ilmek history`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..types import Checkpoint
from .html import Markup, tag
from .links import Links
from .previews import ran_nodes
from .values import preview

__all__ = ["TreeNode", "answered_pauses", "draw_tree", "layout", "pause_state", "what_ran"]

ROW: Final = 30
"""A row's height in pixels (``.checkpoint-tree a.row`` in ``console.css``)."""
LANE: Final = 18
PAD: Final = 14
FIRST_ROW: Final = PAD + ROW // 4 - ROW // 2
"""Where the first row starts from the top (``.tree-rows`` in ``console.css``)."""


@attrs.frozen(kw_only=True)
class TreeNode:
    """Where one checkpoint is drawn: its ``row`` (0 is the oldest) and ``lane``.

    ``damage`` says what is wrong with its parent link, if anything (see the module's docstring).
    """

    checkpoint: Checkpoint
    row: int
    lane: int
    parent_row: int | None
    parent_lane: int | None
    damage: str | None = None


def answered_pauses(checkpoints: Sequence[Checkpoint]) -> set[str]:
    """The pause checkpoints that a run went on from (their pauses were answered).

    A fork's first checkpoint is a copy of the pause it forks from, not an
    answer to it: the fork answers its own copy.
    """
    return {
        checkpoint.parent_id
        for checkpoint in checkpoints
        if checkpoint.parent_id is not None and checkpoint.metadata.get("source") != "fork"
    }


def _looped(parent_of: dict[str, str]) -> set[str]:
    """The checkpoints whose parent links, followed, come back to them (a damaged store)."""
    looped: set[str] = set()
    done: set[str] = set()
    for start in parent_of:
        path: list[str] = []
        on_path: set[str] = set()
        node: str | None = start
        while node is not None and node not in done and node not in on_path:
            path.append(node)
            on_path.add(node)
            node = parent_of.get(node)
        if node is not None and node in on_path:
            looped.update(path[path.index(node) :])
        done.update(path)
    return looped


def layout(checkpoints: Sequence[Checkpoint]) -> list[TreeNode]:
    """Rows and lanes for ``checkpoints`` (any order; a missing parent makes a root).

    A parent link that does not lead to an older listed checkpoint (a loop,
    a forged id) makes a root too, marked with its ``damage``.
    """
    # One row per id: a store cannot hold two, but a forged listing must not draw one twice.
    ordered = sorted({checkpoint.id: checkpoint for checkpoint in checkpoints}.values(), key=lambda c: c.id)
    row_of = {checkpoint.id: row for row, checkpoint in enumerate(ordered)}
    listed_parent = {
        checkpoint.id: parent
        for checkpoint in ordered
        if (parent := checkpoint.parent_id) is not None and parent in row_of
    }
    looped = _looped(listed_parent)
    # Only a link to an older row is drawn: each chain then grows upwards, row by row.
    parent_of = {child: parent for child, parent in listed_parent.items() if row_of[parent] < row_of[child]}
    damage: dict[str, str] = {}
    for child, parent in listed_parent.items():
        if child in looped:
            damage[child] = "damaged: its parents loop"
        elif child not in parent_of:
            damage[child] = f"damaged: its parent {parent} is not older"
    # A branch is a chain: a checkpoint continues its parent's chain when it
    # is the parent's first child, and starts a chain of its own otherwise.
    chain_of: dict[str, int] = {}
    continued: set[str] = set()
    chains: list[tuple[int, int]] = []  # (row it leaves from, last row)
    for checkpoint in ordered:
        parent = parent_of.get(checkpoint.id)
        row = row_of[checkpoint.id]
        # A fork always branches to the side: continuing its parent's lane would read as the old branch.
        if parent is not None and parent not in continued and checkpoint.metadata.get("source") != "fork":
            continued.add(parent)
            chain = chain_of[parent]
            chains[chain] = (chains[chain][0], row)
        else:
            chain = len(chains)
            start = row_of[parent] if parent is not None else row
            chains.append((start, row))
        chain_of[checkpoint.id] = chain
    # Interval colouring: a chain takes the lowest lane free over its rows.
    lane_of_chain: dict[int, int] = {}
    lane_ends: list[int] = []
    for chain in sorted(range(len(chains)), key=lambda c: chains[c]):
        start, end = chains[chain]
        for lane, last in enumerate(lane_ends):
            if last < start:
                lane_ends[lane] = end
                lane_of_chain[chain] = lane
                break
        else:
            lane_of_chain[chain] = len(lane_ends)
            lane_ends.append(end)
    nodes = []
    for checkpoint in ordered:
        parent = parent_of.get(checkpoint.id)
        nodes.append(
            TreeNode(
                checkpoint=checkpoint,
                row=row_of[checkpoint.id],
                lane=lane_of_chain[chain_of[checkpoint.id]],
                parent_row=row_of[parent] if parent is not None else None,
                parent_lane=lane_of_chain[chain_of[parent]] if parent is not None else None,
                damage=damage.get(checkpoint.id),
            )
        )
    return nodes


_SOURCES: Final = {"input": "input", "fork": "fork", "update": "edited", "pause": "paused"}


def what_ran(checkpoint: Checkpoint, parent: Checkpoint | None) -> str:
    """What made a checkpoint: the nodes its parent scheduled (the superstep that ran), or its source.

    A superstep's checkpoint says ``loop`` in its metadata; a person reads the
    nodes. A pause's checkpoint is the superstep that paused, so it names its
    nodes too.
    """
    source = str(checkpoint.metadata.get("source", "?"))
    # A superstep records its tasks' keys.
    recorded = ran_nodes(checkpoint.metadata)
    ran = recorded or []
    if recorded is None and source in ("loop", "pause") and parent is not None:
        ran = [task.node for task in parent.next]
    if source in ("loop", "pause") and ran:
        counted = [
            f"{node} x{count}" if (count := ran.count(node)) > 1 else node for node in dict.fromkeys(ran)
        ]
        return ", ".join(counted)
    if source == "loop" and checkpoint.parent_id is not None and parent is None:
        return "a superstep"
    return _SOURCES.get(source, source)


def pause_state(
    checkpoint: Checkpoint, answered: set[str], latest: str | None, recorded_at: str | None
) -> str | None:
    """``waiting``, ``answered`` or ``passed`` for a checkpoint with pauses (``None`` without).

    The one rule the tree and the pause table both use: answered when a run
    went on from it (or a failed run recorded its answer), waiting while it
    is the thread's latest, passed otherwise (the thread went on elsewhere).
    """
    if not checkpoint.pending:
        return None
    if checkpoint.id in answered or checkpoint.id == recorded_at:
        return "answered"
    return "waiting" if checkpoint.id == latest else "passed"


def _label(
    node: TreeNode,
    parent: Checkpoint | None,
    state: str | None,
    answers: Mapping[str, Any],
    latest: str | None,
    failed_at: str | None,
    reached: bool,
) -> list[tuple[str, str]]:
    """A row's label as ``(CSS class, text)`` parts, in reading order."""
    checkpoint = node.checkpoint
    parts = [
        ("t-step", f"step {checkpoint.step}"),
        # The time early: a long label is cut at the box's edge, never the time.
        ("t-time", f"{checkpoint.ts:%Y-%m-%d %H:%M:%S}"),
        ("t-source", what_ran(checkpoint, parent)),
    ]
    if node.damage is not None:
        parts.append(("t-failed t-damaged", node.damage))
    if reached:
        # Drawn only as the start of a fork: what became of its own pauses is on its own page.
        parts.append(("t-source", "a fork's parent, older than this page"))
    elif state is None and not checkpoint.next:
        parts.append(("t-done", "done"))
    if checkpoint.id == failed_at:
        parts.append(("t-failed", "failed from here"))
    if checkpoint.id == latest:
        parts.append(("t-latest", "latest"))
    if state is not None:
        # The pauses (and their answers) last: the longest part, cut first where the box ends.
        given = [
            f"{pause.id} = {preview(answers[pause.id], 24)}"
            for pause in checkpoint.pending
            if pause.id in answers
        ]
        shown = {"waiting": "waiting", "answered": "answered", "passed": "not answered"}[state]
        ids = "; ".join(given) if given else ", ".join(pause.id for pause in checkpoint.pending)
        parts.append((f"t-pause t-{state}", f"{shown}: {ids}"))
    return parts


def _node_classes(
    checkpoint: Checkpoint, state: str | None, latest: str | None, failed_at: str | None
) -> list[str]:
    """The CSS classes of a checkpoint's circle: the states its label spells out, and a fork's."""
    classes = ["node"]
    if state is not None:
        classes.append(state)
    elif not checkpoint.next:
        classes.append("done")
    if checkpoint.metadata.get("source") == "fork":
        classes.append("fork")
    if checkpoint.id == failed_at:
        classes.append("failed")
    if checkpoint.id == latest:
        classes.append("latest")
    return classes


def _edge_path(x0: int, y0: int, x1: int, y1: int) -> str:
    """The SVG path up from a parent (older, so drawn below) to its child; bent when it changes lane."""
    if x0 == x1:
        return f"M{x0},{y0} L{x1},{y1}"
    bend = y0 - ROW
    return f"M{x0},{y0} C{x0},{y0 - ROW // 2} {x1},{y0 - ROW // 2} {x1},{bend} L{x1},{y1}"


def _row(
    node: TreeNode,
    by_id: Mapping[str, Checkpoint],
    links: Links,
    answered: set[str],
    answers: Mapping[str, Mapping[str, Any]],
    marks: tuple[str | None, str | None, str | None, str | None],
    x: Any,
    y: Any,
    outside: frozenset[str] = frozenset(),
) -> tuple[Markup, Markup]:
    """One checkpoint's circle (for the drawing) and its row: a link holding its label.

    ``marks``: the selected, latest, failed-from and recorded-answer checkpoints;
    ``x``, ``y``: lane and row to pixels; ``outside``: the checkpoints drawn
    from beyond the page (a fork's parent).
    """
    selected, latest, failed_at, recorded_at = marks
    checkpoint = node.checkpoint
    parent = by_id.get(checkpoint.parent_id) if checkpoint.parent_id else None
    reached = checkpoint.id in outside
    state = None if reached else pause_state(checkpoint, answered, latest, recorded_at)
    classes = _node_classes(checkpoint, state, latest, failed_at)
    if reached:
        classes = [css for css in classes if css != "done"]
    parts = _label(node, parent, state, answers.get(checkpoint.id, {}), latest, failed_at, reached)
    circle = tag("circle", {"class": " ".join(classes), "cx": x(node.lane), "cy": y(node.row), "r": 6})
    words = " ".join(text for _, text in parts)
    row = tag(
        "a",
        {
            "href": links.thread(checkpoint.thread_id, checkpoint.id),
            "class": "row selected" if checkpoint.id == selected else "row",
            "aria-current": "page" if checkpoint.id == selected else None,
            # The whole label, where the row cuts it (and the id the row does not show).
            "title": f"{words} · {checkpoint.id} · {checkpoint.ts:%Y-%m-%d %H:%M:%S} UTC",
        },
        # Spaces between the parts: the link's text reads as words, aloud and when copied.
        [
            [" " if index else None, tag("span", {"class": css}, text)]
            for index, (css, text) in enumerate(parts)
        ],
    )
    return circle, row


def _edges(nodes: Sequence[TreeNode], x: Any, y: Any) -> list[Markup]:
    """A path from each drawn parent up to its child; a fork's is drawn as a fork."""
    return [
        tag(
            "path",
            {
                "d": _edge_path(x(node.parent_lane), y(node.parent_row), x(node.lane), y(node.row)),
                "class": "edge fork" if node.checkpoint.metadata.get("source") == "fork" else "edge",
            },
        )
        for node in nodes
        if node.parent_row is not None and node.parent_lane is not None
    ]


def draw_tree(
    checkpoints: Sequence[Checkpoint],
    links: Links,
    *,
    selected: str | None,
    latest: str | None,
    failed_at: str | None = None,
    answers: Mapping[str, Mapping[str, Any]] | None = None,
    recorded_at: str | None = None,
    reached: frozenset[str] = frozenset(),
) -> Markup:
    """The tree as an inline ``<svg>``; each row links to its checkpoint, newest first in reading order.

    Args:
        checkpoints: The checkpoints to draw (a thread's, or its newest ones).
        links: Builds the rows' links.
        selected: The checkpoint the page shows (highlighted).
        latest: The thread's latest checkpoint (marked ``latest``).
        failed_at: The checkpoint a failed run ran from (marked).
        answers: The answers given at pause checkpoints, by checkpoint id and
            pause id (each answered row says what was answered).
        recorded_at: The latest checkpoint, when a failed run recorded an
            answer to its pauses (it reads answered).
        reached: Checkpoints drawn from beyond the page, where a fork starts.
    """
    nodes = layout(checkpoints)
    if not nodes:
        return Markup("")
    answered = answered_pauses(checkpoints) | set(answers or {})
    by_id = {node.checkpoint.id: node.checkpoint for node in nodes}
    lanes = max(node.lane for node in nodes) + 1
    rows = len(nodes)
    # The labels start where the drawing ends, in a column of their own that the box's width cuts.
    width = PAD + lanes * LANE + 8
    height = rows * ROW + 2 * PAD - ROW // 2

    def x(lane: int) -> int:
        return PAD + lane * LANE + LANE // 2

    def y(row: int) -> int:
        # Newest at the top; a circle at the middle of its row.
        return FIRST_ROW + (rows - 1 - row) * ROW + ROW // 2

    edges = _edges(nodes, x, y)
    drawn = [
        _row(
            node,
            by_id,
            links,
            answered,
            answers or {},
            (selected, latest, failed_at, recorded_at),
            x,
            y,
            reached,
        )
        for node in reversed(nodes)
    ]
    return tag(
        "div",
        # A group of links, not a picture: a screen reader lists its rows.
        {"class": "checkpoint-tree", "role": "group", "aria-label": "checkpoint tree, newest first"},
        tag(
            "svg",
            {
                "class": "tree",
                "xmlns": "http://www.w3.org/2000/svg",
                "width": width,
                "height": height,
                "viewBox": f"0 0 {width} {height}",
                # The rows say all the drawing shows.
                "aria-hidden": "true",
                "focusable": "false",
            },
            tag("g", {"class": "edges"}, edges),
            tag("g", {"class": "nodes"}, [circle for circle, _ in drawn]),
        ),
        # Newest first in the document too: reading and tabbing go down the rows as drawn.
        tag("div", {"class": "tree-rows"}, [row for _, row in drawn]),
    )
