"""How many bytes of memory a decoded value holds, for caches bounded by it.

A cache that counts entries, or guesses a size per item, is bounded in name
only: a list of 100 items of 128 KB each holds 12.8 MB whatever the count
says. :func:`held_bytes` walks the value once and adds up what each object
it reaches occupies (``sys.getsizeof``), following containers, attrs and
slotted instances and ``__dict__``. Shared objects are counted once per
call. Decoded stored values are trees of plain data, so the walk is linear
in what it counts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["held_bytes", "held_bytes_of_items"]

_LEAVES: Final = (str, bytes, bytearray, int, float, complex, bool, type(None), type)


def held_bytes(value: Any) -> int:
    """The memory ``value`` and everything it references occupy, in bytes (types not counted)."""
    return held_bytes_of_items((value,))


def held_bytes_of_items(items: Iterable[Any]) -> int:
    """The memory the given values occupy together (not the list that holds them)."""
    seen: set[int] = set()
    pending = list(items)
    total = 0
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        total += sys.getsizeof(value)
        if isinstance(value, _LEAVES):
            continue
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
            continue
        if isinstance(value, (list, tuple, set, frozenset)):
            pending.extend(value)
            continue
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            pending.append(attributes)
        for slot in _slots(type(value)):
            found = getattr(value, slot, None)
            if found is not None:
                pending.append(found)
    return total


def _slots(cls: type) -> tuple[str, ...]:
    names: list[str] = []
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        if isinstance(declared, str):
            declared = (declared,)
        names.extend(name for name in declared if name not in ("__dict__", "__weakref__"))
    return tuple(names)
