"""What a pause asks a person to approve, laid out as its fields rather than folded JSON.

An order's amount and items are what an approver reads first: a mapping
payload is shown as a small table of its fields (a nested mapping or list
opens one level further, deeper values read as one line), every text
escaped. Fields a pause's form shows already (its question, options,
draft) are left out. A payload that is not a mapping is left to
:func:`ilmek.web.layout.value_block`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from .answers import AnswerShape
from .html import Markup, escape, join, tag
from .layout import value_block
from .values import label, preview

__all__ = ["MAX_FIELDS", "payload_block", "payload_fields"]

MAX_FIELDS: Final = 30
"""The most fields (and list items) one level of a payload shows; the rest are counted."""
_TEXT_LIMIT: Final = 2000
_DEPTH: Final = 2
"""How many levels open as tables; deeper values read as one line."""


def _text(value: str) -> Markup:
    shown = value if len(value) <= _TEXT_LIMIT else value[:_TEXT_LIMIT] + " …"
    return tag("span", {"class": "field-text"}, escape(shown, keep_newlines=True))


def _more(count: int, what: str) -> Markup | None:
    return tag("p", {"class": "hint"}, f"and {count} more {what}") if count > 0 else None


def _value(value: Any, depth: int) -> Markup:
    if isinstance(value, str):
        return _text(value)
    if depth < _DEPTH and isinstance(value, Mapping) and value:
        return _table(value, depth + 1, ())
    if depth < _DEPTH and isinstance(value, (list, tuple)) and value:
        return join(
            tag(
                "ol",
                {"class": "field-list"},
                [tag("li", {}, preview(item, 160)) for item in value[:MAX_FIELDS]],
            ),
            _more(len(value) - MAX_FIELDS, "items"),
        )
    return tag("code", {"class": "field-value"}, preview(value, 200))


def _table(payload: Mapping[Any, Any], depth: int, skip: Collection[str]) -> Markup:
    items = [(key, value) for key, value in payload.items() if key not in skip]
    rows = [
        tag(
            "tr",
            {},
            tag("th", {"scope": "row"}, label(key, 60) if not isinstance(key, str) else key),
            tag("td", {}, _value(value, depth)),
        )
        for key, value in items[:MAX_FIELDS]
    ]
    return join(
        tag("table", {"class": "fields"}, tag("tbody", {}, rows)),
        _more(len(items) - MAX_FIELDS, "fields"),
    )


def payload_fields(payload: Any, *, skip: Collection[str] = ()) -> Markup | None:
    """A mapping payload's fields as a table (those in ``skip`` left out), or ``None`` for anything else.

    ``None`` too when every field is skipped: nothing is left to show.
    """
    if not isinstance(payload, Mapping) or not any(key not in skip for key in payload):
        return None
    return _table(payload, 1, skip)


def payload_block(payload: Any, shape: AnswerShape) -> Markup:
    """A pause's payload under its question and draft: its other fields shown, the whole one folded.

    A payload that is neither a mapping with fields to show nor shaped as a
    question or a draft is shown whole.
    """
    skip = {"question", "options", *([shape.draft_field] if shape.draft_field else [])}
    fields = payload_fields(payload, skip=skip)
    if fields is None and shape.draft is None and shape.question is None:
        return tag(
            "div", {"class": "payload"}, tag("span", {"class": "label"}, "Payload"), value_block(payload)
        )
    return join(
        tag("div", {"class": "payload payload-fields"}, fields) if fields is not None else None,
        tag(
            "details",
            {"class": "payload fold"},
            tag("summary", {}, "The whole payload"),
            value_block(payload),
        ),
    )
