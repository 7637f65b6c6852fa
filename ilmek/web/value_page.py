"""One stored value, whole: a channel of a checkpoint, or a step a task recorded.

The thread page cuts a value at :data:`ilmek.web.values.LIMIT` characters
and links here; this page writes up to :data:`WHOLE_LIMIT` (a value larger
still says where it stops).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..checkpoint.base import Checkpointer
from .html import Markup, tag
from .layout import document, facts, value_block
from .links import Links

__all__ = ["WHOLE_LIMIT", "StoredValue", "read_value", "value_page"]

WHOLE_LIMIT: Final = 5_000_000
"""The most characters the value page writes of one value."""


@attrs.frozen(kw_only=True)
class StoredValue:
    """A value and where it is stored."""

    thread_id: str
    checkpoint_id: str
    where: str
    value: Any


def read_value(
    checkpointer: Checkpointer, thread_id: str, checkpoint_id: str, query: dict[str, str | None]
) -> StoredValue | str:
    """The value ``query`` names (``channel``, or ``task`` and ``key``), or why there is none."""
    checkpoint = checkpointer.get(thread_id, checkpoint_id)
    if checkpoint is None:
        return f"Thread {thread_id!r} has no checkpoint {checkpoint_id!r}."
    channel, task, key = query.get("channel"), query.get("task"), query.get("key")
    if channel is not None:
        channels = dict(checkpoint.channels)
        if channel not in channels:
            return f"Checkpoint {checkpoint_id} has no channel {channel!r}."
        return StoredValue(
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            where=f"channel {channel}",
            value=channels[channel],
        )
    if task is not None and key is not None:
        if all(scheduled.task_key != task for scheduled in checkpoint.next):
            return f"Checkpoint {checkpoint_id} schedules no task {task!r}."
        entries = checkpointer.load_journals(checkpoint, [task]).get(task, ())
        entry = next((entry for entry in entries if entry.key == key), None)
        if entry is None:
            return f"Task {task!r} recorded no step {key!r} from checkpoint {checkpoint_id}."
        return StoredValue(
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            where=f"step {key} of task {task}",
            value=entry.value,
        )
    return "Which value? The link names no channel (&channel=) or step (&task=&key=)."


def value_page(links: Links, stored: StoredValue, *, actions_on: bool) -> Markup:
    """The page of one value, whole."""
    body = [
        tag(
            "nav",
            {"class": "crumbs", "aria-label": "where you are"},
            tag("a", {"href": links.threads()}, "Threads"),
            " / ",
            tag("a", {"href": links.thread(stored.thread_id)}, stored.thread_id),
            " / value",
        ),
        tag("h1", {}, f"The whole value: {stored.where}"),
        facts(
            [
                ("Thread", tag("a", {"href": links.thread(stored.thread_id)}, stored.thread_id)),
                (
                    "Checkpoint",
                    tag(
                        "a",
                        {"href": links.thread(stored.thread_id, stored.checkpoint_id)},
                        stored.checkpoint_id,
                    ),
                ),
            ]
        ),
        tag(
            "section",
            {"class": "panel whole", "aria-label": "the value"},
            value_block(stored.value, css="value whole-value", limit=WHOLE_LIMIT, fold=False),
        ),
    ]
    return document(f"Value {stored.where}", links, body, actions_on=actions_on)
