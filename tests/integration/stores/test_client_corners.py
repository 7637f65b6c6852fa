"""Every corner of the clients ends in an ilmek error or in the documented behaviour: joining with nothing to
join, a join asked of a pool, a closed SQLAlchemy connection, a SQLite connection handed to Postgres, a
session whose flush failed, and Django (on SQLite and Postgres) inside and outside its atomic blocks, where a
step's writes through the request's database commit or vanish with the step's record.

Real drivers and the real Postgres the suite starts; Django is configured in processes of its own.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from typing import Any

import psycopg
import psycopg2
import psycopg2.extensions
import psycopg2.pool
import psycopg_pool
import pytest
import sqlalchemy
import sqlalchemy.orm
from psycopg2.extensions import parse_dsn

from ilmek import (
    START,
    InvalidArgumentError,
    PostgresCheckpointer,
    SqliteCheckpointer,
    StorageError,
    channel,
    graph,
    run,
)
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(120)


def echo() -> Any:
    return (
        graph("echo", {"n": channel.last_write(0)})
        .node("n", lambda s: {"n": s["n"] + 1})
        .edge(START, "n")
        .compile()
    )


# --- join_transaction with nothing to join ---------------------------------------------------------


def idle(connection: Any) -> bool:
    status = connection.info.transaction_status if hasattr(connection, "info") else None
    if isinstance(connection, psycopg2.extensions.connection):
        return bool(connection.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE)
    if isinstance(connection, sqlite3.Connection):
        return not connection.in_transaction
    return bool(status == psycopg.pq.TransactionStatus.IDLE)


def joined_clients(postgres_dsn: str, tmp_path: Any) -> dict[str, Any]:
    SqliteCheckpointer(tmp_path / "join.db").close()
    autocommitting = psycopg2.connect(postgres_dsn)
    autocommitting.autocommit = True
    return {
        "psycopg2": psycopg2.connect(postgres_dsn),
        "psycopg2-autocommit": autocommitting,
        "psycopg": psycopg.connect(postgres_dsn),
        "sqlite3": sqlite3.connect(tmp_path / "join.db", isolation_level=None, check_same_thread=False),
    }


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["psycopg2", "psycopg2-autocommit", "psycopg", "sqlite3"])
def test_joining_with_no_transaction_open_is_one_clear_error_on_every_client(
    postgres_dsn: str, tmp_path: Any, kind: str
) -> None:
    """``join_transaction=True`` while no transaction of the caller's is open: the same InvalidArgumentError
    on psycopg2 (autocommit on or off), psycopg 3 and sqlite3, before any node runs; nothing is written and
    the connection is left idle (not in a transaction ilmek opened, holding the thread's lock)."""
    clients = joined_clients(postgres_dsn, tmp_path)
    connection = clients[kind]
    try:
        checkpointer = (
            SqliteCheckpointer(connection, join_transaction=True)
            if kind == "sqlite3"
            else PostgresCheckpointer(connection, join_transaction=True)
        )
        with pytest.raises(InvalidArgumentError, match="no transaction of yours is open"):
            run(echo(), {}, thread_id="nothing-to-join", checkpointer=checkpointer)
        # A read needs no transaction of the caller's: it runs in one of ilmek's own, ended at once.
        assert checkpointer.get("nothing-to-join") is None
        assert idle(connection)
    finally:
        for client in clients.values():
            client.close()


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["psycopg2-pool", "psycopg-pool", "engine"])
def test_join_transaction_with_a_pool_or_engine_is_refused_when_built(postgres_dsn: str, kind: str) -> None:
    """A pool or an Engine lends connections of its own: there is no transaction of the caller's to join."""
    if kind == "psycopg2-pool":
        client: Any = psycopg2.pool.ThreadedConnectionPool(1, 2, postgres_dsn)
        close = client.closeall
    elif kind == "psycopg-pool":
        client = psycopg_pool.ConnectionPool(postgres_dsn, min_size=1, max_size=2, open=True)
        close = client.close
    else:
        client = sqlalchemy.create_engine(
            dsn_to_url(postgres_dsn).replace("postgresql://", "postgresql+psycopg2://")
        )
        close = client.dispose
    try:
        with pytest.raises(InvalidArgumentError, match="needs a connection of yours to join"):
            PostgresCheckpointer(client, join_transaction=True)
    finally:
        close()


