"""Channels: the named slots of a graph's state and how writes fold into them.

``last_write`` keeps the newest write, ``append`` grows a list, ``merge``
shallow-merges dicts, ``reduce`` applies any ``fn(current, incoming)`` and
``messages`` keeps a list of items by id (append, replace, :func:`remove`).
For a state declared as an ``attrs`` class, :func:`append_field`,
:func:`merge_field` and :func:`reduce_field` mark a field's channel; in a
``TypedDict``, ``Annotated[list[str], append]`` does (the functions
themselves, or the channels they make, are the markers).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final, Literal

import attrs

from .types import new_random_id

__all__ = [
    "UNSET",
    "Channel",
    "append",
    "append_field",
    "last_write",
    "merge",
    "merge_field",
    "messages",
    "reduce",
    "reduce_field",
    "remove",
]

ChannelKind = Literal["last_write", "append", "merge", "reduce", "messages"]

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


def _message_id(item: Any) -> Any:
    """An item's id: ``item["id"]`` for a mapping, ``item.id`` for an attrs, dataclass or pydantic value."""
    if isinstance(item, Mapping):
        return item.get("id")
    if not hasattr(item, "id"):
        raise TypeError(
            f"a messages channel holds dicts with an 'id' (or attrs, dataclass or pydantic values "
            f"with an id attribute), got {type(item).__name__}"
        )
    return item.id


def _with_fresh_id(item: Any) -> Any:
    """A copy of ``item`` carrying a new id (the caller's value is never changed)."""
    fresh = new_random_id()
    if isinstance(item, Mapping):
        return {**item, "id": fresh}
    if attrs.has(type(item)):
        return attrs.evolve(item, id=fresh)
    import dataclasses  # only for dataclass messages: `import ilmek` does not load it

    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.replace(item, id=fresh)
    model_copy = getattr(item, "model_copy", None)
    if callable(model_copy):  # a pydantic model, such as LangChain's messages
        return model_copy(update={"id": fresh})
    raise TypeError(f"cannot give a {type(item).__name__} a fresh id; set its id before writing it")


