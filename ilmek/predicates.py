"""Declarative edge guards: conditions on state that a stored graph can carry.

A predicate is a JSON-able dict, never code::

    {"channel": "intent", "eq": "buy"}
    {"channel": "tags", "in": ["a", "b"]}        # the channel's value is one of these
    {"channel": "approved", "exists": True}
    {"all": [p1, p2]}, {"any": [p1, p2]}, {"not": p}

An operator is present when its key is: ``{"channel": "x", "eq": None}``
tests for ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .channel import UNSET
from .errors import GraphError

__all__ = ["COMPARISONS", "Predicate", "check_predicate"]

COMPARISONS = ("eq", "ne", "in", "not_in", "exists", "gt", "ge", "lt", "le")
_COMBINATORS = ("all", "any", "not")
_MISSING = UNSET


def _read(state: Any, channel: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(channel, _MISSING)
    return getattr(state, channel, _MISSING)


def _compare(op: str, value: Any, operand: Any) -> bool:
    if op == "exists":
        return (value is not _MISSING and value is not None) == bool(operand)
    if value is _MISSING:
        return op in ("ne", "not_in")
    if op == "eq":
        return bool(value == operand)
    if op == "ne":
        return bool(value != operand)
    if op == "in":
        return value in operand
    if op == "not_in":
        return value not in operand
    try:
        if op == "gt":
            return bool(value > operand)
        if op == "ge":
            return bool(value >= operand)
        if op == "lt":
            return bool(value < operand)
        return bool(value <= operand)
    except TypeError:
        return False


def check_predicate(spec: Any, path: str, channels: Mapping[str, Any] | None = None) -> None:
    """Validate a predicate's shape.

    Args:
        spec: The predicate.
        path: Where it sits in a larger document, named in errors.
        channels: The declared channels; a predicate on another is refused.

    Raises:
        GraphError: naming ``path`` and what is wrong.
    """
    if not isinstance(spec, Mapping):
        raise GraphError(f"{path}: a predicate is an object, got {type(spec).__name__}")
    combinators = [k for k in _COMBINATORS if k in spec]
    if combinators:
        if len(spec) != 1:
            raise GraphError(f"{path}: {combinators[0]!r} must be the predicate's only key")
        key = combinators[0]
        if key == "not":
            check_predicate(spec["not"], f"{path}.not", channels)
            return
        parts = spec[key]
        if not isinstance(parts, list) or not parts:
            raise GraphError(f"{path}.{key}: expected a non-empty list of predicates")
        for index, part in enumerate(parts):
            check_predicate(part, f"{path}.{key}[{index}]", channels)
        return
    channel = spec.get("channel")
    if not isinstance(channel, str) or not channel:
        raise GraphError(f"{path}.channel: expected a channel name")
    if channels is not None and channel not in channels:
        raise GraphError(f"{path}.channel: channel {channel!r} is not declared")
    ops = [k for k in spec if k != "channel"]
    unknown = [k for k in ops if k not in COMPARISONS]
    if unknown:
        raise GraphError(f"{path}: unknown operator {unknown[0]!r} (known: {', '.join(COMPARISONS)})")
    if len(ops) != 1:
        raise GraphError(f"{path}: a predicate takes exactly one operator, got {len(ops)}")
    op = ops[0]
    if op in ("in", "not_in") and not isinstance(spec[op], list):
        raise GraphError(f"{path}.{op}: expected a list")
    if op == "exists" and not isinstance(spec[op], bool):
        raise GraphError(f"{path}.exists: expected true or false")


class Predicate:
    """A compiled declarative guard, callable as ``predicate(state)``."""

    __slots__ = ("spec",)

    def __init__(self, spec: Mapping[str, Any]) -> None:
        check_predicate(spec, "when")
        self.spec = spec

    def __call__(self, state: Any) -> bool:
        return self._evaluate(self.spec, state)

    def _evaluate(self, spec: Mapping[str, Any], state: Any) -> bool:
        if "all" in spec:
            return all(self._evaluate(part, state) for part in spec["all"])
        if "any" in spec:
            return any(self._evaluate(part, state) for part in spec["any"])
        if "not" in spec:
            return not self._evaluate(spec["not"], state)
        value = _read(state, spec["channel"])
        op = next(k for k in spec if k != "channel")
        return _compare(op, value, spec[op])

    def __repr__(self) -> str:
        return f"Predicate({self.spec!r})"
