"""Tests for ilmek.serde: round trips, the stored format, failures and forged data."""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import importlib.util
import inspect
import json
import math
import re
import socket
import subprocess
import sys
import uuid
import zoneinfo
from collections import OrderedDict
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ilmek import serde
from ilmek.errors import SerializationError

STORED = "stored data"
UTC = dt.UTC
ISTANBUL = zoneinfo.ZoneInfo("Europe/Istanbul")
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


# --------------------------------------------------------------------------- classes


@serde.register
@attrs.frozen
class Point:
    """Frozen, slotted attrs class."""

    x: int
    y: int


@serde.register
@attrs.define
class Item:
    """Mutable, slotted attrs class with a validator and a tuple field."""

    sku: str
    qty: int = attrs.field(validator=attrs.validators.ge(0))
    tags: tuple[str, ...] = ()


@serde.register(name="tests.serde.Order")
@attrs.define(slots=False)
class Order:
    """Unslotted attrs class with nested registered values, a private field and init=False."""

    items: list[Item]
    when: dt.datetime
    _secret: str = attrs.field(alias="secret", default="")
    origin: Point | None = None
    revision: int = attrs.field(init=False, default=0)


@serde.register
@attrs.frozen
class Token:
    """Frozen attrs class whose only field is private (init alias ``token``)."""

    _token: str


@serde.register
@dataclasses.dataclass(frozen=True)
class Money:
    """Frozen dataclass with an init=False field computed in __post_init__."""

    amount: Decimal
    currency: str = "EUR"
    doubled: Decimal = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "doubled", self.amount * 2)


@serde.register
@dataclasses.dataclass
class Basket:
    """Mutable dataclass holding registered values."""

    owner: str
    prices: dict[str, Money] = dataclasses.field(default_factory=dict)


@serde.register
class Color(enum.Enum):
    """Enum whose values are a str and a tuple."""

    RED = "red"
    CUSTOM = (0, 0, 255)


@serde.register
class Level(enum.IntEnum):
    """IntEnum, an int subclass that must come back as itself."""

    LOW = 1
    HIGH = 2


@serde.register
@attrs.define
class Node:
    """Mutable attrs class that can be made to contain itself."""

    name: str
    children: list[Node] = attrs.Factory(list)


class Unregistered:
    """A plain class nobody registered."""


@attrs.define
class UnregisteredAttrs:
    """An attrs class nobody registered."""

    value: int = 0


class SpecialPoint(Point):
    """Subclass of a registered class, not registered itself."""


class Shade(enum.Enum):
    """An Enum nobody registered."""

    DARK = "dark"


class TagKeyedDict(dict[str, Any]):
    """A dict subclass, which must be refused rather than stored as a dict."""


# --------------------------------------------------------------------------- helpers


