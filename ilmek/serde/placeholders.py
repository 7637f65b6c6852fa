"""Stored values of classes this process has not registered, for tools that only show data.

An operator's CLI and the web console never import the application, so
they cannot rebuild an ``app.Money`` a checkpoint holds, and must not try
(nothing named by stored data is ever imported). Inside
:func:`showing_unregistered`, decoding turns such a value into an
:class:`Unregistered` placeholder instead of refusing the whole value: the
registry name, whether it was an object or an enum member, and its stored
payload (decoded by the same rules). Outside it, decoding refuses as always.

A placeholder encodes back to exactly the tag it was read from, so a value
written back by such a tool keeps the class for the application to read.
Reads made while showing are never kept in a checkpointer's value cache.

Inside :func:`showing_damaged` as well (the console's pages), a tag that
cannot be decoded at all (forged, or damaged on disk) becomes a
:class:`Damaged` placeholder, so one bad value shows as damaged instead of
failing the page that holds it. Nothing else ever sees one: it cannot be
encoded, and code that acts on values decodes outside the block.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, Final, Literal

import attrs

__all__ = [
    "Damaged",
    "Unregistered",
    "showing_damaged",
    "showing_unregistered",
    "shows_damaged",
    "shows_unregistered",
]

_SHOWING: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "ilmek_showing_unregistered", default=False
)
_SHOWING_DAMAGED: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "ilmek_showing_damaged", default=False
)


@attrs.frozen
class Unregistered:
    """A stored object or enum member whose class is not registered in this process.

    Attributes:
        type_name: The name it was registered under where it was stored (``"app.Money"``).
        kind: ``"obj"`` for an attrs class or dataclass, ``"enum"`` for an Enum member.
        stored: Its stored payload: a dict of field values for ``"obj"``, the member's
            value for ``"enum"``.
    """

    type_name: str
    kind: Literal["obj", "enum"]
    stored: Any

    def __repr__(self) -> str:
        return f"<{self.type_name} (not registered in this process): {self.stored!r}>"

    @property
    def label(self) -> str:
        """How a display names it: the class name, saying it is not registered here."""
        return f"{self.type_name} (class not registered here)"


@contextlib.contextmanager
def showing_unregistered() -> Iterator[None]:
    """Within the block, values of unregistered classes decode to :class:`Unregistered`.

    For code that shows stored data and never builds the application's
    objects (the CLI's ``show`` and ``history``, the console's pages).
    """
    token = _SHOWING.set(True)
    try:
        yield
    finally:
        _SHOWING.reset(token)


def shows_unregistered() -> bool:
    """Whether decoding in this context makes placeholders (see :func:`showing_unregistered`)."""
    return _SHOWING.get()


# eq=False: hashed by identity, so a damaged dict key or set item is still a key.
@attrs.frozen(eq=False)
class Damaged:
    """A stored tag that cannot be decoded, as a display shows it (see :func:`showing_damaged`).

    Attributes:
        stored: The tag as stored (parsed JSON, its inner values not decoded).
        reason: Why it cannot be decoded.
    """

    stored: Any
    reason: str

    def __repr__(self) -> str:
        return f"<damaged value ({self.reason})>"


@contextlib.contextmanager
def showing_damaged() -> Iterator[None]:
    """Within the block, a tag that cannot be decoded becomes a :class:`Damaged` placeholder.

    For pages that show stored data and must show the rest of it when one
    value is forged or damaged (the web console's).
    """
    token = _SHOWING_DAMAGED.set(True)
    try:
        yield
    finally:
        _SHOWING_DAMAGED.reset(token)


def shows_damaged() -> bool:
    """Whether decoding in this context makes damaged placeholders (see :func:`showing_damaged`)."""
    return _SHOWING_DAMAGED.get()
