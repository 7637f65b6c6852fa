"""Declarative edge guards: conditions on state that a stored graph can carry.

A predicate is a JSON-able dict, never code. The reference's operators (MODEL
§9), which a graph written by the TypeScript or .NET builder uses::

    {"channel": "intent", "eq": "buy"}          # equal (JSON equality, below)
    {"channel": "intent", "neq": "buy"}         # not equal
    {"channel": "tier", "in": ["gold", "vip"]}  # the value is one of these
    {"channel": "score", "gt": 10}              # a number greater than 10
    {"channel": "score", "lt": 10}              # a number less than 10
    {"channel": "cart", "truthy": True}         # non-empty (see below)

Python extensions, which the reference cannot load::

    {"channel": "tier", "not_in": ["banned"]}
    {"channel": "score", "ge": 10}, {"channel": "score", "le": 10}
    {"channel": "approved", "exists": True}     # written and not None
    {"all": [p1, p2]}, {"any": [p1, p2]}, {"not": p}

``ne`` is accepted as an alias of ``neq``; a predicate is kept in canonical
form, so ``{"channel": "x", "ne": 1}`` is stored, drawn and exported as
``{"channel": "x", "neq": 1}``.

An operator is present when its key is: ``{"channel": "x", "eq": None}``
tests for ``None``. A predicate has exactly one operator.

Comparisons follow JSON, so one document routes the same way in every
implementation: a boolean is never a number (``{"eq": 1}`` does not match
``True``, ``{"gt": 0}`` does not match ``True``), ``1`` equals ``1.0``, a
string never equals a number, and lists and dicts compare item by item with
the same rule. ``gt``, ``lt``, ``ge`` and ``le`` take a number and match only
a number. ``truthy`` is false for ``None``, ``False``, ``0``, NaN, ``""`` and
an empty list or dict, true otherwise. A channel that holds no value (never
written, no default) matches ``neq``, ``not_in``, ``truthy: false`` and
``exists: false``, and nothing else.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from .channel import UNSET
from .errors import GraphError

__all__ = [
    "ALIASES",
    "COMPARISONS",
    "EXTENSIONS",
    "OPERATORS",
    "Predicate",
    "check_predicate",
    "describe",
    "json_equal",
    "truthy",
]

OPERATORS = ("eq", "neq", "in", "gt", "lt", "truthy")
"""The reference's operators (MODEL §9)."""
EXTENSIONS = ("not_in", "ge", "le", "exists")
"""Operators only ilmek for Python understands."""
ALIASES = {"ne": "neq"}
"""Accepted spellings and the operator each stands for."""
COMPARISONS = OPERATORS + EXTENSIONS + tuple(ALIASES)
"""Every operator key a predicate may use."""
_COMBINATORS = ("all", "any", "not")
_MISSING = UNSET
_ORDERINGS = ("gt", "lt", "ge", "le")