def assert_identical(expected: Any, actual: Any, path: str = "value") -> None:
    """Assert ``actual`` equals ``expected`` and every nested value has the same type."""
    assert type(expected) is type(actual), f"{path}: {type(expected)} != {type(actual)}"
    kind = type(expected)
    if kind is float:
        assert repr(expected) == repr(actual), path
    elif kind is Decimal:
        assert str(expected) == str(actual), path
    elif kind is list or kind is tuple:
        assert len(expected) == len(actual), path
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            assert_identical(want, got, f"{path}[{index}]")
    elif kind is dict:
        assert len(expected) == len(actual), path
        for (want_key, want), (got_key, got) in zip(expected.items(), actual.items(), strict=True):
            assert_identical(want_key, got_key, f"{path}<key {want_key!r}>")
            assert_identical(want, got, f"{path}[{want_key!r}]")
    elif kind is set or kind is frozenset:
        assert expected == actual, path
        by_element = {element: element for element in actual}
        for element in expected:
            assert_identical(element, by_element[element], f"{path}<element>")
    elif kind is dt.datetime or kind is dt.time:
        assert expected.replace(tzinfo=None) == actual.replace(tzinfo=None), path
        assert expected.fold == actual.fold, path
        assert type(expected.tzinfo) is type(actual.tzinfo), path
        if isinstance(expected.tzinfo, zoneinfo.ZoneInfo):
            assert expected.tzinfo is actual.tzinfo, path
        elif expected.tzinfo is not None:
            assert expected.utcoffset() == actual.utcoffset(), path
            assert expected.tzname() == actual.tzname(), path
    elif isinstance(expected, enum.Enum):
        assert expected is actual, path
    elif attrs.has(kind):
        for field in attrs.fields(kind):
            assert_identical(
                getattr(expected, field.name), getattr(actual, field.name), f"{path}.{field.name}"
            )
    elif dataclasses.is_dataclass(expected):
        for data_field in dataclasses.fields(expected):
            name = data_field.name
            assert_identical(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    else:
        assert expected == actual, path


def _refuse_constant(literal: str) -> Any:
    raise AssertionError(f"non-JSON constant {literal} in encoded text")


def assert_jsonb_safe(text: str) -> None:
    """Assert that Postgres JSONB would accept ``text`` and give back the same numbers."""
    assert "\\u0000" not in text
    text.encode("utf-8")  # lone surrogates would fail here

    def check_float(literal: str) -> float:
        # Postgres numeric prints 1e+16 as an integer and drops the sign of zero.
        assert "e+" not in literal.lower(), literal
        assert not (literal.startswith("-") and float(literal) == 0.0), literal
        return float(literal)

    json.loads(text, parse_constant=_refuse_constant, parse_float=check_float)


def round_trip(value: Any) -> Any:
    """Encode then decode, checking the text is JSONB-safe on the way."""
    text = serde.encode(value)
    assert_jsonb_safe(text)
    return serde.decode(text)


def only_json_types(value: Any) -> bool:
    """Tell whether ``value`` is made only of the types a JSON parser produces."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(only_json_types(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and only_json_types(item) for key, item in value.items())
    return False


def forged(tag: str, payload: Any, **extra: Any) -> str:
    """Stored text for one tag, built by hand."""
    return json.dumps({"__ilmek__": tag, "v": payload, **extra})


@contextlib.contextmanager
def recording_imports() -> Iterator[list[str]]:
    """Record every import statement executed inside the with block."""
    recorded: list[str] = []
    real_import = builtins.__import__

    def tracking_import(name: str, *args: Any, **kwargs: Any) -> Any:
        recorded.append(name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = tracking_import
    try:
        yield recorded
    finally:
        builtins.__import__ = real_import


# --------------------------------------------------------------------------- round trips


def _sample_order() -> Order:
    order = Order(
        items=[Item("sku-1", 2, ("a", "b")), Item("sku\x002", 0)],
        when=dt.datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=ISTANBUL),
        secret="s3cr3t",
        origin=Point(1, -2),
    )
    order.revision = 7
    return order


ROUND_TRIP_CASES: dict[str, Any] = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "negative int": -17,
    "int beyond 64 bits": 2**64 + 1,
    "negative int beyond 64 bits": -(2**200),
    "int of 5000 digits": 10**5000 + 3,
    "negative int of 5000 digits": -(10**5000),
    "float": 1.5,
    "float small": 5e-324,
    "float 1e16": 1e16,
    "float max": sys.float_info.max,
    "negative zero": -0.0,
    "positive infinity": math.inf,
    "negative infinity": -math.inf,
    "empty str": "",
    "unicode str": "çay ⚙ 🧵 日本",
    "str with NUL": "a\x00b",
    "str of NULs": "\x00\x00",
    "str that looks like a tag": '{"__ilmek__":"obj"}',
    "empty list": [],
    "empty dict": {},
    "nested plain": {"a": [1, "x", {"b": None, "c": [True, 2.5]}]},
    "tuple": (1, "a", None),
    "empty tuple": (),
    "nested tuples": ((1, (2, (3,))), ()),
    "list of tuples": [(1, 2), (3, 4)],
    "tuple of lists": ([1], [2, [3]]),
    "dict with int keys": {1: "a", -2: "b"},
    "dict with mixed keys": {None: 1, True: 2, 1.5: 3, "s": 4, (1, "t"): 5},
    "dict with datetime key": {dt.datetime(2024, 1, 1): "new year"},
    "dict with tag key": {"__ilmek__": "obj", "v": 1, "type": "os.system"},
    "nested dict with tag key": {"outer": {"__ilmek__": ["x"]}},
    "dict with NUL key": {"a\x00b": 1, "plain": 2},
    "bytes": b"\x00\xffbinary",
    "empty bytes": b"",
    "bytearray": bytearray(b"\x01\x02"),
    "naive datetime": dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
    "naive datetime with fold": dt.datetime(2024, 11, 3, 1, 30, fold=1),
    "utc datetime": dt.datetime(2024, 1, 1, tzinfo=UTC),
    "offset datetime": dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    "odd offset datetime": dt.datetime(
        2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30, seconds=15))
    ),
    "named offset datetime": dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=3), "MSK")),
    "zoneinfo datetime": dt.datetime(2024, 7, 1, 9, 15, tzinfo=ISTANBUL),
    "zoneinfo datetime in a fold": dt.datetime(2024, 11, 3, 1, 30, tzinfo=NEW_YORK, fold=1),
    "zoneinfo datetime in a gap": dt.datetime(2024, 3, 10, 2, 30, tzinfo=NEW_YORK),
    "min datetime": dt.datetime.min,
    "max datetime": dt.datetime.max,
    "date": dt.date(1999, 12, 31),
    "naive time": dt.time(23, 59, 1, 5),
    "offset time": dt.time(7, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "named offset time": dt.time(7, 0, tzinfo=dt.timezone(dt.timedelta(hours=2), "EET")),
    "zoneinfo time": dt.time(7, 0, tzinfo=ISTANBUL),
    "timedelta": dt.timedelta(days=-3, seconds=5, microseconds=7),
    "max timedelta": dt.timedelta.max,
    "decimal": Decimal("1.10"),
    "decimal exponent": Decimal("-1.23E+40"),
    "decimal negative zero": Decimal("-0.000"),
    "decimal NaN": Decimal("NaN"),
    "decimal infinity": Decimal("-Infinity"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "set": {1, 2, 3},
    "empty set": set(),
    "mixed set": {1, "a", None, (2, "b"), b"x", 2.5, dt.date(2020, 1, 1)},
    "frozenset": frozenset({"x", frozenset({1})}),
    "set of NUL strings": {"a\x00", "\x00b"},
    "attrs frozen slotted": Point(3, 4),
    "attrs with private field": Token("t0k3n"),
    "attrs nested, private, init=False": _sample_order(),
    "dataclass with init=False": Money(Decimal("9.99"), "USD"),
    "dataclass holding dataclasses": Basket("ada", {"tea": Money(Decimal("3.50"))}),
    "enum with str value": Color.RED,
    "enum with tuple value": Color.CUSTOM,
    "int enum": Level.HIGH,
    "attrs in dict in tuple": ({"point": Point(0, 0), 7: [Item("s", 1)]}, Level.LOW),
    "everything nested": {
        "when": [dt.datetime(2024, 1, 1, tzinfo=ISTANBUL), dt.date(2024, 1, 2)],
        "money": (Decimal("0.1"), {Decimal("2"): frozenset({uuid.UUID(int=1)})}),
        "raw": [b"\x00", bytearray(b"")],
        "enum keys": {Color.RED: Level.LOW},
    },
}


@pytest.mark.parametrize("value", ROUND_TRIP_CASES.values(), ids=ROUND_TRIP_CASES.keys())
def test_round_trip_keeps_value_and_every_nested_type(value: Any) -> None:
    """decode(encode(x)) equals x, with the same type at every level."""
    assert_identical(value, round_trip(value))


@pytest.mark.parametrize("value", ROUND_TRIP_CASES.values(), ids=ROUND_TRIP_CASES.keys())
def test_to_jsonable_and_from_jsonable_round_trip_through_a_driver(value: Any) -> None:
    """to_jsonable gives JSON types only; from_jsonable rebuilds x from a driver's parse."""
    jsonable = serde.to_jsonable(value)
    assert only_json_types(jsonable)
    parsed_by_driver = json.loads(json.dumps(jsonable, allow_nan=False))
    assert_identical(value, serde.from_jsonable(parsed_by_driver))


def test_nan_round_trips_as_a_float_nan() -> None:
    """float NaN is tagged (JSONB rejects NaN) and comes back as a float NaN."""
    text = serde.encode({"score": math.nan})
    assert '{"score":{"__ilmek__":"float","v":"nan"}}' == text
    result = serde.decode(text)
    assert float is type(result["score"])
    assert math.isnan(result["score"])


def test_decimal_keeps_its_scale() -> None:
    """Decimal('1.10') comes back as '1.10', not '1.1'."""
    assert "1.10" == str(round_trip(Decimal("1.10")))


def test_zoneinfo_datetime_keeps_the_same_zone_object() -> None:
    """A ZoneInfo datetime comes back with the very ZoneInfo(key) and its wall time."""
    value = dt.datetime(2024, 7, 1, 9, 15, tzinfo=ISTANBUL)
    result = round_trip(value)
    assert ISTANBUL is result.tzinfo
    assert (2024, 7, 1, 9, 15) == (result.year, result.month, result.day, result.hour, result.minute)


def test_unknown_zone_key_falls_back_to_the_stored_offset() -> None:
    """A zone key missing from this system's tz database gives a fixed-offset timezone."""
    text = forged("datetime", "2024-01-01T10:00:00+03:00", zone="Nowhere/Atlantis")
    result = serde.decode(text)
    assert dt.timezone is type(result.tzinfo)
    assert dt.datetime(2024, 1, 1, 7, tzinfo=UTC) == result


@pytest.mark.parametrize("key", ["../../../etc/passwd", "/etc/localtime", "zone.tab", "a//b", ""])
def test_zone_keys_that_are_not_plain_names_are_not_looked_up(key: str) -> None:
    """A zone key that is not a plain IANA-style name is ignored, keeping the offset."""
    result = serde.decode(forged("datetime", "2024-01-01T10:00:00+01:00", zone=key))
    assert dt.timezone(dt.timedelta(hours=1)) == result.tzinfo


def test_other_tzinfo_classes_come_back_as_their_fixed_offset() -> None:
    """A tzinfo that is neither timezone nor ZoneInfo comes back as its utcoffset."""

    class Plus90Minutes(dt.tzinfo):
        def tzname(self, when: dt.datetime | None) -> str:
            return "+90"

        def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
            return dt.timedelta(minutes=90)

        def dst(self, when: dt.datetime | None) -> dt.timedelta:
            return dt.timedelta(0)

    value = dt.datetime(2024, 1, 1, 12, tzinfo=Plus90Minutes())
    result = round_trip(value)
    assert dt.timezone(dt.timedelta(minutes=90)) == result.tzinfo
    assert value == result


def test_init_false_field_is_restored_after_construction() -> None:
    """An init=False attrs field keeps its stored value, not the class default."""
    assert 7 == round_trip(_sample_order()).revision


def test_registered_class_is_rebuilt_through_its_init() -> None:
    """Rebuilding calls __init__, so __post_init__ and validators run on stored data."""
    calls: list[Decimal] = []

    @serde.register(name=f"tests.counting.{uuid.uuid4().hex}")
    @dataclasses.dataclass
    class Counting:
        amount: Decimal

        def __post_init__(self) -> None:
            calls.append(self.amount)

    text = serde.encode(Counting(Decimal("4.2")))
    calls.clear()
    serde.decode(text)
    assert [Decimal("4.2")] == calls


def test_field_missing_from_stored_data_takes_the_class_default() -> None:
    """Data stored before a field was added decodes with that field's default."""
    text = json.dumps({"__ilmek__": "obj", "type": "tests.serde.Order", "v": {"items": [], "when": None}})
    result = serde.decode(text)
    assert ("", None, 0) == (result._secret, result.origin, result.revision)


# --------------------------------------------------------------------------- stored format


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, "x"]}, '{"a":[1,"x"]}'),
        ("çay", '"çay"'),
        ([None, True, 1.25], "[null,true,1.25]"),
        ((1, "a"), '{"__ilmek__":"tuple","v":[1,"a"]}'),
        ({1: "a", None: 2}, '{"__ilmek__":"dict","v":[[1,"a"],[null,2]]}'),
        ({"__ilmek__": 1}, '{"__ilmek__":"dict","v":[["__ilmek__",1]]}'),
        ("a\x00b", '{"__ilmek__":"str","v":["a","b"]}'),
        ({"k\x00": 1}, '{"__ilmek__":"dict","v":[[{"__ilmek__":"str","v":["k",""]},1]]}'),
        (math.inf, '{"__ilmek__":"float","v":"inf"}'),
        (-0.0, '{"__ilmek__":"float","v":"-0.0"}'),
        (1e16, '{"__ilmek__":"float","v":"1e+16"}'),
        (16**1000 * 10**3000, '{"__ilmek__":"int","v":"' + format(16**1000 * 10**3000, "x") + '"}'),
        (b"hi", '{"__ilmek__":"bytes","v":"aGk="}'),
        (bytearray(b"hi"), '{"__ilmek__":"bytearray","v":"aGk="}'),
        (Decimal("1.10"), '{"__ilmek__":"decimal","v":"1.10"}'),
        (dt.date(2024, 1, 2), '{"__ilmek__":"date","v":"2024-01-02"}'),
        (dt.timedelta(days=1, microseconds=2), '{"__ilmek__":"timedelta","v":[1,0,2]}'),
        (
            dt.datetime(2024, 11, 3, 1, 30, tzinfo=NEW_YORK, fold=1),
            '{"__ilmek__":"datetime","v":"2024-11-03T01:30:00-05:00","zone":"America/New_York","fold":1}',
        ),
        (
            dt.time(7, tzinfo=dt.timezone(dt.timedelta(hours=3), "MSK")),
            '{"__ilmek__":"time","v":"07:00:00+03:00","tzname":"MSK"}',
        ),
        (uuid.UUID(int=1), '{"__ilmek__":"uuid","v":"00000000-0000-0000-0000-000000000001"}'),
        ({"b", "a", 1}, '{"__ilmek__":"set","v":["a","b",1]}'),
        (frozenset({2}), '{"__ilmek__":"frozenset","v":[2]}'),
        (
            Color.CUSTOM,
            '{"__ilmek__":"enum","type":"test_serde.Color","v":{"__ilmek__":"tuple","v":[0,0,255]}}',
        ),
        (Point(1, 2), '{"__ilmek__":"obj","type":"test_serde.Point","v":{"x":1,"y":2}}'),
    ],
)
def test_encoded_text_matches_the_documented_format(value: Any, expected: str) -> None:
    """Each kind of value is written as the module docstring documents."""
    expected = expected.replace("test_serde.", f"{Point.__module__}.")
    assert expected == serde.encode(value)


