"""Python values to tagged JSON: :func:`encode`, :func:`to_jsonable` and ``dump_json``.

What belongs here: the walk over containers and registered objects, the
encoder of each type that is not plain JSON, and the hint for a value whose
type cannot be stored.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs

from ilmek.errors import SerializationError

from .placeholders import Unregistered
from .refusals import _MAX_DEPTH, _too_deep_error, _TooDeep, _Unsupported
from .registry import _ClassSpec, _is_dataclass, _is_pydantic_model, _specs_by_type
from .tags import _TAG, _ZONE_KEY, _short_repr, _type_name

if TYPE_CHECKING:
    import decimal
    import uuid

# Integers this large print and parse as decimal only when the interpreter's
# int_max_str_digits limit (4300 by default) allows; hex has no such limit.
_BIG_INT: Final = 10**4000
# From 1e16 on, repr() uses exponent notation, which Postgres numeric prints back
# without a decimal point, so the float would return as an int.
_BIG_FLOAT: Final = 1e16
# A str with NUL or a lone surrogate needs a tag. ASCII strings can hold no
# surrogate, so they skip the regex.
_STR_NEEDS_CARE: Final = re.compile("[\\x00\\ud800-\\udfff]")
_SURROGATE: Final = re.compile("[\\ud800-\\udfff]")
# The characters a stored text cannot hold as they are: NUL and lone surrogates.
_UNSTORABLE_CHAR: Final = re.compile("([\\x00\\ud800-\\udfff])")
# Leaves are walked beforehand, so the C encoder never sees NaN or a cycle.
_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
)


def _compact_json() -> Callable[[Any], str]:
    """``_ENCODER.encode`` without building a new C encoder for every call.

    ``JSONEncoder.encode`` makes its C encoder afresh on each call, about
    half the cost of encoding a small value; values are encoded several
    times a superstep. Where the C accelerator is missing, the plain method.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return _ENCODER.encode
    encode_string = json.encoder.encode_basestring
    chunks = make(None, _ENCODER.default, encode_string, None, ":", ",", False, False, False)

    def encode(value: Any) -> str:
        if type(value) is str:
            return encode_string(value)
        return "".join(chunks(value, 0))

    return encode


dump_json: Final = _compact_json()
"""Compact JSON text (non-ASCII kept, no NaN) of data that is already plain JSON."""
_MISSING: Final = object()


def encode(value: Any, *, where: str = "value") -> str:
    """Turn a value into compact JSON text that :func:`decode` turns back into it.

    Args:
        value: The value to store (see the module docstring for what is supported).
        where: What the value is, for error messages, e.g. ``"channel 'cart'"``.

    Returns:
        JSON text without NaN/Infinity literals or ``\\u0000`` escapes, so that
        Postgres JSONB accepts it.

    Raises:
        SerializationError: Some part of ``value`` cannot be stored; the message
            gives ``where``, the path to that part, its type and what to do.
    """
    jsonable = to_jsonable(value, where=where)
    try:
        return dump_json(jsonable)
    except (ValueError, RecursionError) as exc:
        # Only reachable if the interpreter's int_max_str_digits was lowered or the
        # caller's stack is already nearly exhausted.
        raise SerializationError(
            f"{where}: cannot write the value as JSON ({exc}); store a smaller or less deeply nested value",
            where=where,
            type_name=_type_name(type(value)),
        ) from exc


def to_jsonable(value: Any, *, where: str = "value") -> Any:
    """Return the tagged structure that :func:`encode` would write as JSON.

    Use it to hand values to a driver that serializes JSON itself. Unchanged lists
    and dicts are shared with ``value``, not copied.

    Args:
        value: The value to store.
        where: What the value is, for error messages, e.g. ``"step 'charge#0'"``.

    Returns:
        A structure of dicts with str keys, lists, str, int, float, bool and None.

    Raises:
        SerializationError: Some part of ``value`` cannot be stored; the message
            gives ``where``, the path to that part, its type and what to do.
    """
    try:
        return _walk(value, 0)
    except _TooDeep as exc:
        raise _too_deep_error(value, where, exc) from None
    except _Unsupported as exc:
        raise exc.to_error(where) from None
    except RecursionError:
        raise SerializationError(
            f"{where}: the value is nested too deeply to store; flatten it",
            where=where,
            type_name=_type_name(type(value)),
        ) from None


