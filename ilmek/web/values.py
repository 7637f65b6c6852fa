"""Stored values as text a person reads: JSON-like, bounded, never a surprise.

A channel may hold a megabyte list or a value nested a thousand levels
deep; a page must still render quickly. Everything here stops writing once
a budget of characters is spent and says so. Strings are written as JSON
string literals (a stored newline reads ``\\n``), so a rendered value is
laid out by the console alone; unsafe characters are left for
:func:`ilmek.web.html.escape` to show as escapes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..crypto import Sealed
from ..serde import Damaged, Unregistered

__all__ = ["Rendered", "as_json_text", "label", "preview", "question_of", "render"]

WIDTH: Final = 72
"""Containers that fit this many characters stay on one line."""
LIMIT: Final = 20_000
"""The most characters one value is rendered to."""
_MAX_DEPTH: Final = 40
_MAX_DIGITS: Final = 60
_DAMAGED_SHOWN: Final = 300
"""The most characters of a damaged value's stored JSON a page writes."""


class _Full(Exception):
    """The budget is spent."""


class _Writer:
    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.limit = limit

    def write(self, text: str) -> None:
        room = self.limit - self.size
        if len(text) > room:
            self.parts.append(text[: max(room, 0)])
            self.size = self.limit
            raise _Full
        self.parts.append(text)
        self.size += len(text)

    def text(self) -> str:
        return "".join(self.parts)


def _int_text(value: int) -> str:
    # str() of a very long int is slow, and refused past 4,300 digits.
    if value.bit_length() > _MAX_DIGITS * 3.33:
        return f"<int of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    return str(value)


def _damaged_text(value: Damaged) -> str:
    """A tag that could not be decoded: said so, with why and (the start of) what is stored."""
    stored = json.dumps(value.stored, ensure_ascii=False, default=repr)
    stored = stored if len(stored) <= _DAMAGED_SHOWN else stored[:_DAMAGED_SHOWN] + "…"
    return f"damaged value ({value.reason}) stored as {stored}"


def _scalar(value: Any) -> str | None:
    """The text of a value that is not a container, or ``None`` for a container."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (bytes, bytearray)):
        shown = bytes(value[:200])
        return repr(shown) + ("…" if len(value) > 200 else "")
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, Damaged):
        return _damaged_text(value)
    if isinstance(value, Sealed):
        return value.label
    if isinstance(value, Unregistered):
        if value.kind == "obj" and isinstance(value.stored, Mapping):
            return None
        stored = _scalar(value.stored) or repr(value.stored)
        return f"{value.type_name}({stored}) · class not registered here"
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return None
    if attrs.has(type(value)) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return None
    text = repr(value)
    return text[:200] + ("…" if len(text) > 200 else "")


def _items(value: Any) -> tuple[str, str, list[tuple[str | None, Any]]]:
    """A container as (opening, closing, [(label or None, item)])."""
    if isinstance(value, Mapping):
        return "{", "}", [(_key(key), item) for key, item in value.items()]
    if isinstance(value, list):
        return "[", "]", [(None, item) for item in value]
    if isinstance(value, tuple):
        return "(", ")", [(None, item) for item in value]
    if isinstance(value, (set, frozenset)):
        try:
            ordered = sorted(value)
        except TypeError:
            ordered = list(value)
        return "{", "}", [(None, item) for item in ordered]
    if isinstance(value, Unregistered):
        # As stored: its fields, under the name it was registered with elsewhere.
        stored: list[tuple[str | None, Any]] = [(f"{name}=", item) for name, item in value.stored.items()]
        return f"{value.type_name}(", ") · class not registered here", stored
    if attrs.has(type(value)):
        fields = [(f.name, getattr(value, f.name)) for f in attrs.fields(type(value))]
    else:
        fields = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    return f"{type(value).__name__}(", ")", [(f"{name}=", item) for name, item in fields]


def _key(key: Any) -> str:
    text = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else (_scalar(key) or repr(key))
    return f"{text}: "


def _compact(value: Any, out: _Writer, depth: int) -> None:
    scalar = _scalar(value)
    if scalar is not None:
        out.write(scalar)
        return
    if depth >= _MAX_DEPTH:
        out.write("…")
        return
    opening, closing, items = _items(value)
    out.write(opening)
    for index, (label, item) in enumerate(items):
        if index:
            out.write(", ")
        if label is not None:
            out.write(label)
        _compact(item, out, depth + 1)
    if isinstance(value, tuple) and len(items) == 1:
        out.write(",")
    out.write(closing)


def _one_line(value: Any, width: int) -> str | None:
    """The compact form if it fits ``width`` characters, else ``None``."""
    out = _Writer(width + 1)
    try:
        _compact(value, out, 0)
    except _Full:
        return None
    return out.text()


def _pretty(value: Any, out: _Writer, indent: str, depth: int) -> None:
    fitted = _one_line(value, max(WIDTH - len(indent), 20))
    if fitted is not None:
        out.write(fitted)
        return
    scalar = _scalar(value)
    if scalar is not None:
        out.write(scalar)
        return
    if depth >= _MAX_DEPTH:
        out.write("…")
        return
    opening, closing, items = _items(value)
    inner = indent + "  "
    out.write(opening + "\n")
    for index, (label, item) in enumerate(items):
        out.write(inner + (label or ""))
        _pretty(item, out, inner, depth + 1)
        out.write(",\n" if index < len(items) - 1 else "\n")
    out.write(indent + closing)


@attrs.frozen
class Rendered:
    """A value rendered for reading: ``text`` (possibly several lines) and whether it was cut."""

    text: str
    truncated: bool

    @property
    def lines(self) -> int:
        """How many lines the text takes."""
        return self.text.count("\n") + 1


def render(value: Any, *, limit: int = LIMIT) -> Rendered:
    """``value`` over several lines (a container that fits stays on one), at most ``limit`` characters."""
    out = _Writer(limit)
    try:
        _pretty(value, out, "", 0)
    except _Full:
        return Rendered(out.text() + " …", True)
    except RecursionError:
        return Rendered(out.text() + " …", True)
    return Rendered(out.text(), False)


def preview(value: Any, width: int = 80) -> str:
    """``value`` on one line, cut with ``…`` past ``width`` characters."""
    out = _Writer(width)
    try:
        _compact(value, out, 0)
    except _Full:
        return out.text() + "…"
    except RecursionError:
        return out.text() + "…"
    return out.text()


def label(value: Any, width: int = 40) -> str:
    """A short label for a value: text as it is (cut past ``width``), anything else as :func:`preview`."""
    if isinstance(value, str):
        return value if len(value) <= width else value[:width] + "…"
    return preview(value, width)


def question_of(payload: Any, width: int = 120) -> str:
    """What a pause asks, on one line: a dict's ``question`` if it has a text one, else the payload."""
    if isinstance(payload, Mapping):
        question = payload.get("question")
        if isinstance(question, str):
            return label(question, width)
    return label(payload, width)


def as_json_text(value: Any) -> str | None:
    """``value`` as JSON text an answer form can send back (ASCII only), or ``None`` if it is not JSON."""
    try:
        return json.dumps(value, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