def test_registry_name_defaults_to_module_and_qualname() -> None:
    """A class registered without name= is stored under module.qualname."""
    assert f"{Point.__module__}.Point" == json.loads(serde.encode(Point(0, 0)))["type"]


def test_registry_name_can_be_chosen() -> None:
    """register(name=...) is the name written with each instance."""
    text = serde.encode(Order(items=[], when=dt.datetime(2024, 1, 1)))
    assert "tests.serde.Order" == json.loads(text)["type"]


def test_plain_values_are_not_copied_by_to_jsonable() -> None:
    """Plain JSON containers come back from to_jsonable as the same objects."""
    value = {"messages": [{"role": "user", "content": "hi"}], "count": 3}
    assert value is serde.to_jsonable(value)


def test_to_jsonable_does_not_modify_its_input() -> None:
    """Tagging a nested value copies the containers on its path, not the input."""
    value = {"plain": [1], "nested": [{"t": (1, 2)}]}
    jsonable = serde.to_jsonable(value)
    assert {"plain": [1], "nested": [{"t": (1, 2)}]} == value
    assert {"plain": [1], "nested": [{"t": {"__ilmek__": "tuple", "v": [1, 2]}}]} == jsonable
    assert value["plain"] is jsonable["plain"]


def test_from_jsonable_returns_untagged_structures_as_they_are() -> None:
    """from_jsonable does not copy lists and dicts that hold no tag."""
    parsed = {"a": [{"b": 1}], "c": "d"}
    assert parsed is serde.from_jsonable(parsed)


