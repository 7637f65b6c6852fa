"""Why a value cannot be stored.

What belongs here: the exceptions the encoding walk raises on its way up
(each container adds its path segment), the depth limit that stops the walk,
and the error for a value nested too deep, which names the reference cycle
when there is one.
"""

from __future__ import annotations

from typing import Any, Final

from ilmek.errors import SerializationError

from .registry import _specs_by_type
from .tags import _short_repr, _type_name

_MAX_DEPTH: Final = 100


class _Unsupported(Exception):
    """A value the walk cannot store; each container adds its path segment on the way up."""

    def __init__(self, type_name: str, reason: str) -> None:
        super().__init__(reason)
        self.type_name = type_name
        self.reason = reason
        self.segments: list[str] = []

    def to_error(self, where: str) -> SerializationError:
        path = "".join(reversed(self.segments))
        return SerializationError(f"{where}{path}: {self.reason}", where=where, type_name=self.type_name)


class _TooDeep(_Unsupported):
    """The walk went more than _MAX_DEPTH containers deep (maybe a reference cycle)."""


def _too_deep_error(value: Any, where: str, exc: _TooDeep) -> SerializationError:
    cycle = _find_cycle(value, set(), set(), 0)
    if cycle is not None:
        path, container = cycle
        type_name = _type_name(type(container))
        return SerializationError(
            f"{where}{''.join(path)}: the value contains itself (a reference cycle "
            f"through a {type_name}); stored values must be trees, so break the cycle, "
            "e.g. store an id instead of the object, or store a plain value",
            where=where,
            type_name=type_name,
        )
    path_text = "".join(reversed(exc.segments))
    return SerializationError(
        f"{where}{path_text}: the value is nested more than {_MAX_DEPTH} containers deep; "
        "flatten it or store a plain value",
        where=where,
        type_name=exc.type_name,
    )


def _children(value: Any) -> list[tuple[str, Any]] | None:
    value_type = type(value)
    if value_type is list or value_type is tuple:
        return [(f"[{index}]", item) for index, item in enumerate(value)]
    if value_type is dict:
        children: list[tuple[str, Any]] = []
        for index, (key, item) in enumerate(value.items()):
            children.append((f"<key {index}>", key))
            children.append((f"[{_short_repr(key)}]", item))
        return children
    if value_type is set or value_type is frozenset:
        return [(f"<element {index}>", item) for index, item in enumerate(value)]
    spec = _specs_by_type.get(value_type)
    if spec is None:
        return None
    if spec.is_enum:
        return [(".value", value.value)]
    return [(f".{attribute}", getattr(value, attribute, None)) for attribute in spec.init_keywords]


def _find_cycle(
    value: Any, ancestors: set[int], finished: set[int], depth: int
) -> tuple[list[str], Any] | None:
    """Return the path to the first reference back to an enclosing container, if any."""
    children = _children(value)
    if children is None or id(value) in finished or depth > _MAX_DEPTH + 1:
        return None
    ancestors.add(id(value))
    for segment, child in children:
        if id(child) in ancestors:
            return [segment], child
        found = _find_cycle(child, ancestors, finished, depth + 1)
        if found is not None:
            found[0].insert(0, segment)
            return found
    ancestors.discard(id(value))
    # Shared, acyclic sub-values are explored once, not once per reference.
    finished.add(id(value))
    return None