def _walk(value: Any, depth: int) -> Any:
    value_type = type(value)
    if value_type is str:
        if "\x00" not in value and (value.isascii() or _STR_NEEDS_CARE.search(value) is None):
            return value
        return _encode_str(value)
    if value_type is dict:
        return _walk_dict(value, depth)
    if value_type is list:
        return _walk_list(value, depth)
    if value_type is int:
        if -_BIG_INT < value < _BIG_INT:
            return value
        return {_TAG: "int", "v": format(value, "x")}
    if value_type is float:
        if -_BIG_FLOAT < value < _BIG_FLOAT and (value != 0.0 or math.copysign(1.0, value) > 0):
            return value
        return {_TAG: "float", "v": repr(value)}
    if value is None or value_type is bool:
        return value
    encoder = _ENCODERS.get(value_type)
    if encoder is not None:
        return encoder(value, depth)
    spec = _specs_by_type.get(value_type)
    if spec is not None:
        return _walk_registered(value, spec, depth)
    encoder = _late_encoder(value_type)
    if encoder is not None:
        return encoder(value, depth)
    raise _unsupported(value)


def _walk_list(items: list[Any], depth: int) -> list[Any]:
    if depth >= _MAX_DEPTH:
        raise _TooDeep(_type_name(type(items)), "")
    inner = depth + 1
    changed: list[Any] | None = None
    # Leaves that are already plain JSON are checked inline and skipped: this loop
    # runs for every element of every stored list.
    for index, item in enumerate(items):
        item_type = type(item)
        try:
            if item_type is str:
                if "\x00" not in item and (item.isascii() or _STR_NEEDS_CARE.search(item) is None):
                    continue
                new = _encode_str(item)
            elif item_type is dict:
                new = _walk_dict(item, inner)
            elif item_type is int:
                if -_BIG_INT < item < _BIG_INT:
                    continue
                new = _walk(item, inner)
            elif item is None or item_type is bool:
                continue
            else:
                new = _walk(item, inner)
        except _Unsupported as exc:
            exc.segments.append(f"[{index}]")
            raise
        if new is not item:
            if changed is None:
                changed = items.copy()
            changed[index] = new
    return items if changed is None else changed


def _walk_dict(mapping: dict[Any, Any], depth: int) -> dict[str, Any]:
    if depth >= _MAX_DEPTH:
        raise _TooDeep(_type_name(type(mapping)), "")
    inner = depth + 1
    changed: dict[str, Any] | None = None
    for key, item in mapping.items():
        if not (
            type(key) is str
            and key != _TAG
            and "\x00" not in key
            and (key.isascii() or _STR_NEEDS_CARE.search(key) is None)
        ):
            return _walk_pairs(mapping, inner)
        item_type = type(item)
        try:
            if item_type is str:
                if "\x00" not in item and (item.isascii() or _STR_NEEDS_CARE.search(item) is None):
                    continue
                new = _encode_str(item)
            elif item_type is int:
                if -_BIG_INT < item < _BIG_INT:
                    continue
                new = _walk(item, inner)
            elif item is None or item_type is bool:
                continue
            elif item_type is dict:
                new = _walk_dict(item, inner)
            else:
                new = _walk(item, inner)
        except _Unsupported as exc:
            exc.segments.append(f"[{_short_repr(key)}]")
            raise
        if new is not item:
            if changed is None:
                changed = mapping.copy()
            changed[key] = new
    return mapping if changed is None else changed


def _walk_pairs(mapping: dict[Any, Any], inner: int) -> dict[str, Any]:
    pairs: list[list[Any]] = []
    for index, (key, item) in enumerate(mapping.items()):
        try:
            new_key = _walk(key, inner)
        except _Unsupported as exc:
            exc.segments.append(f"<key {index}>")
            raise
        try:
            new_item = _walk(item, inner)
        except _Unsupported as exc:
            exc.segments.append(f"[{_short_repr(key)}]")
            raise
        pairs.append([new_key, new_item])
    return {_TAG: "dict", "v": pairs}


def _encode_str(value: str) -> dict[str, Any]:
    if _SURROGATE.search(value) is not None:
        # No UTF-8 form: runs of plain text, and each NUL or lone surrogate as
        # its code point number.
        parts: list[Any] = [
            ord(piece) if index % 2 else piece
            for index, piece in enumerate(_UNSTORABLE_CHAR.split(value))
            if piece or index % 2
        ]
        return {_TAG: "ustr", "v": parts}
    return {_TAG: "str", "v": value.split("\x00")}


