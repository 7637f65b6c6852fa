"""Ported from the .NET port's ``dotnet/test/Ilmek.Checkpointer.Sqlite.Tests/TypedStepReloadTests.cs``.

A step's value across a real reload: the step runs against one
checkpointer, the thread pauses, the "process" goes away, and a new
checkpointer on the same store resumes it; the step must not run again, and
the value it replays must be the one recorded. The reference does it on a
SQLite file; here on memory, a SQLite file and Postgres (``ref_reopen`` is
the new process).

The reference's C# types map to what Python's codec round-trips (README,
"Serialization"): a record is a registered ``attrs`` class, an enum a
registered ``Enum``, a ``decimal`` a ``Decimal`` (value and exponent), a
``DateTimeOffset`` an aware ``datetime``, a ``Guid`` a ``UUID``, a value
tuple a ``tuple``. Not ported, for want of a Python counterpart: the
``short`` and ``float`` (32-bit) cases of "narrow numbers survive a reload"
(Python has one ``int`` and one ``float``), the current-culture part of
"decimals round-trip exactly ... whatever the current culture" (``Decimal``
formatting does not depend on the locale), and ``Nullable<int>`` (``None``
is checked as a value).
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import pytest

from ilmek import END, START, Checkpointer, graph, resume, run, serde

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")

Reopen = Callable[[], Checkpointer]


@serde.register
class Status(enum.Enum):
    """The .NET suite's ``Status`` enum, its values not in sequence."""

    PENDING = 0
    SHIPPED = 2
    LOST = 7


@serde.register
@attrs.frozen
class Line:
    """The .NET suite's ``Line`` record."""

    sku: str
    qty: int
    price: decimal.Decimal


@serde.register
@attrs.frozen
class Order:
    """The .NET suite's ``Order`` record: nested records, a decimal, an enum, a date, a guid, loose extras."""

    id: str
    total: decimal.Decimal
    status: Status
    lines: tuple[Line, ...]
    at: dt.datetime
    ref: uuid.UUID
    extra: dict[str, Any] | None = None


@serde.register
@attrs.frozen
class Answer:
    """The .NET suite's ``Answer`` record: a person's structured answer."""

    approved: bool
    note: str


REF = uuid.UUID("9f1c2a5e-6b0d-4c4e-8a51-3f0a9d1e7b22")
AT = dt.datetime(2026, 10, 7, 9, 30, 15, 123000, tzinfo=dt.timezone(dt.timedelta(hours=3)))


def _sample_order() -> Order:
    return Order(
        id="o-1",
        total=decimal.Decimal("12345678901234567890.123456789"),
        status=Status.SHIPPED,
        lines=(Line("a", 2, decimal.Decimal("0.1")), Line("b", 1, decimal.Decimal("1.10"))),
        at=AT,
        ref=REF,
        extra={"k": "v", "n": 2, "list": [1, "x"]},
    )


def _across_reload(reopen: Reopen, name: str, make: Callable[[], T]) -> T:
    """Record ``make()`` in a step, pause, resume through a new checkpointer, and return the replayed
    value."""
    calls: list[int] = []
    replayed: list[Any] = []

    def made() -> T:
        calls.append(1)
        return make()

    def work(state: Any, ctx: Any) -> None:
        replayed.append(ctx.step("make", made))
        ctx.interrupt("go?")

    g = graph(name).node("work", work).edge(START, "work").edge("work", END).compile()
    first = reopen()
    assert "interrupted" == run(g, None, thread_id=name, checkpointer=first).status
    first.close()

    finished = resume(g, "yes", thread_id=name, checkpointer=reopen())

    assert "done" == finished.status
    assert [1] == calls, "the step ran again: its value did not come from the store"
    assert 2 == len(replayed)
    value: T = replayed[1]
    return value


def test_a_record_with_nested_records_a_decimal_an_enum_a_date_and_a_uuid_survives(
    ref_reopen: Reopen,
) -> None:
    """TypedStepReloadTests.Record: "a record with nested records, a decimal, an enum, a date and a guid
    survives a reload"."""
    back = _across_reload(ref_reopen, "record", _sample_order)

    want = _sample_order()
    assert isinstance(back, Order)
    assert (want.id, want.total, str(want.total)) == (back.id, back.total, str(back.total))
    assert Status.SHIPPED is back.status
    assert want.lines == back.lines
    assert "1.10" == str(back.lines[1].price)
    assert (AT, AT.utcoffset()) == (back.at, back.at.utcoffset())
    assert REF == back.ref
    assert back.extra is not None
    assert ("v", 2, [1, "x"]) == (back.extra["k"], back.extra["n"], back.extra["list"])
    assert list is type(back.extra["list"])


