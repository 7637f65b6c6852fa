"""Real driver errors classified by SQLSTATE: serialization failures and deadlocks retried, bad logins not."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.pool
import pytest
import sqlalchemy
from psycopg2.extensions import make_dsn

from ilmek import PostgresCheckpointer, StorageError, TransientStorageError
from ilmek.checkpoint.postgres import adapter_for, classify_postgres_error
from ilmek.dbapi import Session, Statement
from tests.support.pgcluster import dsn_to_url
from tests.support.postgres import query

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


# --- transient or permanent, by SQLSTATE --------------------------------------------------------------


@pytest.fixture
def counters(postgres_dsn: str) -> str:
    """A table of two counters, both 0."""
    query(postgres_dsn, "CREATE TABLE counters (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
    query(postgres_dsn, "INSERT INTO counters VALUES (1, 0), (2, 0)")
    return postgres_dsn


BUMP = Statement("UPDATE counters SET value = value + 1 WHERE id = :id")


def test_a_real_serialization_failure_is_retried(counters: str) -> None:
    """40001 from a repeatable-read transaction that lost a race is retried, and the retry commits."""
    connection = psycopg2.connect(counters)
    rival = psycopg2.connect(counters)
    try:
        adapter = adapter_for(connection)
        attempts: list[int] = []

        def work(session: Session) -> None:
            attempts.append(1)
            session.execute(Statement("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
            session.query(Statement("SELECT value FROM counters WHERE id = 1"))
            if len(attempts) == 1:
                with rival.cursor() as cursor:
                    cursor.execute("UPDATE counters SET value = value + 10 WHERE id = 1")
                rival.commit()
            session.execute(BUMP, id=1)

        adapter.run(work, what="bump a counter", thread_id="t")
        assert 2 == len(attempts)
    finally:
        connection.close()
        rival.close()
    assert [(11,)] == query(counters, "SELECT value FROM counters WHERE id = 1")


def is_superuser(dsn: str) -> bool:
    [(superuser,)] = query(dsn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    return bool(superuser)


def waits_for_a_lock(dsn: str, pid: int) -> bool:
    return bool(query(dsn, "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)))


def test_a_real_deadlock_is_retried(counters: str) -> None:
    """40P01: ilmek's transaction closes a lock cycle, is the deadlock victim, is retried and commits."""
    if not is_superuser(counters):
        pytest.skip("setting deadlock_timeout needs a superuser")
    # The rival waits first and checks for deadlocks only after 30 s; we close the
    # cycle and check after 100 ms, so the cycle is complete when we look: we are the victim.
    connection = psycopg2.connect(counters, options="-c deadlock_timeout=100")
    rival = psycopg2.connect(counters, options="-c deadlock_timeout=30000")
    rival_pid = rival.info.backend_pid
    rival_has_row_2 = threading.Event()
    we_have_row_1 = threading.Event()
    rival_errors: list[BaseException] = []

    def rival_work() -> None:
        try:
            with rival.cursor() as cursor:
                cursor.execute("UPDATE counters SET value = value + 1 WHERE id = 2")
                rival_has_row_2.set()
                assert we_have_row_1.wait(20)
                cursor.execute("UPDATE counters SET value = value + 1 WHERE id = 1")
            rival.commit()
        except BaseException as error:
            rival_errors.append(error)

    attempts: list[int] = []

    def work(session: Session) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            assert rival_has_row_2.wait(20)
        session.execute(BUMP, id=1)
        if len(attempts) == 1:
            we_have_row_1.set()
            deadline = time.monotonic() + 20
            while not waits_for_a_lock(counters, rival_pid):
                assert time.monotonic() < deadline, "the rival never waited for row 1"
                time.sleep(0.01)
        session.execute(BUMP, id=2)

    rival_thread = threading.Thread(target=rival_work)
    rival_thread.start()
    try:
        adapter_for(connection).run(work, what="bump two counters", thread_id="t")
    finally:
        we_have_row_1.set()
        rival_thread.join(30)
        connection.close()
        rival.close()
    assert [] == rival_errors
    assert 2 == len(attempts)
    assert [(1, 2), (2, 2)] == query(counters, "SELECT id, value FROM counters ORDER BY id")


DRIVER_ERRORS = (psycopg2.Error, psycopg.Error)


def error_from(connect: Callable[[], Any], *statements: str) -> BaseException:
    """The error the last statement raises on a fresh connection (the others must succeed)."""
    connection = connect()
    try:
        cursor = connection.cursor()
        for statement in statements[:-1]:
            cursor.execute(statement)
        with pytest.raises(DRIVER_ERRORS) as caught:
            cursor.execute(statements[-1])
        return caught.value
    finally:
        connection.close()