def _encode_tuple(value: tuple[Any, ...], depth: int) -> dict[str, Any]:
    if depth >= _MAX_DEPTH:
        raise _TooDeep("tuple", "")
    return {_TAG: "tuple", "v": _walk_list(list(value), depth)}


def _encode_set(value: set[Any] | frozenset[Any], depth: int) -> dict[str, Any]:
    tag = "set" if type(value) is set else "frozenset"
    if depth >= _MAX_DEPTH:
        raise _TooDeep(tag, "")
    elements: list[Any] = []
    for index, element in enumerate(value):
        try:
            elements.append(_walk(element, depth + 1))
        except _Unsupported as exc:
            exc.segments.append(f"<element {index}>")
            raise
    elements.sort(key=dump_json)
    return {_TAG: tag, "v": elements}


def _encode_bytes(value: bytes | bytearray, depth: int) -> dict[str, Any]:
    import base64

    tag = "bytes" if type(value) is bytes else "bytearray"
    return {_TAG: tag, "v": base64.b64encode(value).decode("ascii")}


def _encode_clock(value: _dt.datetime | _dt.time, depth: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        _TAG: "datetime" if type(value) is _dt.datetime else "time",
        "v": value.isoformat(),
    }
    zone = value.tzinfo
    zoneinfo = sys.modules.get("zoneinfo")
    if zoneinfo is not None and isinstance(zone, zoneinfo.ZoneInfo):
        key = zone.key
        if type(key) is str and _ZONE_KEY.match(key) is not None:
            result["zone"] = key
    elif type(zone) is _dt.timezone:
        name = zone.tzname(None)
        if name != _dt.timezone(zone.utcoffset(None)).tzname(None):
            result["tzname"] = _walk(name, depth)
    if value.fold:
        result["fold"] = 1
    return result


def _encode_date(value: _dt.date, depth: int) -> dict[str, Any]:
    return {_TAG: "date", "v": value.isoformat()}


def _encode_timedelta(value: _dt.timedelta, depth: int) -> dict[str, Any]:
    return {_TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}


def _encode_decimal(value: decimal.Decimal, depth: int) -> dict[str, Any]:
    return {_TAG: "decimal", "v": str(value)}


def _encode_uuid(value: uuid.UUID, depth: int) -> dict[str, Any]:
    return {_TAG: "uuid", "v": str(value)}


_ENCODERS: Final[dict[type[Any], Callable[[Any, int], Any]]] = {
    tuple: _encode_tuple,
    set: _encode_set,
    frozenset: _encode_set,
    bytes: _encode_bytes,
    bytearray: _encode_bytes,
    _dt.datetime: _encode_clock,
    _dt.time: _encode_clock,
    _dt.date: _encode_date,
    _dt.timedelta: _encode_timedelta,
}

_LATE_ENCODERS: Final[dict[tuple[str, str], Callable[[Any, int], Any]]] = {
    ("decimal", "Decimal"): _encode_decimal,
    ("uuid", "UUID"): _encode_uuid,
}
"""Encoders of types whose modules ilmek does not import, by module and name."""


def _encode_placeholder(value: Unregistered, depth: int) -> dict[str, Any]:
    # Back to the very tag it was read from (see placeholders).
    if value.kind not in ("obj", "enum") or type(value.type_name) is not str:
        raise _unsupported(value)
    payload = _walk(value.stored, depth + 1)
    if value.kind == "obj" and not (isinstance(payload, dict) and _TAG not in payload):
        raise _unsupported(value)
    return {_TAG: value.kind, "type": value.type_name, "v": payload}


_ENCODERS[Unregistered] = _encode_placeholder


def _late_encoder(value_type: type[Any]) -> Callable[[Any, int], Any] | None:
    """The encoder of ``value_type`` if it is one of ``_LATE_ENCODERS``' types.

    Found the first time a value of the type is stored, and then kept in
    ``_ENCODERS``. The class must be the module's own: a class that only
    claims the module and name is not stored as one.
    """
    module_name, name = value_type.__module__, value_type.__qualname__
    encoder = _LATE_ENCODERS.get((module_name, name))
    module = sys.modules.get(module_name)
    if encoder is None or module is None or getattr(module, name, None) is not value_type:
        return None
    _ENCODERS[value_type] = encoder
    return encoder


