"""PostgresCheckpointer on the caller's own client, of every kind, and inside the caller's transaction.

Each client kind (psycopg2 and psycopg 3 connections and pools, SQLAlchemy
engines, a generic ``execute`` client) runs the checkout flow and stays the
caller's: never closed, never left in a transaction. A run inside the caller's
open transaction is the caller's to commit or roll back. The port's behaviour
on every backend is ``tests/conformance/port/``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.errors
import psycopg2.pool
import psycopg_pool
import pytest
import sqlalchemy
from psycopg2.extensions import TRANSACTION_STATUS_IDLE, TRANSACTION_STATUS_INTRANS, parse_dsn

from ilmek import PostgresCheckpointer, StorageError, TransientStorageError, run, thread_state
from tests.support.pgworker import (
    CHECKOUT_DONE,
    TWO_STEP_FINAL,
    TWO_STEP_INPUT,
    Effects,
    checkout_graph,
    run_checkout,
    two_step_graph,
)
from tests.support.postgres import RecordingClient, fresh_checkpointer, query

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


# --- every client kind ---------------------------------------------------------------------


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


# --- inside the caller's transaction -------------------------------------------------------------


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
    # A storage failure is the run's, not the node's: run() raises it.
    with pytest.raises(StorageError) as raised:
        run(two_step_graph(effects), TWO_STEP_INPUT, thread_id="refused", checkpointer=checkpointer)
    error = raised.value
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
