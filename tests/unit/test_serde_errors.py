"""ilmek.serde failures: what cannot be encoded names where and why; malformed stored data is refused."""

from __future__ import annotations

import json
import socket
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ilmek import serde
from ilmek.errors import SerializationError
from tests.support.serde_values import (
    STORED,
    Basket,
    Node,
    Order,
    Point,
    Shade,
    SpecialPoint,
    TagKeyedDict,
    Unregistered,
    UnregisteredAttrs,
    forged,
    round_trip,
)

# --------------------------------------------------------------------------- encode failures


def _generator() -> Iterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("make_value", "type_name"),
    [
        (Unregistered, f"{Point.__module__}.Unregistered"),
        (UnregisteredAttrs, f"{Point.__module__}.UnregisteredAttrs"),
        (lambda: lambda: None, "function"),
        (_generator, "generator"),
        (lambda: object(), "object"),
        (lambda: Shade.DARK, f"{Point.__module__}.Shade"),
        (lambda: SpecialPoint(1, 2), f"{Point.__module__}.SpecialPoint"),
        (lambda: OrderedDict(a=1), "collections.OrderedDict"),
        (lambda: TagKeyedDict(a=1), f"{Point.__module__}.TagKeyedDict"),
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
        (SpecialPoint(1, 2), f"its base class {Point.__module__}.Point is registered"),
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
        (_node_containing_itself, "value.children[0]: the value contains itself", f"{Point.__module__}.Node"),
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


@pytest.mark.parametrize(
    "forged",
    [
        {"__ilmek__": ["list"]},
        {"__ilmek__": {"dict": 1}},
        {"__ilmek__": "no-such-tag", "v": 1},
        {"__ilmek__": "set", "v": [[1]]},
        {"__ilmek__": "dict", "v": [[{"__ilmek__": ["key"]}, 1]]},
    ],
)
def test_a_tag_that_cannot_be_decoded_is_a_damaged_placeholder_only_while_showing_damage(
    forged: dict[str, Any],
) -> None:
    """showing_damaged(): a forged tag reads as Damaged beside its valid siblings; elsewhere it is refused."""
    stored = {"ok": [1, 2], "bad": forged}
    with pytest.raises(SerializationError):
        serde.from_jsonable(stored)
    with pytest.raises(SerializationError), serde.showing_unregistered():
        serde.decode(json.dumps(stored))
    with serde.showing_damaged():
        for decoded in (serde.from_jsonable(stored), serde.decode(json.dumps(stored))):
            assert [1, 2] == decoded["ok"]
            bad = decoded["bad"]
            # A damaged dict key is a key like another: the dict around it stays a dict.
            damaged = next(iter(bad)) if isinstance(bad, dict) else bad
            assert isinstance(damaged, serde.Damaged)
            assert (forged if damaged is bad else {"__ilmek__": ["key"]}) == damaged.stored
            assert "stored data" in damaged.reason
    with pytest.raises(SerializationError):
        serde.decode(json.dumps(stored))
