"""Every client users bring, attacked where ownership and caches meet: the caller's rollback,
a failed COMMIT, a generic client with the caller's work open, dict rows, driver subclasses and
proxies, SQLAlchemy connections and sessions, Django on SQLite, and SQLite's own limits.

The promises: ilmek never commits work it did not start, never fills a cache from writes that can
still roll back (a read through the same checkpointer equals a read through a fresh one), and
every client's errors reach the caller as ilmek errors.
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.extensions
import psycopg2.extras
import psycopg_pool
import pytest
import sqlalchemy
import sqlalchemy.orm

from ilmek import (
    START,
    CheckpointNotFoundError,
    IlmekError,
    InvalidArgumentError,
    StorageError,
    TransientStorageError,
    channel,
    graph,
    run,
    thread_state,
)
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.types import Checkpoint, Extend, Replace
from tests.support.backends import Proxy
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(90)


def chat_graph() -> Any:
    """Each run appends the input's message and an echo to a list channel (items stored one per row)."""

    def echo(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": [f"echo of {state['log'][-1]}"]}

    return graph("chat", {"log": channel.append()}).node("echo", echo).edge(START, "echo").compile()


# --- the caller's rollback never leaves a cache ahead of the database ----------------------------------


def test_sqlite_callers_rollback_leaves_no_trace_in_the_cache(tmp_path: Any) -> None:
    """Joined to the caller's transaction, a rolled-back run is forgotten; reused ids serve nobody else."""
    path = tmp_path / "app.db"
    SqliteCheckpointer(path).close()
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    checkpointer = SqliteCheckpointer(connection, join_transaction=True)
    g = chat_graph()

    connection.execute("BEGIN IMMEDIATE")
    assert "done" == run(g, {"log": ["alice's secret"]}, thread_id="alice", checkpointer=checkpointer).status
    assert ["alice's secret", "echo of alice's secret"] == checkpointer.get("alice").channels["log"]  # type: ignore[union-attr]
    connection.execute("ROLLBACK")

    # AUTOINCREMENT rewound: bob's list is stored under the ids alice's had.
    connection.execute("BEGIN IMMEDIATE")
    run(g, {"log": ["bob's note"]}, thread_id="bob", checkpointer=checkpointer)
    connection.execute("COMMIT")

    fresh = SqliteCheckpointer(path)
    try:
        assert None is checkpointer.get("alice")
        assert thread_state(g, fresh, "bob") == thread_state(g, checkpointer, "bob")
        assert {"log": ["bob's note", "echo of bob's note"]} == thread_state(g, checkpointer, "bob")
        assert ["bob's note", "echo of bob's note"] == checkpointer.read_channel("bob", "log")
    finally:
        fresh.close()
        connection.close()


@pytest.mark.postgres
def test_postgres_callers_rollback_leaves_no_trace_in_the_cache(postgres_dsn: str) -> None:
    """The same on Postgres, through the caller's psycopg2 connection, joined."""
    connection = psycopg2.connect(postgres_dsn)
    checkpointer = PostgresCheckpointer(connection, join_transaction=True)
    g = chat_graph()

    def the_callers_own_work() -> None:
        # psycopg2 begins the caller's transaction with the caller's first statement.
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    try:
        the_callers_own_work()
        run(g, {"log": ["alice's secret"]}, thread_id="alice", checkpointer=checkpointer)
        assert ["alice's secret", "echo of alice's secret"] == checkpointer.get("alice").channels["log"]  # type: ignore[union-attr]
        connection.rollback()
        the_callers_own_work()
        run(g, {"log": ["alice's other"]}, thread_id="alice", checkpointer=checkpointer)
        connection.commit()
        with PostgresCheckpointer.connect(postgres_dsn) as fresh:
            assert thread_state(g, fresh, "alice") == thread_state(g, checkpointer, "alice")
            assert {"log": ["alice's other", "echo of alice's other"]} == thread_state(
                g, checkpointer, "alice"
            )
    finally:
        connection.close()


def test_a_commit_that_fails_is_rolled_back_and_retried_on_a_clean_connection(tmp_path: Any) -> None:
    """SQLite busy at COMMIT: the write is rolled back (not left open for the next call), retried, stored."""

    class BusyAtCommit(sqlite3.Connection):
        commits_to_refuse = 1

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
            if sql == "COMMIT" and type(self).commits_to_refuse > 0:
                type(self).commits_to_refuse -= 1
                error = sqlite3.OperationalError("database is locked")
                error.sqlite_errorcode = 5  # type: ignore[attr-defined]
                raise error
            return super().execute(sql, *args)

    path = tmp_path / "busy.db"
    connection = sqlite3.connect(path, isolation_level=None, factory=BusyAtCommit, check_same_thread=False)
    checkpointer = SqliteCheckpointer(connection)
    BusyAtCommit.commits_to_refuse = 1
    checkpointer.put("t", Checkpoint(id="c1", thread_id="t", channels={"n": 1}))
    assert False is connection.in_transaction
    other = SqliteCheckpointer(path)
    try:
        stored = other.get("t")
        assert stored is not None
        assert {"n": 1} == dict(stored.channels)
    finally:
        other.close()
        connection.close()


# --- a generic client ---------------------------------------------------------------------------------


class ExecuteOnly:
    """An ``execute(sql, params)`` client over one autocommit psycopg2 connection (the caller's)."""

    paramstyle = "pyformat"

    def __init__(self, dsn: str) -> None:
        self.connection = psycopg2.connect(dsn)
        self.connection.autocommit = True

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params or None)
            return cursor.fetchall() if cursor.description is not None else []


