"""Tagged JSON back to Python values: :func:`decode` and :func:`from_jsonable`.

What belongs here: the dispatch on each object's tag, the reviver of each tag
with the checks on its payload, the rebuilding of registered classes, and
finding a stored time zone key again. Nothing here imports a module named by
the data (a zone key is looked up only in the system time zone database, never
in the ``tzdata`` package), and a name read from the data is looked up only in
the registry's dict.
"""

from __future__ import annotations

import collections
import datetime as _dt
import enum
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ilmek.errors import SerializationError

from .placeholders import Damaged, Unregistered, shows_damaged, shows_unregistered
from .registry import _ClassSpec, _specs_by_name
from .tags import _TAG, _ZONE_KEY, _short_repr, _type_name

if TYPE_CHECKING:
    import decimal
    import uuid
    import zoneinfo

_STORED_DATA: Final = "stored data"


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
    try:
        return _revive_tag(obj)
    except SerializationError as error:
        if not shows_damaged():
            raise
        return Damaged(stored=obj, reason=str(error))


def _revive_tag(obj: dict[str, Any]) -> Any:
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


MAX_KEYS_PER_HASH: Final = 16
"""The most distinct keys of one stored set or dict that may share a hash value.

Python finds a key by its hash: keys that all share one hash make every
insert compare with each key before it, so building a set of n of them
takes n² steps (integers are easy to forge: ``hash(k * (2**61 - 1))`` is 0
for every ``k``; 20,000 of them took seconds). Distinct keys sharing a full
hash are vanishingly rare in real data, so a stored set or dict with more
than this many is refused as malformed before it is built, and decoding
stays linear in the size of the stored text whatever the keys.
"""


def _check_hashes(keys: list[Any]) -> None:
    """Refuse keys that would make building their set or dict quadratic (see :data:`MAX_KEYS_PER_HASH`).

    Raises:
        _Malformed: more than :data:`MAX_KEYS_PER_HASH` distinct keys share a hash.
        TypeError: a key is not hashable.
    """
    hashes = [hash(key) for key in keys]
    # Hash values are ints that hash to themselves, all different here: this set is built in linear time.
    if len(set(hashes)) == len(hashes):
        return
    crowded = {value for value, count in collections.Counter(hashes).items() if count > MAX_KEYS_PER_HASH}
    if not crowded:
        return
    # Only keys behind a crowded hash are compared, and a group stops growing at the limit, so this
    # costs at most MAX_KEYS_PER_HASH comparisons per key (equal keys, mere repeats, are found at once).
    groups: dict[int, set[Any]] = {value: set() for value in crowded}
    for key, value in zip(keys, hashes, strict=True):
        group = groups.get(value)
        if group is not None:
            group.add(key)
            if len(group) > MAX_KEYS_PER_HASH:
                raise _Malformed(
                    f"more than {MAX_KEYS_PER_HASH} of its keys share one hash value ({_short_repr(key)} "
                    "among them), which no data ilmek wrote holds: building it would take quadratic time"
                )


def _revive_dict(obj: dict[str, Any]) -> dict[Any, Any]:
    pairs = _expect(obj["v"], list, "'v'")
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2:
            raise _Malformed("each entry of 'v' must be a [key, value] list")
    _check_hashes([pair[0] for pair in pairs])
    return dict(pairs)


def _revive_set(obj: dict[str, Any]) -> set[Any]:
    items = _expect(obj["v"], list, "'v'")
    _check_hashes(items)
    return set(items)


def _revive_frozenset(obj: dict[str, Any]) -> frozenset[Any]:
    items = _expect(obj["v"], list, "'v'")
    _check_hashes(items)
    return frozenset(items)


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


def _registered_spec(obj: dict[str, Any], *, want_enum: bool) -> _ClassSpec | None:
    """The registered class ``obj`` names; None when it is not registered but the caller only
    shows data (see :mod:`ilmek.serde.placeholders`), which then keeps the stored payload."""
    name = _expect(obj["type"], str, "'type'")
    # The registry dict is the only place a stored name is ever looked up.
    spec = _specs_by_name.get(name)
    if spec is None:
        if shows_unregistered():
            return None
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


def _revive_enum(obj: dict[str, Any]) -> enum.Enum | Unregistered:
    spec = _registered_spec(obj, want_enum=True)
    if spec is None:
        return Unregistered(type_name=obj["type"], kind="enum", stored=obj["v"])
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
    if spec is None:
        return Unregistered(type_name=obj["type"], kind="obj", stored=stored)
    if spec.is_pydantic:
        return _revive_pydantic(spec, stored)
    keywords: dict[str, Any] = {}
    late: list[tuple[str, Any]] = []
    for attribute, item in stored.items():
        if attribute not in spec.init_keywords:
            raise _undefined_field(spec, attribute)
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


def _undefined_field(spec: _ClassSpec, attribute: str) -> SerializationError:
    return SerializationError(
        f"{_STORED_DATA}: stored {spec.name} has a field {_short_repr(attribute)} "
        f"that {_type_name(spec.cls)} does not define; add the field back (with a "
        "default) to read this data",
        where=_STORED_DATA,
        type_name=spec.name,
    )


def _revive_pydantic(spec: _ClassSpec, stored: dict[str, Any]) -> Any:
    """A registered pydantic model rebuilt with ``model_validate`` from its stored fields."""
    unknown = next((name for name in stored if name not in spec.init_keywords), None)
    if unknown is not None:
        raise _undefined_field(spec, unknown)
    try:
        return spec.cls.model_validate(stored)
    except Exception as exc:  # the model's validators may raise anything
        raise SerializationError(
            f"{_STORED_DATA}: could not rebuild {spec.name} from its stored fields: "
            f"{type(exc).__name__}: {exc}",
            where=_STORED_DATA,
            type_name=spec.name,
        ) from exc


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
