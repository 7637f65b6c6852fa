"""A thread's page: its checkpoint tree, the checkpoint shown, its pauses, journals and graph.

The page is read from a :class:`~ilmek.web.reading.ThreadView`. Forms for
the actions appear only when the console allows actions, and the answer
forms only when the console knows the thread's graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..types import Checkpoint, JournalEntry, Pending, ScheduledTask, utc_now
from .csrf import Guard
from .diff import ChannelDiff, difference
from .graph_svg import draw_graph
from .html import Markup, escape, join, tag
from .layout import Note, action_form, badge, document, note_box, running_badge, value_block, when
from .links import Links
from .reading import ThreadView, held_since
from .tree import draw_tree
from .values import as_json_text, label, question_of

__all__ = ["thread_page"]


def _facts(pairs: Sequence[tuple[str, Any]]) -> Markup:
    return tag(
        "dl",
        {"class": "facts"},
        [
            tag("div", {}, tag("dt", {}, name), tag("dd", {}, value))
            for name, value in pairs
            if value is not None
        ],
    )


def _chips(metadata: Mapping[str, Any]) -> Markup | None:
    if not metadata:
        return None
    return tag(
        "div",
        {"class": "chips"},
        [tag("span", {"class": "chip"}, f"{key}={label(value, 60)}") for key, value in metadata.items()],
    )


def _status(view: ThreadView) -> str:
    return view.info.status if view.info is not None else view.latest.status


def _header(view: ThreadView, links: Links) -> Markup:
    info = view.info
    now = utc_now()
    return tag(
        "div",
        {"class": "thread-head"},
        tag("nav", {"class": "crumbs"}, tag("a", {"href": links.threads()}, "Threads"), " / thread"),
        tag(
            "div",
            {"class": "title-row"},
            tag("h1", {"class": "tid"}, view.thread_id),
            badge(_status(view)),
            running_badge(info.held_since) if info is not None and info.running else None,
        ),
        _facts(
            [
                ("Graph", tag("code", {}, view.graph_name) if view.graph_name else "not recorded"),
                ("Step", str(view.latest.step)),
                ("Created", when(info.created_at, now) if info is not None else None),
                ("Updated", when(info.updated_at, now) if info is not None else when(view.latest.ts, now)),
                ("Running since", when(info.held_since, now) if info is not None and info.running else None),
                ("Checkpoints", f"{len(view.checkpoints)}{'+' if view.truncated else ''}"),
            ]
        ),
        _chips(info.metadata) if info is not None else None,
    )


def _failure(view: ThreadView, links: Links) -> Markup | None:
    error = view.info.error if view.info is not None else None
    if error is None or _status(view) != "error":
        return None
    return tag(
        "section",
        {"class": "panel failed", "id": "failure"},
        tag("h2", {}, "The last run failed"),
        tag("p", {"class": "error-line"}, tag("code", {"class": "etype"}, error.type)),
        # Line breaks are harmless in a page (unlike a terminal): a long message keeps its lines.
        tag("pre", {"class": "message"}, escape(error.message, keep_newlines=True)),
        _facts(
            [
                ("Node", tag("code", {}, error.node) if error.node else "outside any node"),
                ("When", when(error.at)),
                (
                    "Ran from",
                    tag("a", {"href": links.thread(view.thread_id, error.checkpoint_id)}, error.checkpoint_id)
                    if error.checkpoint_id
                    else None,
                ),
            ]
        ),
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


def _options(payload: Any) -> list[Any]:
    if isinstance(payload, Mapping):
        options = payload.get("options")
        if isinstance(options, (list, tuple)):
            return list(options)
    return []


def _prefill(recorded: JournalEntry | None) -> str:
    if recorded is None:
        return "null"
    return as_json_text(recorded.value) or "null"


def _pause_fields(
    pause: Pending, index: int, *, inputs: bool, recorded: JournalEntry | None = None
) -> Markup:
    """One pause: what it asks, its payload, and (with ``inputs``) its option buttons and JSON answer.

    ``recorded``: the answer a failed resume recorded; the editor starts with
    it, as sending it again is how the run is retried.
    """
    payload = pause.payload
    question = (
        payload.get("question")
        if isinstance(payload, Mapping) and isinstance(payload.get("question"), str)
        else None
    )
    buttons = []
    if inputs:
        for option in _options(payload):
            text = as_json_text(option)
            if text is not None:
                buttons.append(
                    tag(
                        "button",
                        {"type": "submit", "name": f"choice.{index}", "value": text, "class": "option"},
                        label(option, 40),
                    )
                )
    return tag(
        "div",
        {"class": "pause"},
        tag(
            "div",
            {"class": "pause-head"},
            tag("span", {"class": "node"}, pause.node),
            tag("code", {"class": "pid"}, pause.id),
        ),
        tag("p", {"class": "question"}, question) if question is not None else None,
        tag("div", {"class": "payload"}, tag("span", {"class": "label"}, "Payload"), value_block(payload)),
        tag(
            "p",
            {"class": "hint warn"},
            "An answer was recorded, but the run that gave it failed: send the same answer again to retry "
            "(another answer is refused; answer differently with a fork).",
        )
        if recorded is not None
        else None,
        tag("div", {"class": "options"}, tag("span", {"class": "label"}, "Answer with"), buttons)
        if buttons
        else None,
        tag(
            "label",
            {"class": "answer"},
            tag("span", {"class": "label"}, "or an answer as JSON" if buttons else "Answer as JSON"),
            tag(
                "textarea",
                {"name": f"answer.{index}", "rows": 3, "spellcheck": "false", "autocomplete": "off"},
                _prefill(recorded),
            ),
            tag("span", {"class": "hint"}, 'e.g. "yes", true, 42, {"approved": true, "note": "ok"}'),
        )
        if inputs
        else None,
    )


def _why_no_form(view: ThreadView, actions_on: bool) -> Markup | None:
    if not actions_on:
        return tag(
            "p",
            {"class": "hint"},
            "The console is read-only: start it with --allow-actions (or allow_actions=True) to answer here.",
        )
    if view.graph is None:
        named = f"graph {view.graph_name!r}" if view.graph_name else "this thread's graph"
        return tag(
            "p",
            {"class": "hint warn"},
            f"The console was not given {named}, so pauses cannot be answered here: "
            "start it with --graph MODULE:GRAPH (or pass graphs= to ilmek.web.app).",
        )
    return None


def _pauses_form(
    view: ThreadView, checkpoint: Checkpoint, links: Links, guard: Guard, *, actions_on: bool, fork: bool
) -> Markup:
    inputs = actions_on and view.graph is not None
    recorded = {} if fork else view.recorded
    fields = [
        _pause_fields(pause, index, inputs=inputs, recorded=recorded.get(pause.id))
        for index, pause in enumerate(checkpoint.pending)
    ]
    if not inputs:
        return join(fields, _why_no_form(view, actions_on))
    label = "Answer differently (fork)" if fork else "Send answer"
    hint = (
        "Runs a new branch from this pause with your answer; steps recorded before the pause are kept."
        if fork
        else "Runs the graph on, in this request, until it finishes or pauses again."
    )
    return action_form(
        links,
        guard,
        "fork" if fork else "answer",
        view.thread_id,
        checkpoint.id,
        fields,
        tag(
            "div",
            {"class": "submit"},
            tag("button", {"type": "submit", "class": "primary"}, label),
            tag("span", {"class": "hint"}, hint),
        ),
        css="answer-form",
    )


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
        {"class": "panel waiting", "id": "pauses"},
        tag("h2", {}, title),
        _pauses_form(view, latest, links, guard, actions_on=actions_on, fork=False),
    )


def _pause_states(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup | None:
    selected = view.selected
    if not selected.pending:
        return None
    rows = []
    for item in view.pauses:
        state_text = {
            "waiting": "waiting",
            "answered": "answered",
            "passed": "not answered (the thread went on elsewhere)",
        }[item.state]
        answer = item.answer.value if item.answer is not None else None
        rows.append(
            tag(
                "tr",
                {},
                tag("td", {}, tag("code", {}, item.pause.id)),
                tag("td", {}, tag("span", {"class": f"badge p-{item.state}"}, state_text)),
                tag("td", {}, question_of(item.pause.payload, 80)),
                tag(
                    "td",
                    {},
                    value_block(answer) if item.answer is not None else tag("span", {"class": "muted"}, "-"),
                ),
            )
        )
    table = tag(
        "table",
        {"class": "grid"},
        tag(
            "thead",
            {},
            tag(
                "tr",
                {},
                tag("th", {}, "Pause"),
                tag("th", {}, "State"),
                tag("th", {}, "Asks"),
                tag("th", {}, "Answer"),
            ),
        ),
        tag("tbody", {}, rows),
    )
    # The latest checkpoint's pauses are answered in the panel above; older ones fork.
    if selected.id == view.latest.id:
        extra = tag(
            "p",
            {"class": "hint"},
            tag("a", {"href": links.thread(view.thread_id, fragment="pauses")}, "Answer it above."),
        )
    else:
        extra = tag(
            "details",
            {"class": "fork"},
            tag("summary", {}, "Answer this pause differently (fork a new branch)"),
            _pauses_form(view, selected, links, guard, actions_on=actions_on, fork=True),
        )
    return join(tag("h3", {}, "Pauses"), table, extra)


def _diff_row(change: ChannelDiff) -> Markup:
    if change.kind == "added":
        shown = value_block(change.after)
    elif change.kind == "removed":
        shown = value_block(change.before)
    elif change.kind == "appended":
        count = len(change.appended)
        shown = join(
            tag("span", {"class": "muted"}, f"{count} item{'s' if count != 1 else ''} appended:"),
            value_block(list(change.appended)),
        )
    else:
        shown = tag(
            "div",
            {"class": "change"},
            tag("div", {}, tag("span", {"class": "label"}, "before"), value_block(change.before)),
            tag("div", {}, tag("span", {"class": "label"}, "after"), value_block(change.after)),
        )
    return tag(
        "tr",
        {},
        tag("td", {"class": "channel"}, tag("code", {}, change.name)),
        tag("td", {}, tag("span", {"class": f"badge d-{change.kind}"}, change.kind)),
        tag("td", {}, shown),
    )


def _changes(view: ThreadView, links: Links) -> Markup:
    selected, parent = view.selected, view.parent
    if selected.parent_id is None:
        intro = "The thread's first checkpoint: every channel is new."
    elif parent is None:
        intro = "Its parent is no longer stored (pruned), so there is nothing to compare with."
    else:
        intro = None
    changes = difference(dict(parent.channels) if parent is not None else None, dict(selected.channels))
    if parent is None and selected.parent_id is not None:
        body: Markup = tag("p", {"class": "muted"}, intro)
    elif not changes:
        body = tag("p", {"class": "muted"}, "No channel changed.")
    else:
        body = join(
            tag("p", {"class": "muted"}, intro) if intro else None,
            tag(
                "table",
                {"class": "grid diff"},
                tag(
                    "thead",
                    {},
                    tag("tr", {}, tag("th", {}, "Channel"), tag("th", {}, "Change"), tag("th", {}, "Value")),
                ),
                tag("tbody", {}, [_diff_row(change) for change in changes]),
            ),
        )
    return join(tag("h3", {}, "Changes from its parent"), body)


def _state(checkpoint: Checkpoint) -> Markup:
    channels = dict(checkpoint.channels)
    if not channels:
        return join(tag("h3", {}, "State"), tag("p", {"class": "muted"}, "No channel written yet."))
    return join(
        tag("h3", {}, "State"),
        tag(
            "table",
            {"class": "grid state"},
            tag(
                "tbody",
                {},
                [
                    tag(
                        "tr",
                        {},
                        tag("td", {"class": "channel"}, tag("code", {}, name)),
                        tag("td", {}, value_block(value)),
                    )
                    for name, value in channels.items()
                ],
            ),
        ),
    )


def _journal(entries: Sequence[JournalEntry]) -> Markup:
    if not entries:
        return tag("p", {"class": "muted"}, "Nothing recorded for this task from this checkpoint.")
    rows = []
    for entry in entries:
        if entry.kind == "interrupt":
            kind = tag("span", {"class": "badge k-pause"}, "pause")
            asked = join(tag("span", {"class": "label"}, "asked"), value_block(entry.payload))
            answered = (
                join(tag("span", {"class": "label"}, "answer"), value_block(entry.value))
                if entry.answered
                else tag("span", {"class": "badge p-waiting"}, "no answer yet")
            )
            shown = join(asked, answered)
        else:
            kind = tag("span", {"class": "badge k-step"}, "step")
            shown = value_block(entry.value)
        rows.append(
            tag(
                "tr", {}, tag("td", {}, tag("code", {}, entry.key)), tag("td", {}, kind), tag("td", {}, shown)
            )
        )
    return tag(
        "table",
        {"class": "grid journal"},
        tag("thead", {}, tag("tr", {}, tag("th", {}, "Key"), tag("th", {}, "Kind"), tag("th", {}, "Result"))),
        tag("tbody", {}, rows),
    )


def _task(task: ScheduledTask, entries: Sequence[JournalEntry]) -> Markup:
    return tag(
        "div",
        {"class": "task"},
        tag(
            "div",
            {"class": "task-head"},
            tag("span", {"class": "node"}, task.node),
            tag("code", {"class": "muted"}, task.task_key) if task.task_key != task.node else None,
            tag("span", {"class": "badge k-send"}, "send") if task.is_send else None,
        ),
        tag("div", {}, tag("span", {"class": "label"}, "input"), value_block(task.input))
        if task.is_send
        else None,
        _journal(entries),
    )


def _tasks(view: ThreadView) -> Markup:
    selected = view.selected
    if not selected.next:
        return join(
            tag("h3", {}, "Next tasks"),
            tag("p", {"class": "muted"}, "Nothing scheduled: the run finished here."),
        )
    return join(
        tag("h3", {}, "Next tasks and their journals"),
        tag(
            "p",
            {"class": "hint"},
            "What each task recorded running from this checkpoint: completed steps, pauses and answers. "
            "A superstep that commits drops its tasks' journals; a pause keeps its task's.",
        ),
        [_task(task, view.journals.get(task.task_key, ())) for task in selected.next],
    )


def _detail(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup:
    selected = view.selected
    source = selected.metadata.get("source")
    return tag(
        "section",
        {"class": "panel detail", "id": "checkpoint"},
        tag(
            "h2",
            {},
            "Checkpoint ",
            tag("code", {}, selected.id),
            tag("span", {"class": "tag latest"}, "latest") if selected.id == view.latest.id else None,
        ),
        _facts(
            [
                ("Step", str(selected.step)),
                ("Source", str(source) if source is not None else "?"),
                ("Status", badge(selected.status)),
                ("Written", when(selected.ts)),
                (
                    "Parent",
                    tag("a", {"href": links.thread(view.thread_id, selected.parent_id)}, selected.parent_id)
                    if selected.parent_id
                    else "none (first checkpoint)",
                ),
                (
                    "Run",
                    tag("code", {}, str(selected.metadata["run_id"]))
                    if "run_id" in selected.metadata
                    else None,
                ),
            ]
        ),
        tag(
            "p", {"class": "hint"}, "A fork's first checkpoint is a copy of the pause it answers differently."
        )
        if source == "fork"
        else None,
        _pause_states(view, links, guard, actions_on),
        _changes(view, links),
        _state(selected),
        _tasks(view),
        tag("h3", {}, "Metadata"),
        value_block(dict(selected.metadata)),
    )


def _tree(view: ThreadView, links: Links) -> Markup:
    failed_at = (
        view.info.error.checkpoint_id if view.info is not None and view.info.error is not None else None
    )
    legend = tag(
        "ul",
        {"class": "legend"},
        tag("li", {}, tag("span", {"class": "dot waiting"}), "waiting"),
        tag("li", {}, tag("span", {"class": "dot answered"}), "answered"),
        tag("li", {}, tag("span", {"class": "dot done"}), "done"),
        tag("li", {}, tag("span", {"class": "dot plain"}), "other"),
        tag("li", {}, tag("span", {"class": "dot fork"}), "fork"),
    )
    return tag(
        "section",
        {"class": "panel tree-panel"},
        tag("h2", {}, "Checkpoints"),
        tag(
            "p",
            {"class": "hint"},
            "Newest at the top; a fork branches to the side. Select one to inspect it.",
        ),
        legend,
        tag(
            "div",
            {"class": "scroll"},
            draw_tree(
                view.checkpoints, links, selected=view.selected.id, latest=view.latest.id, failed_at=failed_at
            ),
        ),
        tag("p", {"class": "hint"}, f"Only the newest {len(view.checkpoints)} checkpoints are drawn.")
        if view.truncated
        else None,
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
            {"class": "panel graph-panel"},
            tag("h2", {}, "Graph"),
            tag("p", {"class": "muted"}, f"The console was not given {named}, so it cannot draw it."),
        )
    graph = view.graph
    selected = view.selected
    paused = [pause.node for pause in selected.pending]
    upcoming = [task.node for task in selected.next]
    return tag(
        "section",
        {"class": "panel graph-panel"},
        tag("h2", {}, "Graph ", tag("code", {}, graph.name)),
        tag(
            "p",
            {"class": "hint"},
            "Bold: about to run from the checkpoint shown; amber: waiting on a pause; "
            "dashed: decided by code (a router, a guard, a command).",
        ),
        tag("div", {"class": "scroll"}, draw_graph(graph, upcoming=upcoming, paused=paused)),
        tag(
            "details",
            {"class": "fold"},
            tag("summary", {}, "Mermaid text"),
            tag("pre", {"class": "value"}, escape(graph.to_mermaid(highlight=selected), keep_newlines=True)),
        ),
    )


def _running(view: ThreadView) -> bool:
    return view.info is not None and view.info.running


def _controls(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup | None:
    """Cancel a running thread, recover a stalled one: near the top, where the trouble shows."""
    if not actions_on:
        return None
    running = _running(view)
    stalled = _status(view) in ("unfinished", "error") and not running and not view.latest.pending
    forms = []
    if running:
        forms.append(
            action_form(
                links,
                guard,
                "cancel",
                view.thread_id,
                None,
                # Which run the page showed: a click after it ended must not stop the next one.
                tag("input", {"type": "hidden", "name": "held_since", "value": held_since(view.info)}),
                tag(
                    "input",
                    {"type": "text", "name": "reason", "placeholder": "reason (optional)", "maxlength": 200},
                ),
                tag("button", {"type": "submit", "class": "warn"}, "Cancel the run"),
                tag("span", {"class": "hint"}, "It stops at its next superstep boundary and ends aborted."),
            )
        )
    if stalled:
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
                    "Recover: continue the run",
                ),
                tag(
                    "span",
                    {"class": "hint"},
                    "Runs the thread on from its last checkpoint, in this request, replaying recorded steps."
                    if view.graph is not None
                    else "Needs the thread's graph (--graph MODULE:GRAPH).",
                ),
            )
        )
    if not forms:
        return None
    if running:
        title = "A run holds the thread"
    elif _status(view) == "error":
        title = "Recover"
    else:
        title = "Stalled: tasks planned, no run holds it"
    return tag("section", {"class": "panel operate"}, tag("h2", {}, title), forms)


def _danger(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup | None:
    """Deleting the thread, at the foot of the page."""
    if not actions_on:
        return None
    running = _running(view)
    return tag(
        "section",
        {"class": "panel operate danger-zone"},
        tag("h2", {}, "Delete"),
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
    links: Links, guard: Guard, view: ThreadView, *, actions_on: bool, note: Note | None = None
) -> Markup:
    """The page of one thread, showing ``view.selected``."""
    body = [
        _header(view, links),
        note_box(note),
        _failure(view, links),
        _controls(view, links, guard, actions_on),
        _waiting(view, links, guard, actions_on),
        tag(
            "div",
            {"class": "columns"},
            _tree(view, links),
            _detail(view, links, guard, actions_on),
        ),
        _graph(view),
        _danger(view, links, guard, actions_on),
    ]
    return document(f"Thread {view.thread_id}", links, body, actions_on=actions_on)
