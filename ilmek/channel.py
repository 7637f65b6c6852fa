"""Channels: the named slots of a graph's state and how writes fold into them.

``last_write`` keeps the newest write, ``append`` grows a list, ``merge``
shallow-merges dicts and ``reduce`` applies any ``fn(current, incoming)``.
For a state declared as an ``attrs`` class, :func:`append_field`,
:func:`merge_field` and :func:`reduce_field` mark a field's channel.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

__all__ = [
    "UNSET",
    "Channel",
    "append",
    "append_field",
    "last_write",
    "merge",
    "merge_field",
    "reduce",
    "reduce_field",
]

ChannelKind = Literal["last_write", "append", "merge", "reduce"]

METADATA_KEY: Final = "ilmek.channel"
"""The key under which an attrs field's metadata carries its :class:`Channel`."""


class _Unset:
    """The marker for "no value": a channel never written and with no default."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __copy__(self) -> _Unset:
        return self

    def __deepcopy__(self, memo: Any) -> _Unset:
        return self


UNSET: Final = _Unset()


def _list_items(incoming: Any) -> list[Any]:
    # A list or tuple extends; anything else (a string included) is one item.
    if isinstance(incoming, (list, tuple)):
        return list(incoming)
    return [incoming]


@attrs.frozen
class Channel:
    """One slot of state and the reducer that folds writes into it.

    Build channels with :func:`last_write`, :func:`append`, :func:`merge` or
    :func:`reduce` rather than directly.
    """

    kind: ChannelKind
    default: Any = UNSET
    fn: Callable[[Any, Any], Any] | None = attrs.field(default=None, eq=False)

    def initial(self) -> Any:
        """What a read sees before any write: a fresh copy of the default, or ``UNSET``.

        Never what a reducer folds onto: :meth:`fold` gets ``UNSET`` for the
        first write, whatever the default.
        """
        if self.default is UNSET:
            return UNSET
        return copy.deepcopy(self.default)

    def new_items(self, incoming: Any) -> list[Any]:
        """For an ``append`` channel, the items a write adds."""
        return _list_items(incoming)

    def fold(self, current: Any, incoming: Any) -> Any:
        """The channel's value after ``incoming`` is written onto ``current``.

        ``current`` is ``UNSET`` for the first write to the channel, whatever
        its default; a ``reduce`` function then receives ``None`` as its
        current value (MODEL §2: "current is absent on the first write").
        Never mutates ``current``.

        Raises:
            TypeError: the write has the wrong shape for the channel (a
                ``merge`` channel given something other than a mapping).
        """
        if self.kind == "last_write":
            return incoming
        if self.kind == "append":
            # One copy of the list per write: it is the bulk of a long conversation.
            if current is UNSET:
                return _list_items(incoming)
            if isinstance(incoming, (list, tuple)):
                return [*current, *incoming]
            return [*current, incoming]
        if self.kind == "merge":
            if not isinstance(incoming, Mapping):
                raise TypeError(f"a merge channel takes a mapping, got {type(incoming).__name__}")
            base_map = {} if current is UNSET else dict(current)
            base_map.update(incoming)
            return base_map
        assert self.fn is not None
        return self.fn(None if current is UNSET else current, incoming)


def last_write(default: Any = UNSET) -> Channel:
    """A channel whose newest write wins (the default kind).

    Args:
        default: The value before the first write; mutable defaults are copied
            for every thread, never shared.
    """
    return Channel("last_write", default)


def append() -> Channel:
    """A list channel: a list or tuple write extends it, any other value is appended as one item."""
    return Channel("append", [])


def merge() -> Channel:
    """A dict channel: each write is shallow-merged in, the incoming value winning per key."""
    return Channel("merge", {})


def reduce(fn: Callable[[Any, Any], Any], default: Any = UNSET) -> Channel:
    """A channel folded by ``fn(current, incoming) -> next``.

    ``fn`` is called on every write, the first included: ``current`` is
    ``None`` on the first write, so ``fn`` must handle it, e.g.
    ``reduce(lambda total, n: (total or 0) + n, 0)``.

    Args:
        fn: The reducer; it must not mutate ``current``.
        default: Only what a read sees before any write. It is never passed
            to ``fn``: a channel declared with ``reduce(fn, 42)`` and written
            ``5`` once holds ``fn(None, 5)``.
    """
    if not callable(fn):
        raise TypeError(f"reduce() needs a callable, got {fn!r}")
    return Channel("reduce", default, fn)


def append_field(**kwargs: Any) -> Any:
    """An ``attrs`` field backed by an :func:`append` channel (default: an empty list)."""
    kwargs.setdefault("factory", list)
    return attrs.field(metadata={METADATA_KEY: append()}, **kwargs)


def merge_field(**kwargs: Any) -> Any:
    """An ``attrs`` field backed by a :func:`merge` channel (default: an empty dict)."""
    kwargs.setdefault("factory", dict)
    return attrs.field(metadata={METADATA_KEY: merge()}, **kwargs)


def reduce_field(fn: Callable[[Any, Any], Any], **kwargs: Any) -> Any:
    """An ``attrs`` field backed by a :func:`reduce` channel with ``fn``.

    As with :func:`reduce`, ``fn`` folds every write and gets ``None`` as the
    current value on the first; the field's ``default`` is only what a read
    sees before any write.
    """
    return attrs.field(metadata={METADATA_KEY: reduce(fn)}, **kwargs)
