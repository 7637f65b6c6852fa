"""ilmek.serde's stored format and registry: the documented text, registry names, what register accepts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import re
import uuid
from decimal import Decimal
from typing import Any

import attrs
import pytest

from ilmek import serde
from ilmek.errors import SerializationError
from tests.support.serde_values import (
    NEW_YORK,
    Color,
    Order,
    Point,
    SpecialPoint,
    Unregistered,
    UnregisteredAttrs,
    round_trip,
)

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
        (Unregistered, "accepts attrs classes, dataclasses, enum.Enum subclasses and pydantic models"),
        (dict, "accepts attrs classes, dataclasses, enum.Enum subclasses and pydantic models"),
        (Point(1, 2), "takes a class"),
        (len, "takes a class"),
    ],
    ids=["plain class", "builtin class", "instance", "function"],
)
def test_register_refuses_what_it_cannot_rebuild(target: Any, message: str) -> None:
    """register raises TypeError for anything but attrs classes, dataclasses, Enums and pydantic models."""
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