def test_equal_sets_encode_to_equal_text() -> None:
    """Set elements are sorted by their encoded text, whatever the iteration order."""
    first = {"x", (1, 2), 3, None}
    second = {None, 3, (1, 2), "x"}
    assert serde.encode(first) == serde.encode(second)


@pytest.mark.parametrize(
    "payload",
    [b'{"a":1}', bytearray(b'{"a":1}'), memoryview(b'{"a":1}'), '{"a":1}'.encode("utf-16")],
    ids=["bytes", "bytearray", "memoryview", "utf-16 bytes"],
)
def test_decode_accepts_bytes_like_text(payload: Any) -> None:
    """decode takes bytes, bytearray and memoryview, like a BLOB or BYTEA column gives."""
    assert {"a": 1} == serde.decode(payload)


def test_decode_recognizes_a_tag_key_spelled_with_escapes() -> None:
    """A tag key written with \\u escapes is still a tag, so it cannot dodge the checks."""
    text = '{"\\u005f_ilmek__":"obj","type":"os.system","v":{}}'
    with pytest.raises(SerializationError, match="not registered in this process"):
        serde.decode(text)


# --------------------------------------------------------------------------- property tests

_text = st.text() | st.text(alphabet='a\x00_ilmek"\\{}')
_keys = _text | st.just("__ilmek__")
_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63)
    | st.floats(allow_nan=False)
    | _text
    | st.binary()
    | st.datetimes()
    | st.datetimes(timezones=st.timezones())
    | st.dates()
    | st.times()
    | st.timedeltas()
    | st.decimals(allow_nan=False)
    | st.uuids()
)
_hashables = st.recursive(_leaves, lambda children: st.lists(children, max_size=3).map(tuple), max_leaves=6)
_values = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(_keys, children, max_size=4)
        | st.dictionaries(st.integers(), children, max_size=3)
        | st.dictionaries(_hashables, children, max_size=3)
        | st.frozensets(_hashables, max_size=3)
        | st.sets(_hashables, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, database=None)
