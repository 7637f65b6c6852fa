"""Ported from the reference's ``ts/packages/checkpointers/sqlite/test/sqlite.edge.test.ts``.

The knobs only the SQLite backend has: table prefixes, migration, WAL, a
caller's connection, closing, a corrupt row. The reference's two contract
runs (``:memory:`` and a WAL file) are ``test_store_contract.py``, which runs
on a SQLite file among the reference stores.

Not ported: "wal: false leaves the journal mode alone" (Python has no such
option: SPEC §7 puts every file ilmek opens in WAL).
"""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
from collections.abc import Callable, Iterator

import psycopg2
import pytest

from ilmek import IlmekError, PostgresCheckpointer, SchemaVersionError, SqliteCheckpointer, StorageError
from tests.support.reference_edge import done, keys_of, make_checkpoint

pytestmark = pytest.mark.timeout(60)

BAD_PREFIXES = ["", "1app", "app-1", "app 1", "app;DROP TABLE x;--", "a.b", 'ilmek"', "ümlaut"]
GOOD_PREFIXES = ["a", "_", "App_2", "ilmek_v2"]


@pytest.fixture
def connection() -> Iterator[sqlite3.Connection]:
    """A caller's own ``:memory:`` connection, closed by the test, never by ilmek."""
    opened = sqlite3.connect(":memory:", check_same_thread=False)
    yield opened
    opened.close()


def table_names(connection: sqlite3.Connection) -> list[str]:
    """The tables of a SQLite database, by name."""
    return [
        row[0]
        for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]


# --- tablePrefix -----------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", BAD_PREFIXES)
def test_a_bad_prefix_is_refused_before_any_sql_runs(connection: sqlite3.Connection, prefix: str) -> None:
    """sqlite.edge · "the prefix <bad> is refused before any SQL runs"."""
    with pytest.raises(ValueError, match="table_prefix"):
        SqliteCheckpointer(connection, table_prefix=prefix)

    assert [] == connection.execute("SELECT name FROM sqlite_master").fetchall()


def test_a_hostile_prefix_passed_to_open_is_refused_too() -> None:
    """sqlite.edge · "a hostile prefix passed to open() is refused too"."""
    with pytest.raises(ValueError, match="table_prefix"):
        SqliteCheckpointer.open(":memory:", table_prefix="x; --")


@pytest.mark.parametrize("prefix", GOOD_PREFIXES)
def test_a_good_prefix_names_every_table(connection: sqlite3.Connection, prefix: str) -> None:
    """sqlite.edge · "the prefix <good> names both tables".

    Python SPEC §7: ``<prefix>_checkpoints``, ``<prefix>_journals`` and any other table ilmek needs.
    Names compare as SQLite resolves them, ignoring case (ilmek folds a prefix to lower case).
    """
    SqliteCheckpointer(connection, table_prefix=prefix).migrate()

    names = [name.lower() for name in table_names(connection) if name != "sqlite_sequence"]

    assert {f"{prefix}_checkpoints".lower(), f"{prefix}_journals".lower()} <= set(names)
    assert [] == [name for name in names if not name.startswith(f"{prefix}_".lower())]


def test_two_prefixes_in_one_file_see_nothing_of_each_other(tmp_path: pathlib.Path) -> None:
    """sqlite.edge · "two prefixes on one file see neither each other's checkpoints nor journals"."""
    shared = sqlite3.connect(tmp_path / "prefixes.db", check_same_thread=False)
    try:
        app_a = SqliteCheckpointer(shared, table_prefix="app_a")
        app_b = SqliteCheckpointer(shared, table_prefix="app_b")
        app_a.put("shared", make_checkpoint("shared"))
        app_a.put_journal("shared:root:n", (done("k#0", "a's"),))

        assert None is app_b.get("shared")
        assert () == app_b.get_journal("shared:root:n")

        app_b.delete_thread("shared")
        assert None is not app_a.get("shared")
        assert ["k#0"] == keys_of(app_a.get_journal("shared:root:n"))
    finally:
        shared.close()


# --- migration and lifecycle -------------------------------------------------------------------------


def test_every_operation_works_on_a_fresh_connection_at_once(connection: sqlite3.Connection) -> None:
    """sqlite.edge · "every operation refuses to run before migrate()".

    Python SPEC §7: building a SqliteCheckpointer migrates, so there is no "before migrate()".
    """
    checkpointer = SqliteCheckpointer(connection)
    operations: list[Callable[[], object]] = [
        lambda: checkpointer.put("t", make_checkpoint("t")),
        lambda: checkpointer.get("t"),
        lambda: checkpointer.list("t"),
        lambda: checkpointer.put_journal("t:root:n", ()),
        lambda: checkpointer.get_journal("t:root:n"),
        lambda: checkpointer.drop_journal("t:root:n"),
        lambda: checkpointer.delete_thread("t"),
    ]

    for operation in operations:
        operation()

    assert None is checkpointer.get("t")


