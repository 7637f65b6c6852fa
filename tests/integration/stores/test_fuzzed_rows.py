"""Every column of every table of the current schema, damaged at random: every read and every run of the
damaged thread returns, or raises an ilmek error, promptly, importing nothing, on SQLite and on Postgres.

The columns are read from the database itself (``PRAGMA table_info``, ``information_schema``), so a column
a later schema adds is fuzzed without anyone remembering to list it. Seeded; ``ILMEK_FUZZ_ROUNDS`` and
``ILMEK_FUZZ_SEED`` run it longer or elsewhere.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import sys
import threading
from collections.abc import Callable
from typing import Any

import psycopg2
import psycopg2.errors
import pytest

from ilmek import (
    START,
    IlmekError,
    InvalidArgumentError,
    PostgresCheckpointer,
    SchemaVersionError,
    SqliteCheckpointer,
    channel,
    graph,
    resume,
    run,
    thread_state,
)
from ilmek.checkpoint.base import Checkpointer

pytestmark = pytest.mark.timeout(300)

ROUNDS = int(os.environ.get("ILMEK_FUZZ_ROUNDS", "80"))
SEED = int(os.environ.get("ILMEK_FUZZ_SEED", "1202"))
READ_TIMEOUT = 5.0
MARKER = "ilmek_fuzz_marker_module"
ID_COLUMNS = frozenset({"thread_id", "checkpoint_id", "parent_id", "base_id", "key"})


def chat() -> Any:
    """A thread with a list channel, a value, a step, a pause and its answer: rows in every table."""

    def talk(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.step("charge", lambda: {"amount": 5, "tags": {"a", "b"}})
        answer = ctx.interrupt({"question": "ok?", "receipt": receipt})
        return {"log": [f"answered {answer}"], "last": answer}

    return (
        graph("chat", {"log": channel.append(), "last": channel.last_write()})
        .node("talk", talk)
        .edge(START, "talk")
        .compile()
    )


def junk(rng: random.Random, *, json_only: bool = False, numeric: bool = False) -> Any:
    """A value a damaged column might hold."""
    if numeric:
        return rng.choice([-1, 0, 2**62, -(2**62), 1e300, -1e-300, 3.5])
    texts = [
        "null",
        "[]",
        "{}",
        '"text"',
        "1e999" if not json_only else "1e308",
        "-1",
        str(rng.randint(-(2**70), 2**70)),
        '{"__ilmek__": "object", "type": "os.system", "fields": {"command": "touch /tmp/pwned"}}',
        f'{{"__ilmek__": "object", "type": "{MARKER}.Thing", "fields": {{}}}}',
        '{"__ilmek__": "enum", "type": "subprocess.Popen", "v": "x"}',
        '{"__ilmek__": "datetime", "v": "not a time"}',
        '{"__ilmek__": "ustr", "v": [1114111]}',
        '{"__ilmek__": "set", "v": [1, [2, 3], {"x": 1}]}',
        '{"log": ["l", 1, 99999999]}',
        '{"log": ["b", 999999]}',
        '{"kind": "cancelled", "at": "later"}',
        '{"type": "X", "message": 5, "at": 1.0}',
        '{"type": "X", "message": "m"}',
        '[{"node": "talk", "task_key": "talk", "is_send": "yes", "input": null}]',
        '["\\ud800", "\\udfff"]',
        json.dumps({"key": rng.random(), "kind": "step"}),
        "[" * rng.randint(1, 3000) + "]" * rng.randint(1, 3000),
    ]
    if not json_only:
        texts += ["", "not json", "x" * rng.randint(1, 300), "\u0000", "talk:interrupt#0"]
    return rng.choice(texts)


def within(seconds: float, action: Callable[[], Any]) -> Any:
    """``action()``'s result, raised or returned, failing the test if it takes longer than ``seconds``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = action()
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "a read of damaged rows hung"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def actions(g: Any, reader: Checkpointer) -> list[Callable[[], Any]]:
    """Every way to read the damaged thread, and the runs that continue it."""
    return [
        lambda: reader.get("victim"),
        lambda: [dict(c.channels) for c in reader.list("victim")],
        lambda: reader.read_channel("victim", "log"),
        lambda: reader.list_threads(),
        lambda: reader.list_threads(status="interrupted", metadata={"owner": "ops"}),
        lambda: reader.get_thread("victim"),
        lambda: [reader.get_journal(p.task_id) for c in reader.list("victim") for p in c.pending],
        lambda: thread_state(g, reader, "victim"),
        lambda: resume(g, "again", thread_id="victim", checkpointer=reader),
        lambda: run(g, None, thread_id="victim", checkpointer=reader),
    ]