# --- closed or mistaken clients ------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_closed_sqlalchemy_connection_is_a_storage_error_saying_closed(postgres_dsn: str) -> None:
    """A SQLAlchemy Connection closed by its owner: a StorageError that says so, not ResourceClosedError."""
    engine = sqlalchemy.create_engine(
        dsn_to_url(postgres_dsn).replace("postgresql://", "postgresql+psycopg2://")
    )
    try:
        connection = engine.connect()
        checkpointer = PostgresCheckpointer(connection)
        connection.close()
        with pytest.raises(StorageError, match="closed"):
            checkpointer.get("any")
    finally:
        engine.dispose()


def test_a_sqlite_connection_handed_to_postgres_is_refused_naming_sqlite_checkpointer(tmp_path: Any) -> None:
    """A sqlite3.Connection has ``execute`` too, but it is SQLite's: refused, naming the class to use."""
    connection = sqlite3.connect(tmp_path / "wrong.db")
    try:
        with pytest.raises(InvalidArgumentError, match="SqliteCheckpointer"):
            PostgresCheckpointer(connection)
    finally:
        connection.close()


@pytest.mark.postgres
def test_a_session_whose_flush_failed_gives_an_ilmek_error_that_says_to_roll_back(postgres_dsn: str) -> None:
    """The request's own flush failed, so its Session awaits a rollback: run(), get_thread() and list() give a
    StorageError saying to roll back, never SQLAlchemy's raw PendingRollbackError."""
    engine = sqlalchemy.create_engine(
        dsn_to_url(postgres_dsn).replace("postgresql://", "postgresql+psycopg2://")
    )
    try:

        class Base(sqlalchemy.orm.DeclarativeBase):
            pass

        class Thing(Base):
            __tablename__ = "unique_things"
            id: sqlalchemy.orm.Mapped[int] = sqlalchemy.orm.mapped_column(primary_key=True)

        Base.metadata.create_all(engine)
        session = sqlalchemy.orm.Session(engine)
        session.add(Thing(id=1))
        session.flush()
        session.add(Thing(id=1))
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            session.flush()  # the application does not roll back
        checkpointer = PostgresCheckpointer(session)
        for call in (
            lambda: run(echo(), {}, thread_id="pending", checkpointer=checkpointer),
            lambda: checkpointer.get_thread("pending"),
            lambda: checkpointer.list("pending"),
        ):
            with pytest.raises(StorageError, match="rolled back"):
                call()
        session.close()
    finally:
        engine.dispose()


# --- Django: a step's writes and its record commit or vanish together --------------------------------------

