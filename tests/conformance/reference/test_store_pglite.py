"""Ported from the reference's ``ts/packages/checkpointers/postgres/test/pglite.test.ts``.

The reference runs its Postgres checkpointer on PGlite (Postgres in WASM);
here the same cases run on a real PostgreSQL. Its contract run is
``test_store_contract.py`` (on Postgres among the reference stores), with one
difference the Python SPEC makes: a NUL character round-trips (§8) where
PGlite refuses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest

from ilmek import Checkpointer, PostgresCheckpointer
from tests.support.reference_edge import done, keys_of, make_checkpoint

pytestmark = pytest.mark.timeout(60)

BAD_PREFIXES = ["", "1app", "app-1", "app 1", "app;DROP TABLE x;--", "a.b", 'ilmek"', "ümlaut"]


@pytest.fixture
def connection(postgres_dsn: str) -> Iterator[Any]:
    """A psycopg2 connection of the caller's own, on a fresh database."""
    with contextlib.closing(psycopg2.connect(postgres_dsn)) as opened:
        yield opened


class CountingClient:
    """The generic client kind (``execute(sql, params)``), counting the statements it is sent."""

    paramstyle = "pyformat"

    def __init__(self) -> None:
        self.sent = 0

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        self.sent += 1
        return []


def test_migrate_is_idempotent_and_stores_values_as_jsonb(connection: Any) -> None:
    """pglite · "migrate() is idempotent and creates jsonb columns".

    Python stores a checkpoint's values in ``blobs`` and ``items`` rows beside it (storage as deltas,
    beyond ilmek/1): those and a journal ``entry`` are the value columns.
    """
    checkpointer = PostgresCheckpointer(connection)
    checkpointer.migrate()
    checkpointer.migrate()

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE (table_name, column_name) IN (('ilmek_journals', 'entry'), ('ilmek_blobs', 'value'),"
            " ('ilmek_items', 'value')) ORDER BY table_name"
        )
        columns = cursor.fetchall()
    connection.rollback()

    assert [
        ("ilmek_blobs", "value", "jsonb"),
        ("ilmek_items", "value", "jsonb"),
        ("ilmek_journals", "entry", "jsonb"),
    ] == columns


def test_two_prefixes_in_one_database_see_nothing_of_each_other(connection: Any) -> None:
    """pglite · "two prefixes in one database see neither each other's checkpoints nor journals"."""
    app_a = PostgresCheckpointer(connection, table_prefix="app_a")
    app_b = PostgresCheckpointer(connection, table_prefix="app_b")
    app_a.migrate()
    app_b.migrate()
    app_a.put("shared", make_checkpoint("shared"))
    app_a.put_journal("shared:root:n", (done("k#0", "a's"),))

    assert None is app_b.get("shared")
    assert () == app_b.get_journal("shared:root:n")

    app_b.delete_thread("shared")
    assert None is not app_a.get("shared")
    assert ["k#0"] == keys_of(app_a.get_journal("shared:root:n"))


def test_a_thread_id_that_is_sql_text_is_stored_as_data(ref_checkpointer: Checkpointer) -> None:
    """pglite · "a thread id that is SQL text is stored as data, not executed"."""
    evil = "x'); DROP TABLE ilmek_checkpoints; --"
    ref_checkpointer.put(evil, make_checkpoint(evil))
    ref_checkpointer.put("anyone-else", make_checkpoint("anyone-else"))

    ref_checkpointer.delete_thread(evil)

    assert None is ref_checkpointer.get(evil)
    assert 1 == len(ref_checkpointer.list("anyone-else"))


@pytest.mark.parametrize("prefix", BAD_PREFIXES)
def test_a_bad_prefix_is_refused_before_any_sql_is_sent(prefix: str) -> None:
    """pglite · "the prefix <bad> is refused before any SQL is sent"."""
    client = CountingClient()

    with pytest.raises(ValueError, match="table_prefix"):
        PostgresCheckpointer(client, table_prefix=prefix)

    assert 0 == client.sent