def build_victim(checkpointer: Checkpointer) -> None:
    g = chat()
    run(g, {"log": ["a"]}, thread_id="victim", checkpointer=checkpointer)
    resume(g, "yes", thread_id="victim", checkpointer=checkpointer)
    run(g, {"log": ["b"]}, thread_id="victim", checkpointer=checkpointer)  # paused again
    checkpointer.put_thread_metadata("victim", {"owner": "ops", "tags": ("x", 1)})


def check(outcome: BaseException | None, *, names_the_thread: bool, where: str) -> None:
    if outcome is None:
        return
    assert isinstance(outcome, IlmekError), f"{where}: a raw {outcome!r} escaped"
    if names_the_thread:
        assert "victim" in str(outcome), f"{where}: {outcome!r} does not name the thread"


def outcome_of(action: Callable[[], Any]) -> BaseException | None:
    try:
        within(READ_TIMEOUT, action)
    except Exception as error:
        return error
    return None


# --- SQLite ---------------------------------------------------------------------------------------------


def sqlite_columns(connection: sqlite3.Connection) -> list[tuple[str, str]]:
    tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    found = []
    for table in sorted(t for t in tables if t.startswith("ilmek_")):
        found += [(table, row[1]) for row in connection.execute(f"PRAGMA table_info({table})")]
    return found


def sqlite_damage(
    connection: sqlite3.Connection, table: str, column: str, value: Any, *, one_row: bool = False
) -> bool:
    """Put ``value`` in the column (of every row, or of one); whether the table's constraints let it."""
    where = f" WHERE {column} IN (SELECT {column} FROM {table} LIMIT 1)" if one_row else ""
    try:
        connection.execute(f"UPDATE {table} SET {column} = ?{where}", (value,))
    except sqlite3.IntegrityError:  # a key already taken, NOT NULL, or text in an INTEGER PRIMARY KEY
        return False
    return True


def test_every_column_damaged_on_sqlite_reads_back_or_raises_an_ilmek_error(tmp_path: Any) -> None:
    """Each round damages a column of the current SQLite schema (every column in turn, then at random) and
    its neighbours; every read and run returns or raises an IlmekError naming the thread."""
    rng = random.Random(SEED)
    g = chat()
    path = tmp_path / "template.db"
    template = SqliteCheckpointer(path)
    build_victim(template)
    template.close()
    columns = sqlite_columns(sqlite3.connect(path))
    assert ("ilmek_threads", "error") in columns
    assert ("ilmek_checkpoints", "journal_chain") in columns
    assert ("ilmek_holds", "cancel_reason") in columns
    damaged: set[tuple[str, str]] = set()
    for round_number in range(max(ROUNDS, len(columns))):
        copy = tmp_path / f"round-{round_number}.db"
        copy.write_bytes(path.read_bytes())
        connection = sqlite3.connect(copy, isolation_level=None)
        connection.execute(
            "INSERT OR REPLACE INTO ilmek_holds (thread_id, owner, expires_at, acquired_at) "
            "VALUES ('victim', 'gone-1', 0, 0)"
        )
        picks = [columns[round_number % len(columns)], *rng.sample(columns, rng.randint(0, 2))]
        for table, column in picks:
            # Every row's value, or (half the time) one row's, its neighbours intact.
            first = None if rng.random() < 0.1 else junk(rng)
            if (
                sqlite_damage(connection, table, column, first, one_row=rng.random() < 0.5)
                or sqlite_damage(connection, table, column, junk(rng), one_row=True)
                or sqlite_damage(connection, table, column, junk(rng, numeric=True), one_row=True)
            ):
                damaged.add((table, column))
        connection.close()
        names = not any(column in ID_COLUMNS for _, column in picks)
        try:
            reader = SqliteCheckpointer(copy, lease_seconds=0.5)
        except IlmekError:
            continue  # the schema version itself was damaged: refused at open, as it should be
        except Exception as error:
            pytest.fail(f"round {round_number} ({picks}): opening raised a raw {error!r}")
        try:
            for action in actions(g, reader):
                check(outcome_of(action), names_the_thread=names, where=f"round {round_number} {picks}")
        finally:
            reader.close()
    assert set(columns) <= damaged | {c for c in columns if c[1] in ("rowid",)}
    assert MARKER not in sys.modules


# --- Postgres -------------------------------------------------------------------------------------------


def postgres_columns(dsn: str) -> list[tuple[str, str, str]]:
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_name LIKE 'ilmek\\_%' AND table_schema = current_schema() "
                "ORDER BY table_name, ordinal_position"
            )
            return [(t, c, d) for t, c, d in cursor.fetchall()]
    finally:
        connection.close()


