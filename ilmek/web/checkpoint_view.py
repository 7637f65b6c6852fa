"""The checkpoint a thread page shows: its pauses, what changed, its state, its tasks' journals, its steps.

Values that the page cuts short (past :data:`ilmek.web.values.LIMIT`
characters) link to the value page, which shows them whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..types import Checkpoint, ScheduledTask
from .children import CHILD_READS
from .children_view import children_block
from .conversation import conversation_block, conversation_of
from .csrf import Guard
from .diff import ChannelDiff, difference
from .html import Markup, escape, join, tag
from .journal_view import journal_table
from .journal_view import scrolling as _scroll
from .layout import action_form, badge, facts, value_block, when
from .links import Links
from .pause_forms import pause_fields
from .reading import ThreadView
from .timing import answered_by
from .tree import what_ran
from .values import label, preview, question_of

__all__ = ["STEPS_SHOWN", "checkpoint_panel", "metadata_chips", "pauses_form"]

STEPS_SHOWN: Final = 25
"""The most steps "Steps to here" lists; older ones are a link away."""


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


def pauses_form(
    view: ThreadView, checkpoint: Checkpoint, links: Links, guard: Guard, *, actions_on: bool, fork: bool
) -> Markup:
    """The pauses of ``checkpoint`` with the controls to answer them (``fork``: answer differently)."""
    inputs = actions_on and view.graph is not None
    recorded = {} if fork else view.recorded
    several = len(checkpoint.pending) > 1
    if fork:
        label = "Send the answers (fork)" if several else "Send this answer (fork)"
        hint = "Runs a new branch from this pause with your answer; steps recorded before the pause are kept."
    else:
        label = "Send the answers" if several else "Send this answer"
        hint = "Runs the graph on, in this request, until it finishes or pauses again."
    submit = tag(
        "div",
        {"class": "submit"},
        tag("button", {"type": "submit", "class": "send"}, label),
        tag("span", {"class": "hint"}, hint),
    )
    fields = [
        pause_fields(
            pause,
            index,
            inputs=inputs,
            several=several,
            recorded=recorded.get(pause.id),
            # One pause: its typed answer's button sits with its editor (folded away behind its options).
            submit=None if several else submit,
            # A refused answer's form, drawn again to correct it.
            typed=view.kept.get(f"answer.{index}"),
            kept=view.kept,
        )
        for index, pause in enumerate(checkpoint.pending)
    ]
    if not inputs:
        return join(fields, _why_no_form(view, actions_on))
    return action_form(
        links,
        guard,
        "fork" if fork else "answer",
        view.thread_id,
        checkpoint.id,
        # A fork names the latest checkpoint the page saw: sent twice (the back button, a double
        # click), the second finds the thread moved on to the first's branch and is refused.
        tag("input", {"type": "hidden", "name": "expect", "value": view.latest.id}) if fork else None,
        fields,
        submit if several else None,
        css="answer-form",
    )


_PAUSE_STATES = {
    "waiting": "waiting",
    "answered": "answered",
    "passed": "not answered (the thread went on elsewhere)",
}


def _status_badge(view: ThreadView) -> Markup:
    """The shown checkpoint's status; a pause's says what became of it, as its pause table does.

    A stored pause checkpoint reads ``interrupted`` forever; once answered
    (a fork's first checkpoint is answered by the fork) or passed, a
    ``waiting`` badge beside an ``answered`` table would contradict it.
    """
    states = {item.state for item in view.pauses}
    if not states or "waiting" in states:
        return badge(view.selected.status)
    state = "answered" if states == {"answered"} else "passed"
    return tag("span", {"class": f"badge p-{state}"}, "answered" if state == "answered" else "not answered")


def _pause_states(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup | None:
    selected = view.selected
    if not selected.pending:
        return None
    rows = [
        tag(
            "tr",
            {},
            tag("td", {"class": "key", "data-label": "Pause"}, tag("code", {}, item.pause.id)),
            tag(
                "td",
                {"data-label": "State"},
                tag("span", {"class": f"badge p-{item.state}"}, _PAUSE_STATES[item.state]),
            ),
            tag(
                "td",
                {"class": "question", "data-label": "Asks"},
                escape(question_of(item.pause.payload, 80), keep_newlines=True),
            ),
            tag(
                "td",
                {"data-label": "Answer"},
                join(value_block(item.answer.value), answered_by(item.answer.by))
                if item.answer is not None
                else tag("span", {"class": "muted"}, "-"),
            ),
        )
        for item in view.pauses
    ]
    head = tag("tr", {}, [tag("th", {"scope": "col"}, name) for name in ("Pause", "State", "Asks", "Answer")])
    table = _scroll(tag("table", {"class": "grid pauses"}, tag("thead", {}, head), tag("tbody", {}, rows)))
    if selected.id == view.latest.id:
        # The latest checkpoint's pauses are answered in the panel at the top.
        extra = tag(
            "p",
            {"class": "hint"},
            tag(
                "a",
                {"href": links.thread(view.thread_id, fragment="pauses")},
                "Answer it at the top of the page.",
            ),
        )
    else:
        extra = tag(
            "div",
            {"class": "fork", "id": "fork"},
            tag("h4", {}, "Answer this pause differently (fork a new branch)"),
            pauses_form(view, selected, links, guard, actions_on=actions_on, fork=True),
        )
    return join(tag("h3", {}, "Pauses"), table, extra)


def _diff_row(change: ChannelDiff, whole: Links | None, view: ThreadView) -> Markup:
    def shown_value(value: Any) -> Markup:
        return value_block(value, whole=_whole(view, whole, change.name))

    if change.kind == "added":
        shown = shown_value(change.after)
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
            tag("div", {}, tag("span", {"class": "label"}, "after"), shown_value(change.after)),
        )
    return tag(
        "tr",
        {},
        tag("td", {"class": "channel"}, tag("code", {}, change.name)),
        tag("td", {}, tag("span", {"class": f"badge d-{change.kind}"}, change.kind)),
        tag("td", {}, shown),
    )


def _whole(view: ThreadView, links: Links | None, channel: str) -> Any:
    return links.value(view.thread_id, view.selected.id, channel=channel) if links is not None else None


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
        head = tag("tr", {}, [tag("th", {"scope": "col"}, name) for name in ("Channel", "Change", "Value")])
        body = join(
            tag("p", {"class": "muted"}, intro) if intro else None,
            _scroll(
                tag(
                    "table",
                    {"class": "grid diff"},
                    tag("thead", {}, head),
                    tag("tbody", {}, [_diff_row(change, links, view) for change in changes]),
                )
            ),
        )
    return join(tag("h3", {}, "Changes from its parent"), body)


def _channel_value(view: ThreadView, links: Links, name: str, value: Any) -> Markup:
    """A channel's value: a list of messages as a conversation, anything else as a value."""
    said = conversation_of(value)
    if said is not None:
        return conversation_block(said, whole=_whole(view, links, name))
    return value_block(value, whole=_whole(view, links, name))


def _state(view: ThreadView, links: Links) -> Markup:
    channels = dict(view.selected.channels)
    if not channels:
        return join(tag("h3", {}, "State"), tag("p", {"class": "muted"}, "No channel written yet."))
    rows = [
        tag(
            "tr",
            {},
            tag("th", {"class": "channel", "scope": "row"}, tag("code", {}, name)),
            tag("td", {}, _channel_value(view, links, name, value)),
        )
        for name, value in channels.items()
    ]
    return join(
        tag("h3", {}, "State"), _scroll(tag("table", {"class": "grid state"}, tag("tbody", {}, rows)))
    )


def _failure_mark(
    task: ScheduledTask, raised: tuple[str, ...], failed_node: str | None, siblings: int
) -> str | None:
    """What a task's badge says of the failure: which tasks raised, when recorded; else its node failed."""
    if raised:
        if task.task_key not in raised:
            return None
        return "failed: raised the error above" if task.task_key == raised[0] else "failed too"
    if failed_node is None or task.node != failed_node:
        return None
    return "failed" if siblings == 1 else f"its node failed ({siblings} tasks)"


def _task(
    view: ThreadView, links: Links, task: ScheduledTask, failed_node: str | None, siblings: int
) -> Markup:
    entries = view.journals.get(task.task_key, ())
    mark = _failure_mark(task, _raised(view), failed_node, siblings)
    failed = mark is not None

    def whole(key: str) -> Any:
        return links.value(view.thread_id, view.selected.id, task=task.task_key, key=key)

    return tag(
        "div",
        {"class": "task failed-task" if failed else "task", "id": f"task-{task.task_key}"},
        tag(
            "div",
            {"class": "task-head"},
            tag("span", {"class": "node"}, task.node),
            tag("code", {"class": "muted"}, task.task_key) if task.task_key != task.node else None,
            tag("span", {"class": "badge k-send"}, "send") if task.is_send else None,
            tag("span", {"class": "badge s-error"}, mark) if mark is not None else None,
        ),
        tag("div", {}, tag("span", {"class": "label"}, "input"), value_block(task.input))
        if task.is_send
        else None,
        journal_table(entries, whole),
        children_block(view.children.get(task.task_key, ())),
    )


def _raised(view: ThreadView) -> tuple[str, ...]:
    """The keys of the selected checkpoint's tasks that raised, as the failure records them (or none)."""
    error = view.info.error if view.info is not None else None
    return error.tasks if error is not None and _failed_node(view) is not None else ()


def _failed_node(view: ThreadView) -> str | None:
    error = view.info.error if view.info is not None else None
    if error is None or view.info is None or view.info.status != "error":
        return None
    return error.node if error.checkpoint_id == view.selected.id else None


def _tasks(view: ThreadView, links: Links) -> Markup:
    selected = view.selected
    if not selected.next:
        return join(
            tag("h3", {}, "Next tasks"),
            tag("p", {"class": "muted"}, "Nothing scheduled: the run finished here (its steps are below)."),
        )
    failed_node = _failed_node(view)
    siblings = sum(1 for task in selected.next if task.node == failed_node)
    return join(
        tag("h3", {"id": "tasks"}, "Next tasks and their journals"),
        tag(
            "p",
            {"class": "hint warn"},
            f"The run failed in node {failed_node}, which ran as {siblings} tasks here; "
            + (
                "the task that raised is marked."
                if _raised(view)
                else "the failure (recorded by an earlier version) names the node, not which task raised."
            ),
        )
        if siblings > 1
        else None,
        tag(
            "p",
            {"class": "hint"},
            "What each task recorded running from this checkpoint: completed steps, pauses and answers. "
            "A superstep that commits drops its tasks' journals; a pause keeps its task's.",
        ),
        tag(
            "p",
            {"class": "hint warn"},
            f"These tasks ran more subgraphs than a page reads: the first {CHILD_READS} are shown.",
        )
        if view.children_cut
        else None,
        [_task(view, links, task, failed_node, siblings) for task in selected.next],
    )


def _steps(view: ThreadView, links: Links) -> Markup | None:
    """The checkpoints that led to the one shown, newest first: what ran at each, and when."""
    by_id = {checkpoint.id: checkpoint for checkpoint in view.checkpoints}
    chain: list[Checkpoint] = []
    current: Checkpoint | None = view.selected
    while current is not None and len(chain) < len(by_id) + 1:
        chain.append(current)
        current = by_id.get(current.parent_id) if current.parent_id else None
    if len(chain) < 2:
        return None
    # One page of steps; the older ones are the steps to the first checkpoint left out.
    older = (
        chain[STEPS_SHOWN].id
        if len(chain) > STEPS_SHOWN
        else chain[-1].parent_id
        if chain[-1].parent_id is not None and chain[-1].parent_id not in by_id
        else None
    )
    chain = chain[:STEPS_SHOWN]
    rows = []
    for checkpoint in chain:
        parent = by_id.get(checkpoint.parent_id) if checkpoint.parent_id else None
        answers = view.answers.get(checkpoint.id, {})
        rows.append(
            tag(
                "tr",
                {"class": "current"} if checkpoint.id == view.selected.id else {},
                tag("td", {"class": "num"}, str(checkpoint.step)),
                tag("td", {}, what_ran(checkpoint, parent)),
                tag(
                    "td",
                    {},
                    "; ".join(f"{key}: {preview(value, 60)}" for key, value in answers.items())
                    if answers
                    else (
                        ", ".join(pause.id for pause in checkpoint.pending) + " (asked)"
                        if checkpoint.pending
                        else ""
                    ),
                ),
                tag("td", {"class": "when"}, when(checkpoint.ts, absolute=True)),
                tag(
                    "td",
                    {"class": "key"},
                    tag("a", {"href": links.thread(view.thread_id, checkpoint.id)}, checkpoint.id),
                ),
            )
        )
    head = tag(
        "tr",
        {},
        [tag("th", {"scope": "col"}, name) for name in ("Step", "Ran", "Pause", "When", "Checkpoint")],
    )
    return join(
        tag("h3", {"id": "steps"}, "Steps to here"),
        _scroll(tag("table", {"class": "grid steps"}, tag("thead", {}, head), tag("tbody", {}, rows))),
        tag(
            "nav",
            {"class": "pager steps-pager", "aria-label": "older steps"},
            tag(
                "a",
                {"href": links.thread(view.thread_id, older, fragment="steps"), "rel": "next"},
                f"Older steps → (to checkpoint {older})",
            ),
        )
        if older is not None
        else None,
    )


def checkpoint_panel(view: ThreadView, links: Links, guard: Guard, actions_on: bool) -> Markup:
    """The section showing ``view.selected``."""
    selected = view.selected
    source = selected.metadata.get("source")
    parent = view.parent
    return tag(
        "section",
        {"class": "panel detail", "id": "checkpoint", "aria-labelledby": "checkpoint-title"},
        tag(
            "h2",
            {"id": "checkpoint-title"},
            "Checkpoint ",
            tag("code", {}, selected.id),
            tag("span", {"class": "tag latest"}, "latest") if selected.id == view.latest.id else None,
        ),
        facts(
            [
                ("Step", str(selected.step)),
                ("Ran", what_ran(selected, parent)),
                ("Status", _status_badge(view)),
                ("Written", when(selected.ts, absolute=True)),
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
        _state(view, links),
        _tasks(view, links),
        _steps(view, links),
        tag("h3", {}, "Metadata"),
        value_block(dict(selected.metadata)),
    )


def metadata_chips(metadata: Mapping[str, Any]) -> Markup | None:
    """A thread's metadata as chips (``key=value``)."""
    if not metadata:
        return None
    return tag(
        "div",
        {"class": "chips"},
        [tag("span", {"class": "chip"}, f"{key}={label(value, 60)}") for key, value in metadata.items()],
    )
