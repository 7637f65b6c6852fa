"""The subgraphs a task ran, drawn under it: each child's checkpoints and journals, at every depth."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..namespaces import join_path
from ..types import Checkpoint, utc_now
from .children import ChildView
from .graph_svg import Marks
from .html import Markup, join, tag
from .journal_view import journal_table, scrolling
from .layout import badge, when

__all__ = ["children_block", "drawing_marks"]


def _checkpoints(child: ChildView) -> Markup:
    """The child's checkpoints, newest first: step, status, id, time."""
    now = utc_now()
    head = tag(
        "tr", {}, [tag("th", {"scope": "col"}, name) for name in ("Step", "Status", "Checkpoint", "When")]
    )
    rows = [
        tag(
            "tr",
            {},
            tag("td", {"data-label": "Step"}, str(checkpoint.step)),
            tag("td", {"data-label": "Status"}, badge(checkpoint.status)),
            tag("td", {"data-label": "Checkpoint"}, tag("code", {"class": "cid"}, checkpoint.id)),
            tag("td", {"data-label": "When"}, when(checkpoint.ts, now)),
        )
        for checkpoint in child.checkpoints
    ]
    return join(
        scrolling(
            tag("table", {"class": "grid child-checkpoints"}, tag("thead", {}, head), tag("tbody", {}, rows))
        ),
        tag("p", {"class": "hint"}, f"The newest {len(child.checkpoints)}; older ones are not listed.")
        if child.more
        else None,
    )


def _tasks(child: ChildView) -> Markup:
    """The tasks the child's latest checkpoint runs next: each one's journal and its own children."""
    latest = child.checkpoints[0]
    if not latest.next:
        return tag("p", {"class": "muted"}, "It finished: nothing is scheduled in it.")
    return join(
        [
            tag(
                "div",
                {"class": "task child-task"},
                tag(
                    "div",
                    {"class": "task-head"},
                    tag("span", {"class": "node"}, task.node),
                    tag("code", {"class": "muted"}, task.task_key) if task.task_key != task.node else None,
                ),
                journal_table(child.journals.get(task.task_key, ()), lambda _key: None),
                children_block(child.children.get(task.task_key, ())),
            )
            for task in latest.next
        ]
    )


def _child(child: ChildView) -> Markup:
    return tag(
        "section",
        {"class": "subgraph-run", "data-ns": join_path(child.path)},
        tag("h4", {}, "Subgraph ", tag("code", {"class": "ns"}, join_path(child.path))),
        _checkpoints(child),
        tag("p", {"class": "label"}, "Next in it, and what each task recorded"),
        _tasks(child),
        [_earlier(checkpoint, ran) for checkpoint, ran in child.earlier],
    )


def _earlier(checkpoint: Checkpoint, ran: Sequence[ChildView]) -> Markup:
    """The children an earlier checkpoint's superstep ran (its tasks' journals went when it committed)."""
    return tag(
        "div",
        {"class": "child-step"},
        tag(
            "p",
            {"class": "label"},
            f"Ran from its step {checkpoint.step} (",
            tag("code", {"class": "cid"}, checkpoint.id),
            ")",
        ),
        children_block(ran),
    )


def children_block(children: Sequence[ChildView]) -> Markup | None:
    """The children a task ran, each nested in the one that ran it; ``None`` when it ran none."""
    if not children:
        return None
    return tag("div", {"class": "subgraph-runs"}, [_child(child) for child in children])


def drawing_marks(children: Mapping[str, Sequence[ChildView]]) -> dict[tuple[str, ...], Marks]:
    """What each child's latest checkpoint runs next or waits on, for the drawing inside its node.

    Keyed by the node names leading to the child (a part is ``"node:task_key"``);
    the children of one node (its sends) are marked together.
    """
    marks: dict[tuple[str, ...], Marks] = {}

    def add(child: ChildView) -> None:
        path = tuple(part.split(":", 1)[0] for part in child.path)
        latest, known = child.checkpoints[0], marks.get(path, Marks())
        marks[path] = Marks(
            known.upcoming | {task.node for task in latest.next},
            known.paused | {pause.node for pause in latest.pending},
        )
        for runs in child.children.values():
            for grandchild in runs:
                add(grandchild)

    for runs in children.values():
        for child in runs:
            add(child)
    return marks