def _is_removal(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("remove") is True and set(item) == {"id", "remove"}


_GONE: Final = object()


def _index_key(item_id: Hashable) -> Hashable:
    """What the fold's index keys a message id by: a key no choice of ids can make collide.

    A str hashes with a secret of the process, so a string is its own key. An
    int hashes to itself modulo ``2**61 - 1``: ids forged to share one hash
    (``k * (2**61 - 1)``) would make every insert compare with each id before
    it, so 20,000 of them cost seconds per write. Every id that is not a str
    is keyed by its type and a text form (an int in hex, linear in its
    length), strings whose hashes are salted; ``1``, ``1.0`` and ``True``, which
    are stored as different values, are different ids.
    """
    if type(item_id) is int:
        return ("int", format(item_id, "x"))
    try:
        return (type(item_id).__qualname__, repr(item_id))
    except ValueError:  # a repr Python refuses (a tuple holding a huge int): the id itself
        return (type(item_id).__qualname__, item_id)


def _ids(items: list[Any]) -> set[Hashable]:
    """The index keys of stored messages' ids (each has one: it was given one when written)."""
    try:
        # Dicts with str ids, the common case: the fast way.
        return {item_id if type(item_id := item["id"]) is str else _index_key(item_id) for item in items}
    except (TypeError, KeyError):
        return {_key_of(item) for item in items}


def _key_of(item: Any) -> Hashable:
    item_id = _message_id(item)
    return item_id if type(item_id) is str else _index_key(item_id)


def _fold_messages(current: Any, incoming: Any) -> tuple[list[Any], tuple[Any, ...] | None]:
    """The list after a write, and the items it appended when it only appended (else ``None``).

    An item whose id is new is appended, one whose id is there replaces it in
    place, ``{"id": X, "remove": True}`` removes ``X``; an item without an id
    gets a fresh one, here, so the stored value never changes afterwards. A
    write that only appends costs a set of the ids, not a copy of the items'
    positions: that is only built for a replace or a removal.
    """
    result = [] if current is UNSET else list(current)
    known = _ids(result)
    positions: dict[Hashable, int] | None = None
    appended: list[Any] | None = []
    for item in _list_items(incoming):
        removal = _is_removal(item)
        if not removal and _message_id(item) is None:
            item = _with_fresh_id(item)
        item_id = _message_id(item)
        if not isinstance(item_id, Hashable):
            raise TypeError(f"a message id must be a string (or another hashable value), got {item_id!r}")
        key = item_id if type(item_id) is str else _index_key(item_id)
        if removal or key in known:
            if positions is None:
                positions = {_key_of(old): at for at, old in enumerate(result) if old is not _GONE}
            if key not in positions:
                raise ValueError(f"there is no message with id {item_id!r} to remove")
            appended = None
            if removal:
                result[positions.pop(key)] = _GONE
                known.discard(key)
            else:
                result[positions[key]] = item
            continue
        known.add(key)
        if positions is not None:
            positions[key] = len(result)
        result.append(item)
        if appended is not None:
            appended.append(item)
    if appended is None:
        result = [item for item in result if item is not _GONE]
    return result, None if appended is None else tuple(appended)


@attrs.frozen
class Channel:
    """One slot of state and the reducer that folds writes into it.

    Build channels with :func:`last_write`, :func:`append`, :func:`merge`,
    :func:`reduce` or :func:`messages` rather than directly.
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

    def fold_change(self, current: Any, incoming: Any) -> tuple[Any, tuple[Any, ...] | None]:
        """:meth:`fold`, and the items the write appended when that is all it did.

        ``None`` for the second part means the value changed otherwise (a
        ``messages`` write that replaced or removed an item, any write to a
        channel that is not a list), so it must be stored whole; items mean
        only they need storing, at the end of the list.
        """
        if self.kind == "messages":
            return _fold_messages(current, incoming)
        value = self.fold(current, incoming)
        return value, tuple(_list_items(incoming)) if self.kind == "append" else None

    def fold(self, current: Any, incoming: Any) -> Any:
        """The channel's value after ``incoming`` is written onto ``current``.

        ``current`` is ``UNSET`` for the first write to the channel, whatever
        its default; a ``reduce`` function then receives ``None`` as its
        current value (MODEL §2: "current is absent on the first write").
        Never mutates ``current``.

        Raises:
            TypeError: the write has the wrong shape for the channel (a
                ``merge`` channel given something other than a mapping, a
                ``messages`` channel an item without a place for an id).
            ValueError: a ``messages`` write removes an id the list does not have.
        """
        if self.kind == "last_write":
            return incoming
        if self.kind == "messages":
            return _fold_messages(current, incoming)[0]
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


def messages() -> Channel:
    """A list of messages kept by id: what LangGraph users know as ``add_messages``.

    Items are dicts with an ``"id"`` (or attrs/dataclass values with an ``id``
    attribute). A write of items (a list, or one item) appends those whose id
    is new and replaces in place those whose id is already there; an item
    ``{"id": X, "remove": True}`` (see :func:`remove`) removes ``X``; an item
    without an id (or with ``None``) is stored with a fresh one. Removing an
    id the list does not have is an error. Stored as an :func:`append`
    channel is, one row per new item, so ``read_channel`` pages it in SQL; a
    write that replaces or removes stores the list whole once (the next
    appends are rows again).
    """
    return Channel("messages", [])


def remove(message_id: Any) -> dict[str, Any]:
    """The item that removes message ``message_id`` from a :func:`messages` channel.

    ``{"messages": [ilmek.remove("m1")]}`` is ``{"messages": [{"id": "m1", "remove": True}]}``.
    """
    return {"id": message_id, "remove": True}


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
