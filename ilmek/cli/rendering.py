"""How a stored value is drawn for a terminal: :func:`render_value`, shortened unless ``--full``."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import json
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from ..crypto import Sealed
from ..redact import printable_json
from ..serde import Unregistered

# How much of a value `show` prints unless --full is given.
_MAX_TEXT = 200
_HEAD_ITEMS = 10
_TAIL_ITEMS = 3
_MAX_KEYS = 30
_MAX_DEPTH = 6
_LINE_WIDTH = 100

# Python refuses str() of an int longer than this (sys.int_max_str_digits).
_MAX_INT_DIGITS = 4300

MAX_PRINTED_INT_DIGITS = 20_000
"""The longest int ``show --full`` prints in decimal digits.

Writing an int in decimal takes time quadratic in its length (20,000 digits
take a few milliseconds, a million over a minute, during which Ctrl-C waits),
so a longer one stored in a checkpoint shows as ``<int of about N digits, too
long to print>``; ``--json`` gives it whole, in hex, as it is stored.
"""

_LOG10_2 = 0.30102999566398120
_MAX_PRINTED_BITS = int(MAX_PRINTED_INT_DIGITS / _LOG10_2) + 1


def _int_digits(value: int) -> int:
    """How many decimal digits ``value`` has, without str() (which refuses long ones).

    Only for ints of at most :data:`_MAX_PRINTED_BITS` bits: the powers of ten
    it compares with cost time quadratic in their length too.
    """
    magnitude = abs(value)
    digits = max(1, int(magnitude.bit_length() * _LOG10_2))
    while digits > 1 and 10 ** (digits - 1) > magnitude:
        digits -= 1
    while 10**digits <= magnitude:
        digits += 1
    return digits


def _displayable_int(value: int, full: bool) -> int | str:
    """An int as ``show`` prints it: whole (``full``), or its length when long; never costing seconds."""
    bits = abs(value).bit_length()
    if bits > _MAX_PRINTED_BITS:
        return f"<int of about {int(bits * _LOG10_2) + 1:,} digits, too long to print>"
    digits = _int_digits(value)
    if not full and digits > _MAX_TEXT:
        return f"<int of {digits} digits>"
    # Python will not print more digits than this with str(); Decimal will.
    return value if digits <= _MAX_INT_DIGITS else str(decimal.Decimal(value))


def _sort_key(item: Any) -> str:
    """A set's item as it is ordered for display: by repr, or by its type where repr refuses (a long int)."""
    try:
        return repr(item)
    except ValueError:
        return f"<{type(item).__name__}>"


def _displayable(value: Any, full: bool, depth: int = 0) -> Any:
    """``value`` as JSON types, shortened unless ``full``; what JSON lacks becomes text."""
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return _displayable_int(value, full)
    if isinstance(value, str):
        if full or len(value) <= _MAX_TEXT:
            return value
        return f"{value[:_MAX_TEXT]}… ({len(value) - _MAX_TEXT} more characters)"
    if not full and depth >= _MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())
        shown = items if full else items[:_MAX_KEYS]
        result = {str(key): _displayable(item, full, depth + 1) for key, item in shown}
        if len(items) > len(shown):
            result["…"] = f"{len(items) - len(shown)} more keys"
        return result
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=_sort_key) if isinstance(value, set | frozenset) else list(value)
        if full or len(items) <= _HEAD_ITEMS + _TAIL_ITEMS:
            return [_displayable(item, full, depth + 1) for item in items]
        hidden = len(items) - _HEAD_ITEMS - _TAIL_ITEMS
        return [
            *(_displayable(item, full, depth + 1) for item in items[:_HEAD_ITEMS]),
            f"… {hidden} more items …",
            *(_displayable(item, full, depth + 1) for item in items[-_TAIL_ITEMS:]),
        ]
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID | _dt.timedelta):
        return str(value)
    if isinstance(value, Sealed):
        return f"<{value.label}>"
    if isinstance(value, Unregistered):
        # As stored, under the name the application registered it with.
        return {value.label: _displayable(value.stored, full, depth + 1)}
    if attrs.has(type(value)):
        fields = {field.name: getattr(value, field.name) for field in attrs.fields(type(value))}
        return _displayable(fields, full, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return _displayable(fields, full, depth)
    text = repr(value)
    return text if full or len(text) <= _MAX_TEXT else f"{text[:_MAX_TEXT]}…"


def render_value(value: Any, *, full: bool = False, indent: str = "") -> str:
    """A stored value as pretty JSON-ish text: short parts on one line, long ones broken up.

    Every character that could steer a terminal is escaped; the only line
    breaks are the layout's own (a stored newline prints as ``\\n``). An
    integer too long to print shows its length (``<int of 5001 digits>``)
    unless ``full``; one of more than :data:`MAX_PRINTED_INT_DIGITS` digits
    always does.

    Args:
        value: Any value a checkpoint holds.
        full: Print long strings, lists and integers whole instead of shortened.
        indent: Put in front of every line but the first.
    """
    # JSON's own escapes for what json.dumps leaves raw (C1, bidi overrides...).
    return printable_json(_pretty(_displayable(value, full), indent, _LINE_WIDTH - len(indent)))


def _pretty(value: Any, indent: str, width: int) -> str:
    """``value`` (JSON types) in ``width`` columns; what does not fit opens one line per item."""
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) <= width or not isinstance(value, dict | list) or not value:
        return compact
    inner = indent + "  "
    parts = []
    if isinstance(value, dict):
        for key, item in value.items():
            label = json.dumps(key, ensure_ascii=False) + ": "
            parts.append(label + _pretty(item, inner, width - 2 - len(label)))
        opening, closing = "{", "}"
    else:
        parts = [_pretty(item, inner, width - 2) for item in value]
        opening, closing = "[", "]"
    body = f",\n{inner}".join(parts)
    return f"{opening}\n{inner}{body}\n{indent}{closing}"