class DeclaringClient(ExecuteOnly):
    """The same, saying whether its caller has a transaction open."""

    in_transaction = False


@pytest.mark.postgres
@pytest.mark.parametrize("kind", [ExecuteOnly, DeclaringClient])
def test_a_generic_client_never_commits_the_callers_open_transaction(postgres_dsn: str, kind: type) -> None:
    """The caller began a transaction on the client: ilmek refuses rather than COMMIT the caller's work."""
    client = kind(postgres_dsn)
    checkpointer = PostgresCheckpointer(client)
    try:
        checkpointer.migrate()
        client.execute("CREATE TABLE orders (id INTEGER)", None)
        client.execute("BEGIN", None)
        client.execute("INSERT INTO orders VALUES (1)", None)
        if isinstance(client, DeclaringClient):
            client.in_transaction = True
        with pytest.raises(StorageError, match="did not start"):
            run(chat_graph(), {"log": ["x"]}, thread_id="g", checkpointer=checkpointer)
        client.execute("ROLLBACK", None)
        assert [] == client.execute("SELECT id FROM orders", None)
    finally:
        client.connection.close()


# --- drivers by type: subclasses, proxies, dict rows, async ------------------------------------------------


CLIENTS = {
    "psycopg2-dict-rows": lambda dsn: psycopg2.connect(
        dsn, connection_factory=psycopg2.extras.RealDictConnection
    ),
    "psycopg2-proxy": lambda dsn: Proxy(psycopg2.connect(dsn)),
    "psycopg-dict-rows": lambda dsn: psycopg.connect(dsn, row_factory=psycopg.rows.dict_row, autocommit=True),
    "psycopg-pool-dict-rows": lambda dsn: psycopg_pool.ConnectionPool(
        dsn,
        kwargs={"row_factory": psycopg.rows.dict_row, "autocommit": True, "prepare_threshold": None},
        open=True,
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_clients_of_every_shape_migrate_run_and_read(postgres_dsn: str, kind: str) -> None:
    """Dict-row connections and pools, a connection behind a proxy: migrate, run, pause, resume, read."""
    client = CLIENTS[kind](postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(client)
        checkpointer.migrate()
        g = chat_graph()
        assert "done" == run(g, {"log": ["one"]}, thread_id="shape", checkpointer=checkpointer).status
        assert "done" == run(g, {"log": ["two"]}, thread_id="shape", checkpointer=checkpointer).status
        assert ["one", "echo of one", "two", "echo of two"] == checkpointer.read_channel("shape", "log")
        [info] = checkpointer.list_threads()
        assert ("shape", "done") == (info.id, info.status)
    finally:
        client.close()


@pytest.mark.postgres
def test_async_clients_are_refused_naming_the_sync_class(postgres_dsn: str) -> None:
    """A psycopg AsyncConnection is not taken for a generic client: the error names what to pass."""
    import asyncio

    async def refuse() -> None:
        connection = await psycopg.AsyncConnection.connect(postgres_dsn)
        try:
            with pytest.raises(InvalidArgumentError, match=r"psycopg\.Connection") as caught:
                PostgresCheckpointer(connection)
            assert isinstance(caught.value, TypeError)
        finally:
            await connection.close()

    asyncio.run(refuse())


# --- SQLAlchemy: an Engine, and the caller's Connection or Session ---------------------------------------


@pytest.fixture
def engine(postgres_dsn: str) -> Iterator[Any]:
    """A SQLAlchemy engine on the test database (psycopg2), disposed afterwards."""
    created = sqlalchemy.create_engine(
        dsn_to_url(postgres_dsn).replace("postgresql://", "postgresql+psycopg2://", 1)
    )
    yield created
    created.dispose()


@pytest.mark.postgres
def test_a_sqlalchemy_session_joins_the_callers_transaction(engine: Any) -> None:
    """Through a Session, the run lands with session.commit() and vanishes with session.rollback()."""
    PostgresCheckpointer(engine).migrate()
    g = chat_graph()
    with sqlalchemy.orm.Session(engine) as session:
        checkpointer = PostgresCheckpointer(session)
        run(g, {"log": ["kept"]}, thread_id="kept", checkpointer=checkpointer)
        session.commit()
        run(g, {"log": ["dropped"]}, thread_id="dropped", checkpointer=checkpointer)
        assert ["dropped", "echo of dropped"] == checkpointer.read_channel("dropped", "log")
        session.rollback()
        assert None is checkpointer.get("dropped")
    outside = PostgresCheckpointer(engine)
    assert ["kept", "echo of kept"] == outside.read_channel("kept", "log")
    assert None is outside.get("dropped")


@pytest.mark.postgres
def test_a_sqlalchemy_connection_joins_the_callers_transaction(engine: Any) -> None:
    """Through a Connection, the caller's commit keeps the run and their rollback drops it."""
    PostgresCheckpointer(engine).migrate()
    g = chat_graph()
    with engine.connect() as connection:
        checkpointer = PostgresCheckpointer(connection)
        run(g, {"log": ["kept"]}, thread_id="kept", checkpointer=checkpointer)
        connection.commit()
        run(g, {"log": ["dropped"]}, thread_id="dropped", checkpointer=checkpointer)
        connection.rollback()
    outside = PostgresCheckpointer(engine)
    assert ["kept", "echo of kept"] == outside.read_channel("kept", "log")
    assert None is outside.get("dropped")


@pytest.mark.postgres
def test_a_sqlalchemy_pool_timeout_is_an_ilmek_error(postgres_dsn: str) -> None:
    """An engine whose pool has nothing to lend: a TransientStorageError saying how to size it."""
    url = dsn_to_url(postgres_dsn).replace("postgresql://", "postgresql+psycopg2://", 1)
    tiny = sqlalchemy.create_engine(url, pool_size=1, max_overflow=0, pool_timeout=0.05)
    try:
        checkpointer = PostgresCheckpointer(tiny)
        checkpointer.migrate()
        # The caller keeps the only connection.
        with tiny.connect(), pytest.raises(TransientStorageError, match="size the pool") as caught:
            run(chat_graph(), {"log": ["x"]}, thread_id="t", checkpointer=checkpointer)
        assert isinstance(caught.value.__cause__, sqlalchemy.exc.TimeoutError)
    finally:
        tiny.dispose()


# --- Django on SQLite ---------------------------------------------------------------------------------------


def test_a_node_never_runs_inside_the_callers_django_atomic_block(tmp_path: Any) -> None:
    """run() inside transaction.atomic() (a view under ATOMIC_REQUESTS): the node runs on a worker with
    its own connection, so a step's ORM write commits with the step's record instead of joining (and
    vanishing with) the caller's transaction; outside an atomic block the result is the same."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {os.getcwd()!r})
        import django
        from django.conf import settings
        settings.configure(DATABASES={{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                                    "NAME": {str(tmp_path / "django.db")!r}}}}},
                           INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
        from django.db import connection, transaction
        from ilmek import START, SqliteCheckpointer, channel, graph, run

        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")

        def create_order(note):
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO orders (note) VALUES (%s)", [note])
            return connection.in_atomic_block

        def place(state, ctx):
            return {{"log": [ctx.step("create order", create_order, state["log"][-1])]}}

        g = graph("orders", {{"log": channel.append()}}).node("place", place).edge(START, "place").compile()
        checkpointer = SqliteCheckpointer({str(tmp_path / "ilmek.db")!r})
        try:
            with transaction.atomic():
                inside = run(g, {{"log": ["in a view"]}}, thread_id="view", checkpointer=checkpointer)
                raise RuntimeError("the view failed after the run")
        except RuntimeError:
            pass
        outside = run(g, {{"log": ["in a script"]}}, thread_id="script", checkpointer=checkpointer)
        with connection.cursor() as cursor:
            cursor.execute("SELECT note FROM orders ORDER BY id")
            notes = [row[0] for row in cursor.fetchall()]
        print(json.dumps({{"inside": inside.state["log"], "outside": outside.state["log"], "notes": notes}}))
        """
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert 0 == finished.returncode, finished.stderr
    assert {
        "inside": ["in a view", False],
        "outside": ["in a script", False],
        "notes": ["in a view", "in a script"],
    } == json.loads(finished.stdout.splitlines()[-1])


def test_django_imported_but_never_configured_leaves_run_on_the_callers_thread(tmp_path: Any) -> None:
    """A program that imports django.db without configuring Django (a library did) has no Django
    connection, so no atomic block: run() still runs a one-task superstep on the caller's thread,
    and Ctrl-C in that node reaches the caller. Django stays unconfigured."""
    script = textwrap.dedent(
        f"""
        import json, sys, threading
        sys.path.insert(0, {os.getcwd()!r})
        import django.db
        from django.conf import settings
        from ilmek import START, SqliteCheckpointer, channel, graph, run

        def where(state):
            return {{"log": [threading.current_thread() is threading.main_thread()]}}

        def interrupted(state):
            raise KeyboardInterrupt

        checkpointer = SqliteCheckpointer({str(tmp_path / "ilmek.db")!r})
        g = graph("where", {{"log": channel.append()}}).node("n", where).edge(START, "n").compile()
        on_main = run(g, None, thread_id="where", checkpointer=checkpointer).state["log"]
        g = graph("ctrl-c", {{"log": channel.append()}}).node("n", interrupted).edge(START, "n").compile()
        try:
            run(g, None, thread_id="ctrl-c", checkpointer=checkpointer)
            stopped = False
        except KeyboardInterrupt:
            stopped = True
        print(json.dumps({{"on_main": on_main, "stopped": stopped, "configured": settings.configured}}))
        """
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert 0 == finished.returncode, finished.stderr
    assert {"on_main": [True], "stopped": True, "configured": False} == json.loads(
        finished.stdout.splitlines()[-1]
    )


def test_django_on_sqlite_runs_inside_and_outside_its_atomic_blocks(tmp_path: Any) -> None:
    """Django's default database is SQLite: a checkpointer on its connection; its atomic blocks decide."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {os.getcwd()!r})
        import django
        from django.conf import settings
        settings.configure(DATABASES={{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                                    "NAME": {str(tmp_path / "django.db")!r},
                                                    "OPTIONS": {{"transaction_mode": "IMMEDIATE"}}}}}},
                           INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
        from django.db import connection, transaction
        from ilmek import START, SqliteCheckpointer, channel, graph, run

        g = graph("chat", {{"log": channel.append()}}).node(
            "echo", lambda s: {{"log": ["echo"]}}).edge(START, "echo").compile()
        checkpointer = SqliteCheckpointer(connection)
        outside = run(g, {{"log": ["outside"]}}, thread_id="outside", checkpointer=checkpointer).status
        try:
            with transaction.atomic():
                run(g, {{"log": ["rolled back"]}}, thread_id="inside", checkpointer=checkpointer)
                raise RuntimeError("the view failed")
        except RuntimeError:
            pass
        with transaction.atomic():
            run(g, {{"log": ["committed"]}}, thread_id="committed", checkpointer=checkpointer)
        print(json.dumps({{
            "outside": outside,
            "inside": checkpointer.get("inside") is not None,
            "committed": checkpointer.read_channel("committed", "log"),
        }}))
        """
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert 0 == finished.returncode, finished.stderr
    assert {"outside": "done", "inside": False, "committed": ["committed", "echo"]} == json.loads(
        finished.stdout.splitlines()[-1]
    )


# --- SQLite's own limits ------------------------------------------------------------------------------------


def test_sqlite_connections_of_ended_threads_are_closed(tmp_path: Any) -> None:
    """A thread-per-request server: each request thread's connection is closed when the thread ends."""
    # The collection below would also finalize what earlier tests of this worker
    # process left for the collector (a subprocess's pipes), and report their
    # ResourceWarnings here; collect that first, as not this test's concern.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    checkpointer = SqliteCheckpointer(tmp_path / "requests.db")
    try:

        def request() -> None:
            checkpointer.get("someone")

        for _ in range(40):
            worker = threading.Thread(target=request)
            worker.start()
            worker.join()
        gc.collect()
        assert checkpointer.open_connections() <= 2
    finally:
        checkpointer.close()


def test_opening_a_file_another_connection_locks_is_an_ilmek_error(tmp_path: Any) -> None:
    """A new file held exclusively by another connection: opening it says so as an ilmek error."""
    path = tmp_path / "locked.db"
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("PRAGMA journal_mode = DELETE")
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(IlmekError) as caught:
            SqliteCheckpointer(path, busy_timeout=0.1)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    finally:
        locker.execute("ROLLBACK")
        locker.close()


def test_prune_keeps_more_blobs_than_sqlite_binds_in_one_statement(tmp_path: Any) -> None:
    """40,000 kept values: prune must not bind one parameter per kept value (SQLite's limit is 32,766)."""
    path = tmp_path / "big.db"
    checkpointer = SqliteCheckpointer(path, synchronous="OFF")
    try:
        checkpointer.put("big", Checkpoint(id="c0000000000", thread_id="big", channels={"v": 0}))
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN")
        for n in range(1, 40_001):
            blob_id = connection.execute(
                "INSERT INTO ilmek_blobs (thread_id, channel, value) VALUES ('big', 'v', ?) "
                "RETURNING blob_id",
                (str(n),),
            ).fetchone()[0]
            connection.execute(
                "INSERT INTO ilmek_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, "
                "manifest, next, pending, task_journals, metadata) "
                "VALUES ('big', ?, ?, NULL, ?, 0, ?, '[]', '[]', '{}', '{}')",
                (f"c{n:010d}", f"c{n - 1:010d}", n, json.dumps({"v": ["b", blob_id]})),
            )
        connection.execute("UPDATE ilmek_threads SET checkpoint_id = 'c0000040000' WHERE thread_id = 'big'")
        connection.execute("COMMIT")
        connection.close()
        assert 5_000 == checkpointer.prune("big", keep_last=35_001)
        latest = checkpointer.get("big")
        assert latest is not None
        assert {"v": 40_000} == dict(latest.channels)
    finally:
        checkpointer.close()


def test_a_delta_commit_whose_parent_is_gone_is_refused(tmp_path: Any) -> None:
    """Changes on top of a missing parent would drop the unchanged channels: refused, nothing written."""
    checkpointer = SqliteCheckpointer(tmp_path / "orphan.db")
    try:
        checkpointer.put("t", Checkpoint(id="c1", thread_id="t", channels={"a": 1, "b": 2}))
        child = Checkpoint(id="c2", thread_id="t", parent_id="nowhere", channels={"a": 1, "b": 3})
        with pytest.raises(CheckpointNotFoundError, match="'nowhere'"):
            checkpointer.commit("t", child, changes={"b": Replace(3)})
        assert ["c1"] == [c.id for c in checkpointer.list("t")]
    finally:
        checkpointer.close()


def test_a_full_disk_reports_the_write_that_failed(tmp_path: Any) -> None:
    """SQLite runs out of room mid-run: the error is the failed write's, not the hold's release after it."""
    path = tmp_path / "full.db"
    SqliteCheckpointer(path).close()
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count = {pages + 2}")
    checkpointer = SqliteCheckpointer(connection)
    big = "x" * 50_000

    def hoard(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": [big]}

    g = graph("hoard", {"log": channel.append()}).node("hoard", hoard).edge(START, "hoard").compile()
    try:
        with pytest.raises(StorageError) as caught:
            run(g, {"log": ["start"]}, thread_id="full", checkpointer=checkpointer)
        assert "release the hold" not in str(caught.value)
        assert "full" in str(caught.value.__cause__).lower()
        # Room again: the thread goes on (the lease the failed release left lapses).
        connection.execute("PRAGMA max_page_count = 1000000")
    finally:
        connection.close()


def test_changes_extend_a_list_through_the_callers_connection(tmp_path: Any) -> None:
    """A caller's connection in its own transactions: commit with Extend changes reads back whole."""
    connection = sqlite3.connect(tmp_path / "own.db", isolation_level=None, check_same_thread=False)
    checkpointer: Checkpointer = SqliteCheckpointer(connection)
    try:
        checkpointer.commit(
            "t", Checkpoint(id="c1", thread_id="t", channels={"log": ["a"]}), changes={"log": Extend(["a"])}
        )
        assert False is connection.in_transaction
    finally:
        connection.close()
