"""Argument checks at the public entry points, with the same rules on every backend.

Every check returns the value as ilmek will use it (a plain ``str`` or
``int``, never a subclass that renders differently) or raises
:class:`~ilmek.errors.InvalidArgumentError` naming the argument and what it
should be. Nothing here touches storage.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
from typing import Any

from .errors import InvalidArgumentError
from .types import THREAD_STATUSES

__all__ = [
    "MAX_ID_BYTES",
    "MAX_KEY_BYTES",
    "MAX_LIMIT",
    "MAX_NAME_BYTES",
    "MAX_SECONDS",
    "checkpoint_id",
    "count",
    "is_plain_text",
    "latest_or_checkpoint_id",
    "moment",
    "name_problem",
    "number",
    "optional_checkpoint_id",
    "search_text",
    "seconds",
    "task_id",
    "text",
    "thread_id",
    "thread_status",
]

MAX_ID_BYTES = 1024
"""The longest thread, checkpoint or task id, in UTF-8 bytes (indexes have limits)."""

MAX_KEY_BYTES = 384
"""The longest key of a step or an interrupt (``ctx.step(key, ...)``), as stored: JSON-escaped ASCII.

A key is stored escaped (ASCII letters and digits count one byte each, any
other character six, or twelve beyond the basic plane), so that any text,
NUL included, can be a key. A journal row is indexed by thread, checkpoint,
task and key together, and Postgres refuses an index entry over 2,704
bytes: with ids at their longest (1 KiB each) and names at theirs, keys up
to this length fit on every backend. A longer key is refused before the
step's function runs.
"""

MAX_NAME_BYTES = 128
"""The longest node or channel name, in UTF-8 bytes (a node's name is its tasks' journal key)."""

MAX_LIMIT = 2**31 - 1
"""The largest ``limit``, ``offset`` or ``keep_last`` accepted."""

MAX_SECONDS = threading.TIMEOUT_MAX
"""The longest duration accepted (a lease, a busy timeout, a retry's wait).

It is what a thread or a queue can wait for (``threading.TIMEOUT_MAX``:
about 292 years on Linux and macOS, 49 days on Windows); a longer wait
would fail with ``OverflowError`` in the middle of a run.
"""


def _problem(value: str, limit: int | None = MAX_ID_BYTES) -> str | None:
    if "\0" in value:
        return "contains NUL, which databases cannot store"
    if value.isascii():  # the usual case, checked at every commit: no encoding needed
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return "contains a lone surrogate, which is not text"
    if limit is not None and size > limit:
        return f"is longer than {limit} bytes"
    return None


def is_plain_text(value: Any) -> bool:
    """Whether ``value`` is text every backend stores, filters and sends back as text.

    A ``str`` without NUL and without a lone surrogate, of any length.
    """
    return isinstance(value, str) and _problem(value, limit=None) is None


def name_problem(name: str) -> str | None:
    """What keeps a node's or a channel's name from being stored (``None``: nothing).

    Names are stored as text in every backend and are part of task ids and
    journal keys: no NUL, no lone surrogate, at most :data:`MAX_NAME_BYTES`.
    """
    return _problem(name, limit=MAX_NAME_BYTES)


def text(value: Any, name: str, *, allow_empty: bool = False) -> str:
    """A plain ``str`` without NUL or lone surrogates, of bounded length."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__}")
    plain = str.__str__(value)
    if not plain and not allow_empty:
        raise InvalidArgumentError(f"{name} must not be empty")
    problem = _problem(plain)
    if problem is not None:
        raise InvalidArgumentError(f"{name} {_shown(plain)} {problem}")
    return plain


def journal_key(value: Any, what: str = "a step key") -> str:
    """A step's or interrupt's key: a non-empty string, at most :data:`MAX_KEY_BYTES` bytes as stored."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {_shown_any(value)}")
    plain = str.__str__(value)
    stored = len(json.dumps(plain, ensure_ascii=True))
    if stored > MAX_KEY_BYTES:
        raise InvalidArgumentError(
            f"{what} {_shown(plain)} is {stored} bytes as stored (JSON-escaped); keys are at most "
            f"{MAX_KEY_BYTES} bytes so that every database can index the step's record. Use a shorter key "
            "(a hash of the data, say)"
        )
    return plain


def task_id(value: Any, name: str = "task_id") -> str:
    """A task id (``<thread>:<checkpoint>:<task key>``): text, as long as its three parts may be."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty string, got {_shown_any(value)}")
    plain = str.__str__(value)
    problem = _problem(plain, limit=2 * MAX_ID_BYTES + MAX_NAME_BYTES + 16)
    if problem is not None:
        raise InvalidArgumentError(f"{name} {_shown(plain)} {problem}")
    return plain