def _late_builtins() -> tuple[type[Any], ...]:
    """The types of ``_LATE_ENCODERS`` whose modules are imported."""
    found = (getattr(sys.modules.get(module_name), name, None) for module_name, name in _LATE_ENCODERS)
    return tuple(value_type for value_type in found if isinstance(value_type, type))


def _walk_registered(value: Any, spec: _ClassSpec, depth: int) -> dict[str, Any]:
    if depth >= _MAX_DEPTH:
        raise _TooDeep(_type_name(spec.cls), "")
    if spec.is_enum:
        try:
            payload = _walk(value.value, depth + 1)
        except _Unsupported as exc:
            exc.segments.append(".value")
            raise
        return {_TAG: "enum", "type": spec.name, "v": payload}
    if spec.is_pydantic:
        return {_TAG: "obj", "type": spec.name, "v": _walk_pydantic(value, spec, depth)}
    fields: dict[str, Any] = {}
    for attribute in spec.init_keywords:
        # A slotted init=False field without a default may never have been set;
        # leaving it out reproduces that state on decode.
        item = getattr(value, attribute, _MISSING)
        if item is _MISSING:
            continue
        try:
            fields[attribute] = _walk(item, depth + 1)
        except _Unsupported as exc:
            exc.segments.append(f".{attribute}")
            raise
    return {_TAG: "obj", "type": spec.name, "v": fields}


def _walk_pydantic(value: Any, spec: _ClassSpec, depth: int) -> dict[str, Any]:
    """A pydantic model's fields as stored: ``model_dump`` (by alias), each value walked."""
    try:
        dumped = value.model_dump(by_alias=True, round_trip=True)
    except Exception as exc:  # a model's own serializers may raise anything
        raise _Unsupported(
            _type_name(spec.cls), f"{_type_name(spec.cls)}.model_dump() failed: {type(exc).__name__}: {exc}"
        ) from exc
    fields: dict[str, Any] = {}
    for attribute, item in dumped.items():
        try:
            fields[attribute] = _walk(item, depth + 1)
        except _Unsupported as exc:
            exc.segments.append(f".{attribute}")
            raise
    return fields


_SUPPORTED_SUMMARY: Final = (
    "ilmek stores JSON values (dict, list, str, int, float, bool, None), tuple, set, "
    "frozenset, bytes, bytearray, datetime, date, time, timedelta, Decimal, UUID, and "
    "attrs classes, dataclasses, Enums and pydantic models registered with ilmek.serde.register(...)"
)
_EXACT_BUILTINS: Final = (
    dict, list, tuple, set, frozenset, str, bytes, bytearray, int, float,
    _dt.datetime, _dt.date, _dt.time, _dt.timedelta,
)  # fmt: skip


def _unsupported(value: Any) -> _Unsupported:
    value_type = type(value)
    type_name = _type_name(value_type)
    storable_if_registered = (
        isinstance(value, enum.Enum)
        or attrs.has(value_type)
        or _is_dataclass(value)
        or _is_pydantic_model(value_type)
    )
    if storable_if_registered:
        registered_base = next((base for base in value_type.__mro__[1:] if base in _specs_by_type), None)
        if registered_base is not None:
            hint = (
                f"its base class {_type_name(registered_base)} is registered, but each "
                "class must be registered itself so that it comes back as the same type: "
                f"register it with ilmek.serde.register({value_type.__qualname__}) or "
                "store a plain value"
            )
        else:
            hint = (
                f"{type_name} is not registered: register it with "
                f"ilmek.serde.register({value_type.__qualname__}) (or decorate the class "
                "with @ilmek.serde.register) or store a plain value"
            )
    else:
        exact = _EXACT_BUILTINS + _late_builtins()
        base = next((base for base in exact if isinstance(value, base)), None)
        if base is not None:
            hint = (
                f"it is a subclass of {_type_name(base)}, and only exact {_type_name(base)} "
                "values are stored so that they come back as the same type; convert it "
                f"to a plain {_type_name(base)}, or store a plain value of another kind"
            )
        else:
            hint = (
                f"{_SUPPORTED_SUMMARY}. Store a plain value instead, or wrap the data "
                "in an attrs class or dataclass and register it with "
                "ilmek.serde.register(...)"
            )
    return _Unsupported(type_name, f"cannot store a value of type {type_name}: {hint}")
