"""JSONB round trips on Postgres: edge values through channels, journals, pauses, answers and metadata.

NUL characters, odd numbers, time zones and nested values come back as
written, from every place ilmek stores them; what JSONB cannot hold (a NUL in a
metadata key) is refused.
"""

from __future__ import annotations

import datetime
import math
import zoneinfo
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ilmek import END, START, Checkpoint, channel, graph, pending_interrupts, resume, run, thread_state
from ilmek.types import JournalEntry, new_checkpoint_id, task_id_for
from tests.support.postgres import fresh_checkpointer

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


# --- JSONB round trips -----------------------------------------------------------------------------

IST = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
BRT = datetime.timezone(datetime.timedelta(hours=-3))

EDGE_VALUES: dict[str, Any] = {
    "nul inside": "before\0after",
    "only nul": "\0",
    "nul at both ends": "\0middle\0",
    "key with nul\0": "value",
    "nested": {"inner key\0": ["\0", ("in a tuple\0",), {"in a set\0"}]},
    "positive zero": 0.0,
    "negative zero": -0.0,
    "1e16": 1e16,
    "-1e16": -1e16,
    "just below 1e16": 9999999999999998.0,
    "smallest subnormal": 5e-324,
    "largest float": 1.7976931348623157e308,
    "one tenth": 0.1,
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "2**64 + 1": 2**64 + 1,
    "-(2**100)": -(2**100),
    "10**16 as int": 10**16,
    "3999 digits": 10**3998 + 7,
    "5001 digits": 10**5000 + 3,
    "decimal 1.10": Decimal("1.10"),
    "decimal 1E+3": Decimal("1E+3"),
    "decimal -0.00": Decimal("-0.00"),
    "decimal NaN": Decimal("NaN"),
    "decimal 40 digits": Decimal("3.141592653589793238462643383279502884197"),
    "aware +05:30": datetime.datetime(2024, 3, 31, 1, 30, 15, 123456, tzinfo=IST),
    "aware -03:00": datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=BRT),
    "aware UTC": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    "aware zoneinfo, second 01:30": datetime.datetime(
        2024, 10, 27, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"), fold=1
    ),
    "naive": datetime.datetime(2024, 3, 31, 1, 30),
    "time +05:30": datetime.time(23, 59, 59, 999999, tzinfo=IST),
    "date": datetime.date(2024, 2, 29),
}
THREAD_METADATA = {key: value for key, value in EDGE_VALUES.items() if "\0" not in key}


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Equal, of the same type, down to the sign of zero, NaN, a Decimal's exponent and a time zone."""
    assert type(expected) is type(actual), f"{path}: {type(expected).__name__} came back as {actual!r}"
    if isinstance(expected, dict):
        assert set(expected) == set(actual), path
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), path
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{path}[{index}]")
    elif isinstance(expected, float):
        assert repr(expected) == repr(actual), path
    elif isinstance(expected, Decimal):
        assert str(expected) == str(actual), path
    elif isinstance(expected, (datetime.datetime, datetime.time)):
        assert expected == actual, path
        assert expected.utcoffset() == actual.utcoffset(), path
        assert repr(expected.tzinfo) == repr(actual.tzinfo), path
        assert expected.fold == actual.fold, path
    else:
        assert expected == actual, path


