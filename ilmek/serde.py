"""The codec every checkpointer uses to store values: Python values to JSON text and back.

What belongs here: the stored format (the tags below), the registry of user classes
that may be stored, and the two walks that apply them. Nothing here does I/O; the
checkpointers decide where the text goes.

Format
------
Plain JSON values are stored as themselves, so stored data stays readable and
queryable (also inside a Postgres JSONB column)::

    encode({"a": [1, "x"]})  ->  '{"a":[1,"x"]}'

Every other value becomes a *tag*: a JSON object whose ``"__ilmek__"`` key names the
kind and whose ``"v"`` key holds the payload, itself encoded by these same rules::

    (1, "a")                 {"__ilmek__":"tuple","v":[1,"a"]}
    {1: "a", None: 2}        {"__ilmek__":"dict","v":[[1,"a"],[null,2]]}
    float("nan")             {"__ilmek__":"float","v":"nan"}
    "a\\x00b"                 {"__ilmek__":"str","v":["a","b"]}
    b"hi"                    {"__ilmek__":"bytes","v":"aGk="}
    Decimal("1.10")          {"__ilmek__":"decimal","v":"1.10"}
    Point(x=1, y=2)          {"__ilmek__":"obj","type":"app.Point","v":{"x":1,"y":2}}
    Color.RED                {"__ilmek__":"enum","type":"app.Color","v":"red"}

The tags and their payloads:

``tuple``
    List of the items.
``dict``
    List of ``[key, value]`` pairs, in order. Used only when some key is not a str,
    contains NUL, or is ``"__ilmek__"`` itself; every other dict is a plain object.
    Hence any JSON object holding a ``"__ilmek__"`` key is a tag, never user data.
``set``, ``frozenset``
    List of the elements, sorted by their encoded text so that equal sets give
    equal text (elements of mixed, unorderable types are fine).
``str``
    A string that contains NUL (which Postgres JSONB rejects, even escaped), as the
    list of its NUL-separated parts.
``float``
    ``repr()`` of the float. Used for NaN and the infinities (not JSON), for
    ``-0.0`` and for magnitudes of at least 1e16: Postgres stores JSON numbers as
    ``numeric``, which drops the sign of zero and prints ``1e+16`` as an integer,
    so those would come back with another sign or as ``int``.
``int``
    Hexadecimal text, for integers of 4000 or more decimal digits (Python refuses
    to print or parse such integers as decimal by default). Smaller integers of
    any size are plain JSON numbers.
``bytes``, ``bytearray``
    Standard base64.
``datetime``, ``date``, ``time``
    ``isoformat()``, which keeps microseconds and the UTC offset. A datetime or
    time whose tzinfo is a ``zoneinfo.ZoneInfo`` also stores ``"zone"`` (its key);
    a ``datetime.timezone`` with a custom name stores ``"tzname"``; ``fold=1`` is
    stored as ``"fold":1``.
``timedelta``
    ``[days, seconds, microseconds]``.
``decimal``
    ``str()`` of the Decimal, which keeps its exponent (``"1.10"`` stays
    ``"1.10"``) and its NaN or infinity.
``uuid``
    The hyphenated hex form.
``obj``
    A registered attrs class or dataclass: ``"type"`` is its registry name and
    ``"v"`` maps attribute names to values.
``enum``
    A registered Enum member: ``"type"`` is its registry name and ``"v"`` its value.

Decisions worth knowing
-----------------------
* Types are matched exactly: a subclass of ``dict``, ``str``, ``int``, ``float``
  (``OrderedDict``, ``numpy.float64``, an unregistered ``StrEnum``...) is refused
  rather than stored as its base type, because it would come back as another type.
  The same holds for a subclass of a registered class: register it too.
* Time zones. A ``ZoneInfo`` comes back as ``ZoneInfo(key)`` (same wall time and
  fold) when this process finds that key in the system time zone database
  (``zoneinfo.TZPATH``); otherwise it comes back as a fixed-offset
  ``datetime.timezone`` with the offset it had when stored. The ``tzdata`` package
  is deliberately not consulted, because looking a key up there imports modules.
  Any other tzinfo (pytz, dateutil, your own) comes back as a fixed-offset
  ``datetime.timezone`` with the stored ``utcoffset()``; a ``time`` whose tzinfo
  gives no offset, and is not a ``ZoneInfo``, comes back naive.
* A registered class is rebuilt by calling it with keyword arguments (attrs
  aliases, so private ``_x`` fields work) for its ``init=True`` fields, then
  setting ``init=False`` fields with ``object.__setattr__``. Fields missing from
  stored data take the class's defaults; a stored field the class no longer has
  is an error rather than silently dropped data.
* Strings containing a lone surrogate (``"\\ud800"``) have no UTF-8 form, so
  they are stored tagged, the surrogates (and any NUL) as code point numbers
  between the plain runs of text, and come back as they were.
* Values nested more than 100 containers deep are refused (as are reference
  cycles, which are reported as such).
* Postgres JSONB does not keep the key order of an object, so a plain dict read
  back from a JSONB column is equal but may iterate in another order (a ``dict``
  tag's pairs keep theirs). Text columns keep the order.
* :func:`to_jsonable` shares unchanged lists and dicts with its input rather than
  copying them; do not mutate its result if you still use the input.

Security
--------
Decoding never imports a module named by the data (the first decimal, UUID,
bytes or zone it reads imports the standard library's ``decimal``, ``uuid``,
``base64`` or ``zoneinfo``), never looks anything up by name except in this
module's registry dict, and never uses pickle, eval or exec. Stored data that
names a type this process has not registered, or carries an unknown tag, raises
:class:`~ilmek.errors.SerializationError`; so does any malformed tag payload.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

import attrs

from ilmek.errors import SerializationError

if TYPE_CHECKING:
    import decimal
    import uuid
    import zoneinfo

# ``import ilmek`` imports none of base64, dataclasses, decimal, uuid and
# zoneinfo (together 8 ms). A value of one of their types exists only once its
# module is imported, so encoding looks for the module in ``sys.modules``
# instead of importing it to ask; decoding such a value imports it then.

__all__ = [
    "decode",
    "encode",
    "from_jsonable",
    "is_registered",
    "register",
    "to_jsonable",
]

_TAG: Final = "__ilmek__"
_STORED_DATA: Final = "stored data"
_MAX_DEPTH: Final = 100
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
_ZONE_KEY: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*\Z")
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

_ClassT = TypeVar("_ClassT", bound=type[Any])


# --------------------------------------------------------------------------- registry


@attrs.frozen
class _ClassSpec:
    """How one registered class is stored and rebuilt."""

    name: str
    cls: type[Any]
    is_enum: bool
    # attribute name -> __init__ keyword, or None for init=False fields
    init_keywords: dict[str, str | None]


_specs_by_type: dict[type[Any], _ClassSpec] = {}
_specs_by_name: dict[str, _ClassSpec] = {}
_registry_lock = threading.Lock()


@overload
def register(cls: _ClassT, /, *, name: str | None = None) -> _ClassT: ...


@overload
def register(cls: None = None, /, *, name: str | None = None) -> Callable[[_ClassT], _ClassT]: ...


def register(cls: Any = None, /, *, name: str | None = None) -> Any:
    """Allow instances of a class to be stored, and rebuilt when read back.

    Usable as ``@register``, ``@register(name="x")`` or ``register(Cls)``.

    Args:
        cls: An attrs class, a dataclass or an ``enum.Enum`` subclass.
        name: The name stored with each instance. Defaults to
            ``f"{cls.__module__}.{cls.__qualname__}"``; pass one to keep stored
            data readable after moving or renaming the class.

    Returns:
        ``cls`` itself, or a decorator that registers and returns its argument
        when ``cls`` is omitted.

    Raises:
        TypeError: ``cls`` is not an attrs class, dataclass or Enum, or ``name``
            is not a non-empty str.
        ValueError: ``name`` already belongs to a different class, or ``cls``
            is already registered under another name.
    """
    if cls is None:

        def decorator(target: _ClassT) -> _ClassT:
            return _register(target, name)

        return decorator
    return _register(cls, name)


def _register(cls: _ClassT, name: str | None) -> _ClassT:
    if not isinstance(cls, type):
        raise TypeError(
            "ilmek.serde.register() takes a class (an attrs class, a dataclass or an "
            f"enum.Enum subclass), not a {_type_name(type(cls))} value"
        )
    if name is None:
        name = f"{cls.__module__}.{cls.__qualname__}"
    elif type(name) is not str or not name:
        raise TypeError(f"ilmek.serde.register(name=...) must be a non-empty str, got {name!r}")
    init_keywords: dict[str, str | None] = {}
    if issubclass(cls, enum.Enum):
        is_enum = True
    elif attrs.has(cls):
        is_enum = False
        for attribute in attrs.fields(cls):
            init_keywords[attribute.name] = attribute.alias if attribute.init else None
    elif _is_dataclass(cls):
        import dataclasses

        is_enum = False
        for field in dataclasses.fields(cls):
            init_keywords[field.name] = field.name if field.init else None
    else:
        raise TypeError(
            f"ilmek.serde.register() accepts attrs classes, dataclasses and enum.Enum "
            f"subclasses; {_type_name(cls)} is none of these. Make it one of them, or "
            "store a plain value (dict, list, str, ...) instead"
        )
    for field_name in init_keywords:
        # The stored field map must stay a plain JSON object that is not a tag.
        if field_name == _TAG or not field_name.isidentifier():
            raise TypeError(
                f"{_type_name(cls)} has a field named {field_name!r}, which ilmek cannot "
                f"store (field names must be identifiers other than {_TAG!r})"
            )
    spec = _ClassSpec(name=name, cls=cls, is_enum=is_enum, init_keywords=init_keywords)
    with _registry_lock:
        holder = _specs_by_name.get(name)
        if holder is not None and holder.cls is not cls:
            raise ValueError(
                f"cannot register {_type_name(cls)} as {name!r}: that name is already "
                f"registered for {_type_name(holder.cls)} (a different class). Pass "
                "another name=... to ilmek.serde.register()"
            )
        previous = _specs_by_type.get(cls)
        if previous is not None and previous.name != name:
            raise ValueError(
                f"cannot register {_type_name(cls)} as {name!r}: it is already registered "
                f"as {previous.name!r}, and a class has exactly one stored name"
            )
        _specs_by_type[cls] = spec
        _specs_by_name[name] = spec
    return cls


def is_registered(cls: Any) -> bool:
    """Tell whether instances of ``cls`` can be stored.

    Args:
        cls: Any object; only classes can be registered.

    Returns:
        True if ``cls`` itself (not merely a base class) was passed to :func:`register`.
    """
    return isinstance(cls, type) and cls in _specs_by_type


def _type_name(cls: type[Any]) -> str:
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", repr(cls))
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


# --------------------------------------------------------------------------- encoding


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


def _is_dataclass(value: Any) -> bool:
    dataclasses = sys.modules.get("dataclasses")
    return dataclasses is not None and bool(dataclasses.is_dataclass(value))


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


_SUPPORTED_SUMMARY: Final = (
    "ilmek stores JSON values (dict, list, str, int, float, bool, None), tuple, set, "
    "frozenset, bytes, bytearray, datetime, date, time, timedelta, Decimal, UUID, and "
    "attrs classes, dataclasses and Enums registered with ilmek.serde.register(...)"
)
_EXACT_BUILTINS: Final = (
    dict, list, tuple, set, frozenset, str, bytes, bytearray, int, float,
    _dt.datetime, _dt.date, _dt.time, _dt.timedelta,
)  # fmt: skip


def _unsupported(value: Any) -> _Unsupported:
    value_type = type(value)
    type_name = _type_name(value_type)
    if isinstance(value, enum.Enum) or attrs.has(value_type) or _is_dataclass(value):
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


def _short_repr(key: Any) -> str:
    try:
        text = repr(key)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{_type_name(type(key))}>"
    return text if len(text) <= 60 else text[:57] + "..."


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


# --------------------------------------------------------------------------- decoding


def decode(text: str | bytes | bytearray | memoryview) -> Any:
    """Turn text written by :func:`encode` back into the value.

    Args:
        text: The stored JSON, as str or as bytes in UTF-8 (or UTF-16/32).

    Returns:
        A value equal to, and of the same types as, the one encoded.

    Raises:
        SerializationError: The text is not JSON, names a type this process has
            not registered, carries an unknown tag or a malformed tag payload.
            ``where`` is ``"stored data"``.
    """
    if type(text) is not str:
        if not isinstance(text, (bytes, bytearray, memoryview)):
            raise SerializationError(
                f"{_STORED_DATA}: decode() takes str or bytes, not {_type_name(type(text))}",
                where=_STORED_DATA,
                type_name=_type_name(type(text)),
            )
        raw = bytes(text)
        try:
            source = raw.decode(json.detect_encoding(raw), "surrogatepass")
        except UnicodeDecodeError as exc:
            raise SerializationError(
                f"{_STORED_DATA}: the stored bytes are not UTF-8 text ({exc})",
                where=_STORED_DATA,
                type_name=None,
            ) from exc
    else:
        source = text
    try:
        # Always through the hook: scanning the text for the tag key first would
        # cost more than the hook's one call per object (and would miss keys
        # spelled with \u escapes).
        return _TAGGED_DECODER.decode(source)
    except RecursionError:
        raise SerializationError(
            f"{_STORED_DATA}: the stored JSON is nested too deeply to read",
            where=_STORED_DATA,
            type_name=None,
        ) from None
    except ValueError as exc:
        raise SerializationError(
            f"{_STORED_DATA}: not valid JSON ({exc})",
            where=_STORED_DATA,
            type_name=None,
        ) from exc


def from_jsonable(obj: Any) -> Any:
    """Rebuild a value from an already-parsed JSON structure (the inverse of :func:`to_jsonable`).

    Use it when a driver has parsed a JSONB column into Python objects. Lists and
    dicts that hold no tag are returned as they are, not copied.

    Args:
        obj: Parsed JSON: dicts with str keys, lists, str, int, float, bool, None.

    Returns:
        The value that was stored.

    Raises:
        SerializationError: ``obj`` names a type this process has not registered,
            carries an unknown tag or a malformed tag payload. ``where`` is
            ``"stored data"``.
    """
    try:
        return _revive(obj)
    except RecursionError:
        raise SerializationError(
            f"{_STORED_DATA}: the stored JSON is nested too deeply to read",
            where=_STORED_DATA,
            type_name=None,
        ) from None


def _revive(value: Any) -> Any:
    value_type = type(value)
    if value_type is dict:
        changed: dict[str, Any] | None = None
        for key, item in value.items():
            item_type = type(item)
            if item_type is dict or item_type is list:
                new = _revive(item)
                if new is not item:
                    if changed is None:
                        changed = value.copy()
                    changed[key] = new
        result = value if changed is None else changed
        return _revive_tagged(result) if _TAG in result else result
    if value_type is list:
        changed_list: list[Any] | None = None
        for index, item in enumerate(value):
            item_type = type(item)
            if item_type is dict or item_type is list:
                new = _revive(item)
                if new is not item:
                    if changed_list is None:
                        changed_list = value.copy()
                    changed_list[index] = new
        return value if changed_list is None else changed_list
    return value


def _object_hook(obj: dict[str, Any]) -> Any:
    # json calls this innermost object first, so payloads arrive already decoded.
    if _TAG in obj:
        return _revive_tagged(obj)
    return obj


_TAGGED_DECODER: Final = json.JSONDecoder(object_hook=_object_hook)


class _Malformed(Exception):
    """A tag payload has the wrong shape; turned into SerializationError by _revive_tagged."""


def _revive_tagged(obj: dict[str, Any]) -> Any:
    tag = obj[_TAG]
    entry = _REVIVERS.get(tag) if type(tag) is str else None
    if entry is None:
        shown = _short_repr(tag)
        raise SerializationError(
            f"{_STORED_DATA}: unknown tag {shown} (type {shown} is not registered in this "
            "process); was it written by a newer ilmek?",
            where=_STORED_DATA,
            type_name=tag if type(tag) is str else _type_name(type(tag)),
        )
    reviver, allowed_keys, type_name = entry
    if allowed_keys is _TYPED_KEYS and type(obj.get("type")) is str:
        type_name = obj["type"]
    if not obj.keys() <= allowed_keys or "v" not in obj:
        raise SerializationError(
            f"{_STORED_DATA}: malformed {tag!r} tag: expected keys "
            f"{sorted(allowed_keys)}, found {sorted(obj.keys())}",
            where=_STORED_DATA,
            type_name=type_name,
        )
    try:
        return reviver(obj)
    except SerializationError:
        raise
    except (
        _Malformed,
        TypeError,
        ValueError,
        LookupError,
        ArithmeticError,
        AttributeError,
    ) as exc:
        raise SerializationError(
            f"{_STORED_DATA}: malformed {tag!r} tag payload for {type_name}: {exc}",
            where=_STORED_DATA,
            type_name=type_name,
        ) from exc


def _expect(value: Any, expected: type[Any], what: str) -> Any:
    if type(value) is not expected:
        raise _Malformed(f"{what} must be a {expected.__name__}, got {_type_name(type(value))}")
    return value


def _revive_tuple(obj: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(_expect(obj["v"], list, "'v'"))


def _revive_dict(obj: dict[str, Any]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for pair in _expect(obj["v"], list, "'v'"):
        if type(pair) is not list or len(pair) != 2:
            raise _Malformed("each entry of 'v' must be a [key, value] list")
        result[pair[0]] = pair[1]
    return result


def _revive_set(obj: dict[str, Any]) -> set[Any]:
    return set(_expect(obj["v"], list, "'v'"))


def _revive_frozenset(obj: dict[str, Any]) -> frozenset[Any]:
    return frozenset(_expect(obj["v"], list, "'v'"))


def _revive_str(obj: dict[str, Any]) -> str:
    parts = _expect(obj["v"], list, "'v'")
    for part in parts:
        _expect(part, str, "each part")
    return "\x00".join(parts)


def _revive_unpaired(obj: dict[str, Any]) -> str:
    pieces = []
    for part in _expect(obj["v"], list, "'v'"):
        if type(part) is int:
            if not (part == 0 or 0xD800 <= part <= 0xDFFF):
                raise _Malformed(f"{part} is not a NUL or a lone surrogate")
            pieces.append(chr(part))
        else:
            pieces.append(_expect(part, str, "each part"))
    return "".join(pieces)


def _revive_float(obj: dict[str, Any]) -> float:
    return float(_expect(obj["v"], str, "'v'"))


def _revive_int(obj: dict[str, Any]) -> int:
    return int(_expect(obj["v"], str, "'v'"), 16)


def _revive_bytes(obj: dict[str, Any]) -> bytes:
    import base64

    return base64.b64decode(_expect(obj["v"], str, "'v'"), validate=True)


def _revive_bytearray(obj: dict[str, Any]) -> bytearray:
    return bytearray(_revive_bytes(obj))


def _revive_datetime(obj: dict[str, Any]) -> _dt.datetime:
    value = _dt.datetime.fromisoformat(_expect(obj["v"], str, "'v'"))
    return _apply_zone(value, obj)


def _revive_time(obj: dict[str, Any]) -> _dt.time:
    value = _dt.time.fromisoformat(_expect(obj["v"], str, "'v'"))
    return _apply_zone(value, obj)


_ClockT = TypeVar("_ClockT", _dt.datetime, _dt.time)


def _apply_zone(value: _ClockT, obj: dict[str, Any]) -> _ClockT:
    key = obj.get("zone")
    if key is not None:
        zone = _load_zone(_expect(key, str, "'zone'"))
        if zone is not None:
            # Keep the wall time, as ZoneInfo semantics (and pickle) do.
            value = value.replace(tzinfo=zone)
    name = obj.get("tzname")
    if name is not None:
        _expect(name, str, "'tzname'")
        offset = value.tzinfo.utcoffset(None) if type(value.tzinfo) is _dt.timezone else None
        if offset is None:
            raise _Malformed("'tzname' needs a fixed UTC offset in 'v'")
        value = value.replace(tzinfo=_dt.timezone(offset, name))
    fold = obj.get("fold")
    if fold is not None:
        if type(fold) is not int or fold not in (0, 1):
            raise _Malformed("'fold' must be 0 or 1")
        value = value.replace(fold=fold)
    return value


_zones: dict[str, zoneinfo.ZoneInfo] = {}


def _load_zone(key: str) -> zoneinfo.ZoneInfo | None:
    """Return ZoneInfo(key) if the system time zone database has it, else None."""
    zone = _zones.get(key)
    if zone is not None:
        return zone
    if len(key) > 128 or _ZONE_KEY.match(key) is None:
        return None
    import zoneinfo

    # ZoneInfo falls back to the tzdata package, which means importing modules named
    # after the key; checking the files first keeps decoding import-free.
    if not any(os.path.isfile(os.path.join(directory, key)) for directory in zoneinfo.TZPATH):
        return None
    try:
        zone = zoneinfo.ZoneInfo(key)
    except (ValueError, OSError, LookupError):  # LookupError: ZoneInfoNotFoundError
        return None
    _zones[key] = zone
    return zone


def _revive_date(obj: dict[str, Any]) -> _dt.date:
    return _dt.date.fromisoformat(_expect(obj["v"], str, "'v'"))


def _revive_timedelta(obj: dict[str, Any]) -> _dt.timedelta:
    parts = _expect(obj["v"], list, "'v'")
    if len(parts) != 3 or any(type(part) is not int for part in parts):
        raise _Malformed("'v' must be [days, seconds, microseconds] integers")
    return _dt.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])


def _revive_decimal(obj: dict[str, Any]) -> decimal.Decimal:
    import decimal

    # An explicit context so that a caller's context without the InvalidOperation
    # trap cannot turn garbage into NaN.
    strict = decimal.Context(traps=[decimal.InvalidOperation])
    return decimal.Decimal(_expect(obj["v"], str, "'v'"), strict)


def _revive_uuid(obj: dict[str, Any]) -> uuid.UUID:
    import uuid

    return uuid.UUID(_expect(obj["v"], str, "'v'"))


def _registered_spec(obj: dict[str, Any], *, want_enum: bool) -> _ClassSpec:
    name = _expect(obj["type"], str, "'type'")
    # The registry dict is the only place a stored name is ever looked up.
    spec = _specs_by_name.get(name)
    if spec is None:
        raise SerializationError(
            f"{_STORED_DATA}: type {_short_repr(name)} is not registered in this process; "
            "import the module that defines it and register the class with "
            "ilmek.serde.register(...) under that name before reading",
            where=_STORED_DATA,
            type_name=name,
        )
    if spec.is_enum != want_enum:
        raise SerializationError(
            f"{_STORED_DATA}: {name!r} is stored as {'an enum' if want_enum else 'an object'} "
            f"but is registered for {_type_name(spec.cls)}, which is not "
            f"{'an Enum' if want_enum else 'an attrs class or dataclass'}",
            where=_STORED_DATA,
            type_name=name,
        )
    return spec


def _revive_enum(obj: dict[str, Any]) -> enum.Enum:
    spec = _registered_spec(obj, want_enum=True)
    try:
        member: enum.Enum = spec.cls(obj["v"])
    except ValueError as exc:
        raise SerializationError(
            f"{_STORED_DATA}: {spec.name} has no member with the stored value {_short_repr(obj['v'])}",
            where=_STORED_DATA,
            type_name=spec.name,
        ) from exc
    return member


def _revive_object(obj: dict[str, Any]) -> Any:
    spec = _registered_spec(obj, want_enum=False)
    stored = _expect(obj["v"], dict, "'v'")
    keywords: dict[str, Any] = {}
    late: list[tuple[str, Any]] = []
    for attribute, item in stored.items():
        if attribute not in spec.init_keywords:
            raise SerializationError(
                f"{_STORED_DATA}: stored {spec.name} has a field {_short_repr(attribute)} "
                f"that {_type_name(spec.cls)} does not define; add the field back (with a "
                "default) to read this data",
                where=_STORED_DATA,
                type_name=spec.name,
            )
        keyword = spec.init_keywords[attribute]
        if keyword is None:
            late.append((attribute, item))
        else:
            keywords[keyword] = item
    try:
        instance = spec.cls(**keywords)
        for attribute, item in late:
            # init=False fields; object.__setattr__ also works on frozen classes.
            object.__setattr__(instance, attribute, item)
    except Exception as exc:  # validators and __post_init__ may raise anything
        raise SerializationError(
            f"{_STORED_DATA}: could not rebuild {spec.name} from its stored fields: "
            f"{type(exc).__name__}: {exc}",
            where=_STORED_DATA,
            type_name=spec.name,
        ) from exc
    return instance


_PLAIN_KEYS: Final = frozenset({_TAG, "v"})
_TYPED_KEYS: Final = frozenset({_TAG, "type", "v"})
_CLOCK_KEYS: Final = frozenset({_TAG, "v", "zone", "tzname", "fold"})

# tag -> (reviver, keys its object may have, type name for error messages)
_REVIVERS: Final[dict[str, tuple[Callable[[dict[str, Any]], Any], frozenset[str], str]]] = {
    "tuple": (_revive_tuple, _PLAIN_KEYS, "tuple"),
    "dict": (_revive_dict, _PLAIN_KEYS, "dict"),
    "set": (_revive_set, _PLAIN_KEYS, "set"),
    "frozenset": (_revive_frozenset, _PLAIN_KEYS, "frozenset"),
    "str": (_revive_str, _PLAIN_KEYS, "str"),
    "ustr": (_revive_unpaired, _PLAIN_KEYS, "str"),
    "float": (_revive_float, _PLAIN_KEYS, "float"),
    "int": (_revive_int, _PLAIN_KEYS, "int"),
    "bytes": (_revive_bytes, _PLAIN_KEYS, "bytes"),
    "bytearray": (_revive_bytearray, _PLAIN_KEYS, "bytearray"),
    "datetime": (_revive_datetime, _CLOCK_KEYS, "datetime.datetime"),
    "date": (_revive_date, _PLAIN_KEYS, "datetime.date"),
    "time": (_revive_time, _CLOCK_KEYS, "datetime.time"),
    "timedelta": (_revive_timedelta, _PLAIN_KEYS, "datetime.timedelta"),
    "decimal": (_revive_decimal, _PLAIN_KEYS, "decimal.Decimal"),
    "uuid": (_revive_uuid, _PLAIN_KEYS, "uuid.UUID"),
    "obj": (_revive_object, _TYPED_KEYS, "registered object"),
    "enum": (_revive_enum, _TYPED_KEYS, "registered enum"),
}