def postgres_damage(dsn: str, table: str, column: str, data_type: str, rng: random.Random) -> bool:
    """Put a value of the column's own type that ilmek did not write there; whether it took."""
    if data_type == "jsonb":
        value: Any = junk(rng, json_only=True)
        cast = "::jsonb"
    elif data_type in ("bigint", "integer", "double precision"):
        value, cast = junk(rng, numeric=True), ""
        if data_type != "double precision":
            value = int(value) if abs(value) < 2**62 else -1
    else:
        value, cast = rng.choice(["", "x" * 300, "talk:interrupt#0", "victim", "\ud7ff", "-1"]), ""
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {column} = %s{cast}", (value,))
    except (psycopg2.Error, OverflowError, ValueError):
        return False  # a constraint or type the database enforces: not a damage it can hold
    finally:
        connection.close()
    return True


@pytest.mark.postgres
def test_every_column_damaged_on_postgres_reads_back_or_raises_an_ilmek_error(postgres_dsn: str) -> None:
    """The same on Postgres, every column of the current schema with values of its own type (JSONB takes
    only JSON); one fresh thread per round in one database."""
    rng = random.Random(SEED)
    g = chat()
    columns = postgres_columns(postgres_dsn)
    assert ("ilmek_threads", "error", "jsonb") in columns
    damaged: set[tuple[str, str]] = set()
    writer = PostgresCheckpointer(psycopg2.connect(postgres_dsn))
    rounds = max(len(columns), ROUNDS // 2)
    for round_number in range(rounds):
        for table in ("items", "logs", "blobs", "journals", "checkpoints", "holds", "threads"):
            connection = psycopg2.connect(postgres_dsn)
            with connection, connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM ilmek_{table}")
            connection.close()
        writer.delete_thread("victim")
        build_victim(writer)
        picks = [columns[round_number % len(columns)], *rng.sample(columns, rng.randint(0, 2))]
        for table, column, data_type in picks:
            if table == "ilmek_meta":
                continue  # one database for every round: the version is damaged on SQLite
            if postgres_damage(postgres_dsn, table, column, data_type, rng):
                damaged.add((table, column))
        names = not any(column in ID_COLUMNS for _, column, _ in picks)
        reader = PostgresCheckpointer(psycopg2.connect(postgres_dsn), lease_seconds=0.5)
        for action in actions(g, reader):
            check(outcome_of(action), names_the_thread=names, where=f"round {round_number} {picks}")
        reader._adapter._shared.connection.close()  # type: ignore[attr-defined]
    writer._adapter._shared.connection.close()  # type: ignore[attr-defined]
    wanted = {(t, c) for t, c, _ in columns if t != "ilmek_meta"}
    assert len(damaged & wanted) >= len(wanted) * 0.8, sorted(wanted - damaged)
    assert MARKER not in sys.modules


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_metadata_key_no_text_can_hold_is_refused_alike_everywhere(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """A lone surrogate in a metadata key, written or filtered by: an InvalidArgumentError on every backend
    (Postgres raised the driver's UnicodeEncodeError for the filter, and stored such metadata tagged, where
    no filter, not even on its other keys, could find it)."""
    if backend == "sqlite":
        store: Checkpointer = SqliteCheckpointer(tmp_path / "keys.db")
    else:
        store = PostgresCheckpointer(psycopg2.connect(request.getfixturevalue("postgres_dsn")))
    try:
        with pytest.raises(InvalidArgumentError, match="lone surrogates"):
            store.list_threads(metadata={"\ud800": 1})
        with pytest.raises(InvalidArgumentError, match="lone surrogates"):
            store.put_thread_metadata("surrogate-key", {"\ud800": 1, "plain": "yes"})
        store.put_thread_metadata("plain-keys", {"plain": "yes", "emoji 🙂": "\ud800 in a value is fine"})
        assert ["plain-keys"] == [
            t.id for t in store.list_threads(metadata={"emoji 🙂": "\ud800 in a value is fine"})
        ]
    finally:
        store.close()
        if backend == "postgres":
            store._adapter._shared.connection.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("stored", "said"),
    [
        ("-1", "version '-1', which no ilmek ever wrote"),
        ("0", "version '0', which no ilmek ever wrote"),
        ("-7", "version '-7', which no ilmek ever wrote"),
        ("1.5", "version '1.5', which is not a number"),
        ("abc", "version 'abc', which is not a number"),
        ("999", f"version 999, this ilmek uses version {SqliteCheckpointer.SCHEMA_VERSION}: upgrade ilmek"),
    ],
)
def test_a_damaged_schema_version_is_refused_at_open_with_the_stored_text(
    tmp_path: Any, stored: str, said: str
) -> None:
    """A ``schema_version`` of -1 once raised a raw KeyError(-1) at every SQLite open (it looked for the
    upgrade from version -1); every value no ilmek wrote is a SchemaVersionError quoting it, and a newer
    version says to upgrade ilmek."""
    path = tmp_path / "damaged.db"
    build_victim(SqliteCheckpointer(path))
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("UPDATE ilmek_meta SET value = ? WHERE key = 'schema_version'", (stored,))
    connection.close()
    with pytest.raises(SchemaVersionError, match=re.escape(said)):
        SqliteCheckpointer(path).get("victim")