def edge_graph(calls: list[str]) -> Any:
    """Echoes the edge values through a step (journal), a pause (payload) and an answer."""

    def echo(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        echoed = ctx.step("echo", lambda: calls.append("echo") or EDGE_VALUES)
        answer = ctx.interrupt(EDGE_VALUES)
        return {"echoed": echoed, "answer": answer}

    return (
        graph(
            "pg-edges",
            {
                "data": channel.last_write(None),
                "items": channel.append(),
                "echoed": channel.last_write(None),
                "answer": channel.last_write(None),
            },
        )
        .node("echo", echo)
        .edge(START, "echo")
        .edge("echo", END)
        .compile()
    )


def test_edge_values_survive_channels_journals_pauses_and_answers(postgres_dsn: str) -> None:
    """NUL strings and keys, odd floats, huge ints, Decimal scale and time zones come back exactly."""
    calls: list[str] = []
    edges = edge_graph(calls)
    items = list(EDGE_VALUES.values())
    with fresh_checkpointer(postgres_dsn) as writer:
        paused = run(edges, {"data": EDGE_VALUES, "items": items}, thread_id="edges", checkpointer=writer)
    assert "interrupted" == paused.status
    with fresh_checkpointer(postgres_dsn) as reader:
        stored = reader.get("edges")
        assert stored is not None
        assert_same(EDGE_VALUES, stored.channels["data"], "data")
        assert_same(items, stored.channels["items"], "items")
        assert_same(items[3:6], reader.read_channel("edges", "items", offset=3, limit=3), "page")
        [pending] = pending_interrupts(reader, "edges")
        assert_same(EDGE_VALUES, pending.payload, "payload")
        # The paused task's journal, read under the pause's task id.
        [step, pause] = reader.get_journal(pending.task_id)
        assert_same(EDGE_VALUES, step.value, "journal")
        assert_same(EDGE_VALUES, pause.payload, "journal payload")
    with fresh_checkpointer(postgres_dsn) as resumer:
        finished = resume(edges, EDGE_VALUES, thread_id="edges", checkpointer=resumer)
    assert "done" == finished.status
    assert ["echo"] == calls
    with fresh_checkpointer(postgres_dsn) as reader:
        state = thread_state(edges, reader, "edges")
    assert_same(EDGE_VALUES, state["echoed"], "echoed")
    assert_same(EDGE_VALUES, state["answer"], "answer")


def test_edge_values_survive_metadata_and_the_journal_table(postgres_dsn: str) -> None:
    """Thread and checkpoint metadata and a stored journal keep NUL, odd floats, Decimals, zones.

    Thread metadata keys are what filters query, so they may not hold NUL; the values may.
    """
    checkpoint_id = new_checkpoint_id()
    checkpoint = Checkpoint(
        id=checkpoint_id, thread_id="meta", channels={"data": EDGE_VALUES}, metadata=EDGE_VALUES
    )
    task_id = task_id_for("meta", checkpoint_id, "node")
    entries = [
        JournalEntry(key="step", value=EDGE_VALUES),
        JournalEntry(key="pause", kind="interrupt", payload=EDGE_VALUES, value=EDGE_VALUES, answered=True),
    ]
    with fresh_checkpointer(postgres_dsn) as writer:
        writer.put("meta", checkpoint)
        writer.put_thread_metadata("meta", THREAD_METADATA)
        writer.put_journal(task_id, entries)
    with fresh_checkpointer(postgres_dsn) as reader:
        [step, pause] = reader.get_journal(task_id)
        assert_same(EDGE_VALUES, step.value, "journal step")
        assert_same(EDGE_VALUES, pause.payload, "journal payload")
        assert_same(EDGE_VALUES, pause.value, "journal answer")
        assert pause.answered is True
        stored = reader.get("meta")
        assert stored is not None
        assert_same(EDGE_VALUES, dict(stored.metadata), "checkpoint metadata")
        info = reader.get_thread("meta")
        assert info is not None
        assert_same(THREAD_METADATA, dict(info.metadata), "thread metadata")
        [listed] = reader.list_threads(search="meta")
        assert_same(THREAD_METADATA, dict(listed.metadata), "listed metadata")


def test_list_threads_matches_metadata_holding_nul_and_odd_numbers(postgres_dsn: str) -> None:
    """A metadata filter on a NUL string, -0.0 or a Decimal finds the thread that has it."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        metadata = {"note": "a\0b", "zero": -0.0, "price": Decimal("1.10"), "tenant": "acme"}
        filters = {"note": "a\0b", "zero": -0.0, "price": Decimal("1.10")}
        checkpointer.put_thread_metadata("odd", metadata)
        checkpointer.put_thread_metadata("plain", {"tenant": "acme"})
        for key, value in filters.items():
            assert ["odd"] == [info.id for info in checkpointer.list_threads(metadata={key: value})], key
        assert [] == checkpointer.list_threads(metadata={"note": "a\0c"})


def test_thread_metadata_keys_with_nul_are_refused(postgres_dsn: str) -> None:
    """Metadata keys are what filters query: a NUL-bearing key is refused, and nothing is stored."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        with pytest.raises(ValueError, match="metadata keys of thread 'mixed' must be text without NUL"):
            checkpointer.put_thread_metadata("mixed", {"tenant": "acme", "note\0": "x"})
        assert checkpointer.get_thread("mixed") is None


def nul_key_graph(kind: str) -> Any:
    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if kind == "step":
            value = ctx.step("key\0with nul", lambda: "stepped")
        else:
            value = ctx.interrupt("question", key="key\0with nul")
        return {"log": [value]}

    return (
        graph("pg-nul-key", {"log": channel.append()})
        .node("node", node)
        .edge(START, "node")
        .edge("node", END)
        .compile()
    )


@pytest.mark.parametrize("kind", ["step", "interrupt"])
def test_a_journal_key_with_nul_is_stored_as_on_every_backend(postgres_dsn: str, kind: str) -> None:
    """``ctx.step`` / ``ctx.interrupt`` keys containing NUL work on Postgres as they do on SQLite."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        result = run(nul_key_graph(kind), None, thread_id="nul-key", checkpointer=checkpointer)
    assert result.status in ("done", "interrupted"), result.errors


@pytest.mark.parametrize("sealed", [False, True])
def test_a_dict_reads_back_in_one_key_order_in_the_writing_process_and_in_another(
    postgres_dsn: str, sealed: bool
) -> None:
    """JSONB keeps a dict's keys, not their order: the process that wrote a list item reads it back (from
    its cache) with the keys in the order another process reads them (from the server), not as written;
    sealed, the value is stored as its text inside the seal, and both read the order it was written in."""
    import os

    import psycopg2

    from ilmek import START, PostgresCheckpointer, channel, graph, run
    from ilmek.crypto import Keyring

    seen: list[list[str]] = []

    def note(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(list(state["items"][-1]) if state["items"] else [])
        return {"items": [{"zeta": 1, "b": 2, "aa": {"yy": 1, "x": 2}, "a": 3}]}

    g = graph("order", {"items": channel.append()}).node("note", note).edge(START, "note").compile()
    cipher = Keyring({"k1": os.urandom(32)}, "k1") if sealed else None
    writer = PostgresCheckpointer(psycopg2.connect(postgres_dsn), cipher=cipher)
    other = PostgresCheckpointer(psycopg2.connect(postgres_dsn), cipher=cipher)
    expected = ["zeta", "b", "aa", "a"] if sealed else ["a", "b", "aa", "zeta"]
    inner = ["yy", "x"] if sealed else ["x", "yy"]
    try:
        run(g, {}, thread_id="order", checkpointer=writer)
        mine = writer.get("order")
        theirs = other.get("order")
        assert mine is not None
        assert theirs is not None
        assert list(theirs.channels["items"][0]) == expected
        assert list(theirs.channels["items"][0]["aa"]) == inner
        assert list(mine.channels["items"][0]) == expected
        assert list(mine.channels["items"][0]["aa"]) == inner
        # The next turn's node sees the same order whichever process runs it.
        run(g, {}, thread_id="order", checkpointer=writer)
        run(g, {}, thread_id="order", checkpointer=other)
        assert seen[1] == seen[2] == expected
    finally:
        writer.close()
        other.close()


_KEYS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)
_OBJECTS = st.recursive(
    st.dictionaries(_KEYS, st.integers(-5, 5) | st.text(max_size=3), max_size=5),
    lambda inner: st.dictionaries(_KEYS, inner, max_size=4) | st.lists(inner, max_size=3),
    max_leaves=12,
)
# Values with no object at all (their text is read without a key-order pass), braces inside strings included.
_PLAIN = st.text(max_size=6) | st.lists(st.text(alphabet='{}ab"', max_size=4) | st.integers(), max_size=4)


@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=_OBJECTS | _PLAIN)
def test_the_writers_reading_of_a_value_is_the_servers(postgres_dsn: str, value: Any) -> None:
    """decode_as_jsonb_reads gives a stored text back with its keys in the order a real server's jsonb gives
    them (shortest first, then by UTF-8 bytes, any unicode), nested at every depth."""
    import psycopg2

    from ilmek import serde
    from ilmek.checkpoint._jsonb_order import decode_as_jsonb_reads

    text = serde.encode(value)
    with psycopg2.connect(postgres_dsn) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT CAST(%s AS jsonb)::text", (text,))
        served = serde.decode(cursor.fetchone()[0])
    connection.close()

    def shape(item: Any) -> Any:
        if isinstance(item, dict):
            return [(key, shape(inner)) for key, inner in item.items()]
        if isinstance(item, (list, tuple)):
            return [shape(inner) for inner in item]
        return item

    mine = decode_as_jsonb_reads(text)
    assert type(mine) is type(served)
    assert shape(served) == shape(mine)


@settings(
    max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    number=st.integers(-(2**63), 2**63 - 1),
    real=st.floats(allow_nan=False, allow_infinity=False),
    text=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    flag=st.booleans(),
)
def test_a_functions_arguments_read_back_exactly_from_their_json_object(
    postgres_dsn: str, number: int, real: float, text: str, flag: bool
) -> None:
    """The schema's functions take their arguments as one JSON object (call_arguments) and read them back
    with ->> and a cast: every bigint (the advisory lock key spans all 64 bits), every finite double (epoch
    times), any text and a boolean come back as they were sent, beside JSON spliced in unparsed."""
    import psycopg2

    from ilmek.checkpoint.sql.calls import call_arguments

    call = call_arguments(
        {"number": number, "real": real, "text": text, "flag": flag, "none": None},
        {"items": '[[1,2,"x"]]', "manifest": '{"b":["l",1,2]}'},
    )
    with psycopg2.connect(postgres_dsn) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT CAST(c ->> 'number' AS bigint), CAST(c ->> 'real' AS double precision), c ->> 'text', "
            "CAST(c ->> 'flag' AS boolean), c ->> 'none', c -> 'items', c -> 'manifest' "
            "FROM (SELECT CAST(%s AS jsonb) AS c) AS arguments",
            (call,),
        )
        row = cursor.fetchone()
    connection.close()
    assert (number, real, text, flag, None, [[1, 2, "x"]], {"b": ["l", 1, 2]}) == row
