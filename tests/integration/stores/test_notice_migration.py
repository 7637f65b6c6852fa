"""A store written before the notice outbox existed (SQLite schema 3, Postgres schema 5) migrates: the table
and its index appear, a thread paused there resumes, and its next pause is noticed from the outbox."""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

import pytest

from ilmek import START, Checkpointer, PauseNotice, channel, graph, resume, run
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.postgres import fresh_checkpointer, query

FAR = float(2**33)


def _ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"log": [ctx.interrupt("first?", key="first"), ctx.interrupt("second?", key="second")]}


GRAPH = graph("noticing", {"log": channel.append()}).node("ask", _ask).edge(START, "ask").compile()


def _resumes_and_notices(checkpointer: Checkpointer) -> None:
    seen: list[PauseNotice] = []

    def failing(notice: PauseNotice) -> None:
        raise OSError("no network")

    result = resume(GRAPH.bind(on_pause=failing), "old", thread_id="old", checkpointer=checkpointer)
    assert "interrupted" == result.status
    (waiting,) = checkpointer.due_notices(FAR)
    assert ("old", result.checkpoint_id, "ask:second#0") == (
        waiting.thread_id,
        waiting.checkpoint_id,
        waiting.pause_id,
    )
    run(GRAPH.bind(on_pause=seen.append), {}, thread_id="new", checkpointer=checkpointer)
    assert ["new"] == [n.thread_id for n in seen]


def test_a_sqlite_store_of_schema_3_migrates_to_the_outbox(tmp_path: pathlib.Path) -> None:
    """SQLite at schema 3 (no notices table) upgrades when opened; its paused thread goes on."""
    path = tmp_path / "old.db"
    with SqliteCheckpointer(str(path)) as checkpointer:
        assert "interrupted" == run(GRAPH, {}, thread_id="old", checkpointer=checkpointer).status
    with sqlite3.connect(path) as connection:
        connection.execute("DROP TABLE ilmek_notices")
        for table in ("ilmek_blobs", "ilmek_items"):  # what schema 5 added
            connection.execute(f"ALTER TABLE {table} DROP COLUMN origin")
        connection.execute("UPDATE ilmek_meta SET value = '3' WHERE key = 'schema_version'")
    with SqliteCheckpointer(str(path)) as checkpointer:
        _resumes_and_notices(checkpointer)
    with sqlite3.connect(path) as connection:
        assert [(str(SqliteCheckpointer.SCHEMA_VERSION),)] == connection.execute(
            "SELECT value FROM ilmek_meta"
        ).fetchall()
        indexes = {row[1] for row in connection.execute("PRAGMA index_list(ilmek_notices)")}
    assert "ilmek_notices_due" in indexes


@pytest.mark.postgres
def test_a_postgres_store_of_schema_5_migrates_to_the_outbox(postgres_dsn: str) -> None:
    """Postgres at schema 5 is migrated by migrate(): the outbox and its index appear; the thread goes on."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        assert "interrupted" == run(GRAPH, {}, thread_id="old", checkpointer=checkpointer).status
    query(postgres_dsn, "DROP TABLE ilmek_notices")
    for table in ("ilmek_blobs", "ilmek_items"):  # what schema 7 added
        query(postgres_dsn, f"ALTER TABLE {table} DROP COLUMN origin")
    query(postgres_dsn, "UPDATE ilmek_meta SET value = '5' WHERE key = 'schema_version'")
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        checkpointer.migrate()
        _resumes_and_notices(checkpointer)
    assert [(str(PostgresCheckpointer.SCHEMA_VERSION),)] == query(
        postgres_dsn, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'"
    )
    assert [("ilmek_notices_due",)] == query(
        postgres_dsn, "SELECT indexname FROM pg_indexes WHERE indexname = 'ilmek_notices_due'"
    )