@given(_values)
def test_any_supported_value_round_trips_through_jsonb_safe_text(value: Any) -> None:
    """Any mix of supported values round-trips exactly through text JSONB would accept."""
    text = serde.encode(value)
    assert_jsonb_safe(text)
    assert_identical(value, serde.decode(text))


@settings(max_examples=75, deadline=None, database=None)
@given(_values)
def test_any_supported_value_round_trips_through_jsonable(value: Any) -> None:
    """to_jsonable gives JSON types only, and from_jsonable rebuilds the value."""
    jsonable = serde.to_jsonable(value)
    assert only_json_types(jsonable)
    assert_identical(value, serde.from_jsonable(json.loads(json.dumps(jsonable, allow_nan=False))))


# --------------------------------------------------------------------------- encode failures


def _generator() -> Iterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("make_value", "type_name"),
    [
        (Unregistered, f"{__name__}.Unregistered"),
        (UnregisteredAttrs, f"{__name__}.UnregisteredAttrs"),
        (lambda: lambda: None, "function"),
        (_generator, "generator"),
        (lambda: object(), "object"),
        (lambda: Shade.DARK, f"{__name__}.Shade"),
        (lambda: SpecialPoint(1, 2), f"{__name__}.SpecialPoint"),
        (lambda: OrderedDict(a=1), "collections.OrderedDict"),
        (lambda: TagKeyedDict(a=1), f"{__name__}.TagKeyedDict"),
        (lambda: complex(1, 2), "complex"),
    ],
    ids=[
        "plain class",
        "unregistered attrs",
        "function",
        "generator",
        "object",
        "unregistered enum",
        "subclass of registered",
        "OrderedDict",
        "dict subclass",
        "complex",
    ],
)
def test_unsupported_value_names_where_path_and_type(make_value: Callable[[], Any], type_name: str) -> None:
    """An unsupported value deep inside fails with where, the path and the type name."""
    value = [0, 1, {"when": make_value()}]
    with pytest.raises(SerializationError) as caught:
        serde.encode(value, where="channel 'cart'")
    error = caught.value
    assert ("channel 'cart'", type_name) == (error.where, error.type_name)
    assert str(error).startswith(f"channel 'cart'[2]['when']: cannot store a value of type {type_name}")


def test_unsupported_socket_is_refused() -> None:
    """A socket is refused with its type name."""
    with socket.socket() as sock, pytest.raises(SerializationError) as caught:
        serde.to_jsonable({"conn": sock}, where="step 'charge#0'")
    assert ("step 'charge#0'", "socket.socket") == (caught.value.where, caught.value.type_name)
    assert str(caught.value).startswith("step 'charge#0'['conn']: cannot store")


@pytest.mark.parametrize(
    ("value", "expected_hint"),
    [
        (UnregisteredAttrs(), "register it with ilmek.serde.register(UnregisteredAttrs)"),
        (Shade.DARK, "register it with ilmek.serde.register(Shade)"),
        (SpecialPoint(1, 2), f"its base class {__name__}.Point is registered"),
        (OrderedDict(), "convert it to a plain dict"),
        (Unregistered(), "Store a plain value instead"),
    ],
    ids=["attrs", "enum", "subclass", "dict subclass", "other"],
)
def test_unsupported_value_message_says_what_to_do(value: Any, expected_hint: str) -> None:
    """The message tells how to fix it: register the class or store a plain value."""
    with pytest.raises(SerializationError) as caught:
        serde.encode(value)
    assert expected_hint in str(caught.value)


@pytest.mark.parametrize(
    ("value", "expected_prefix"),
    [
        ({Unregistered(): 1}, "value<key 0>: cannot store"),
        ({1: Unregistered()}, "value[1]: cannot store"),
        ((1, [Unregistered()]), "value[1][0]: cannot store"),
        ({frozenset({Unregistered()})}, "value<element 0><element 0>: cannot store"),
        (Order(items=[], when=Unregistered()), "value.when: cannot store"),  # type: ignore[arg-type]
        (Basket("x", {"tea": Unregistered()}), "value.prices['tea']: cannot store"),  # type: ignore[dict-item]
    ],
    ids=["dict key", "int-keyed value", "tuple", "set", "attrs field", "dataclass field"],
)
def test_path_names_keys_elements_and_fields(value: Any, expected_prefix: str) -> None:
    """The path in the message spells dict keys, set elements and fields."""
    with pytest.raises(SerializationError) as caught:
        serde.encode(value)
    assert str(caught.value).startswith(expected_prefix)


@pytest.mark.parametrize("text", ["bad\ud800", "\udfff", "a\ud800\x00b\udc00c", "\x00\ud800\x00"])
def test_lone_surrogates_round_trip_in_stored_text(text: str) -> None:
    """A str with lone surrogates (and NUL) has no UTF-8 form; it is tagged, stored, and comes back."""
    stored = serde.encode({"name": text}, where="channel 'user'")
    stored.encode("utf-8")  # what a database is handed
    assert {"name": text} == serde.decode(stored)


def test_a_forged_lone_surrogate_tag_is_refused() -> None:
    """A ``ustr`` tag whose numbers are not NUL or surrogates is malformed stored data."""
    with pytest.raises(SerializationError, match="stored data"):
        serde.decode('{"__ilmek__": "ustr", "v": ["a", 65]}')


def _list_containing_itself() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def _dict_containing_itself() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["me"] = loop
    return loop


def _node_containing_itself() -> Node:
    node = Node("root")
    node.children.append(node)
    return node


def _list_containing_itself_through_a_tuple() -> list[Any]:
    loop: list[Any] = []
    loop.append((loop,))
    return loop


