"""Ported from the reference's ``ts/packages/checkpointers/sqlite/test/sqlite.test.ts``.

Cases about a durable store in general (a step runs once across a pause, a
pause survives a restart, history reads) run on memory, a SQLite file and
Postgres; cases about SQLite itself (opening, migrating, table prefixes, a
caller's own connection) run on :class:`SqliteCheckpointer`.
"""

from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import Callable

import pytest

from ilmek import Checkpointer, SqliteCheckpointer, resume, run
from tests.support.helpers import Calls
from tests.support.reference_edge import (
    assert_a_step_runs_once_across_a_pause,
    assert_history_reads_and_delete,
    chain_graph,
    checkout_graph,
)

pytestmark = pytest.mark.timeout(60)


def test_open_migrates_and_migrate_is_idempotent() -> None:
    """sqlite · "open() migrates, and migrate() is idempotent"."""
    with SqliteCheckpointer.open(":memory:") as checkpointer:
        checkpointer.migrate()

        assert None is checkpointer.get("nobody")


def test_a_fresh_connection_is_migrated_when_the_checkpointer_is_built() -> None:
    """sqlite · "using it before migrate() says so instead of failing on missing tables".

    Python SPEC §7: a SqliteCheckpointer creates and migrates its tables when built, so it just works.
    """
    connection = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        checkpointer = SqliteCheckpointer(connection)

        assert None is checkpointer.get("t")
    finally:
        connection.close()


def test_a_step_runs_once_across_a_pause(ref_checkpointer: Checkpointer) -> None:
    """sqlite · "a step runs once across an interrupt/resume cycle (§12.1) on SQLite"."""
    assert_a_step_runs_once_across_a_pause(ref_checkpointer, "t1")


def test_a_pause_survives_closing_the_store(
    ref_checkpointer: Checkpointer, ref_reopen: Callable[[], Checkpointer]
) -> None:
    """sqlite · "a pause survives closing the database — a new instance on the same FILE resumes it"."""
    g = checkout_graph(Calls())
    paused = run(g, {}, thread_id="t2", checkpointer=ref_checkpointer)
    assert "interrupted" == paused.status
    ref_checkpointer.close()

    second = ref_reopen()
    parked = second.get("t2")
    assert parked is not None
    assert 1 == len(parked.pending)

    finished = resume(g, "yes", thread_id="t2", checkpointer=second)
    assert ("done", ["yes"]) == (finished.status, finished.state["log"])


def test_an_effect_before_the_pause_does_not_rerun_after_a_restart(
    ref_checkpointer: Checkpointer, ref_reopen: Callable[[], Checkpointer]
) -> None:
    """sqlite · "an effect before the pause does not re-run after a restart"."""
    calls = Calls()
    g = checkout_graph(calls)
    run(g, {}, thread_id="t3", checkpointer=ref_checkpointer)
    ref_checkpointer.close()
    assert {"create_order": 1} == dict(calls)

    finished = resume(g, "yes", thread_id="t3", checkpointer=ref_reopen())

    assert "done" == finished.status
    assert {"create_order": 1, "charge": 1} == dict(calls)


def test_get_by_id_list_newest_first_with_limit_and_delete_thread(ref_checkpointer: Checkpointer) -> None:
    """sqlite · "get by id, list (newest first, with limit), and deleteThread"."""
    assert_history_reads_and_delete(ref_checkpointer, "t4")


def test_a_table_prefix_isolates_two_apps_in_one_file(tmp_path: pathlib.Path) -> None:
    """sqlite · "a custom tablePrefix isolates two apps in one file"."""
    connection = sqlite3.connect(tmp_path / "shared.db", check_same_thread=False)
    try:
        app1 = SqliteCheckpointer(connection, table_prefix="app1")
        app2 = SqliteCheckpointer(connection, table_prefix="app2")

        run(chain_graph(), {}, thread_id="same-id", checkpointer=app1)

        assert len(app1.list("same-id")) >= 1
        assert [] == app2.list("same-id")
    finally:
        connection.close()


def test_it_is_a_checkpointer() -> None:
    """sqlite · "satisfies the Checkpointer interface structurally" (in Python: it is one)."""
    with SqliteCheckpointer.open(":memory:") as checkpointer:
        assert isinstance(checkpointer, Checkpointer)


def test_a_callers_own_sqlite3_connection_works_unchanged(tmp_path: pathlib.Path) -> None:
    """sqlite · "accepts a duck-typed database, so better-sqlite3 drops in unchanged".

    Python's counterpart: the caller's own ``sqlite3`` connection is used as it is.
    """
    connection = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    try:
        checkpointer = SqliteCheckpointer(connection)
        g = checkout_graph(Calls())
        options = {"thread_id": "duck", "checkpointer": checkpointer}

        assert "interrupted" == run(g, {}, **options).status
        assert "done" == resume(g, "yes", **options).status
        checkpointer.close()
        assert [(1,)] == connection.execute("SELECT 1").fetchall()
    finally:
        connection.close()
