"""Stores the hold and write-path tests attack: a SQLite file and a fresh Postgres database,
opened by several checkpointers as separate processes would, and a count of each table's rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest

from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer

#: A short lease, for the tests that watch a hold lapse or be renewed.
LEASE = 0.4
#: A lease no loaded machine lets lapse by starving a renewal: for tests where a
#: lapse would be a failure for a reason other than the one they test.
STEADY_LEASE = 30.0


class Store:
    """Opens checkpointers on one store, as separate processes would."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: Any) -> None:
        self.kind = kind
        self.opened: list[Checkpointer] = []
        self.pools: list[Any] = []
        #: Connections and clients a test opened itself, closed after its checkpointers.
        self.closing: list[Any] = []
        if kind == "sqlite":
            self.path = tmp_path / "holds.db"
        else:
            self.dsn: str = request.getfixturevalue("postgres_dsn")

    def open(self, *, lease_seconds: float = LEASE, maxconn: int = 8) -> Checkpointer:
        checkpointer: Checkpointer
        if self.kind == "sqlite":
            checkpointer = SqliteCheckpointer(self.path, lease_seconds=lease_seconds)
        else:
            pool = psycopg2.pool.ThreadedConnectionPool(1, maxconn, self.dsn)
            self.pools.append(pool)
            checkpointer = PostgresCheckpointer(pool, lease_seconds=lease_seconds)
        self.opened.append(checkpointer)
        return checkpointer

    def close(self) -> None:
        for checkpointer in self.opened:
            checkpointer.close()
        for pool in self.pools:
            pool.closeall()
        for resource in self.closing:
            resource.close()


@pytest.fixture(params=["sqlite", "postgres"], name="store")
def store_fixture(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    """A SQLite file or a fresh Postgres database, opened like separate processes would."""
    opened = Store(request.param, request, tmp_path)
    yield opened
    opened.close()


def rows_of(store: Store, thread_id: str) -> dict[str, int]:
    """How many rows each ilmek table holds for a thread, straight from the database."""
    tables = ("threads", "checkpoints", "blobs", "logs", "journals", "holds")
    counts: dict[str, int] = {}
    if store.kind == "sqlite":
        import sqlite3

        connection = sqlite3.connect(store.path)
        try:
            for table in tables:
                counts[table] = connection.execute(
                    f"SELECT count(*) FROM ilmek_{table} WHERE thread_id = ?", (thread_id,)
                ).fetchone()[0]
            counts["items"] = connection.execute(
                "SELECT count(*) FROM ilmek_items WHERE log_id NOT IN (SELECT log_id FROM ilmek_logs)"
            ).fetchone()[0]
        finally:
            connection.close()
    else:
        connection = psycopg2.connect(store.dsn)
        try:
            with connection.cursor() as cursor:
                for table in tables:
                    cursor.execute(f"SELECT count(*) FROM ilmek_{table} WHERE thread_id = %s", (thread_id,))
                    counts[table] = cursor.fetchone()[0]
                cursor.execute(
                    "SELECT count(*) FROM ilmek_items WHERE log_id NOT IN (SELECT log_id FROM ilmek_logs)"
                )
                counts["items"] = cursor.fetchone()[0]
        finally:
            connection.close()
    return counts


def execute(store: Store, statement: str) -> None:
    """Run one statement of plain SQL (no parameters) on the store, outside ilmek, and commit it."""
    if store.kind == "sqlite":
        import sqlite3

        connection = sqlite3.connect(store.path)
        try:
            with connection:
                connection.execute(statement)
        finally:
            connection.close()
    else:
        connection = psycopg2.connect(store.dsn)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(statement)
        finally:
            connection.close()
