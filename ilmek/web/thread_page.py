"""A thread's page: how its last run ended, its open pauses, its checkpoint tree and checkpoint, its graph.

The page is read from a :class:`~ilmek.web.reading.ThreadView`. Forms for
the actions appear only when the console allows actions, and the answer
forms only when the console knows the thread's graph. The checkpoint
shown is drawn by :mod:`ilmek.web.checkpoint_view`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..operations import why_stalled
from ..types import Pending, utc_now
from .actions import recoverable
from .background import console_process, held_here
from .checkpoint_view import checkpoint_panel, metadata_chips, pauses_form
from .children_view import drawing_marks
from .csrf import Guard
from .graph_svg import draw_graph
from .html import Markup, escape, tag
from .layout import Note, action_form, badge, document, facts, note_box, running_badge, when
from .links import Links
from .reading import ThreadView, held_since
from .timing import pause_timing
from .traceback_view import traceback_block
from .tree import draw_tree

__all__ = ["thread_page"]


def _status(view: ThreadView) -> str:
    return view.info.status if view.info is not None else view.latest.status


def _running(view: ThreadView) -> bool:
    return view.info is not None and view.info.running


def _holder(held_by: str) -> str:
    """Who holds the thread; the console's own process said as such."""
    return f"{held_by}: {console_process()}, running it in the background" if held_here(held_by) else held_by


def _header(view: ThreadView, links: Links) -> Markup:
    info = view.info
    now = utc_now()
    running = info is not None and info.running
    return tag(
        "div",
        {"class": "thread-head"},
        tag(
            "nav",
            {"class": "crumbs", "aria-label": "where you are"},
            tag("a", {"href": links.threads()}, "Threads"),
            " / thread",
            tag(
                "a",
                {"href": links.thread(view.next_waiting), "class": "next-waiting", "rel": "next"},
                "Next waiting thread →",
            )
            if view.next_waiting is not None
            else None,
        ),
        tag(
            "div",
            {"class": "title-row"},
            tag("h1", {"class": "tid"}, view.thread_id),
            badge(_status(view)),
            running_badge(info.held_since) if info is not None and info.running else None,
            tag("span", {"class": "badge s-aborted"}, "cancelled")
            if info is not None and info.cancelled is not None and not running
            else None,
        ),
        facts(
            [
                ("Graph", tag("code", {}, view.graph_name) if view.graph_name else "not recorded"),
                ("Step", str(view.latest.step)),
                ("Created", when(info.created_at, now, absolute=True) if info is not None else None),
                (
                    "Updated",
                    when(info.updated_at, now, absolute=True)
                    if info is not None
                    else when(view.latest.ts, now),
                ),
                ("Running since", when(info.held_since, now, absolute=True) if running and info else None),
                ("Held by", _holder(info.held_by) if running and info is not None and info.held_by else None),
                (
                    "Checkpoints",
                    f"{len(view.checkpoints) - len(view.reached)}{'+' if view.truncated else ''}",
                ),
            ]
        ),
        metadata_chips(info.metadata) if info is not None else None,
    )


def _failure(view: ThreadView, links: Links) -> Markup | None:
    error = view.info.error if view.info is not None else None
    if error is None or _status(view) != "error":
        return None
    return tag(
        "section",
        {"class": "panel failed", "id": "failure", "aria-labelledby": "failure-title"},
        tag("h2", {"id": "failure-title"}, "The last run failed"),
        tag("p", {"class": "error-line"}, tag("code", {"class": "etype"}, error.type)),
        # Line breaks are harmless in a page (unlike a terminal): a long message keeps its lines.
        tag("pre", {"class": "message"}, escape(error.message, keep_newlines=True)),
        facts(
            [
                (
                    "Node",
                    tag(
                        "a",
                        {"href": links.thread(view.thread_id, error.checkpoint_id, fragment="tasks")},
                        tag("code", {}, error.node),
                    )
                    if error.node and error.checkpoint_id
                    else tag("code", {}, error.node)
                    if error.node
                    else "outside any node",
                ),
                ("When", when(error.at, absolute=True)),
                (
                    "Ran from",
                    tag("a", {"href": links.thread(view.thread_id, error.checkpoint_id)}, error.checkpoint_id)
                    if error.checkpoint_id
                    else None,
                ),
            ]
        ),
        tag(
            "div",
            {"class": "traceback"},
            tag("h3", {}, "Traceback"),
            traceback_block(error.traceback),
        )
        if error.traceback
        else tag("p", {"class": "hint"}, "No traceback was kept for this failure."),
        tag(
            "p",
            {"class": "hint"},
            "Fix the cause, then send the recorded answer again (below): the run continues, "
            "replaying every recorded step."
            if view.recorded
            else "Fix the cause, then recover the thread: the run continues from its last checkpoint, "
            "replaying every recorded step.",
        ),
    )


