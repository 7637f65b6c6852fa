"""Time on the console's pages: a pause's deadline ("due in 3 h", "overdue by 5 min"), a timer's wake
time, and who gave a recorded answer (``JournalEntry.by``)."""

from __future__ import annotations

import datetime as _dt

from ..types import Pending
from .html import Markup, join, tag
from .layout import when
from .values import label

__all__ = ["answered_by", "pause_timing", "span_text"]

_BY = {
    "person": "a person",
    "deadline": "the deadline (its on_timeout answer)",
    "timer": "the timer",
    "token": "an answer link",
}


def span_text(seconds: float) -> str:
    """A span in its largest unit, rounded: ``3 h``, ``2 d``, ``5 min``, ``40 s``."""
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{round(seconds / size)} {unit}"
    return f"{round(seconds)} s"


def _exact(moment: _dt.datetime, shown: str, css: str) -> Markup:
    moment = moment.astimezone(_dt.UTC)
    return tag(
        "time",
        {"datetime": moment.isoformat(), "title": f"{moment:%Y-%m-%d %H:%M:%S} UTC", "class": css},
        shown,
    )


def pause_timing(pause: Pending, now: _dt.datetime) -> Markup | None:
    """When a pause ends by itself: a timer's wake time, a deadline's "due in" or "overdue" and what it
    answers then; ``None`` for a pause that waits for a person for as long as it takes."""
    if pause.deadline is None:
        return None
    if pause.kind == "timer":
        return join("sleeping (ctx.sleep): wakes ", when(pause.deadline, now, absolute=True))
    left = (pause.deadline - now).total_seconds()
    due = (
        _exact(pause.deadline, f"due in {span_text(left)}", "due")
        if left > 0
        else _exact(pause.deadline, f"overdue by {span_text(-left)}", "overdue")
    )
    return join(due, f"; then answered {label(pause.on_timeout, 60)} (on_timeout)")


def answered_by(by: str | None) -> Markup | None:
    """ "by a person", "by the deadline"...: who gave a recorded answer (``None`` when not kept)."""
    if by is None:
        return None
    return tag("span", {"class": "muted by"}, f" by {_BY.get(by, by)}")