DRIVERS: dict[str, Callable[[str], Any]] = {"psycopg2": psycopg2.connect, "psycopg": psycopg.connect}


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_real_driver_errors_are_classified_by_sqlstate(counters: str, driver: str) -> None:
    """Connection loss and lock timeouts are transient; constraint, syntax and arithmetic errors are not."""

    def connect() -> Any:
        return DRIVERS[driver](counters)

    terminated = error_from(connect, "SELECT pg_terminate_backend(pg_backend_pid())")
    assert "transient" == classify_postgres_error(terminated)

    connection = connect()
    with contextlib.suppress(Exception):
        connection.cursor().execute("SELECT pg_terminate_backend(pg_backend_pid())")
    with pytest.raises(DRIVER_ERRORS) as closed:
        connection.cursor().execute("SELECT 1")
    connection.close()
    assert "transient" == classify_postgres_error(closed.value)

    holder = connect()
    try:
        holder.cursor().execute("SELECT * FROM counters WHERE id = 1 FOR UPDATE")
        no_wait = error_from(connect, "SELECT * FROM counters WHERE id = 1 FOR UPDATE NOWAIT")
        lock_timeout = error_from(
            connect, "SET lock_timeout = '20ms'", "UPDATE counters SET value = 5 WHERE id = 1"
        )
    finally:
        holder.close()
    assert "55P03" == (getattr(no_wait, "pgcode", None) or getattr(no_wait, "sqlstate", None))
    assert "transient" == classify_postgres_error(no_wait)
    assert "transient" == classify_postgres_error(lock_timeout)

    unique_violation = error_from(connect, "INSERT INTO counters VALUES (1, 0)")
    syntax_error = error_from(connect, "SELEC 1")
    division_by_zero = error_from(connect, "SELECT 1 / 0")
    for permanent in (unique_violation, syntax_error, division_by_zero):
        assert "permanent" == classify_postgres_error(permanent), repr(permanent)
    assert classify_postgres_error(ValueError("not a database error")) is None


def error_after_idling(connect: Callable[[], Any], dsn: str, setting: str) -> BaseException:
    """The error a connection meets after the server ended its session for idling too long (``setting``)."""
    connection = connect()
    try:
        connection.autocommit = True
        connection.cursor().execute(f"SET {setting} = '50ms'")
        if setting == "idle_in_transaction_session_timeout":
            connection.autocommit = False
            connection.cursor().execute("SELECT 1")
        wait_until_gone(dsn, connection.info.backend_pid)
        with pytest.raises(DRIVER_ERRORS) as caught:
            connection.cursor().execute("SELECT 1")
        return caught.value
    finally:
        connection.close()


def sqlstate_of(error: BaseException) -> str | None:
    return getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_server_timeouts_and_cancels_are_transient(counters: str, driver: str) -> None:
    """The server ending an idle session (57P05, 25P03) or cancelling a statement (statement_timeout,
    pg_cancel_backend: 57014) is an outage a retry on a fresh connection gets past, not a permanent error."""

    def connect() -> Any:
        return DRIVERS[driver](counters)

    idle = error_after_idling(connect, counters, "idle_session_timeout")
    idle_in_transaction = error_after_idling(connect, counters, "idle_in_transaction_session_timeout")
    timed_out = error_from(connect, "SET statement_timeout = '20ms'", "SELECT pg_sleep(5)")
    cancelled = error_from(connect, "SELECT pg_cancel_backend(pg_backend_pid()), pg_sleep(5)")
    expected = {"idle": "57P05", "idle in transaction": "25P03", "timeout": "57014", "cancel": "57014"}
    if driver == "psycopg2":
        # psycopg2 reads the server's farewell as a connection that broke, with no SQLSTATE.
        expected.update({"idle": None, "idle in transaction": None})
    errors = {"idle": idle, "idle in transaction": idle_in_transaction, "timeout": timed_out}
    errors["cancel"] = cancelled
    assert expected == {name: sqlstate_of(error) for name, error in errors.items()}
    assert dict.fromkeys(errors, "transient") == {
        name: classify_postgres_error(error) for name, error in errors.items()
    }