def test_every_operation_refuses_before_migrate_on_postgres(postgres_dsn: str) -> None:
    """sqlite.edge · "every operation refuses to run before migrate()", where it has meaning: Postgres.

    A PostgresCheckpointer never creates tables on its own (SPEC §7): each port operation on
    tables not yet migrated is a SchemaVersionError saying to run migrate(), and creates nothing.
    """
    with PostgresCheckpointer.connect(postgres_dsn, table_prefix="unmigrated") as checkpointer:
        operations: dict[str, Callable[[], object]] = {
            "put": lambda: checkpointer.put("t", make_checkpoint("t")),
            "get": lambda: checkpointer.get("t"),
            "list": lambda: checkpointer.list("t"),
            "put_journal": lambda: checkpointer.put_journal("t:root:n", ()),
            "get_journal": lambda: checkpointer.get_journal("t:root:n"),
            "drop_journal": lambda: checkpointer.drop_journal("t:root:n"),
            "delete_thread": lambda: checkpointer.delete_thread("t"),
        }
        refused = {}
        for name, operation in operations.items():
            with pytest.raises(SchemaVersionError, match=r"migrate\(\)") as raised:
                operation()
            refused[name] = type(raised.value)

    assert dict.fromkeys(operations, SchemaVersionError) == refused
    with contextlib.closing(psycopg2.connect(postgres_dsn)) as check, check.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'unmigrated%'")
        assert [(0,)] == cursor.fetchall()


def test_migrating_twice_keeps_the_data_written_in_between() -> None:
    """sqlite.edge · "migrating twice keeps the data written in between"."""
    with SqliteCheckpointer.open(":memory:") as checkpointer:
        checkpoint = make_checkpoint("t")
        checkpointer.put("t", checkpoint)
        checkpointer.migrate()

        found = checkpointer.get("t")

        assert checkpoint.id == (found.id if found else None)


def test_a_file_database_is_switched_to_wal(tmp_path: pathlib.Path) -> None:
    """sqlite.edge · "a file database is switched to WAL by default"."""
    path = tmp_path / "wal.db"
    SqliteCheckpointer.open(path).close()

    check = sqlite3.connect(path)
    try:
        assert [("wal",)] == check.execute("PRAGMA journal_mode").fetchall()
    finally:
        check.close()


def test_a_callers_connection_keeps_its_journal_mode_and_still_migrates(tmp_path: pathlib.Path) -> None:
    """sqlite.edge · "a database that refuses the WAL pragma still migrates".

    Python only accepts ``sqlite3`` connections: a caller's connection in its
    own journal mode is left in it, and ilmek migrates and works there.
    """
    caller = sqlite3.connect(tmp_path / "delete.db", check_same_thread=False)
    try:
        assert [("delete",)] == caller.execute("PRAGMA journal_mode").fetchall()
        checkpointer = SqliteCheckpointer(caller)
        checkpointer.put("t", make_checkpoint("t"))

        assert None is not checkpointer.get("t")
        assert [("delete",)] == caller.execute("PRAGMA journal_mode").fetchall()
    finally:
        caller.close()


def test_closing_a_checkpointer_leaves_the_callers_connection_open(connection: sqlite3.Connection) -> None:
    """sqlite.edge · "close() on a duck-typed database without close() is a no-op".

    Python SPEC §7: a connection passed in is never closed by ilmek.
    """
    checkpointer = SqliteCheckpointer(connection)

    checkpointer.close()

    assert [(1,)] == connection.execute("SELECT 1").fetchall()


@pytest.mark.parametrize("where", ["memory", "file"])
def test_a_closed_checkpointer_fails_loudly_instead_of_losing_writes(
    tmp_path: pathlib.Path, where: str
) -> None:
    """sqlite.edge · "a closed checkpointer fails loudly instead of losing writes" (SPEC §9: StorageError)."""
    checkpointer = SqliteCheckpointer.open(":memory:" if where == "memory" else tmp_path / "closed.db")
    checkpointer.close()

    with pytest.raises(StorageError):
        checkpointer.put("t", make_checkpoint("t"))


def test_a_corrupt_row_is_an_error_not_an_empty_thread(connection: sqlite3.Connection) -> None:
    """sqlite.edge · "a corrupted row surfaces as a parse error, not as an empty thread"."""
    checkpointer = SqliteCheckpointer(connection)
    connection.execute(
        "INSERT INTO ilmek_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, manifest,"
        " next, pending, task_journals, metadata) VALUES ('t', 'ckpt-x', NULL, NULL, 0, 0, '{not json',"
        " '[]', '[]', '{}', '{}')"
    )
    connection.commit()

    with pytest.raises((IlmekError, ValueError)):
        checkpointer.get("t")


def test_a_lone_surrogate_survives() -> None:
    """sqlite.edge · "a lone surrogate survives because JSON escapes it"."""
    with SqliteCheckpointer.open(":memory:") as checkpointer:
        checkpointer.put("t", make_checkpoint("t", channels={"s": "x\ud800y"}))

        found = checkpointer.get("t")

        assert "x\ud800y" == (found.channels["s"] if found else None)
