"""PostgresCheckpointer against a real server: client kinds, schema, prefixes, transactions, holds, failures.

What belongs here is what only Postgres can show: the caller's own client of
every kind, ``migrate()`` racing across processes, the caller's open
transaction, advisory-lock holds across processes, connections killed
mid-run, SQLSTATE classification of real driver errors, query plans at scale
and JSONB round trips. The port's behaviour on every backend is
``tests/conformance/port/``'s.

Cross-process tests run ``tests/support/pgworker.py``; side effects are counted in
an append-only effects file, so effects of a killed process count too.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import math
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import psycopg2
import psycopg2.errors
import psycopg2.pool
import psycopg_pool
import pytest
import sqlalchemy
from psycopg2.extensions import TRANSACTION_STATUS_IDLE, TRANSACTION_STATUS_INTRANS, make_dsn, parse_dsn

from ilmek import (
    END,
    START,
    Checkpoint,
    PostgresCheckpointer,
    Result,
    ResumeError,
    SchemaVersionError,
    StorageError,
    ThreadBusyError,
    TransientStorageError,
    channel,
    graph,
    pending_interrupts,
    resume,
    run,
    thread_state,
)
from ilmek.checkpoint.postgres import adapter_for, classify_postgres_error
from ilmek.cli import main
from ilmek.dbapi import Session, Statement
from ilmek.types import JournalEntry, new_checkpoint_id, task_id_for
from tests.support.helpers import reply_chat
from tests.support.pgcluster import PostgresServer, find_bindir
from tests.support.pgworker import (
    CART,
    CHECKOUT_DONE,
    TWO_STEP_FINAL,
    TWO_STEP_INPUT,
    Effects,
    checkout_graph,
    run_checkout,
    two_step_graph,
)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

ROOT = pathlib.Path(__file__).resolve().parents[3]
ILMEK_TABLES = {"meta", "threads", "checkpoints", "blobs", "logs", "items", "journals", "holds"}


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def effects(tmp_path: pathlib.Path) -> Effects:
    """An empty effects file: one line per real execution of a step function."""
    return Effects(tmp_path / "effects.log")


def query(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own, committed; the rows, if any."""
    with contextlib.closing(psycopg2.connect(dsn)) as connection:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall() if cursor.description is not None else []
        connection.commit()
    return rows