def _cancelled(view: ThreadView, links: Links) -> Markup | None:
    cancelled = view.info.cancelled if view.info is not None else None
    if cancelled is None or _running(view):
        return None
    return tag(
        "section",
        {"class": "panel cancelled", "id": "cancelled", "aria-labelledby": "cancelled-title"},
        tag("h2", {"id": "cancelled-title"}, "The last run was cancelled"),
        tag("p", {"class": "reason"}, cancelled.reason),
        facts(
            [
                ("When", when(cancelled.at, absolute=True)),
                (
                    "Stopped at",
                    tag(
                        "a",
                        {"href": links.thread(view.thread_id, cancelled.checkpoint_id)},
                        cancelled.checkpoint_id,
                    )
                    if cancelled.checkpoint_id
                    else None,
                ),
            ]
        ),
        tag(
            "p",
            {"class": "hint"},
            "Its last checkpoint stands: continue the run (below) to go on from it, "
            "replaying recorded steps.",
        ),
    )


def _cancel_form(view: ThreadView, links: Links, guard: Guard, cancelling: str | None) -> Markup:
    shown = held_since(view.info)
    asked = cancelling is not None and cancelling == shown
    return action_form(
        links,
        guard,
        "cancel",
        view.thread_id,
        None,
        # Which run the page showed: a click after it ended must not stop the next one.
        tag("input", {"type": "hidden", "name": "held_since", "value": shown}),
        tag(
            "label",
            {"class": "reason-field"},
            tag("span", {"class": "label"}, "Reason (optional)"),
            tag("input", {"type": "text", "name": "reason", "maxlength": 200, "disabled": asked}),
        ),
        tag(
            "button",
            {"type": "submit", "class": "warn", "disabled": asked},
            "Cancel requested" if asked else "Cancel the run",
        ),
        tag(
            "span",
            {"class": "hint", "role": "status"},
            "Asked: the run stops at its next superstep boundary; this page follows it."
            if asked
            else "It stops at its next superstep boundary and ends aborted.",
        ),
    )


def _controls(
    view: ThreadView, links: Links, guard: Guard, actions_on: bool, cancelling: str | None
) -> Markup | None:
    """Cancel a running thread, recover a stalled one: near the top, where the trouble shows."""
    if not actions_on:
        return None
    running = _running(view)
    stalled = recoverable(view.info, view.latest)
    forms = []
    if running:
        forms.append(_cancel_form(view, links, guard, cancelling))
    if stalled:
        cancelled = view.info is not None and view.info.cancelled is not None
        forms.append(
            action_form(
                links,
                guard,
                "recover",
                view.thread_id,
                None,
                tag(
                    "button",
                    {"type": "submit", "class": "primary", "disabled": view.graph is None},
                    "Continue the run" if cancelled else "Recover: continue the run",
                ),
                tag(
                    "span",
                    {"class": "hint"},
                    "Runs the thread on from its last checkpoint in the console's process, replaying "
                    "recorded steps; a long run goes on after the page returns."
                    if view.graph is not None
                    else "Needs the thread's graph (--graph MODULE:GRAPH).",
                ),
            )
        )
    if not forms:
        return None
    if running and view.info is not None and held_here(view.info.held_by):
        title = f"Running in {console_process()}…"
    elif running:
        title = "A run holds the thread"
    elif _status(view) == "error":
        title = "Recover"
    elif view.info is not None and view.info.cancelled is not None:
        title = "Cancelled: tasks planned, no run holds it"
    else:
        why = why_stalled(view.info) if view.info is not None else None
        title = f"Stalled: {why or 'tasks planned, no run holds it'}"
    return tag(
        "section",
        {"class": "panel operate", "aria-labelledby": "operate-title"},
        tag("h2", {"id": "operate-title"}, title),
        forms,
    )


def _timings(pending: Sequence[Pending]) -> Markup | None:
    """When each open pause ends by itself (a deadline, a timer); ``None`` when none does."""
    now = utc_now()
    lines = [(pause, pause_timing(pause, now)) for pause in pending]
    shown = [tag("li", {}, tag("code", {}, pause.id), ": ", timing) for pause, timing in lines if timing]
    return tag("ul", {"class": "timing"}, shown) if shown else None


