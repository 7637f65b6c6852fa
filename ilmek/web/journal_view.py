"""A task's journal drawn as a table: its recorded steps, pauses and answers (the root's and a child's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..types import JournalEntry
from .answers import shape_of
from .html import Markup, Url, escape, join, tag
from .layout import value_block
from .payload_fields import payload_fields
from .timing import answered_by

__all__ = ["journal_table", "scrolling"]


def scrolling(table: Markup) -> Markup:
    """A table that scrolls sideways on its own when it is wider than the screen (the page never does)."""
    # Focusable, so a keyboard can scroll it too.
    return tag("div", {"class": "table-scroll", "tabindex": "0"}, table)


def _asked(payload: Any) -> Markup:
    """What a pause asked: its question and draft as text when it has them, else the payload."""
    shape = shape_of(payload)
    if shape.draft is None:
        fields = payload_fields(payload)
        return fields if fields is not None else value_block(payload)
    return join(
        tag("p", {"class": "asked-question"}, escape(shape.question, keep_newlines=True))
        if shape.question
        else None,
        value_block(shape.draft),
    )


def journal_table(entries: Sequence[JournalEntry], whole: Callable[[str], Url | None]) -> Markup:
    """A task's journal as a table: each recorded step's key, kind and result (a pause: asked, answered)."""
    if not entries:
        return tag("p", {"class": "muted"}, "Nothing recorded for this task from this checkpoint.")
    rows = []
    for entry in entries:
        if entry.kind == "interrupt":
            kind = tag("span", {"class": "badge k-pause"}, "pause")
            answered = (
                join(
                    tag("span", {"class": "label"}, "answer"), value_block(entry.value), answered_by(entry.by)
                )
                if entry.answered
                else tag("span", {"class": "badge p-waiting"}, "no answer yet")
            )
            shown = join(tag("span", {"class": "label"}, "asked"), _asked(entry.payload), answered)
        elif entry.kind == "unstored":
            kind = tag("span", {"class": "badge k-step"}, "step")
            shown = tag("p", {}, f"Ran, but its result (of type {entry.payload}) could not be stored.")
        else:
            kind = tag("span", {"class": "badge k-step"}, "step")
            shown = value_block(entry.value, whole=whole(entry.key))
        rows.append(
            tag(
                "tr",
                {},
                tag("td", {"class": "key", "data-label": "Key"}, tag("code", {}, entry.key)),
                tag("td", {"data-label": "Kind"}, kind),
                tag("td", {"data-label": "Result"}, shown),
            )
        )
    head = tag("tr", {}, [tag("th", {"scope": "col"}, name) for name in ("Key", "Kind", "Result")])
    return scrolling(tag("table", {"class": "grid journal"}, tag("thead", {}, head), tag("tbody", {}, rows)))