@pytest.mark.parametrize(
    ("make_loop", "expected_prefix", "type_name"),
    [
        (_list_containing_itself, "value[1]: the value contains itself", "list"),
        (_dict_containing_itself, "value['me']: the value contains itself", "dict"),
        (_node_containing_itself, "value.children[0]: the value contains itself", f"{__name__}.Node"),
        (_list_containing_itself_through_a_tuple, "value[0][0]: the value contains itself", "list"),
    ],
    ids=["list", "dict", "attrs", "through a tuple"],
)
def test_reference_cycle_is_a_serialization_error(
    make_loop: Callable[[], Any], expected_prefix: str, type_name: str
) -> None:
    """A value containing itself raises SerializationError (not RecursionError) at the cycle."""
    with pytest.raises(SerializationError) as caught:
        serde.encode(make_loop())
    assert type_name == caught.value.type_name
    assert str(caught.value).startswith(expected_prefix)


def test_too_deep_nesting_is_a_serialization_error() -> None:
    """A value nested thousands of levels deep fails cleanly, not with RecursionError."""
    value: Any = "leaf"
    for _ in range(5000):
        value = [value]
    with pytest.raises(SerializationError, match="nested more than 100 containers deep"):
        serde.encode(value)


def test_shared_sub_values_are_not_mistaken_for_cycles() -> None:
    """The same list referenced twice is stored twice, not reported as a cycle."""
    shared = [1, 2]
    assert [[1, 2], [1, 2]] == round_trip([shared, shared])


# --------------------------------------------------------------------------- registry


def test_register_forms_return_the_class() -> None:
    """register works as @register, @register(name=...) and register(Cls), returning the class."""

    @attrs.define
    class First:
        value: int

    @dataclasses.dataclass
    class Second:
        value: int

    class Third(enum.Enum):
        ONE = 1

    unique = uuid.uuid4().hex
    assert First is serde.register(First, name=f"first-{unique}")
    assert Second is serde.register(name=f"second-{unique}")(Second)
    assert Third is serde.register(Third, name=f"third-{unique}")
    assert (True, True, True) == tuple(serde.is_registered(cls) for cls in (First, Second, Third))


def test_is_registered_is_false_for_other_objects() -> None:
    """is_registered is False for unregistered classes, subclasses and non-classes."""
    assert (False, False, False, True) == (
        serde.is_registered(Unregistered),
        serde.is_registered(SpecialPoint),
        serde.is_registered(Point(1, 2)),
        serde.is_registered(Point),
    )


def test_registering_the_same_class_twice_is_fine() -> None:
    """Registering a class again under the same name changes nothing."""
    assert Point is serde.register(Point)
    assert Point(1, 2) == round_trip(Point(1, 2))


def test_name_taken_by_another_class_raises_value_error_naming_both() -> None:
    """A second class under a taken name is a ValueError naming both classes."""

    @attrs.define
    class Original:
        value: int

    @attrs.define
    class Impostor:
        value: int

    name = f"taken-{uuid.uuid4().hex}"
    serde.register(Original, name=name)
    with pytest.raises(ValueError, match="already registered") as caught:
        serde.register(Impostor, name=name)
    assert "Original" in str(caught.value)
    assert "Impostor" in str(caught.value)
    assert Original(1) == serde.decode(serde.encode(Original(1)))


def test_class_registered_under_another_name_raises_value_error() -> None:
    """A class has one stored name; registering it under a second is a ValueError."""
    with pytest.raises(ValueError, match=re.escape("already registered as 'tests.serde.Order'")):
        serde.register(Order, name="tests.serde.OrderAgain")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (Unregistered, "accepts attrs classes, dataclasses and enum.Enum subclasses"),
        (dict, "accepts attrs classes, dataclasses and enum.Enum subclasses"),
        (Point(1, 2), "takes a class"),
        (len, "takes a class"),
    ],
    ids=["plain class", "builtin class", "instance", "function"],
)
def test_register_refuses_what_it_cannot_rebuild(target: Any, message: str) -> None:
    """register raises TypeError for anything but attrs classes, dataclasses and Enums."""
    with pytest.raises(TypeError, match=message):
        serde.register(target)


def test_register_refuses_a_field_named_like_the_tag() -> None:
    """A field named __ilmek__ would make the stored fields look like a tag."""
    tagged = dataclasses.make_dataclass("Tagged", [("__ilmek__", int)])
    with pytest.raises(TypeError, match="__ilmek__"):
        serde.register(tagged)


@pytest.mark.parametrize("name", ["", 3])
def test_register_refuses_a_name_that_is_not_a_non_empty_str(name: Any) -> None:
    """register(name=...) must be a non-empty str."""
    with pytest.raises(TypeError, match="non-empty str"):
        serde.register(UnregisteredAttrs, name=name)


# --------------------------------------------------------------------------- decode failures