def _waiting(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup | None:
    latest = view.latest
    if not latest.pending:
        return None
    count = len(latest.pending)
    title = "Waiting for an answer" if count == 1 else f"Waiting for {count} answers"
    if view.recorded:
        title += ": the last answer's run failed"
    return tag(
        "section",
        {"class": "panel waiting", "id": "pauses", "aria-labelledby": "pauses-title"},
        tag("h2", {"id": "pauses-title"}, title),
        _timings(latest.pending),
        pauses_form(view, latest, links, guard, actions_on=actions_on, fork=False),
    )


def _tree(view: ThreadView, links: Links) -> Markup:
    failed_at = (
        view.info.error.checkpoint_id if view.info is not None and view.info.error is not None else None
    )
    legend = tag(
        "ul",
        {"class": "legend", "aria-label": "legend"},
        [
            tag("li", {}, tag("span", {"class": f"dot {css}"}), name)
            for css, name in (
                ("waiting", "waiting"),
                ("answered", "answered"),
                ("done", "done"),
                ("plain", "other"),
                ("fork", "fork"),
            )
        ],
    )
    pager = []
    if view.paged:
        pager.append(
            tag("a", {"href": links.thread(view.thread_id, view.selected.id)}, "← Newest checkpoints")
        )
    if view.older is not None:
        pager.append(
            tag(
                "a",
                {"href": links.thread(view.thread_id, view.selected.id, tree=view.older), "rel": "next"},
                "Older checkpoints →",
            )
        )
    return tag(
        "section",
        {"class": "panel tree-panel", "aria-labelledby": "tree-title"},
        tag("h2", {"id": "tree-title"}, "Checkpoints"),
        tag(
            "p",
            {"class": "hint"},
            "Newest at the top; a fork branches to the side. Select one to inspect it.",
        ),
        legend,
        tag(
            "div",
            {"class": "scroll", "tabindex": "-1"},
            draw_tree(
                view.checkpoints,
                links,
                selected=view.selected.id,
                latest=view.latest.id,
                failed_at=failed_at,
                answers=view.answers,
                recorded_at=view.latest.id if view.recorded else None,
                reached=view.reached,
            ),
        ),
        tag(
            "p",
            {"class": "hint"},
            f"{len(view.checkpoints)} checkpoints drawn"
            + (
                " (an older page)"
                if view.paged
                else f", the newest {len(view.checkpoints) - len(view.reached)}"
            )
            + (f" and {len(view.reached)} a fork starts from" if view.reached else "")
            + ("; there are older ones." if view.older is not None else "."),
        )
        if view.truncated
        else None,
        tag("nav", {"class": "pager tree-pager", "aria-label": "checkpoint pages"}, pager) if pager else None,
    )


def _graph(view: ThreadView) -> Markup:
    if view.graph is None:
        named = (
            f"graph {view.graph_name!r}"
            if view.graph_name
            else "the thread's graph (its checkpoints do not name one)"
        )
        return tag(
            "section",
            {"class": "panel graph-panel", "aria-labelledby": "graph-title"},
            tag("h2", {"id": "graph-title"}, "Graph"),
            tag("p", {"class": "muted"}, f"The console was not given {named}, so it cannot draw it."),
        )
    graph = view.graph
    selected = view.selected
    return tag(
        "section",
        {"class": "panel graph-panel", "aria-labelledby": "graph-title"},
        tag("h2", {"id": "graph-title"}, "Graph ", tag("code", {}, graph.name)),
        tag(
            "p",
            {"class": "hint"},
            "Bold: about to run from the checkpoint shown; amber: waiting on a pause; "
            "dashed: decided by code (a router, a guard, a command).",
        ),
        tag(
            "div",
            {"class": "scroll", "tabindex": "0", "role": "group", "aria-label": "the graph drawn"},
            draw_graph(
                graph,
                upcoming=[task.node for task in selected.next],
                paused=[pause.node for pause in selected.pending],
                inside=drawing_marks(view.children),
            ),
        ),
        tag(
            "details",
            {"class": "fold"},
            tag("summary", {}, "Mermaid text"),
            tag("pre", {"class": "value"}, escape(graph.to_mermaid(highlight=selected), keep_newlines=True)),
        ),
    )


def _danger(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup | None:
    """Deleting the thread, at the foot of the page."""
    if not actions_on:
        return None
    running = _running(view)
    return tag(
        "section",
        {"class": "panel operate danger-zone", "aria-labelledby": "delete-title"},
        tag("h2", {"id": "delete-title"}, "Delete"),
        action_form(
            links,
            guard,
            "delete",
            view.thread_id,
            None,
            tag(
                "label",
                {"class": "confirm"},
                tag("input", {"type": "checkbox", "name": "confirm", "value": "yes", "required": True}),
                " delete every checkpoint and journal of this thread",
            ),
            tag("button", {"type": "submit", "class": "danger", "disabled": running}, "Delete thread"),
            tag("span", {"class": "hint"}, "Cancel the run first." if running else None),
        ),
    )


def thread_page(
    links: Links,
    guard: Guard,
    view: ThreadView,
    *,
    actions_on: bool,
    note: Note | None = None,
    cancelling: str | None = None,
    refresh: float | None = None,
) -> Markup:
    """The page of one thread, showing ``view.selected``.

    ``cancelling``: the run a cancel was just asked of (see
    :attr:`ilmek.web.actions.Outcome.cancelling`); ``refresh``: seconds
    after which a running thread's page reloads itself.
    """
    body = [
        _header(view, links),
        note_box(note),
        _failure(view, links),
        _cancelled(view, links),
        _controls(view, links, guard, actions_on, cancelling),
        _waiting(view, links, guard, actions_on),
        tag(
            "div", {"class": "columns"}, _tree(view, links), checkpoint_panel(view, links, guard, actions_on)
        ),
        _graph(view),
        _danger(view, links, guard, actions_on),
    ]
    return document(
        f"Thread {view.thread_id}",
        links,
        body,
        actions_on=actions_on,
        refresh=refresh if _running(view) else None,
    )