DJANGO = textwrap.dedent(
    """
    import json, sys, threading
    sys.path.insert(0, {repo!r})
    import django
    from django.conf import settings
    databases = {{"default": {database}, "other": {database}}}
    settings.configure(DATABASES=databases, INSTALLED_APPS=[], USE_TZ=True)
    django.setup()
    from django.db import connection, connections, transaction
    from ilmek import START, ThreadBusyError, ResumeError, TransientStorageError, channel, graph, resume, run
    from ilmek.checkpoint.postgres import PostgresCheckpointer
    from ilmek.checkpoint.sqlite import SqliteCheckpointer

    vendor = connection.vendor
    checkpointer = SqliteCheckpointer(connection) if vendor == "sqlite" else PostgresCheckpointer(connection)
    if vendor != "sqlite":
        checkpointer.migrate()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE charges (thread_id TEXT PRIMARY KEY, attempts INTEGER NOT NULL)")
    calls = []

    def charge(thread_id):
        calls.append(thread_id)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO charges (thread_id, attempts) VALUES (%s, 1) "
                "ON CONFLICT (thread_id) DO UPDATE SET attempts = charges.attempts + 1", [thread_id])
        return "charged"

    def pay(state, ctx):
        answer = ctx.interrupt({{"question": "charge?"}})
        return {{"log": [answer, ctx.step("charge", charge, ctx.thread_id)]}}

    g = graph("pay", {{"log": channel.append()}}).node("pay", pay).edge(START, "pay").compile()

    def charges(thread_id):
        with connection.cursor() as cursor:
            cursor.execute("SELECT attempts FROM charges WHERE thread_id = %s", [thread_id])
            return [row[0] for row in cursor.fetchall()]

    out = {{}}
    with transaction.atomic():
        run(g, {{"log": []}}, thread_id="t", checkpointer=checkpointer)
    # The request fails after the charge: both the charge's row and ilmek's record roll back.
    try:
        with transaction.atomic():
            resume(g, "yes", thread_id="t", checkpointer=checkpointer)
            raise RuntimeError("the view failed after the charge")
    except RuntimeError:
        pass
    out["after_failed_request"] = charges("t")
    out["still_paused"] = bool(checkpointer.get("t").pending)
    with transaction.atomic():
        done = resume(g, "yes", thread_id="t", checkpointer=checkpointer)
    out["done"] = [done.status, done.state["log"]]
    out["charges"] = charges("t")
    out["calls"] = len(calls)

    # Eight double-clicked approves of one pause, each its own request: one charge.
    with transaction.atomic():
        run(g, {{"log": []}}, thread_id="race", checkpointer=checkpointer)
    outcomes = []
    barrier = threading.Barrier(8)

    def approve():
        barrier.wait()
        try:
            with transaction.atomic():
                outcomes.append(resume(g, "yes", thread_id="race", checkpointer=checkpointer).status)
        except (ThreadBusyError, ResumeError) as error:
            outcomes.append(type(error).__name__)
        except TransientStorageError as error:
            outcomes.append("transient: " + str(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approve) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["race"] = sorted(outcomes)
    out["race_charges"] = charges("race")

    # A turn outside any atomic block is ilmek's own transaction (this process remembers its
    # checkpoint); another process (the second alias) takes a turn; then turns in atomic blocks start
    # from the stale checkpoint remembered, inside the request's transaction: one the view rolls back,
    # one it commits; then one outside again.
    other_connection = connections["other"]
    other = (
        SqliteCheckpointer(other_connection) if vendor == "sqlite" else PostgresCheckpointer(other_connection)
    )
    chat = graph("chat", {{"log": channel.append()}}).node("r", lambda s: {{"log": ["r"]}})
    chat = chat.edge(START, "r").compile()
    run(chat, {{"log": ["one"]}}, thread_id="memo", checkpointer=checkpointer)
    out["remembered"] = checkpointer._remembered_latest("memo") is not None
    run(chat, {{"log": ["two"]}}, thread_id="memo", checkpointer=other)
    try:
        with transaction.atomic():
            run(chat, {{"log": ["rolled back"]}}, thread_id="memo", checkpointer=checkpointer)
            raise RuntimeError("the view failed")
    except RuntimeError:
        pass
    with transaction.atomic():
        run(chat, {{"log": ["three"]}}, thread_id="memo", checkpointer=checkpointer)
    out["memo"] = run(chat, {{"log": ["four"]}}, thread_id="memo", checkpointer=checkpointer).state["log"]
    out["memo_other"] = run(chat, {{"log": ["five"]}}, thread_id="memo", checkpointer=other).state["log"]
    print(json.dumps(out))
    """
)


def run_django(database: dict[str, Any]) -> dict[str, Any]:
    script = DJANGO.format(repo=os.getcwd(), database=repr(database))
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert 0 == finished.returncode, finished.stderr
    return dict(json.loads(finished.stdout.splitlines()[-1]))