@pytest.fixture
def login_refused_dsn(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose role may not log in, and a password.

    The test cluster trusts every connection, so a wrong password cannot
    happen; a role without LOGIN is refused at the same point, with an
    authorization SQLSTATE of the same class (28000, beside 28P01 for a
    wrong password).
    """
    if not is_superuser(postgres_dsn):
        pytest.skip("creating a role needs a superuser")
    role = f"ilmek_nologin_{uuid.uuid4().hex[:8]}"
    query(postgres_dsn, f"CREATE ROLE {role} NOLOGIN")
    yield make_dsn(postgres_dsn, user=role, password="hunter2")
    query(postgres_dsn, f"DROP ROLE {role}")


def test_a_refused_login_is_not_transient(login_refused_dsn: str) -> None:
    """A login the server refuses (like a wrong password) is a permanent error.

    psycopg 3 says on the error itself that it came from a connection attempt. psycopg2 does
    not, so for it ilmek marks the errors of the connections it obtains itself: that case is
    the pool test below.
    """
    with pytest.raises(DRIVER_ERRORS) as caught:
        psycopg.connect(login_refused_dsn)
    assert "permanent" == classify_postgres_error(caught.value)


def test_a_pool_whose_logins_are_refused_raises_a_permanent_storage_error(login_refused_dsn: str) -> None:
    """A pool that cannot log in gives StorageError, not TransientStorageError, and no password in it."""
    pool = psycopg2.pool.ThreadedConnectionPool(0, 2, login_refused_dsn)
    try:
        with pytest.raises(StorageError) as caught:
            PostgresCheckpointer(pool).get("any")
    finally:
        pool.closeall()
    assert "hunter2" not in str(caught.value)
    assert not isinstance(caught.value, TransientStorageError)


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_an_engine_whose_first_connection_is_lost_while_sqlalchemy_probes_it_is_retried(
    postgres_dsn: str, driver: str
) -> None:
    """SQLAlchemy's first connect probes the server (version, hstore) before ilmek gets the connection; a
    connection lost there (a pooler's recycled server session) is transient like anywhere else: ilmek tries
    again with another connection and the read succeeds, instead of a permanent "could not read" error."""
    connect = DRIVERS[driver]
    made: list[Any] = []

    def creator() -> Any:
        connection = connect(postgres_dsn)
        made.append(connection)
        if len(made) == 1:  # the first connection reaches SQLAlchemy dead, as a pooler may hand it out
            pid = connection.info.backend_pid
            query(postgres_dsn, "SELECT pg_terminate_backend(%s)", (pid,))
            wait_until_gone(postgres_dsn, pid)
        return connection

    engine = sqlalchemy.create_engine(f"postgresql+{driver}://", creator=creator)
    try:
        assert PostgresCheckpointer(engine).get("never-run") is None
    finally:
        engine.dispose()
    assert 2 == len(made)


def wait_until_gone(dsn: str, pid: int) -> None:
    deadline = time.monotonic() + 10
    while query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)):
        assert time.monotonic() < deadline, f"backend {pid} did not end"
        time.sleep(0.01)


def test_an_engine_whose_logins_are_refused_still_raises_a_permanent_storage_error(
    login_refused_dsn: str,
) -> None:
    """Through a SQLAlchemy engine too, a login the server refuses is permanent: a lost connection is
    transient, a refused one is not."""
    engine = sqlalchemy.create_engine(
        dsn_to_url(login_refused_dsn).replace("postgresql://", "postgresql+psycopg2://")
    )
    try:
        with pytest.raises(StorageError) as caught:
            PostgresCheckpointer(engine).get("any")
    finally:
        engine.dispose()
    assert not isinstance(caught.value, TransientStorageError)
    assert "hunter2" not in str(caught.value)


def test_a_psycopg_connection_whose_replies_no_longer_match_its_commands_is_transient(counters: str) -> None:
    """psycopg 3's InternalError with no SQLSTATE (two results for one command, as when a pooler recycles
    the server connection under it) is a lost connection, retried on a fresh one; a server's own internal
    error (SQLSTATE XX000) stays permanent."""
    connection = psycopg.connect(counters)
    try:
        # The driver's own path for BEGIN and COMMIT, given two commands' replies for one.
        with pytest.raises(psycopg.InternalError) as lost:
            connection.wait(connection._exec_command(b"SELECT 1; SELECT 2"))
    finally:
        connection.close()
    assert lost.value.sqlstate is None, repr(lost.value)
    assert "results" in str(lost.value)
    assert "transient" == classify_postgres_error(lost.value)
    raise_internal = "DO $$ BEGIN RAISE EXCEPTION 'broken' USING ERRCODE = 'XX000'; END $$"
    server_side = error_from(lambda: psycopg.connect(counters), raise_internal)
    assert isinstance(server_side, psycopg.InternalError)
    assert "permanent" == classify_postgres_error(server_side)
