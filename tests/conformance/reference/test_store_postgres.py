"""Ported from the reference's ``ts/packages/checkpointers/postgres/test/postgres.test.ts``.

The reference drives a fake client (``FakePg``) and keeps a real database for
one smoke test; here every case runs against a real PostgreSQL, never a fake.
Cases about a durable store in general run on memory, a SQLite file and
Postgres; cases about Postgres itself (migrate, prefixes, a DSN) on Postgres.

Not ported: the ``SQL_TAGS`` check inside "migrate() creates both tables"
(statement tags exist for the reference's test double only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import pytest

from ilmek import Checkpointer, PostgresCheckpointer, resume, run
from tests.support.helpers import Calls
from tests.support.reference_edge import (
    assert_a_step_runs_once_across_a_pause,
    assert_history_reads_and_delete,
    chain_graph,
    checkout_graph,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def connection(postgres_dsn: str) -> Iterator[Any]:
    """A psycopg2 connection of the caller's own, on a fresh database."""
    with contextlib.closing(psycopg2.connect(postgres_dsn)) as opened:
        yield opened


def tables_named(connection: Any, pattern: str) -> set[str]:
    """The tables whose names match a LIKE pattern."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s", (pattern,)
        )
        found = {row[0] for row in cursor.fetchall()}
    connection.rollback()
    return found


def test_migrate_creates_both_tables_idempotently(connection: Any) -> None:
    """postgres · "migrate() creates both tables, idempotently"."""
    checkpointer = PostgresCheckpointer(connection, table_prefix="fresh")

    checkpointer.migrate()
    checkpointer.migrate()

    assert {"fresh_checkpoints", "fresh_journals"} <= tables_named(connection, "fresh\\_%")


def test_a_step_runs_once_across_a_pause(ref_checkpointer: Checkpointer) -> None:
    """postgres · "a step runs once across an interrupt/resume cycle (§12.1) on Postgres"."""
    assert_a_step_runs_once_across_a_pause(ref_checkpointer, "t1")


def test_a_second_checkpointer_on_the_same_store_resumes_the_pause(
    ref_checkpointer: Checkpointer, ref_reopen: Callable[[], Checkpointer]
) -> None:
    """postgres · "durable across a fresh checkpointer instance sharing the same database"."""
    g = checkout_graph(Calls())
    assert "interrupted" == run(g, {}, thread_id="t2", checkpointer=ref_checkpointer).status

    finished = resume(g, "yes", thread_id="t2", checkpointer=ref_reopen())

    assert ("done", ["yes"]) == (finished.status, finished.state["log"])


def test_get_by_id_list_newest_first_with_limit_and_delete_thread(ref_checkpointer: Checkpointer) -> None:
    """postgres · "get by id, list (newest first, with limit), and deleteThread"."""
    assert_history_reads_and_delete(ref_checkpointer, "t3")


def test_it_is_a_checkpointer(connection: Any) -> None:
    """postgres · "satisfies the Checkpointer interface structurally" (in Python: it is one)."""
    assert isinstance(PostgresCheckpointer(connection), Checkpointer)


def test_a_table_prefix_isolates_two_apps_in_one_database(connection: Any) -> None:
    """postgres · "a custom tablePrefix isolates two apps in one database"."""
    app1 = PostgresCheckpointer(connection, table_prefix="app1")
    app2 = PostgresCheckpointer(connection, table_prefix="app2")
    app1.migrate()
    app2.migrate()

    run(chain_graph(), {}, thread_id="t", checkpointer=app1)

    assert len(app1.list("t")) >= 1
    assert [] == app2.list("t")
    assert {"app1_checkpoints", "app2_checkpoints"} <= tables_named(connection, "app_\\_checkpoints")


def test_a_live_round_trip_through_a_dsn(postgres_dsn: str) -> None:
    """postgres · "live Postgres round-trip" (the reference's DATABASE_URL smoke test, always run here)."""
    with PostgresCheckpointer.connect(postgres_dsn) as checkpointer:
        checkpointer.migrate()
        g = checkout_graph(Calls())
        options: dict[str, Any] = {"thread_id": "t-live", "checkpointer": checkpointer}

        assert "interrupted" == run(g, {}, **options).status
        assert "done" == resume(g, "yes", **options).status
        checkpointer.delete_thread("t-live")
        assert None is checkpointer.get("t-live")