MALFORMED_CASES: dict[str, str] = {
    "tag not a str": '{"__ilmek__":1,"v":[]}',
    "unknown tag": forged("pickle", "gASVAAAAAA=="),
    "missing v": '{"__ilmek__":"tuple"}',
    "extra key": forged("tuple", [], extra=1),
    "tuple payload not a list": forged("tuple", "abc"),
    "dict payload not a list": forged("dict", {"a": 1}),
    "dict pair too short": forged("dict", [[1]]),
    "dict pair not a list": forged("dict", ["ab"]),
    "dict unhashable key": forged("dict", [[[1], 2]]),
    "set unhashable element": forged("set", [{"a": 1}]),
    "frozenset payload not a list": forged("frozenset", 3),
    "str parts not strs": forged("str", ["a", 1]),
    "float not a str": forged("float", 1.5),
    "float garbage": forged("float", "not a number"),
    "int not hex": forged("int", "xyz"),
    "bytes not base64": forged("bytes", "!!!"),
    "bytearray not a str": forged("bytearray", [1, 2]),
    "datetime garbage": forged("datetime", "yesterday"),
    "datetime zone not a str": forged("datetime", "2024-01-01T00:00:00", zone=5),
    "datetime fold not 0 or 1": forged("datetime", "2024-01-01T00:00:00", fold=2),
    "datetime tzname without offset": forged("datetime", "2024-01-01T00:00:00", tzname="X"),
    "date garbage": forged("date", "2024-13-01"),
    "time garbage": forged("time", "25:00"),
    "timedelta wrong length": forged("timedelta", [1, 2]),
    "timedelta not ints": forged("timedelta", [1, "2", 3]),
    "timedelta overflow": forged("timedelta", [10**10, 0, 0]),
    "decimal garbage": forged("decimal", "1.2.3"),
    "uuid garbage": forged("uuid", "not-a-uuid"),
    "obj without type": forged("obj", {}),
    "obj type not a str": forged("obj", {}, type=["x"]),
    "obj payload not a dict": forged("obj", [1, 2], type="test_serde.Point"),
    "obj unknown field": forged("obj", {"x": 1, "y": 2, "z": 3}, type="test_serde.Point"),
    "obj missing required field": forged("obj", {"x": 1}, type="test_serde.Point"),
    "obj failing validator": forged("obj", {"sku": "s", "qty": -1}, type="test_serde.Item"),
    "obj naming an enum": forged("obj", {}, type="test_serde.Color"),
    "enum naming a class": forged("enum", 1, type="test_serde.Point"),
    "enum unknown value": forged("enum", "purple", type="test_serde.Color"),
    "enum unhashable value": forged("enum", {"a": 1}, type="test_serde.Color"),
    "not JSON": "{nope",
    "trailing garbage": "[1] 2",
    "too deep": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.parametrize("text", MALFORMED_CASES.values(), ids=MALFORMED_CASES.keys())
def test_malformed_stored_data_is_a_serialization_error(text: str) -> None:
    """Malformed or unknown stored data raises SerializationError, never a bare KeyError etc."""
    text = text.replace("test_serde.", f"{Point.__module__}.")
    with pytest.raises(SerializationError) as caught:
        serde.decode(text)
    assert STORED == caught.value.where
    assert str(caught.value).startswith(f"{STORED}: ")


PARSEABLE_MALFORMED_CASES = {
    case: text
    for case, text in MALFORMED_CASES.items()
    if case not in {"not JSON", "trailing garbage", "too deep"}
}


@pytest.mark.parametrize("text", PARSEABLE_MALFORMED_CASES.values(), ids=PARSEABLE_MALFORMED_CASES.keys())
def test_malformed_parsed_data_is_a_serialization_error(text: str) -> None:
    """from_jsonable rejects the same malformed data that decode rejects."""
    parsed = json.loads(text.replace("test_serde.", f"{Point.__module__}."))
    with pytest.raises(SerializationError) as caught:
        serde.from_jsonable(parsed)
    assert STORED == caught.value.where


def test_decode_rejects_non_text() -> None:
    """decode of something that is neither str nor bytes is a SerializationError."""
    with pytest.raises(SerializationError, match="takes str or bytes"):
        serde.decode(123)  # type: ignore[arg-type]


def test_unknown_tag_error_names_the_tag() -> None:
    """An unknown tag is reported as not registered in this process, with its name."""
    with pytest.raises(SerializationError) as caught:
        serde.decode(forged("pickle", ""))
    assert "pickle" == caught.value.type_name
    assert "not registered in this process" in str(caught.value)


def test_validator_failure_on_decode_is_chained() -> None:
    """A registered class refusing stored fields is a SerializationError from its error."""
    text = forged("obj", {"sku": "s", "qty": -1}, type=f"{Point.__module__}.Item")
    with pytest.raises(SerializationError, match="could not rebuild") as caught:
        serde.decode(text)
    assert isinstance(caught.value.__cause__, ValueError)
    assert f"{Point.__module__}.Item" == caught.value.type_name


# --------------------------------------------------------------------------- security


@pytest.fixture
def trap_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module, never imported yet, that leaves a file behind if it is."""
    module_name = f"ilmek_trap_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module_name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\nclass Evil:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.util.find_spec(module_name) is not None
    assert module_name not in sys.modules
    return module_name, marker


@pytest.mark.parametrize("tag", ["obj", "enum"])
def test_forged_type_naming_an_importable_module_imports_nothing(
    tag: str, trap_module: tuple[str, Path]
) -> None:
    """A forged tag naming a real, importable module's class neither imports nor runs it."""
    module_name, marker = trap_module
    text = forged(tag, {}, type=f"{module_name}.Evil")
    with recording_imports() as imports, pytest.raises(SerializationError) as caught:
        serde.decode(text)
    assert (False, False) == (module_name in sys.modules, marker.exists())
    assert [] == imports
    assert f"{module_name}.Evil" == caught.value.type_name
    assert "not registered in this process" in str(caught.value)


@pytest.mark.parametrize(
    "type_name",
    [
        "os.system",
        "subprocess.Popen",
        "collections.OrderedDict",
        "builtins.eval",
        "antigravity.geohash",
        "this.s",
        "pickle.loads",
    ],
)
@pytest.mark.parametrize("tag", ["obj", "enum"])
def test_forged_type_naming_a_real_class_is_refused(tag: str, type_name: str) -> None:
    """Forged types naming real callables are refused without any import or lookup."""
    never_imported = [name for name in ("antigravity", "this") if name not in sys.modules]
    assert ["antigravity", "this"] == never_imported  # importing them has side effects
    text = forged(tag, {"args": ["touch", "/tmp/ilmek-pwned"]}, type=type_name)
    with recording_imports() as imports, pytest.raises(SerializationError) as caught:
        serde.decode(text)
    assert [] == imports
    assert (STORED, type_name) == (caught.value.where, caught.value.type_name)
    assert ["antigravity", "this"] == [name for name in never_imported if name not in sys.modules]


def test_forged_type_inside_plain_data_is_refused(trap_module: tuple[str, Path]) -> None:
    """A forged tag deep inside ordinary-looking data is found and refused."""
    module_name, marker = trap_module
    payload = {
        "messages": [
            {"role": "user", "content": {"__ilmek__": "obj", "type": f"{module_name}.Evil", "v": {}}}
        ]
    }
    with pytest.raises(SerializationError, match="not registered in this process"):
        serde.from_jsonable(payload)
    assert (False, False) == (module_name in sys.modules, marker.exists())


def test_unknown_zone_key_imports_nothing() -> None:
    """A zone key missing from the system database does not fall back to importing tzdata.

    The standard library's ``zoneinfo`` itself is the one import allowed: ilmek
    loads it the first time a stored zone is read, whatever the key.
    """
    text = forged("datetime", "2024-01-01T00:00:00+00:00", zone="Nowhere/Atlantis")
    with recording_imports() as imports:
        serde.decode(text)
    assert [] == [name for name in imports if name != "zoneinfo"]


def test_serde_source_uses_no_code_loading_facilities() -> None:
    """serde.py imports no pickle/importlib/marshal and calls no eval/exec/__import__."""
    tree = ast.parse(Path(inspect.getfile(serde)).read_text())
    imported: set[str] = set()
    bare_calls: set[str] = set()
    method_calls: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            bare_calls.add(node.func.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method_calls.add(node.func.attr)
    forbidden_modules = {"pickle", "marshal", "importlib", "shelve", "copyreg", "pydoc", "dill"}
    assert set() == imported & forbidden_modules
    assert set() == bare_calls & {"eval", "exec", "compile", "__import__"}
    assert set() == method_calls & {"import_module", "__import__", "locate", "find_class"}


def test_decoding_uses_only_the_registry_for_names() -> None:
    """A class registered under a name is found; the same class by its import path is not."""
    unique = f"aliased-{uuid.uuid4().hex}"

    @attrs.frozen
    class Aliased:
        value: int

    serde.register(Aliased, name=unique)
    by_registry = serde.decode(forged("obj", {"value": 1}, type=unique))
    assert Aliased(1) == by_registry
    with pytest.raises(SerializationError, match="not registered in this process"):
        serde.decode(forged("obj", {"value": 1}, type=f"{Aliased.__module__}.{Aliased.__qualname__}"))


def test_base64_payload_is_validated_strictly() -> None:
    """Non-alphabet characters in a bytes payload are an error, not silently dropped."""
    assert b"hi" == serde.decode(forged("bytes", base64.b64encode(b"hi").decode()))
    with pytest.raises(SerializationError):
        serde.decode(forged("bytes", "aG k="))


def test_decimal_garbage_is_refused_even_without_the_trap() -> None:
    """A caller's decimal context without the InvalidOperation trap cannot turn garbage into NaN."""
    with decimal.localcontext() as context:
        context.traps[decimal.InvalidOperation] = False
        with pytest.raises(SerializationError):
            serde.decode(forged("decimal", "garbage"))


# --------------------------------------------------------------------------- modules ilmek does not import


LATE_ROUND_TRIP = """
import sys
import ilmek
from ilmek import serde
late = ("base64", "dataclasses", "decimal", "uuid", "zoneinfo")
print(sorted(m for m in late if m in sys.modules))
import dataclasses, datetime, decimal, uuid, zoneinfo

@serde.register(name="late.Point")
@dataclasses.dataclass
class Point:
    x: int

value = {
    "d": decimal.Decimal("1.10"),
    "u": uuid.UUID(int=7),
    "b": b"\\x00\\xff",
    "t": datetime.datetime(2024, 5, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Istanbul")),
    "p": Point(3),
}
text = serde.encode(value)
back = serde.decode(text)
print(back == value and type(back["d"]) is decimal.Decimal and back["t"].tzinfo.key == "Europe/Istanbul")
"""


def test_types_of_modules_imported_after_ilmek_round_trip() -> None:
    """ilmek imports none of decimal, uuid, zoneinfo, dataclasses and base64, yet stores their values.

    A program that imports them only after ``import ilmek`` gets the same
    stored text and the same values back as one that had them first.
    """
    out = subprocess.run([sys.executable, "-c", LATE_ROUND_TRIP], capture_output=True, text=True, check=True)
    assert ["[]", "True"] == out.stdout.split()


def test_a_class_only_named_like_decimal_is_not_stored_as_one() -> None:
    """A class claiming decimal.Decimal's module and name is refused, not stored as a Decimal."""
    impostor = type("Decimal", (), {"__module__": "decimal", "__str__": lambda self: "rm -rf"})
    with pytest.raises(SerializationError, match=r"cannot store a value of type decimal\.Decimal"):
        serde.encode(impostor())


def test_a_decimal_subclass_is_refused_with_the_subclass_hint() -> None:
    """A Decimal subclass gets the exact-type hint, though decimal is not one of ilmek's imports."""

    class Money(Decimal):
        pass

    with pytest.raises(SerializationError, match=r"subclass of decimal\.Decimal, and only exact"):
        serde.encode(Money("1.5"))