def tables(dsn: str) -> set[str]:
    """The tables of the ``public`` schema."""
    rows = query(dsn, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
    return {row[0] for row in rows}


def application_dsn(dsn: str, name: str) -> str:
    """The DSN with an ``application_name``, so a test can find its sessions in pg_stat_activity."""
    return make_dsn(dsn, application_name=name)


def unique(stem: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{stem}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def fresh_checkpointer(dsn: str, **options: Any) -> Iterator[PostgresCheckpointer]:
    """A checkpointer on a connection of its own, as another process would open."""
    checkpointer = PostgresCheckpointer.connect(dsn, **options)
    try:
        yield checkpointer
    finally:
        checkpointer.close()


class RecordingClient:
    """The generic client kind (``execute(sql, params)`` returning rows) that records every call.

    With a connection it forwards each call to it (autocommit, so ilmek's own
    ``BEGIN``/``COMMIT`` are real); without one it answers nothing.
    """

    paramstyle = "pyformat"

    def __init__(self, connection: Any = None) -> None:
        self.connection = connection
        self.calls: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        self.calls.append((sql, params))
        if self.connection is None:
            return []
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params or None)
            return cursor.fetchall() if cursor.description is not None else []

    def statements(self) -> list[str]:
        return [sql for sql, _ in self.calls]

    @classmethod
    def on(cls, dsn: str) -> RecordingClient:
        connection = psycopg2.connect(dsn)
        connection.autocommit = True
        return cls(connection)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


class Worker:
    """A ``tests/support/pgworker.py`` process and the JSON lines it reports."""

    def __init__(self, log_dir: pathlib.Path, *args: str) -> None:
        self.stderr_path = log_dir / f"worker-{uuid.uuid4().hex[:8]}.err"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.pgworker", *args],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    def next_event(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(10)
            raise AssertionError(
                f"the worker exited ({self.process.returncode}) without reporting:\n"
                f"{self.stderr_path.read_text()}"
            )
        event: dict[str, Any] = json.loads(line)
        return event

    def expect(self, name: str) -> dict[str, Any]:
        event = self.next_event()
        assert name == event["event"], event
        return event

    def outcome(self) -> dict[str, Any]:
        event = self.expect("outcome")
        assert 0 == self.process.wait(30)
        return event

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def workers(tmp_path: pathlib.Path) -> Iterator[Callable[..., Worker]]:
    """Starts workers; any still running at the end of the test is killed."""
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        worker = Worker(tmp_path, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


_empty_databases = itertools.count(1)


@pytest.fixture
def empty_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A database with no tables at all (not cloned from the migrated template)."""
    name = f"ilmek_empty_{next(_empty_databases)}_{uuid.uuid4().hex[:6]}"
    dsn = postgres_server.create_database(name)
    yield dsn
    postgres_server.drop_database(name)


# --- 1. every client kind ---------------------------------------------------------------------


class CallerClient:
    """A client of one kind as the application holds it, and what the test checks about it."""

    #: Transaction statuses of connections as ilmek gave them back to a pool (None: no pool).
    returned: list[int] | None = None

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.client: Any = None

    def select_one(self) -> Any:
        """``SELECT 1`` through the caller's client: it is still open and usable."""
        raise NotImplementedError

    def left_idle(self) -> bool:
        """Whether ilmek left no transaction open on the caller's connection(s)."""
        assert self.returned is not None
        assert self.returned, "no connection was given back"
        return all(status == TRANSACTION_STATUS_IDLE for status in self.returned)

    def close(self) -> None:
        raise NotImplementedError


class Psycopg2Connection(CallerClient):
    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.client = psycopg2.connect(dsn)

    def select_one(self) -> Any:
        with self.client.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone()[0]

    def left_idle(self) -> bool:
        return bool(self.client.info.transaction_status == TRANSACTION_STATUS_IDLE)

    def close(self) -> None:
        self.client.close()


class PsycopgConnection(Psycopg2Connection):
    def __init__(self, dsn: str) -> None:
        CallerClient.__init__(self, dsn)
        self.client = psycopg.connect(dsn)

    def select_one(self) -> Any:
        return self.client.execute("SELECT 1").fetchone()[0]


class RecordingThreadedPool(psycopg2.pool.ThreadedConnectionPool):
    """psycopg2's pool noting each connection's transaction status as it comes back.

    The pool rolls back whatever is still open on return, so work ilmek
    forgot to commit would vanish silently: only the status on return shows it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.returned: list[int] = []

    def putconn(self, conn: Any = None, key: Any = None, close: bool = False) -> None:
        if conn is not None and not conn.closed:
            self.returned.append(conn.info.transaction_status)
        super().putconn(conn, key, close)


class Psycopg2Pool(CallerClient):
    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.client = RecordingThreadedPool(1, 6, dsn)
        self.returned = self.client.returned

    def select_one(self) -> Any:
        connection = self.client.getconn()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                return cursor.fetchone()[0]
        finally:
            connection.rollback()
            self.client.putconn(connection)

    def close(self) -> None:
        self.client.closeall()


class RecordingConnectionPool(psycopg_pool.ConnectionPool):
    """psycopg_pool's pool noting each connection's transaction status as it comes back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.returned: list[int] = []
        super().__init__(*args, **kwargs)

    def putconn(self, conn: Any) -> None:
        if not conn.closed:
            self.returned.append(conn.info.transaction_status)
        super().putconn(conn)


class PsycopgPool(CallerClient):
    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.client = RecordingConnectionPool(dsn, min_size=1, max_size=6, open=True)
        self.returned = self.client.returned

    def select_one(self) -> Any:
        with self.client.connection() as connection:
            return connection.execute("SELECT 1").fetchone()[0]

    def close(self) -> None:
        self.client.close()


class SqlAlchemyEngine(CallerClient):
    driver = "psycopg2"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        params = parse_dsn(dsn)
        url = sqlalchemy.URL.create(
            f"postgresql+{self.driver}",
            username=params.get("user"),
            password=params.get("password"),
            host=params.get("host"),
            port=int(params["port"]) if "port" in params else None,
            database=params.get("dbname"),
        )
        self.client = sqlalchemy.create_engine(url)
        self.returned = []
        # The engine's pool resets (rolls back) a connection coming back; look first.
        sqlalchemy.event.listen(self.client, "reset", self._note_reset)

    def _note_reset(self, dbapi_connection: Any, record: Any, state: Any) -> None:
        assert self.returned is not None
        self.returned.append(int(dbapi_connection.info.transaction_status))

    def select_one(self) -> Any:
        with self.client.connect() as connection:
            return connection.execute(sqlalchemy.text("SELECT 1")).scalar()

    def close(self) -> None:
        self.client.dispose()


class SqlAlchemyPsycopgEngine(SqlAlchemyEngine):
    driver = "psycopg"


class GenericClient(CallerClient):
    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.client = RecordingClient.on(dsn)

    def select_one(self) -> Any:
        return self.client.execute("SELECT 1", None)[0][0]

    def left_idle(self) -> bool:
        return bool(self.client.connection.info.transaction_status == TRANSACTION_STATUS_IDLE)

    def close(self) -> None:
        self.client.close()


CLIENT_KINDS: dict[str, type[CallerClient]] = {
    "psycopg2-connection": Psycopg2Connection,
    "psycopg2-pool": Psycopg2Pool,
    "psycopg-connection": PsycopgConnection,
    "psycopg-pool": PsycopgPool,
    "sqlalchemy-psycopg2": SqlAlchemyEngine,
    "sqlalchemy-psycopg": SqlAlchemyPsycopgEngine,
    "generic-execute": GenericClient,
}


@pytest.mark.parametrize("kind", sorted(CLIENT_KINDS))
def test_every_client_kind_runs_the_checkout_flow_and_stays_the_callers(
    postgres_dsn: str, effects: Effects, kind: str
) -> None:
    """Each client kind: pause, resume, done, steps once; committed for others; never closed by ilmek."""
    caller = CLIENT_KINDS[kind](postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(caller.client)
        run_checkout(checkpointer, effects, f"checkout-{kind}")
        assert caller.left_idle()
        checkpointer.close()
        assert 1 == caller.select_one()
    finally:
        caller.close()
    with fresh_checkpointer(postgres_dsn) as other:
        assert CHECKOUT_DONE == thread_state(checkout_graph(effects), other, f"checkout-{kind}")


# --- 2. migrate() and ddl() -----------------------------------------------------------------


def test_migrate_from_four_processes_at_once_succeeds_in_all(
    empty_dsn: str, tmp_path: pathlib.Path, workers: Callable[..., Worker], effects: Effects
) -> None:
    """Four processes booting together on an empty database all migrate; the schema is whole, once."""
    go = tmp_path / "go"
    started = [workers("migrate", "--dsn", empty_dsn, "--go-file", str(go)) for _ in range(4)]
    for worker in started:
        worker.expect("ready")
    go.touch()
    assert ["migrated"] * 4 == [worker.outcome()["outcome"] for worker in started]
    assert {f"ilmek_{name}" for name in ILMEK_TABLES} == tables(empty_dsn)
    assert [("schema_version", str(PostgresCheckpointer.SCHEMA_VERSION))] == query(
        empty_dsn, "SELECT key, value FROM ilmek_meta"
    )
    with fresh_checkpointer(empty_dsn) as checkpointer:
        run_checkout(checkpointer, effects, "after-migrate")


def test_migrate_brings_a_schema_2_store_with_a_paused_thread_to_3(empty_dsn: str, effects: Effects) -> None:
    """Schema 3 adds the superstep function: a store at 2 is refused until migrated, then resumes."""
    with fresh_checkpointer(empty_dsn) as checkpointer:
        checkpointer.migrate()
        checkout = checkout_graph(effects)
        paused = run(checkout, CART, thread_id="from-2", checkpointer=checkpointer)
        assert "interrupted" == paused.status
    # What schema 2 was: the same tables, without the function.
    query(empty_dsn, "DROP FUNCTION ilmek_superstep")
    query(empty_dsn, "UPDATE ilmek_meta SET value = '2' WHERE key = 'schema_version'")
    with fresh_checkpointer(empty_dsn) as checkpointer:
        with pytest.raises(SchemaVersionError, match=r"version 2, this ilmek uses version 3: run migrate"):
            resume(checkout, "yes", thread_id="from-2", checkpointer=checkpointer)
        checkpointer.migrate()
        assert [("3",)] == query(empty_dsn, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'")
        assert [(1,)] == query(empty_dsn, "SELECT count(*) FROM pg_proc WHERE proname = 'ilmek_superstep'")
        finished = resume(checkout, "yes", thread_id="from-2", checkpointer=checkpointer)
    assert ("done", CHECKOUT_DONE) == (finished.status, finished.state)
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()


def test_the_printed_ddl_runs_in_psql_and_gives_a_schema_ready_to_use(
    empty_dsn: str, effects: Effects, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ilmek ddl --dialect postgres` piped into psql (a function body spans lines) makes a usable store."""
    bindir = find_bindir()
    assert bindir is not None, "psql comes with the server the tests run"
    assert 0 == main(["ddl", "--dialect", "postgres"])
    printed = capsys.readouterr().out
    subprocess.run(
        [f"{bindir}/psql", "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-q", empty_dsn],
        input=printed,
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert {f"ilmek_{name}" for name in ILMEK_TABLES} == tables(empty_dsn)
    with fresh_checkpointer(empty_dsn) as checkpointer:
        run_checkout(checkpointer, effects, "by-psql")


DDL_WORDS = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE")


def test_migrate_twice_is_a_no_op(empty_dsn: str) -> None:
    """A second migrate() reads the version and changes nothing: no DDL, no write."""
    client = RecordingClient.on(empty_dsn)
    try:
        checkpointer = PostgresCheckpointer(client)
        checkpointer.migrate()
        assert any(sql.startswith("CREATE TABLE") for sql in client.statements())
        before = tables(empty_dsn)
        client.calls.clear()
        PostgresCheckpointer(client).migrate()
        writes = [sql for sql in client.statements() if sql.split()[0].upper() in DDL_WORDS]
        assert [] == writes
        assert before == tables(empty_dsn)
    finally:
        client.close()


def run_ddl_by_hand(dsn: str, statements: list[str]) -> None:
    """What an operator does with ``ddl()``: run each statement, then commit."""
    with contextlib.closing(psycopg2.connect(dsn)) as connection:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        connection.commit()


def test_ddl_run_by_hand_gives_a_schema_the_checkpointer_accepts_without_migrate(
    empty_dsn: str, effects: Effects
) -> None:
    """The SQL of ddl(), run with psycopg2 into an empty database, is a schema ready to use."""
    statements = PostgresCheckpointer(RecordingClient()).ddl()
    run_ddl_by_hand(empty_dsn, statements)
    assert {f"ilmek_{name}" for name in ILMEK_TABLES} == tables(empty_dsn)
    connection = psycopg2.connect(empty_dsn)
    try:
        run_checkout(PostgresCheckpointer(connection), effects, "by-hand")
    finally:
        connection.close()


def test_a_schema_of_another_version_is_refused_saying_what_to_do(empty_dsn: str, effects: Effects) -> None:
    """A meta version edited to 999 is SchemaVersionError naming found and expected; nothing runs."""
    run_ddl_by_hand(empty_dsn, PostgresCheckpointer(RecordingClient()).ddl())
    query(empty_dsn, "UPDATE ilmek_meta SET value = '999' WHERE key = 'schema_version'")
    with fresh_checkpointer(empty_dsn) as checkpointer:
        with pytest.raises(SchemaVersionError) as caught:
            checkpointer.get("any")
        assert 999 == caught.value.found
        assert checkpointer.schema_version == caught.value.expected
        assert "999" in str(caught.value)
        assert f"version {checkpointer.schema_version}" in str(caught.value)
        assert "upgrade ilmek" in str(caught.value)
        with pytest.raises(SchemaVersionError):
            run(checkout_graph(effects), CART, thread_id="refused", checkpointer=checkpointer)
    assert {} == effects.counts()
    assert [] == query(empty_dsn, "SELECT thread_id FROM ilmek_threads")


def test_missing_tables_are_schema_version_error_saying_run_migrate(empty_dsn: str, effects: Effects) -> None:
    """Without the tables every use is SchemaVersionError telling to run migrate(); nothing is created."""
    with fresh_checkpointer(empty_dsn) as checkpointer:
        with pytest.raises(SchemaVersionError, match=r"run migrate\(\)") as caught:
            checkpointer.get("any")
        assert 0 == caught.value.found
        with pytest.raises(SchemaVersionError, match=r"run migrate\(\)"):
            run(checkout_graph(effects), CART, thread_id="no-tables", checkpointer=checkpointer)
    assert set() == tables(empty_dsn)


# --- 3. table prefixes ----------------------------------------------------------------------------


def test_table_prefix_names_every_table(postgres_dsn: str) -> None:
    """``table_prefix="billing"`` creates billing_checkpoints, billing_journals... and nothing else."""
    with fresh_checkpointer(postgres_dsn, table_prefix="billing") as checkpointer:
        checkpointer.migrate()
        assert all("ilmek_" not in statement for statement in checkpointer.ddl())
    rows = query(
        postgres_dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s",
        ("billing\\_%",),
    )
    assert {f"billing_{name}" for name in ILMEK_TABLES} == {row[0] for row in rows}
    assert {"billing_checkpoints", "billing_journals"} <= {row[0] for row in rows}


def test_two_prefixes_in_one_database_never_see_each_others_threads(
    postgres_dsn: str, effects: Effects
) -> None:
    """The same thread id under two prefixes: separate states, listings, deletes and holds."""
    with (
        fresh_checkpointer(postgres_dsn) as default,
        fresh_checkpointer(postgres_dsn, table_prefix="billing") as billing,
        fresh_checkpointer(postgres_dsn, table_prefix="billing") as billing_elsewhere,
    ):
        billing.migrate()
        two_step = two_step_graph(effects)
        run(two_step, {"log": ["default"]}, thread_id="shared", checkpointer=default)
        run(two_step, {"log": ["billing"]}, thread_id="shared", checkpointer=billing)
        assert ["default", "prepared", "finished"] == thread_state(two_step, default, "shared")["log"]
        assert ["billing", "prepared", "finished"] == thread_state(two_step, billing, "shared")["log"]
        run(two_step, None, thread_id="only-default", checkpointer=default)
        assert ["only-default", "shared"] == sorted(info.id for info in default.list_threads())
        assert ["shared"] == [info.id for info in billing.list_threads()]
        with billing.hold("shared"):
            with pytest.raises(ThreadBusyError):
                run(two_step, None, thread_id="shared", checkpointer=billing_elsewhere)
            assert "done" == run(two_step, None, thread_id="shared", checkpointer=default).status
        billing.delete_thread("shared")
        assert billing.get("shared") is None
        assert default.get("shared") is not None


def test_prefixes_differing_only_in_case_name_the_same_tables(postgres_dsn: str, effects: Effects) -> None:
    """``Billing`` and ``billing`` are one prefix (as unquoted SQL names are): same tables, same holds."""
    with (
        fresh_checkpointer(postgres_dsn, table_prefix="Billing") as upper,
        fresh_checkpointer(postgres_dsn, table_prefix="billing") as lower,
    ):
        upper.migrate()
        lower.migrate()
        run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="case", checkpointer=upper)
        assert lower.get("case") is not None
        with upper.hold("case"), pytest.raises(ThreadBusyError):
            lower.hold("case").__enter__()
    tables = query(postgres_dsn, "SELECT count(*) FROM pg_class WHERE relname = 'billing_checkpoints'")
    assert [(1,)] == tables


def test_the_longest_allowed_prefix_works(postgres_dsn: str, effects: Effects) -> None:
    """A 40-character prefix keeps every table and index name within Postgres's 63 characters."""
    prefix = "p" * 40
    with fresh_checkpointer(postgres_dsn, table_prefix=prefix) as checkpointer:
        checkpointer.migrate()
        run_checkout(checkpointer, effects, "long-prefix")
    names = query(postgres_dsn, "SELECT relname FROM pg_class WHERE relname LIKE %s", (prefix + "%",))
    assert len(names) > len(ILMEK_TABLES)
    assert all(len(name) <= 63 and name.startswith(prefix + "_") for (name,) in names)


HOSTILE_PREFIXES = [
    "x; DROP TABLE ilmek_checkpoints; --",
    "ilmek_checkpoints--",
    "a b",
    "1abc",
    "",
    "é",
    "a" * 41,
    None,
    'quoted"name',
    "tab\tname",
]


@pytest.mark.parametrize("prefix", HOSTILE_PREFIXES)
def test_a_hostile_prefix_is_value_error_before_any_sql(postgres_dsn: str, prefix: Any) -> None:
    """A prefix outside ``[A-Za-z_][A-Za-z0-9_]{0,39}`` is refused before a single statement is sent."""
    recording = RecordingClient()
    with pytest.raises(ValueError, match="table_prefix"):
        PostgresCheckpointer(recording, table_prefix=prefix)
    assert [] == recording.calls
    before = tables(postgres_dsn)
    connection = psycopg2.connect(postgres_dsn)
    try:
        with pytest.raises(ValueError, match="table_prefix"):
            PostgresCheckpointer(connection, table_prefix=prefix)
        # A statement would have opened a transaction on this non-autocommit connection.
        assert TRANSACTION_STATUS_IDLE == connection.info.transaction_status
    finally:
        connection.close()
    assert before == tables(postgres_dsn)
    assert "ilmek_checkpoints" in before


def test_connect_with_a_hostile_prefix_opens_no_session(postgres_dsn: str) -> None:
    """``connect(dsn, table_prefix=bad)`` is ValueError and leaves no session behind."""
    name = unique("bad-prefix")
    with pytest.raises(ValueError, match="table_prefix") as caught:
        PostgresCheckpointer.connect(application_dsn(postgres_dsn, name), table_prefix="a b")
    sessions = query(
        postgres_dsn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
    )
    del caught
    assert [(0,)] == sessions


# --- 4. inside the caller's transaction -------------------------------------------------------------


@pytest.fixture
def app_connection(postgres_dsn: str) -> Iterator[Any]:
    """The application's own psycopg2 connection (non-autocommit) with an ``orders`` table of its own."""
    connection = psycopg2.connect(postgres_dsn)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    connection.commit()
    yield connection
    connection.close()


CALLER_FIRST_STATEMENTS = {
    "select": "SELECT 1",
    "insert": "INSERT INTO orders (id) VALUES (1)",
}


def committed_thread_ids(dsn: str) -> list[str]:
    return [row[0] for row in query(dsn, "SELECT thread_id FROM ilmek_threads ORDER BY thread_id")]


@pytest.mark.parametrize("first", sorted(CALLER_FIRST_STATEMENTS))
def test_a_run_in_the_callers_transaction_is_undone_by_the_callers_rollback(
    postgres_dsn: str, app_connection: Any, effects: Effects, first: str
) -> None:
    """Joining, ilmek writes in a savepoint and commits nothing: the caller's rollback takes them too."""
    with app_connection.cursor() as cursor:
        cursor.execute(CALLER_FIRST_STATEMENTS[first])
    checkpointer = PostgresCheckpointer(app_connection, join_transaction=True)
    result = run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="in-tx", checkpointer=checkpointer)
    assert "done" == result.status
    assert TRANSACTION_STATUS_INTRANS == app_connection.info.transaction_status
    assert [] == committed_thread_ids(postgres_dsn)
    app_connection.rollback()
    assert [] == committed_thread_ids(postgres_dsn)
    assert [] == query(postgres_dsn, "SELECT thread_id FROM ilmek_checkpoints")
    assert [] == query(postgres_dsn, "SELECT id FROM orders")
    with app_connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ilmek_threads")
        assert (0,) == cursor.fetchone()
    with fresh_checkpointer(postgres_dsn) as other:
        assert other.get("in-tx") is None


@pytest.mark.parametrize("first", sorted(CALLER_FIRST_STATEMENTS))
def test_a_run_in_the_callers_transaction_is_kept_by_the_callers_commit(
    postgres_dsn: str, app_connection: Any, effects: Effects, first: str
) -> None:
    """When the caller commits, the run's checkpoints are committed with the caller's own rows."""
    with app_connection.cursor() as cursor:
        cursor.execute(CALLER_FIRST_STATEMENTS[first])
    checkpointer = PostgresCheckpointer(app_connection, join_transaction=True)
    run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="in-tx", checkpointer=checkpointer)
    app_connection.commit()
    assert ["in-tx"] == committed_thread_ids(postgres_dsn)
    expected_orders = [(1,)] if first == "insert" else []
    assert expected_orders == query(postgres_dsn, "SELECT id FROM orders")
    with fresh_checkpointer(postgres_dsn) as other:
        assert TWO_STEP_FINAL == thread_state(two_step_graph(effects), other, "in-tx")


@pytest.mark.parametrize("first", sorted(CALLER_FIRST_STATEMENTS))
def test_without_joining_a_callers_open_transaction_is_refused_never_committed(
    postgres_dsn: str, app_connection: Any, effects: Effects, first: str
) -> None:
    """Owning its transactions, ilmek refuses a connection with the caller's work open; nothing committed."""
    with app_connection.cursor() as cursor:
        cursor.execute(CALLER_FIRST_STATEMENTS[first])
    checkpointer = PostgresCheckpointer(app_connection)
    with pytest.raises(StorageError, match="join_transaction=True"):
        run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="refused", checkpointer=checkpointer)
    assert TRANSACTION_STATUS_INTRANS == app_connection.info.transaction_status
    app_connection.rollback()
    assert [] == query(postgres_dsn, "SELECT id FROM orders")
    assert [] == committed_thread_ids(postgres_dsn)
    assert {} == effects.counts()


def test_a_database_error_in_the_callers_transaction_leaves_it_usable(
    postgres_dsn: str, app_connection: Any, effects: Effects
) -> None:
    """A refused write rolls back to ilmek's savepoint only: the caller's transaction goes on and commits."""
    query(
        postgres_dsn,
        "CREATE FUNCTION refuse_journals() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'journals are refused here'; END $$",
    )
    query(
        postgres_dsn,
        "CREATE TRIGGER refuse BEFORE INSERT ON ilmek_journals "
        "FOR EACH ROW EXECUTE FUNCTION refuse_journals()",
    )
    with app_connection.cursor() as cursor:
        cursor.execute("INSERT INTO orders (id) VALUES (1)")
    checkpointer = PostgresCheckpointer(app_connection, join_transaction=True)
    result = run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="refused", checkpointer=checkpointer)
    assert "error" == result.status
    [(node, error)] = result.errors
    assert "work" == node
    assert isinstance(error, StorageError)
    assert not isinstance(error, TransientStorageError)
    assert "'refused'" in str(error)
    assert isinstance(error.__cause__, psycopg2.errors.RaiseException)
    with app_connection.cursor() as cursor:
        cursor.execute("INSERT INTO orders (id) VALUES (2)")
    app_connection.commit()
    assert [(1,), (2,)] == query(postgres_dsn, "SELECT id FROM orders ORDER BY id")
    # The input checkpoint, written before the refused journal, was committed with the caller.
    assert ["refused"] == committed_thread_ids(postgres_dsn)


def test_an_autocommit_connection_gets_ilmek_s_own_transactions_committed(
    postgres_dsn: str, effects: Effects
) -> None:
    """On an autocommit connection ilmek begins and commits its own transactions; none is left open."""
    connection = psycopg2.connect(postgres_dsn)
    connection.autocommit = True
    try:
        run_checkout(PostgresCheckpointer(connection), effects, "autocommit")
        assert TRANSACTION_STATUS_IDLE == connection.info.transaction_status
        assert connection.autocommit is True
    finally:
        connection.close()
    with fresh_checkpointer(postgres_dsn) as other:
        assert CHECKOUT_DONE == thread_state(checkout_graph(effects), other, "autocommit")


# --- 5. holds across processes ----------------------------------------------------------------------


def test_two_processes_resuming_one_pause_charge_once(
    postgres_dsn: str, effects: Effects, tmp_path: pathlib.Path, workers: Callable[..., Worker]
) -> None:
    """A double-clicked approve from two processes: one completes, the other is refused; one charge."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        paused = run(checkout_graph(effects), CART, thread_id="race", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    go = tmp_path / "go"
    arguments = ["--dsn", postgres_dsn, "--thread", "race", "--effects", str(effects.path)]
    racers = [workers("resume", *arguments, "--answer", "yes", "--go-file", str(go)) for _ in range(2)]
    for racer in racers:
        racer.expect("ready")
    go.touch()
    outcomes = sorted(racer.outcome()["outcome"] for racer in racers)
    assert "done" in outcomes
    outcomes.remove("done")
    assert outcomes[0] in ("busy", "resume_error")
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        assert CHECKOUT_DONE == thread_state(checkout_graph(effects), checkpointer, "race")


def run_when_free(action: Callable[[], Result], seconds: float) -> tuple[Result, float]:
    """Retry ``action`` while the thread is busy; the result and how long it took to get in."""
    started = time.monotonic()
    while True:
        try:
            return action(), time.monotonic() - started
        except ThreadBusyError:
            if time.monotonic() - started > seconds:
                raise
            time.sleep(0.02)


@pytest.mark.parametrize("client", ["connection", "pool"])
def test_a_killed_holder_releases_the_thread_as_its_session_ends(
    postgres_dsn: str, effects: Effects, workers: Callable[..., Worker], client: str
) -> None:
    """A process SIGKILLed inside a long node frees the thread as its session ends; its step replays."""
    arguments = ["--dsn", postgres_dsn, "--thread", "killed", "--effects", str(effects.path)]
    holder = workers("linger", *arguments, "--client", client)
    holder.expect("ready")
    holder.expect("lingering")
    two_step = two_step_graph(effects)
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        with pytest.raises(ThreadBusyError):
            run(two_step, None, thread_id="killed", checkpointer=checkpointer)
        holder.kill()
        # Only as long as the server takes to notice the closed socket: far below any lease.
        result, waited = run_when_free(
            lambda: run(two_step, None, thread_id="killed", checkpointer=checkpointer), seconds=4.0
        )
    assert "done" == result.status, result.errors
    assert TWO_STEP_FINAL == result.state
    assert {"prepare": 1, "finish": 1} == effects.counts()
    print(f"\nthread free {waited * 1000:.0f} ms after SIGKILL ({client})")


# --- 6. connections lost mid-run -----------------------------------------------------------------


class Between:
    """Parks a node between its two steps until the test lets it go."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()

    def __call__(self, point: str) -> None:
        self.arrived.set()
        assert self.released.wait(30), "the test never let the node go on"


class Background:
    """``run`` on a thread of its own, keeping its result or exception."""

    def __init__(self, action: Callable[[], Result]) -> None:
        self.result: Result | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(action,))
        self._thread.start()

    def _run(self, action: Callable[[], Result]) -> None:
        try:
            self.result = action()
        except BaseException as error:
            self.error = error

    def join(self) -> None:
        self._thread.join(45)
        assert not self._thread.is_alive(), "the run never returned"


def terminate_sessions(dsn: str, application_name: str, *, spare_the_hold: bool = False) -> int:
    """``pg_terminate_backend`` the sessions with that application name; wait until they are gone.

    With ``spare_the_hold``, the session holding an advisory lock (the run's hold) is left alive.
    """
    spare = (
        " AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)"
        if spare_the_hold
        else ""
    )
    victims = query(
        dsn, f"SELECT pid FROM pg_stat_activity WHERE application_name = %s{spare}", (application_name,)
    )
    pids = [pid for (pid,) in victims]
    for pid in pids:
        query(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while pids and query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)):
        assert time.monotonic() < deadline, "terminated sessions did not go away"
        time.sleep(0.01)
    return len(pids)


POOLS: dict[str, Callable[[str], Any]] = {
    "psycopg2-pool": lambda dsn: psycopg2.pool.ThreadedConnectionPool(1, 6, dsn),
    "psycopg-pool": lambda dsn: psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=6, open=True),
}


def close_client(client: Any) -> None:
    if hasattr(client, "closeall"):
        client.closeall()
    else:
        client.close()


@pytest.mark.parametrize("kind", sorted(POOLS))
def test_a_pool_survives_its_connections_being_terminated_mid_run(
    postgres_dsn: str, effects: Effects, kind: str
) -> None:
    """Pooled write sessions killed between two steps: the next write retries on a new connection.

    The hold's own session is spared: losing it is a lost hold, which must stop the run (see below).
    """
    name = unique("victim")
    pool = POOLS[kind](application_dsn(postgres_dsn, name))
    between = Between()
    two_step = two_step_graph(effects, between)
    try:
        checkpointer = PostgresCheckpointer(pool)
        background = Background(
            lambda: run(two_step, TWO_STEP_INPUT, thread_id="lost", checkpointer=checkpointer)
        )
        try:
            assert between.arrived.wait(30)
            assert terminate_sessions(postgres_dsn, name, spare_the_hold=True) >= 1
        finally:
            between.released.set()
            background.join()
        assert background.error is None
        assert background.result is not None
        assert "done" == background.result.status, background.result.errors
        assert TWO_STEP_FINAL == background.result.state
    finally:
        close_client(pool)
    assert {"prepare": 1, "finish": 1} == effects.counts()
    with fresh_checkpointer(postgres_dsn) as other:
        assert TWO_STEP_FINAL == thread_state(two_step, other, "lost")


def terminate_the_hold(dsn: str, thread_id: str) -> None:
    """Terminate the session a run holds its thread through (the one its hold row names)."""
    [(pid,)] = query(dsn, "SELECT holder FROM ilmek_holds WHERE thread_id = %s", (thread_id,))
    query(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)):
        assert time.monotonic() < deadline, "the terminated session did not go away"
        time.sleep(0.01)


def test_a_run_that_lost_its_hold_performs_no_further_step(postgres_dsn: str, effects: Effects) -> None:
    """Once its hold's session is gone and another run has the thread, a run does not perform more steps."""
    name = unique("hold-lost")
    pool = psycopg2.pool.ThreadedConnectionPool(1, 6, application_dsn(postgres_dsn, name))
    between = Between()
    try:
        checkpointer = PostgresCheckpointer(pool)
        paused_graph = two_step_graph(effects, between)
        first = Background(
            lambda: run(paused_graph, TWO_STEP_INPUT, thread_id="lost", checkpointer=checkpointer)
        )
        try:
            assert between.arrived.wait(30)
            terminate_the_hold(postgres_dsn, "lost")
            with fresh_checkpointer(postgres_dsn) as other:
                second = run(two_step_graph(effects), None, thread_id="lost", checkpointer=other)
            assert "done" == second.status
        finally:
            between.released.set()
            first.join()
    finally:
        pool.closeall()
    assert {"prepare": 1, "finish": 1} == effects.counts()


SINGLE_CONNECTIONS: dict[str, Callable[[str], Any]] = {
    "psycopg2-connection": psycopg2.connect,
    "psycopg-connection": psycopg.connect,
}


@pytest.mark.parametrize("kind", sorted(SINGLE_CONNECTIONS))
def test_a_single_connection_terminated_mid_run_fails_clearly_and_loses_nothing_committed(
    postgres_dsn: str, effects: Effects, kind: str
) -> None:
    """The one connection killed between two steps: a storage error naming the thread; a new run replays."""
    name = unique("victim")
    connection = SINGLE_CONNECTIONS[kind](application_dsn(postgres_dsn, name))
    between = Between()
    try:
        checkpointer = PostgresCheckpointer(connection)
        paused_graph = two_step_graph(effects, between)
        background = Background(
            lambda: run(paused_graph, TWO_STEP_INPUT, thread_id="lost", checkpointer=checkpointer)
        )
        try:
            assert between.arrived.wait(30)
            assert 1 == terminate_sessions(postgres_dsn, name)
        finally:
            between.released.set()
            background.join()
    finally:
        connection.close()
    if background.error is not None:
        failure = background.error
    else:
        assert background.result is not None
        assert "error" == background.result.status
        [(_, failure)] = background.result.errors
    assert isinstance(failure, (StorageError, ThreadBusyError)), repr(failure)
    assert "'lost'" in str(failure)
    with fresh_checkpointer(postgres_dsn) as other:
        result = run(two_step_graph(effects), None, thread_id="lost", checkpointer=other)
    assert "done" == result.status, result.errors
    assert TWO_STEP_FINAL == result.state
    # ``prepare`` was recorded before the kill, so it replays. Before ``finish``
    # the run confirmed its hold through its connection, found it gone, and did
    # not run the step: the new run performs it, once.
    assert {"prepare": 1, "finish": 1} == effects.counts()


# --- 7. transient or permanent, by SQLSTATE --------------------------------------------------------------


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


# --- 8. storage economics -------------------------------------------------------------------------------


def chat_graph(turns: int) -> Any:
    """Appends one message per superstep until there are ``turns`` of them."""

    def speak(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [f"message {len(state['messages'])}"]}

    def again(state: dict[str, Any], ctx: Any) -> str:
        return "speak" if len(state["messages"]) < turns else END

    return (
        graph("pg-chat", {"messages": channel.append()})
        .node("speak", speak)
        .edge(START, "speak")
        .router("speak", again)
        .compile()
    )


def test_a_long_append_channel_is_stored_once_and_read_in_pages(postgres_dsn: str) -> None:
    """300 supersteps of one message each: 300 item rows, same-size checkpoints, pages by offset/limit."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        result = run(chat_graph(300), None, thread_id="long", checkpointer=checkpointer, recursion_limit=400)
        assert "done" == result.status
        messages = [f"message {i}" for i in range(300)]
        assert messages == checkpointer.read_channel("long", "messages")
        assert messages[100:110] == checkpointer.read_channel("long", "messages", offset=100, limit=10)
        assert messages[295:] == checkpointer.read_channel("long", "messages", offset=295, limit=10)
        assert [] == checkpointer.read_channel("long", "messages", offset=300, limit=10)
        assert [] == checkpointer.read_channel("long", "messages", offset=0, limit=0)
        assert [] == checkpointer.read_channel("long", "no-such-channel")
    assert [(300,)] == query(postgres_dsn, "SELECT count(*) FROM ilmek_items")
    sizes = query(
        postgres_dsn,
        "SELECT pg_column_size(manifest) FROM ilmek_checkpoints WHERE thread_id = 'long' "
        "ORDER BY checkpoint_id",
    )
    assert 301 == len(sizes)
    # Checkpoint 300 costs what checkpoint 10 did (give or take a digit of a length).
    assert sizes[-1][0] <= sizes[10][0] + 8


def failing_graph() -> Any:
    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the node failed")

    return (
        graph("pg-fail", {"log": channel.append()})
        .node("fail", fail)
        .edge(START, "fail")
        .edge("fail", END)
        .compile()
    )


def test_list_threads_filters_and_pages(postgres_dsn: str, effects: Effects) -> None:
    """search (LIKE characters literal), metadata, status, offset and limit, newest first."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        checkout = checkout_graph(effects)
        run(checkout, CART, thread_id="order_100%", checkpointer=checkpointer)
        run(checkout, CART, thread_id="order-200", checkpointer=checkpointer)
        resume(checkout, "yes", thread_id="order-200", checkpointer=checkpointer)
        assert "error" == run(failing_graph(), None, thread_id="orderX100", checkpointer=checkpointer).status
        checkpointer.put_thread_metadata("order_100%", {"tenant": "acme", "tier": 1})
        checkpointer.put_thread_metadata("order-200", {"tenant": "acme", "tier": 2})
        checkpointer.put_thread_metadata("orderX100", {"tenant": "globex"})

        def ids(**filters: Any) -> list[str]:
            return [info.id for info in checkpointer.list_threads(**filters)]

        newest_first = ["orderX100", "order-200", "order_100%"]
        assert newest_first == ids()
        assert ["order_100%"] == ids(search="_100%")
        assert ["orderX100", "order_100%"] == ids(search="100")
        assert ["order_100%"] == ids(search="ORDER_")
        assert ["order-200", "order_100%"] == ids(metadata={"tenant": "acme"})
        assert ["order-200"] == ids(metadata={"tenant": "acme", "tier": 2})
        assert ["order_100%"] == ids(status="interrupted")
        assert ["order-200"] == ids(status="done")
        assert ["orderX100"] == ids(status="error")
        assert [] == ids(status="unfinished")
        assert newest_first[1:] == ids(offset=1)
        assert newest_first[1:2] == ids(offset=1, limit=1)
        assert [] == ids(offset=3, limit=5)
        assert ["order_100%"] == ids(metadata={"tenant": "acme"}, status="interrupted", search="order")


BULK_THREADS = 100_000


def explain(dsn: str, sql: str, params: Any) -> str:
    return "\n".join(row[0] for row in query(dsn, "EXPLAIN " + sql, params))


def test_queries_use_indexes_at_one_hundred_thousand_threads(postgres_dsn: str) -> None:
    """With 100,000 threads the latest-checkpoint and list_threads queries use indexes (times reported)."""
    query(
        postgres_dsn,
        "INSERT INTO ilmek_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) SELECT 'bulk-' || i, 1.7e9 + i, 1.7e9 + i, "
        "(ARRAY['done', 'interrupted', 'unfinished'])[1 + i %% 3], i %% 50, lpad(i::text, 12, '0'), "
        "jsonb_build_object('tenant', 'tenant-' || (i %% 1000)) "
        "FROM generate_series(1, %s) AS i",
        (BULK_THREADS,),
    )
    query(
        postgres_dsn,
        "INSERT INTO ilmek_checkpoints (thread_id, checkpoint_id, step, ts, manifest, next, pending, "
        "task_journals, metadata) SELECT 'bulk-' || (i %% 10000), lpad(i::text, 12, '0'), 0, 1.7e9, "
        "'{}', '[]', '[]', '{}', '{}' FROM generate_series(1, %s) AS i",
        (BULK_THREADS,),
    )
    query(postgres_dsn, "ANALYZE ilmek_threads")
    query(postgres_dsn, "ANALYZE ilmek_checkpoints")
    client = RecordingClient.on(postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(client)

        def sent_by(action: Callable[[], Any], marker: str) -> tuple[str, Any]:
            client.calls.clear()
            action()
            [call] = [call for call in client.calls if marker in call[0]]
            return call

        latest = sent_by(lambda: checkpointer.get("bulk-7"), "ORDER BY checkpoint_id DESC LIMIT 1")
        assert "Index" in explain(postgres_dsn, *latest)
        listing = sent_by(lambda: checkpointer.list_threads(limit=50), "ORDER BY t.updated_at DESC")
        assert "Index" in explain(postgres_dsn, *listing)
        by_metadata = sent_by(
            lambda: checkpointer.list_threads(metadata={"tenant": "tenant-7"}, limit=50),
            "ORDER BY t.updated_at",
        )
        assert "ilmek_threads_metadata" in explain(postgres_dsn, *by_metadata)

        timings = {}
        for label, filters in {
            "list_threads(limit=50)": {"limit": 50},
            'list_threads(status="interrupted", limit=50)': {"status": "interrupted", "limit": 50},
            'list_threads(metadata={"tenant": "tenant-7"}, limit=50)': {
                "metadata": {"tenant": "tenant-7"},
                "limit": 50,
            },
        }.items():
            started = time.perf_counter()
            found = checkpointer.list_threads(**filters)
            timings[label] = time.perf_counter() - started
            assert 50 == len(found)
    finally:
        client.close()
    print(f"\nat {BULK_THREADS} threads:")
    for label, seconds in timings.items():
        print(f"  {label}: {seconds * 1000:.1f} ms")


class CountingConnection(psycopg2.extensions.connection):  # type: ignore[misc]
    """Records each statement with whether it ran in autocommit, and counts COMMIT calls."""

    sent: list[tuple[str, bool]] = []  # noqa: RUF012 - one list for every connection of the pool
    commits: int = 0

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cursor_factory"] = _CountingCursor
        return super().cursor(*args, **kwargs)

    def commit(self) -> None:
        type(self).commits += 1
        super().commit()


class _CountingCursor(psycopg2.extensions.cursor):  # type: ignore[misc]
    def execute(self, query: Any, params: Any = None) -> Any:
        CountingConnection.sent.append((" ".join(str(query).split()[:2]), bool(self.connection.autocommit)))
        return super().execute(query, params)


def test_a_turn_is_three_round_trips_a_read_and_two_calls_each_its_own_transaction(postgres_dsn: str) -> None:
    """A turn on a thread this process made: one read (the list's items are known), the input's
    call (taking the hold) and the superstep's call (giving it back), each a statement in
    autocommit; no BEGIN, no COMMIT."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 2, postgres_dsn, connection_factory=CountingConnection)
    g = reply_chat("turns")
    try:
        checkpointer = PostgresCheckpointer(pool)
        # The first turn makes the thread and its list: the list's items stay known to this process.
        run(g, {"log": ["one"]}, thread_id="turns", checkpointer=checkpointer)
        CountingConnection.sent.clear()
        CountingConnection.commits = 0
        result = run(g, {"log": ["two"]}, thread_id="turns", checkpointer=checkpointer)
    finally:
        pool.closeall()
    assert ["one", "reply to one", "two", "reply to two"] == result.state["log"]
    assert [("SELECT checkpoint_id,", True), ("SELECT busy,", True), ("SELECT busy,", True)] == (
        CountingConnection.sent
    )
    assert 0 == CountingConnection.commits


def test_a_new_threads_first_run_is_a_read_and_one_call_per_checkpoint(postgres_dsn: str) -> None:
    """A run on a new thread: the read that finds no thread, one call that makes the thread, its
    list and its first checkpoint (taking the hold), one call per superstep; all in autocommit.
    Another process then reads the same state, list items included."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 2, postgres_dsn, connection_factory=CountingConnection)
    g = reply_chat("fresh")
    try:
        checkpointer = PostgresCheckpointer(pool)
        run(g, {"log": ["warm"]}, thread_id="fresh-warm-up", checkpointer=checkpointer)  # the schema check
        CountingConnection.sent.clear()
        CountingConnection.commits = 0
        result = run(g, {"log": ["one", "two"]}, thread_id="fresh", checkpointer=checkpointer)
    finally:
        pool.closeall()
    assert ["one", "two", "reply to two"] == result.state["log"]
    assert [("SELECT checkpoint_id,", True), ("SELECT busy,", True), ("SELECT busy,", True)] == (
        CountingConnection.sent
    )
    assert 0 == CountingConnection.commits
    with PostgresCheckpointer.connect(postgres_dsn) as fresh:
        stored = fresh.get("fresh")
        assert stored is not None
        assert ["one", "two", "reply to two"] == list(stored.channels["log"])
        assert 2 == len(fresh.list("fresh"))
        info = fresh.get_thread("fresh")
        assert info is not None
        assert "done" == info.status


def test_a_resume_records_its_answers_in_one_call(postgres_dsn: str) -> None:
    """A resume: the latest checkpoint and the pause's journals read, the answers one call (taking
    the hold, and returning what is recorded from the pause, so the journals are not read again),
    the superstep one call; all in autocommit, no COMMIT."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 2, postgres_dsn, connection_factory=CountingConnection)
    charges: list[str] = []

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.step("charge", lambda: charges.append("charged") or len(charges))
        answer = ctx.interrupt("Charge?")
        return {"log": [f"{receipt}: {answer}"]}

    g = graph("answers", {"log": channel.append()}).node("checkout", checkout)
    g = g.edge(START, "checkout").edge("checkout", END).compile()
    try:
        checkpointer = PostgresCheckpointer(pool)
        assert (
            "interrupted" == run(g, {"log": ["order"]}, thread_id="answers", checkpointer=checkpointer).status
        )
        CountingConnection.sent.clear()
        CountingConnection.commits = 0
        done = resume(g, "yes", thread_id="answers", checkpointer=checkpointer)
    finally:
        pool.closeall()
    assert (["order", "1: yes"], ["charged"]) == (done.state["log"], charges)
    assert [
        ("SELECT checkpoint_id,", True),
        ("SELECT base_id,", True),
        ("SELECT busy,", True),
        ("SELECT busy,", True),
    ] == CountingConnection.sent
    assert 0 == CountingConnection.commits


class KeepsSettingsToItself:
    """A proxy for a psycopg2 connection whose attribute sets (``autocommit``) stay on the proxy."""

    def __init__(self, connection: Any) -> None:
        self.wrapped = connection

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # stands in for the connection, as wrapt's proxies do
        return type(self.wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class ProxyLendingPool(psycopg2.pool.ThreadedConnectionPool):  # type: ignore[misc]
    """Lends each connection through a :class:`KeepsSettingsToItself` proxy."""

    def getconn(self, key: Any = None) -> Any:
        return KeepsSettingsToItself(super().getconn(key))

    def putconn(self, conn: Any = None, key: Any = None, close: bool = False) -> None:
        super().putconn(conn.wrapped if isinstance(conn, KeepsSettingsToItself) else conn, key, close)


def test_a_proxy_that_keeps_autocommit_to_itself_still_commits_every_call(postgres_dsn: str) -> None:
    """The switch to autocommit never reaches the driver, which opens a transaction for the call:
    ilmek commits it. Every turn is durable for another process, no transaction (or advisory
    lock) stays open on a pooled connection, and the thread is free for the next run."""
    pool = ProxyLendingPool(1, 2, postgres_dsn)
    g = reply_chat("proxied")
    try:
        checkpointer = PostgresCheckpointer(pool)
        for turn in ("one", "two", "three"):
            assert "done" == run(g, {"log": [turn]}, thread_id="proxied", checkpointer=checkpointer).status
        lent = [pool.getconn() for _ in range(2)]
        statuses = [connection.get_transaction_status() for connection in lent]
        for connection in lent:
            pool.putconn(connection)
    finally:
        pool.closeall()
    assert [TRANSACTION_STATUS_IDLE] * 2 == statuses
    with fresh_checkpointer(postgres_dsn) as other:
        assert ["one", "reply to one", "two", "reply to two", "three", "reply to three"] == (
            thread_state(g, other, "proxied")["log"]
        )
        with other.hold("proxied"):
            pass


# --- 9. JSONB round trips -----------------------------------------------------------------------------

IST = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
BRT = datetime.timezone(datetime.timedelta(hours=-3))

EDGE_VALUES: dict[str, Any] = {
    "nul inside": "before\0after",
    "only nul": "\0",
    "nul at both ends": "\0middle\0",
    "key with nul\0": "value",
    "nested": {"inner key\0": ["\0", ("in a tuple\0",), {"in a set\0"}]},
    "positive zero": 0.0,
    "negative zero": -0.0,
    "1e16": 1e16,
    "-1e16": -1e16,
    "just below 1e16": 9999999999999998.0,
    "smallest subnormal": 5e-324,
    "largest float": 1.7976931348623157e308,
    "one tenth": 0.1,
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "2**64 + 1": 2**64 + 1,
    "-(2**100)": -(2**100),
    "10**16 as int": 10**16,
    "3999 digits": 10**3998 + 7,
    "5001 digits": 10**5000 + 3,
    "decimal 1.10": Decimal("1.10"),
    "decimal 1E+3": Decimal("1E+3"),
    "decimal -0.00": Decimal("-0.00"),
    "decimal NaN": Decimal("NaN"),
    "decimal 40 digits": Decimal("3.141592653589793238462643383279502884197"),
    "aware +05:30": datetime.datetime(2024, 3, 31, 1, 30, 15, 123456, tzinfo=IST),
    "aware -03:00": datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=BRT),
    "aware UTC": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    "aware zoneinfo, second 01:30": datetime.datetime(
        2024, 10, 27, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"), fold=1
    ),
    "naive": datetime.datetime(2024, 3, 31, 1, 30),
    "time +05:30": datetime.time(23, 59, 59, 999999, tzinfo=IST),
    "date": datetime.date(2024, 2, 29),
}
THREAD_METADATA = {key: value for key, value in EDGE_VALUES.items() if "\0" not in key}


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Equal, of the same type, down to the sign of zero, NaN, a Decimal's exponent and a time zone."""
    assert type(expected) is type(actual), f"{path}: {type(expected).__name__} came back as {actual!r}"
    if isinstance(expected, dict):
        assert set(expected) == set(actual), path
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), path
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{path}[{index}]")
    elif isinstance(expected, float):
        assert repr(expected) == repr(actual), path
    elif isinstance(expected, Decimal):
        assert str(expected) == str(actual), path
    elif isinstance(expected, (datetime.datetime, datetime.time)):
        assert expected == actual, path
        assert expected.utcoffset() == actual.utcoffset(), path
        assert repr(expected.tzinfo) == repr(actual.tzinfo), path
        assert expected.fold == actual.fold, path
    else:
        assert expected == actual, path


def edge_graph(calls: list[str]) -> Any:
    """Echoes the edge values through a step (journal), a pause (payload) and an answer."""

    def echo(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        echoed = ctx.step("echo", lambda: calls.append("echo") or EDGE_VALUES)
        answer = ctx.interrupt(EDGE_VALUES)
        return {"echoed": echoed, "answer": answer}

    return (
        graph(
            "pg-edges",
            {
                "data": channel.last_write(None),
                "items": channel.append(),
                "echoed": channel.last_write(None),
                "answer": channel.last_write(None),
            },
        )
        .node("echo", echo)
        .edge(START, "echo")
        .edge("echo", END)
        .compile()
    )


def test_edge_values_survive_channels_journals_pauses_and_answers(postgres_dsn: str) -> None:
    """NUL strings and keys, odd floats, huge ints, Decimal scale and time zones come back exactly."""
    calls: list[str] = []
    edges = edge_graph(calls)
    items = list(EDGE_VALUES.values())
    with fresh_checkpointer(postgres_dsn) as writer:
        paused = run(edges, {"data": EDGE_VALUES, "items": items}, thread_id="edges", checkpointer=writer)
    assert "interrupted" == paused.status
    with fresh_checkpointer(postgres_dsn) as reader:
        stored = reader.get("edges")
        assert stored is not None
        assert_same(EDGE_VALUES, stored.channels["data"], "data")
        assert_same(items, stored.channels["items"], "items")
        assert_same(items[3:6], reader.read_channel("edges", "items", offset=3, limit=3), "page")
        [pending] = pending_interrupts(reader, "edges")
        assert_same(EDGE_VALUES, pending.payload, "payload")
        # The paused task's journal, read under the pause's task id.
        [step, pause] = reader.get_journal(pending.task_id)
        assert_same(EDGE_VALUES, step.value, "journal")
        assert_same(EDGE_VALUES, pause.payload, "journal payload")
    with fresh_checkpointer(postgres_dsn) as resumer:
        finished = resume(edges, EDGE_VALUES, thread_id="edges", checkpointer=resumer)
    assert "done" == finished.status
    assert ["echo"] == calls
    with fresh_checkpointer(postgres_dsn) as reader:
        state = thread_state(edges, reader, "edges")
    assert_same(EDGE_VALUES, state["echoed"], "echoed")
    assert_same(EDGE_VALUES, state["answer"], "answer")


def test_edge_values_survive_metadata_and_the_journal_table(postgres_dsn: str) -> None:
    """Thread and checkpoint metadata and a stored journal keep NUL, odd floats, Decimals, zones.

    Thread metadata keys are what filters query, so they may not hold NUL; the values may.
    """
    checkpoint_id = new_checkpoint_id()
    checkpoint = Checkpoint(
        id=checkpoint_id, thread_id="meta", channels={"data": EDGE_VALUES}, metadata=EDGE_VALUES
    )
    task_id = task_id_for("meta", checkpoint_id, "node")
    entries = [
        JournalEntry(key="step", value=EDGE_VALUES),
        JournalEntry(key="pause", kind="interrupt", payload=EDGE_VALUES, value=EDGE_VALUES, answered=True),
    ]
    with fresh_checkpointer(postgres_dsn) as writer:
        writer.put("meta", checkpoint)
        writer.put_thread_metadata("meta", THREAD_METADATA)
        writer.put_journal(task_id, entries)
    with fresh_checkpointer(postgres_dsn) as reader:
        [step, pause] = reader.get_journal(task_id)
        assert_same(EDGE_VALUES, step.value, "journal step")
        assert_same(EDGE_VALUES, pause.payload, "journal payload")
        assert_same(EDGE_VALUES, pause.value, "journal answer")
        assert pause.answered is True
        stored = reader.get("meta")
        assert stored is not None
        assert_same(EDGE_VALUES, dict(stored.metadata), "checkpoint metadata")
        info = reader.get_thread("meta")
        assert info is not None
        assert_same(THREAD_METADATA, dict(info.metadata), "thread metadata")
        [listed] = reader.list_threads(search="meta")
        assert_same(THREAD_METADATA, dict(listed.metadata), "listed metadata")


def test_list_threads_matches_metadata_holding_nul_and_odd_numbers(postgres_dsn: str) -> None:
    """A metadata filter on a NUL string, -0.0 or a Decimal finds the thread that has it."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        metadata = {"note": "a\0b", "zero": -0.0, "price": Decimal("1.10"), "tenant": "acme"}
        filters = {"note": "a\0b", "zero": -0.0, "price": Decimal("1.10")}
        checkpointer.put_thread_metadata("odd", metadata)
        checkpointer.put_thread_metadata("plain", {"tenant": "acme"})
        for key, value in filters.items():
            assert ["odd"] == [info.id for info in checkpointer.list_threads(metadata={key: value})], key
        assert [] == checkpointer.list_threads(metadata={"note": "a\0c"})


def test_thread_metadata_keys_with_nul_are_refused(postgres_dsn: str) -> None:
    """Metadata keys are what filters query: a NUL-bearing key is refused, and nothing is stored."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        with pytest.raises(ValueError, match="metadata keys of thread 'mixed' must be strings without NUL"):
            checkpointer.put_thread_metadata("mixed", {"tenant": "acme", "note\0": "x"})
        assert checkpointer.get_thread("mixed") is None


def nul_key_graph(kind: str) -> Any:
    def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if kind == "step":
            value = ctx.step("key\0with nul", lambda: "stepped")
        else:
            value = ctx.interrupt("question", key="key\0with nul")
        return {"log": [value]}

    return (
        graph("pg-nul-key", {"log": channel.append()})
        .node("node", node)
        .edge(START, "node")
        .edge("node", END)
        .compile()
    )


@pytest.mark.parametrize("kind", ["step", "interrupt"])
def test_a_journal_key_with_nul_is_stored_as_on_every_backend(postgres_dsn: str, kind: str) -> None:
    """``ctx.step`` / ``ctx.interrupt`` keys containing NUL work on Postgres as they do on SQLite."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        result = run(nul_key_graph(kind), None, thread_id="nul-key", checkpointer=checkpointer)
    assert result.status in ("done", "interrupted"), result.errors


def test_a_resume_with_nothing_paused_is_resume_error_on_postgres(
    postgres_dsn: str, effects: Effects
) -> None:
    """A resume racing a finished one finds nothing paused: ResumeError naming the thread, no charge."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        run_checkout(checkpointer, effects, "finished")
        with pytest.raises(ResumeError, match="'finished'"):
            resume(checkout_graph(effects), "yes", thread_id="finished", checkpointer=checkpointer)
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()