def test_a_tuple_survives(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.Tuple: "a value tuple survives a reload"."""
    back = _across_reload(ref_reopen, "tuple", lambda: (3, "three", decimal.Decimal("9.99")))

    assert (3, "three", decimal.Decimal("9.99")) == back
    assert tuple is type(back)


def test_decimals_round_trip_exactly_value_and_exponent(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.DecimalsAreExact: "decimals round-trip exactly — value and scale — whatever the
    current culture".

    The reference's extremes are .NET's ``decimal.MaxValue`` and ``MinValue``.
    """
    values = [
        decimal.Decimal(text)
        for text in (
            "0.1",
            "1.10",
            "5.0",
            "12345678901234567890.123456789",
            "-0.000000001",
            "79228162514264337593543950335",
            "-79228162514264337593543950335",
        )
    ]

    back = _across_reload(ref_reopen, "decimals", lambda: values)

    assert values == back
    assert [str(v) for v in values] == [str(v) for v in back]
    assert "1.10" == str(_across_reload(ref_reopen, "decimal-scale", lambda: decimal.Decimal("1.10")))


def test_an_enum_member_survives(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.Enum: "an enum survives a reload"."""
    assert Status.LOST is _across_reload(ref_reopen, "enum", lambda: Status.LOST)


def test_a_list_of_records_survives(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.ListOfRecords: "a list of records survives a reload".

    The reference's read-only list, list and array are Python's list and tuple.
    """
    lines = [Line("a", 1, decimal.Decimal("2.5")), Line("b", 3, decimal.Decimal("0.3"))]

    as_list = _across_reload(ref_reopen, "list", lambda: lines)
    as_tuple = _across_reload(ref_reopen, "array", lambda: tuple(lines))

    assert (lines, list) == (as_list, type(as_list))
    assert (tuple(lines), tuple) == (as_tuple, type(as_tuple))


def test_a_dict_of_decimals_survives(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.TypedDictionary: "a dictionary of typed values survives a reload"."""
    prices = {"a": decimal.Decimal("0.1"), "b": decimal.Decimal("1.10")}

    back = _across_reload(ref_reopen, "dict", lambda: prices)

    assert prices == back
    assert ["0.1", "1.10"] == [str(v) for v in back.values()]


@pytest.mark.parametrize(
    "value",
    [42, 0.1, 5.0, 1e300, 2**63 - 1],
    ids=["int", "float", "integral-float", "huge-float", "int64-max"],
)
def test_numbers_survive_with_their_type(ref_reopen: Reopen, value: float) -> None:
    """TypedStepReloadTests.Numbers: "narrow numbers survive a reload: int, float, double"."""
    back = _across_reload(ref_reopen, "number", lambda: value)

    assert (value, type(value)) == (back, type(back))


def test_none_survives(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.Nulls: "null survives a reload into nullable types"."""
    assert None is _across_reload(ref_reopen, "none", lambda: None)


def test_plain_data_stays_plain(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.UntypedStaysPlain: "untyped steps keep the plain-data shape after a reload"."""
    back = _across_reload(ref_reopen, "untyped", lambda: {"a": 1, "b": "x"})

    assert ({"a": 1, "b": "x"}, dict) == (back, type(back))


def test_a_structured_answer_replays_as_its_class_after_reloads(ref_reopen: Reopen) -> None:
    """TypedStepReloadTests.TypedInterruptAnswer: "a typed interrupt answer replays after a reload".

    The first answer is recorded; the second pause sends the thread back to
    the store; on the last resume the first answer replays from a journal
    read by a third checkpointer, and must come back as ``Answer``.
    """
    seen: list[Any] = []

    def work(state: Any, ctx: Any) -> None:
        first = ctx.interrupt("first?", key="first")
        ctx.interrupt("second?", key="second")
        seen.append(first)

    g = graph("answers").node("work", work).edge(START, "work").edge("work", END).compile()
    opts: dict[str, Any] = {"thread_id": "a"}

    first = ref_reopen()
    run(g, None, checkpointer=first, **opts)
    first.close()
    second = ref_reopen()
    assert "interrupted" == resume(g, Answer(True, "ok"), checkpointer=second, **opts).status
    second.close()
    assert "done" == resume(g, "fine", checkpointer=ref_reopen(), **opts).status

    assert [Answer(True, "ok")] == seen
