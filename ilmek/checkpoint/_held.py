"""How many bytes of memory a decoded value holds, for caches bounded by it.

A cache that counts entries, or guesses a size per item, is bounded in name
only: a list of 100 items of 128 KB each holds 12.8 MB whatever the count
says. :func:`held_bytes` walks the value once and adds up what each object
it reaches occupies (``sys.getsizeof``), following containers, attrs and
slotted instances and ``__dict__``. Shared containers and objects are
counted once per call, shared strings and numbers each time they are met
(erring high, never low). Decoded stored values are trees of plain data, so
the walk is linear in what it counts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["held_bytes", "held_bytes_of_items"]

_LEAVES: Final = (str, bytes, bytearray, int, float, complex, bool, type(None), type)


def held_bytes(value: Any) -> int:
    """The memory ``value`` and everything it references occupy, in bytes."""
    return held_bytes_of_items((value,))


def held_bytes_of_items(items: Iterable[Any]) -> int:
    """The memory the given values occupy together (not the list that holds them)."""
    size = sys.getsizeof
    total = 0
    nested: list[Any] = []
    for item in items:
        # Most list items are text: counted without the walk (a shared one twice, erring high).
        if type(item) is str:
            total += size(item)
        else:
            nested.append(item)
    return total + _walk(nested) if nested else total


def _walk(pending: list[Any]) -> int:
    size = sys.getsizeof
    seen: set[int] = set()
    total = 0
    while pending:
        value = pending.pop()
        if isinstance(value, _LEAVES):
            total += size(value)
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        total += size(value)
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending.extend(value)
        else:
            attributes = getattr(value, "__dict__", None)
            if isinstance(attributes, dict):
                pending.append(attributes)
            for slot in _slots(type(value)):
                found = getattr(value, slot, None)
                if found is not None:
                    pending.append(found)
    return total


_SLOTS: dict[type, tuple[str, ...]] = {}


def _slots(cls: type) -> tuple[str, ...]:
    found = _SLOTS.get(cls)
    if found is not None:
        return found
    names: list[str] = []
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        if isinstance(declared, str):
            declared = (declared,)
        names.extend(name for name in declared if name not in ("__dict__", "__weakref__"))
    _SLOTS[cls] = found = tuple(names)
    return found