def _read(state: Any, channel: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(channel, _MISSING)
    return getattr(state, channel, _MISSING)


def _is_number(value: Any) -> bool:
    # bool is an int in Python but never a number in JSON. A Decimal exists only
    # once its module is imported, so ilmek does not import it to ask.
    if isinstance(value, (int, float)):
        return not isinstance(value, bool)
    decimal = sys.modules.get("decimal")
    return decimal is not None and isinstance(value, decimal.Decimal)


def _is_array(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def json_equal(left: Any, right: Any) -> bool:
    """Whether two values are equal as JSON values are.

    A boolean equals only a boolean, a number only a number (``1 == 1.0``),
    a string only a string, ``None`` only ``None``; lists (or tuples) and
    dicts are equal when their items are, by the same rule. Other Python
    values compare with ``==``.
    """
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) or _is_number(right):
        return _is_number(left) and _is_number(right) and bool(left == right)
    if isinstance(left, str) or isinstance(right, str):
        return isinstance(left, str) and isinstance(right, str) and left == right
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, Mapping) or isinstance(right, Mapping):
        if not (isinstance(left, Mapping) and isinstance(right, Mapping)) or left.keys() != right.keys():
            return False
        return all(json_equal(left[key], right[key]) for key in left)
    if _is_array(left) or _is_array(right):
        if not (_is_array(left) and _is_array(right)) or len(left) != len(right):
            return False
        return all(json_equal(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


def truthy(value: Any) -> bool:
    """The reference's notion of a value worth acting on.

    False for a missing value, ``None``, ``False``, zero, NaN and anything
    empty (``""``, ``[]``, ``{}``); true for everything else.
    """
    if value is _MISSING or value is None:
        return False
    if isinstance(value, bool):
        return value
    if _is_number(value):
        return bool(value != 0 and value == value)  # NaN is the one value unequal to itself
    if hasattr(value, "__len__"):
        return len(value) > 0
    return True


def _compare(op: str, value: Any, operand: Any) -> bool:
    if op == "truthy":
        return truthy(value) is operand
    if op == "exists":
        return (value is not _MISSING and value is not None) is operand
    if value is _MISSING:
        return op in ("neq", "not_in")
    if op == "eq":
        return json_equal(value, operand)
    if op == "neq":
        return not json_equal(value, operand)
    if op == "in":
        return any(json_equal(value, item) for item in operand)
    if op == "not_in":
        return not any(json_equal(value, item) for item in operand)
    if not _is_number(value):
        return False
    if op == "gt":
        return bool(value > operand)
    if op == "lt":
        return bool(value < operand)
    if op == "ge":
        return bool(value >= operand)
    return bool(value <= operand)


def _operator(spec: Mapping[str, Any]) -> str:
    return next(k for k in spec if k != "channel")


def check_predicate(spec: Any, path: str, channels: Mapping[str, Any] | None = None) -> None:
    """Validate a predicate's shape.

    Args:
        spec: The predicate.
        path: Where it sits in a larger document, named in errors.
        channels: The declared channels; a predicate on another is refused.

    Raises:
        GraphError: naming ``path`` and what is wrong: not an object, no
            channel, an undeclared channel, an unknown operator, not exactly
            one operator, or an operand of the wrong kind (``in`` and
            ``not_in`` take a list, ``gt``/``lt``/``ge``/``le`` a number,
            ``truthy`` and ``exists`` a boolean).
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
        raise GraphError(
            f'{path}.channel: expected a channel name, e.g. {{"channel": "intent", "eq": "buy"}}'
        )
    if channels is not None and channel not in channels:
        raise GraphError(f"{path}.channel: channel {channel!r} is not declared")
    ops = [k for k in spec if k != "channel"]
    unknown = [k for k in ops if k not in COMPARISONS]
    if unknown:
        raise GraphError(
            f"{path}: unknown operator {unknown[0]!r} (known: {', '.join(OPERATORS)}; "
            f"Python extensions: {', '.join(EXTENSIONS)}, {', '.join(_COMBINATORS)}; "
            f"aliases: {', '.join(ALIASES)})"
        )
    if len(ops) != 1:
        raise GraphError(f"{path}: a predicate takes exactly one operator, got {len(ops)}")
    op = ops[0]
    operand = spec[op]
    if op in ("in", "not_in") and not isinstance(operand, list):
        raise GraphError(f"{path}.{op}: expected a list")
    if op in _ORDERINGS and (
        not isinstance(operand, (int, float)) or isinstance(operand, bool) or not math.isfinite(operand)
    ):
        raise GraphError(f"{path}.{op}: expected a number, got {operand!r}")
    if op in ("truthy", "exists") and not isinstance(operand, bool):
        raise GraphError(f"{path}.{op}: expected true or false")


def _canonical(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy with aliases spelled as the operators they stand for."""
    if "not" in spec:
        return {"not": _canonical(spec["not"])}
    for key in ("all", "any"):
        if key in spec:
            return {key: [_canonical(part) for part in spec[key]]}
    return {ALIASES.get(key, key): copy.deepcopy(value) for key, value in spec.items()}


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)


_SYMBOLS = {"eq": "==", "neq": "!=", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}


def describe(spec: Mapping[str, Any]) -> str:
    """A predicate as a reader would write it, e.g. ``intent == "buy"``.

    ``spec`` must be a valid predicate in canonical form (as
    :attr:`Predicate.spec` is).
    """
    if "not" in spec:
        return f"not ({describe(spec['not'])})"
    for key, joiner in (("all", " and "), ("any", " or ")):
        if key in spec:
            parts = spec[key]
            if len(parts) == 1:
                return describe(parts[0])
            return joiner.join(f"({describe(part)})" for part in parts)
    channel = spec["channel"]
    op = _operator(spec)
    operand = spec[op]
    if op in _SYMBOLS:
        return f"{channel} {_SYMBOLS[op]} {_value(operand)}"
    if op in ("in", "not_in"):
        items = ", ".join(_value(item) for item in operand)
        return f"{channel} {'in' if op == 'in' else 'not in'} [{items}]"
    return f"{op}({channel})" if operand else f"not {op}({channel})"


class Predicate:
    """A compiled declarative guard, callable as ``predicate(state)``.

    Attributes:
        spec: The predicate in canonical form (aliases replaced).
    """

    __slots__ = ("spec",)

    def __init__(self, spec: Mapping[str, Any]) -> None:
        check_predicate(spec, "when")
        self.spec: Mapping[str, Any] = _canonical(spec)

    def __call__(self, state: Any) -> bool:
        return self._evaluate(self.spec, state)

    def _evaluate(self, spec: Mapping[str, Any], state: Any) -> bool:
        if "all" in spec:
            return all(self._evaluate(part, state) for part in spec["all"])
        if "any" in spec:
            return any(self._evaluate(part, state) for part in spec["any"])
        if "not" in spec:
            return not self._evaluate(spec["not"], state)
        op = _operator(spec)
        return _compare(op, _read(state, spec["channel"]), spec[op])

    def __repr__(self) -> str:
        return f"Predicate({self.spec!r})"