def check_django(out: dict[str, Any]) -> None:
    assert [] == out["after_failed_request"], "the charge's row outlived the request that rolled back"
    assert out["still_paused"]
    assert ["done", ["yes", "charged"]] == out["done"]
    assert [1] == out["charges"]
    assert 2 == out["calls"]  # the rolled-back try, then the one that stood
    assert "done" in out["race"]
    assert all(o in ("done", "ThreadBusyError", "ResumeError") for o in out["race"]), out["race"]
    assert [1] == out["race_charges"]
    assert out["remembered"], "the first turn, outside any atomic block, should be remembered"
    turns = ["one", "r", "two", "r", "three", "r", "four", "r"]
    assert turns == out["memo"], "a turn started from a remembered checkpoint lost or repeated one"
    assert [*turns, "five", "r"] == out["memo_other"]


def test_django_on_sqlite_a_steps_writes_and_its_record_commit_or_vanish_together(tmp_path: Any) -> None:
    """Django on SQLite (transaction_mode IMMEDIATE, as the README says) under atomic blocks: a step's write
    through the request's connection waits on nothing, rolls back with a failed request as the step's
    record does, and eight racing approves charge once."""
    check_django(
        run_django(
            {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(tmp_path / "django.db"),
                "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
            }
        )
    )


@pytest.mark.parametrize("mode", [None, "DEFERRED", "immediate", "EXCLUSIVE"])
def test_django_on_sqlite_without_immediate_transactions_is_refused_when_built(
    tmp_path: Any, mode: str | None
) -> None:
    """A Django SQLite database whose transactions begin deferred (so concurrent requests would fail with
    'database is locked') is refused when the checkpointer is built, naming the setting that fixes it."""
    options = {} if mode is None else {"transaction_mode": mode}
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "d.db"), "OPTIONS": options}
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {os.getcwd()!r})
        import django
        from django.conf import settings
        settings.configure(DATABASES={{"default": {database!r}}}, INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
        from django.db import connection
        from ilmek import InvalidArgumentError, SqliteCheckpointer
        try:
            SqliteCheckpointer(connection)
        except InvalidArgumentError as error:
            print(json.dumps({{"refused": str(error)}}))
        else:
            print(json.dumps({{"refused": None}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert 0 == done.returncode, done.stderr
    refused = json.loads(done.stdout)["refused"]
    if mode in (None, "DEFERRED"):
        assert refused is not None
        assert '"OPTIONS": {"transaction_mode": "IMMEDIATE"}' in refused
        assert "'default'" in refused
    else:
        assert refused is None


@pytest.mark.postgres
def test_django_on_postgres_a_steps_writes_and_its_record_commit_or_vanish_together(
    postgres_dsn: str,
) -> None:
    """Django on Postgres under atomic blocks: the same promises."""
    params = parse_dsn(postgres_dsn)
    check_django(
        run_django(
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": params["dbname"],
                "USER": params.get("user", ""),
                "HOST": params.get("host", ""),
                "PORT": params.get("port", ""),
            }
        )
    )


@pytest.mark.postgres
def test_a_django_checkpointers_workers_close_their_connections(postgres_dsn: str) -> None:
    """Outside an atomic block, two tasks of one superstep run on ilmek's workers and use the ORM: when the
    run ends their Django connections are closed, not left to the garbage collector."""
    params = parse_dsn(postgres_dsn)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        "OPTIONS": {"application_name": "ilmek-worker-test"},
    }
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {os.getcwd()!r})
        import django
        from django.conf import settings
        settings.configure(DATABASES={{"default": {database!r}}}, INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
        from django.db import connection
        from ilmek import START, channel, graph, run
        from ilmek.checkpoint.postgres import PostgresCheckpointer

        def use_orm(state):
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return {{}}

        checkpointer = PostgresCheckpointer(connection)
        checkpointer.migrate()
        g = (graph("two", {{"n": channel.last_write(0)}}).node("a", use_orm).node("b", use_orm)
             .edge(START, "a").edge(START, "b").compile())
        run(g, {{}}, thread_id="two", checkpointer=checkpointer)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ilmek-worker-test'"
            )
            print(json.dumps({{"sessions": cursor.fetchone()[0]}}))
        """
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert 0 == finished.returncode, finished.stderr
    # Only the main thread's own connection is left.
    assert {"sessions": 1} == json.loads(finished.stdout.splitlines()[-1])