def thread_id(value: Any, name: str = "thread_id") -> str:
    """A thread id: a non-empty string, no NUL, no lone surrogate, at most 1 KiB."""
    return text(value, name)


def checkpoint_id(value: Any, name: str = "checkpoint_id") -> str:
    """A checkpoint id, by the same rules as a thread id."""
    return text(value, name)


def optional_checkpoint_id(value: Any, name: str = "checkpoint_id") -> str | None:
    """``None`` or a checkpoint id."""
    return None if value is None else checkpoint_id(value, name)


def latest_or_checkpoint_id(value: Any, name: str = "checkpoint_id") -> str | None:
    """For ``get``: ``None`` or ``""`` mean the latest checkpoint (as in the reference); else an id."""
    if value is None or (isinstance(value, str) and not value):
        return None
    return checkpoint_id(value, name)


def search_text(value: Any, name: str = "search") -> str | None:
    """``None`` or text to look for (the empty string means no filter)."""
    if value is None:
        return None
    return text(value, name, allow_empty=True) or None


def count(value: Any, name: str, *, minimum: int = 0, optional: bool = False) -> int | None:
    """An ``int`` (not a ``bool``) between ``minimum`` and :data:`MAX_LIMIT`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= MAX_LIMIT:
        raise InvalidArgumentError(f"{name} must be between {minimum} and {MAX_LIMIT}, got {value}")
    return int(value)


def number(
    value: Any,
    name: str,
    *,
    minimum: float = 0.0,
    maximum: float = MAX_SECONDS,
    above: bool = False,
    unit: str = "",
) -> float:
    """A finite ``int`` or ``float`` (no ``bool``) from ``minimum`` (excluded if ``above``) to ``maximum``."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_number and (value > minimum if above else value >= minimum) and value <= maximum:  # NaN fails
        return float(value)
    least = f"more than {minimum:g}" if above else f"at least {minimum:g}"
    most = f"threading.TIMEOUT_MAX ({maximum:g})" if maximum == MAX_SECONDS else f"{maximum:g}"
    got = repr(value) if is_number else type(value).__name__
    raise InvalidArgumentError(f"{name} must be a finite number{unit}, {least} and at most {most}, got {got}")


def seconds(value: Any, name: str, *, positive: bool = False) -> float:
    """A duration: finite seconds, from 0 (excluded when ``positive``) to :data:`MAX_SECONDS`."""
    return number(value, name, above=positive, unit=" of seconds")


def moment(value: Any, name: str) -> float | None:
    """``None``, or a point in time as epoch seconds: an aware ``datetime`` or a number.

    A naive ``datetime`` is refused: it would be read in an unknown zone.
    """
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(f"{name} must be time-zone aware (e.g. datetime.now(UTC))")
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise InvalidArgumentError(f"{name} must be a datetime or epoch seconds, got {type(value).__name__}")


def _shown(value: str) -> str:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return repr(shown)


def _shown_any(value: Any) -> str:
    return _shown(value) if isinstance(value, str) else type(value).__name__


#: Words people use for a thread waiting for an answer, all meaning the status ``interrupted``.
STATUS_ALIASES = {"paused": "interrupted", "waiting": "interrupted"}


def thread_status(value: Any, name: str = "status") -> str | None:
    """``None``, a thread status, or ``running`` (held by a live run now).

    ``paused`` and ``waiting`` are accepted for ``interrupted``.
    """
    if value is None:
        return None
    allowed = (*THREAD_STATUSES, "running")
    if isinstance(value, str):
        value = STATUS_ALIASES.get(value, value)
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(
            f"{name} must be one of {', '.join(allowed)} (paused and waiting mean interrupted), got {value!r}"
        )
    return str.__str__(value)
