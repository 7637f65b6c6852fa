"""ilmek.serde round trips: every supported type comes back as itself, by example and by property.

Also the types of modules ilmek does not import itself (a program imports
them after ilmek), and what only looks like one of them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import subprocess
import sys
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ilmek import serde
from ilmek.errors import SerializationError
from tests.support.serde_values import (
    ISTANBUL,
    NEW_YORK,
    UTC,
    Basket,
    Color,
    Item,
    Level,
    Money,
    Order,
    Point,
    Token,
    assert_identical,
    assert_jsonb_safe,
    forged,
    only_json_types,
    round_trip,
)

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
