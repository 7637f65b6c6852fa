"""What the serde test modules share: registered and unregistered classes, and checks of what comes back.

The classes are registered here, once, at import (``serde.register`` keeps a
process-wide registry); a class registered without ``name=`` is stored under
this module's name, which the tests read from ``Point.__module__``.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import datetime as dt
import enum
import json
import zoneinfo
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import attrs

from ilmek import serde

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
