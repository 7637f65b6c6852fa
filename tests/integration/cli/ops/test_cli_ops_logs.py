"""What the library logs for operators: retries, lost holds, migrations, recoveries, cancels, by thread."""

from __future__ import annotations

import logging
import pathlib
import sqlite3
import threading
import time
from typing import Any

import psycopg2
import psycopg2.pool
import pytest

from ilmek import END, START, HoldLostError, channel, graph, recover, request_cancel, run
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.graph import CompiledGraph
from ilmek.loading import load_graph
from tests.support.cli_ops import WAIT_SECONDS, Modules, Store, failed_threads, wait_until
from tests.support.crashworker import Effects

pytestmark = pytest.mark.timeout(120)


# --- what the library logs for operators ----------------------------------------------------------


def ilmek_records(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[logging.LogRecord]:
    """The records of ``logger`` whose message contains ``text``."""
    return [record for record in caplog.records if record.name == logger and text in record.getMessage()]


def counting_graph() -> CompiledGraph:
    """One node, one step: the smallest run that writes."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"n": ctx.step("count", lambda: state["n"] + 1)}

    return (
        graph("ops-log", {"n": channel.last_write(0)})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def test_a_sqlite_write_lock_held_elsewhere_briefly_is_waited_out_within_the_busy_timeout(
    caplog: pytest.LogCaptureFixture, tmp_path: pathlib.Path
) -> None:
    """Another connection holds BEGIN IMMEDIATE for a moment shorter than the busy timeout: the run waits
    for it (SQLite's own busy wait) and finishes; nothing is logged as failing."""
    path = tmp_path / "locked.db"
    with SqliteCheckpointer(path, busy_timeout=2.0) as checkpointer:
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            release = threading.Timer(0.2, lambda: blocker.execute("COMMIT"))
            release.start()
            with caplog.at_level(logging.INFO, logger="ilmek"):
                result = run(counting_graph(), {}, thread_id="locked-out", checkpointer=checkpointer)
            release.join()
        finally:
            blocker.close()
    assert "done" == result.status
    assert [] == [record for record in caplog.records if record.levelno >= logging.WARNING]


@pytest.mark.postgres
def test_a_postgres_lock_timeout_is_retried_and_logged_with_the_thread(
    caplog: pytest.LogCaptureFixture, postgres_dsn: str
) -> None:
    """A table lock held elsewhere past lock_timeout (55P03): retried; `ilmek.storage` names the thread."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, options="-c lock_timeout=50")
    blocker = psycopg2.connect(postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(pool)
        checkpointer.migrate()
        with blocker.cursor() as cursor:
            cursor.execute("LOCK TABLE ilmek_threads IN ACCESS EXCLUSIVE MODE")
        release = threading.Timer(0.3, blocker.commit)
        release.start()
        with caplog.at_level(logging.INFO, logger="ilmek"):
            checkpointer.put_thread_metadata("locked-out", {"owner": "ops"})
        release.join()
        checkpointer.close()
    finally:
        blocker.close()
        pool.closeall()
    retries = ilmek_records(caplog, "ilmek.storage", "retrying after a transient database error")
    assert retries, [record.getMessage() for record in caplog.records]
    assert {"locked-out"} == {getattr(record, "thread_id", None) for record in retries}


def test_a_run_whose_thread_is_deleted_logs_its_lost_hold_with_the_thread(
    caplog: pytest.LogCaptureFixture, store: Store
) -> None:
    """delete_thread while a run holds the thread: its hold is lost, `ilmek.holds` warns naming the thread."""
    checkpointer, other = store.open(), store.open()
    started, go_on = threading.Event(), threading.Event()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", lambda: "recorded")
        started.set()
        assert go_on.wait(WAIT_SECONDS)
        ctx.step("after", lambda: "never recorded")
        return {"n": 1}

    g = graph("ops-doomed", {"n": channel.last_write(0)}).node("work", work).edge(START, "work").compile()
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            run(g, {}, thread_id="doomed", checkpointer=checkpointer)
        except HoldLostError as error:
            failures.append(error)

    with caplog.at_level(logging.INFO, logger="ilmek"):
        runner = threading.Thread(target=drive)
        runner.start()
        assert started.wait(WAIT_SECONDS)
        other.delete_thread("doomed")
        go_on.set()
        runner.join(WAIT_SECONDS)
    assert 1 == len(failures)
    [lost] = ilmek_records(caplog, "ilmek.holds", "lost the hold on thread 'doomed'")
    assert (logging.WARNING, "doomed") == (lost.levelno, getattr(lost, "thread_id", None))
    [deleted] = ilmek_records(caplog, "ilmek.storage", "deleted thread 'doomed'")
    assert "doomed" == getattr(deleted, "thread_id", None)


def test_creating_the_tables_logs_the_migration(caplog: pytest.LogCaptureFixture, store: Store) -> None:
    """A fresh store's tables created: `ilmek.storage` logs the schema versions, from 0 to the current one."""
    if store.kind == "sqlite":
        path = store.path.with_name("fresh.db")

        def migrate() -> None:
            SqliteCheckpointer(path).close()
    else:
        store.sql(
            "DROP TABLE ilmek_checkpoints, ilmek_journals, ilmek_threads, ilmek_blobs, ilmek_logs, "
            "ilmek_items, ilmek_holds, ilmek_meta"
        )

        def migrate() -> None:
            with PostgresCheckpointer.connect(store.dsn) as fresh:
                fresh.migrate()  # type: ignore[attr-defined]

    with caplog.at_level(logging.INFO, logger="ilmek"):
        migrate()
    [record] = ilmek_records(caplog, "ilmek.storage", "migrated the ilmek_* tables")
    current = (SqliteCheckpointer if store.kind == "sqlite" else PostgresCheckpointer).SCHEMA_VERSION
    assert f"from schema version 0 to {current}" in record.getMessage()


def test_recover_logs_each_thread_it_continued_with_its_checkpoint(
    caplog: pytest.LogCaptureFixture, checkpointer: Checkpointer, modules: Modules, effects: Effects
) -> None:
    """`ilmek.operations` logs each recovered thread with `thread_id` and the `checkpoint_id` it ended at."""
    flag = modules.folder / "fixed"
    reference = modules.flaky(effects, flag)
    failed_threads(checkpointer, reference, ["stalled"])
    flag.touch()
    with caplog.at_level(logging.INFO, logger="ilmek"):
        [result] = recover(load_graph(reference), checkpointer)
    [record] = ilmek_records(caplog, "ilmek.operations", "recovered thread 'stalled': done")
    assert ("stalled", result.checkpoint_id) == (
        getattr(record, "thread_id", None),
        getattr(record, "checkpoint_id", None),
    )
    assert result.checkpoint_id is not None


def test_a_cancel_is_logged_where_it_is_asked_and_where_the_run_sees_it(
    caplog: pytest.LogCaptureFixture, store: Store
) -> None:
    """request_cancel is logged by the asking side and by the run's hold (`ilmek.holds`), with the thread."""
    checkpointer, operator = store.open(), store.open()

    def tick(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.01)
        return {"n": state["n"] + 1}

    g = (
        graph("ops-tick", {"n": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .router("tick", lambda state: "tick" if state["n"] < 100_000 else END, destinations=["tick", END])
        .compile()
    )
    results: list[Any] = []
    with caplog.at_level(logging.INFO, logger="ilmek"):
        runner = threading.Thread(
            target=lambda: results.append(
                run(g, {}, thread_id="ticking", checkpointer=checkpointer, recursion_limit=10**6)
            )
        )
        runner.start()
        wait_until(lambda: request_cancel(operator, "ticking", "log me"), "the run holds its thread")
        runner.join(WAIT_SECONDS)
    [result] = results
    assert ("aborted", "log me") == (result.status, result.abort_reason)
    [asked] = [
        r
        for r in caplog.records
        if "asked the run holding thread 'ticking' to cancel: log me" in r.getMessage()
    ]
    assert asked.name.startswith("ilmek.")
    assert "ticking" == getattr(asked, "thread_id", None)
    [seen] = ilmek_records(caplog, "ilmek.holds", "cancel requested for thread 'ticking': log me")
    assert "ticking" == getattr(seen, "thread_id", None)


@pytest.mark.postgres
def test_a_retried_checkpoint_commit_is_logged_with_the_checkpoint(
    caplog: pytest.LogCaptureFixture, postgres_dsn: str
) -> None:
    """A superstep's commit meets a lock held elsewhere past lock_timeout: the retry's record names thread
    and checkpoint.

    The checkpoint being committed is known when its commit is retried, so
    the record carries its id (``checkpoint_id``), as the README promises
    operators who search their logs by checkpoint.
    """
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, options="-c lock_timeout=50")
    blocker = psycopg2.connect(postgres_dsn)
    timers: list[threading.Timer] = []

    def work(state: dict[str, Any]) -> dict[str, Any]:
        # Lock the checkpoints from another session just before the superstep commits.
        with blocker.cursor() as cursor:
            cursor.execute("LOCK TABLE ilmek_checkpoints IN ACCESS EXCLUSIVE MODE")
        timers.append(threading.Timer(0.3, blocker.commit))
        timers[-1].start()
        return {"n": 1}

    g = graph("ops-commit", {"n": channel.last_write(0)}).node("work", work).edge(START, "work").compile()
    try:
        checkpointer = PostgresCheckpointer(pool)
        checkpointer.migrate()
        with caplog.at_level(logging.INFO, logger="ilmek"):
            result = run(g, {}, thread_id="committing", checkpointer=checkpointer)
        for timer in timers:
            timer.join()
    finally:
        blocker.close()
        pool.closeall()
    assert "done" == result.status
    retries = ilmek_records(caplog, "ilmek.storage", "retrying after a transient database error")
    assert retries, [record.getMessage() for record in caplog.records]
    assert {("committing", result.checkpoint_id)} == {
        (getattr(record, "thread_id", None), getattr(record, "checkpoint_id", None)) for record in retries
    }
