"""A store written before ``due_at`` existed (SQLite schema 2, Postgres schema 4) migrates: the column and its
index appear, a thread paused there resumes, and a new deadline is due."""

from __future__ import annotations

import datetime as dt
import pathlib
import sqlite3
from typing import Any

import pytest

from ilmek import START, Checkpointer, channel, graph, resume, run, tick
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.postgres import fresh_checkpointer, query

DUE = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def _ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    plain = ctx.interrupt("plain?", key="plain")
    timed = ctx.interrupt("timed?", key="timed", deadline=DUE, on_timeout="late")
    return {"log": [plain, timed]}


GRAPH = graph("migrating", {"log": channel.append()}).node("ask", _ask).edge(START, "ask").compile()


def _resumes_and_comes_due(checkpointer: Checkpointer) -> None:
    assert "interrupted" == resume(GRAPH, "old", thread_id="old", checkpointer=checkpointer).status
    info = checkpointer.get_thread("old")
    assert info is not None
    assert DUE == info.due_at
    (woke,) = tick(GRAPH, checkpointer, now=DUE)
    assert ["old", "late"] == woke.state["log"]


def test_a_sqlite_store_of_schema_2_migrates_to_due_at(tmp_path: pathlib.Path) -> None:
    """SQLite at schema 2 (no due_at column, no index) upgrades when opened; its paused thread goes on."""
    path = tmp_path / "old.db"
    with SqliteCheckpointer(str(path)) as checkpointer:
        assert "interrupted" == run(GRAPH, {}, thread_id="old", checkpointer=checkpointer).status
    with sqlite3.connect(path) as connection:
        connection.execute("DROP INDEX ilmek_threads_due")
        connection.execute("ALTER TABLE ilmek_threads DROP COLUMN due_at")
        for table in ("ilmek_blobs", "ilmek_items"):  # what schema 5 added
            connection.execute(f"ALTER TABLE {table} DROP COLUMN origin")
        connection.execute("UPDATE ilmek_meta SET value = '2' WHERE key = 'schema_version'")
    with SqliteCheckpointer(str(path)) as checkpointer:
        _resumes_and_comes_due(checkpointer)
    with sqlite3.connect(path) as connection:
        assert [(str(SqliteCheckpointer.SCHEMA_VERSION),)] == connection.execute(
            "SELECT value FROM ilmek_meta"
        ).fetchall()
        indexes = {row[1] for row in connection.execute("PRAGMA index_list(ilmek_threads)")}
    assert "ilmek_threads_due" in indexes


@pytest.mark.postgres
def test_a_postgres_store_of_schema_4_migrates_to_due_at(postgres_dsn: str) -> None:
    """Postgres at schema 4 is refused until migrated; migrate adds due_at, its index and the superstep
    function that writes it; the paused thread goes on."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        assert "interrupted" == run(GRAPH, {}, thread_id="old", checkpointer=checkpointer).status
    query(postgres_dsn, "DROP INDEX ilmek_threads_due")
    query(postgres_dsn, "ALTER TABLE ilmek_threads DROP COLUMN due_at")
    query(postgres_dsn, "UPDATE ilmek_meta SET value = '4' WHERE key = 'schema_version'")
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        checkpointer.migrate()
        _resumes_and_comes_due(checkpointer)
    assert [(str(PostgresCheckpointer.SCHEMA_VERSION),)] == query(
        postgres_dsn, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'"
    )
    assert [("ilmek_threads_due",)] == query(
        postgres_dsn, "SELECT indexname FROM pg_indexes WHERE indexname = 'ilmek_threads_due'"
    )
