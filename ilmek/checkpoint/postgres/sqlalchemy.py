"""SQLAlchemy: an ``Engine`` (ilmek's own transactions on raw pooled connections),
or a ``Connection`` / ``Session`` / ``scoped_session`` (ilmek writes inside your transaction).

With an ``Engine``, a run keeps one of its pooled connections and commits its
own work. With a ``Connection`` or a ``Session`` — what Flask and FastAPI
applications usually hold — the transaction is yours: ilmek writes in a
savepoint (``begin_nested()``), commits nothing, and the writes land when
you commit. SQLAlchemy is imported only once the caller has imported it.
A mock connection (Alembic's offline mode) is refused, saying to emit the
DDL instead.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ...dbapi import Adapter, ConnectionClosed, ErrorKind, Session, sqlstate, while_connecting
from ...errors import InvalidArgumentError
from ...redact import connection_secrets
from .common import PoolAdapter, PostgresAdapter
from .psycopg import PsycopgConnection
from .psycopg2 import Psycopg2Connection

__all__ = ["OFFLINE_ADVICE", "adapt"]


def _driver_adapter(driver_connection: Any) -> PostgresAdapter:
    """How to make tuple cursors and read the status of the engine's DBAPI connection."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(driver_connection, psycopg.Connection):
        return PsycopgConnection(driver_connection, joins=False)
    return Psycopg2Connection(driver_connection, joins=False)


class _EngineConnection:
    """A pooled connection of the engine: the proxy SQLAlchemy hands out, and the driver's."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.driver = getattr(proxy, "driver_connection", None) or proxy.dbapi_connection
        self.tools = _driver_adapter(self.driver)

    @property
    def autocommit(self) -> bool:
        return bool(self.driver.autocommit)

    @property
    def closed(self) -> bool:
        return bool(getattr(self.driver, "closed", False))

    def commit(self) -> None:
        self.proxy.commit()

    def rollback(self) -> None:
        self.proxy.rollback()


class EngineAdapter(PoolAdapter):
    """A SQLAlchemy ``Engine``: raw DB-API connections from its pool."""

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self._engine = engine
        self.paramstyle = engine.dialect.paramstyle
        self.dialect: str = engine.dialect.name
        self.secrets = connection_secrets(None, {"password": engine.url.password})

    def borrow(self) -> Any:
        return _EngineConnection(self._engine.raw_connection())

    def classify(self, error: BaseException) -> ErrorKind | None:
        kind = super().classify(error)
        if kind == "permanent" and while_connecting(error) and self._lost_while_probed(error):
            return "transient"
        return kind

    def _lost_while_probed(self, error: BaseException) -> bool:
        """Whether a connection was lost during the engine's first-connect probes (version, hstore).

        They run inside ``raw_connection()``, on a connection already open, so
        what they raise looks like a failed login; a pooler's recycled server
        session is met there. SQLAlchemy's dialect is what tells a lost
        connection from a refused one (it reads the driver's words, which
        ilmek does not).
        """
        dialect = self._engine.dialect
        dbapi_error = getattr(getattr(dialect, "loaded_dbapi", None), "Error", None)
        if not (isinstance(dbapi_error, type) and isinstance(error, dbapi_error)):
            return False
        try:
            return bool(dialect.is_disconnect(error, None, None))
        except Exception:
            return False

    def roll_back(self, connection: Any) -> None:
        connection.proxy.rollback()

    def give_back(self, connection: Any, *, broken: bool) -> None:
        if broken:
            with contextlib.suppress(Exception):
                connection.proxy.invalidate()
        # Closing the proxy returns it to the engine's pool.
        with contextlib.suppress(Exception):
            connection.proxy.close()

    def cursor(self, connection: Any) -> Any:
        return connection.tools.cursor(connection.driver)

    def socket_of(self, connection: Any) -> int | None:
        return super().socket_of(connection.driver)

    def run_statement(self, connection: Any, cursor: Any, sql: str, params: Any) -> None:
        connection.tools.run_statement(connection.driver, cursor, sql, params)

    def status(self, connection: Any) -> int:
        return int(connection.tools.status(connection.driver))


class _JoinedAdapter(PostgresAdapter):
    """Statements through SQLAlchemy inside the caller's transaction, in savepoints."""

    joins = True
    # SQLAlchemy connections and sessions belong to one thread at a time.
    any_thread = False

    def __init__(self, client: Any) -> None:
        super().__init__()
        self._client = client
        bind = self._bind()
        self.paramstyle = bind.dialect.paramstyle
        self.dialect: str = bind.dialect.name

    def _bind(self) -> Any:
        raise NotImplementedError

    def _sql_connection(self) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def _mine(self) -> Iterator[Any]:
        yield self._client

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        if bool(getattr(self._client, "closed", False)):
            raise ConnectionClosed(
                "the SQLAlchemy Connection given to PostgresCheckpointer is closed: pass one that is open "
                "(or the Engine, which lends connections of its own)"
            )
        return self._mine()

    def advice(self, error: BaseException) -> str:
        pending = _sqlalchemy_error("PendingRollbackError")
        if (pending is not None and isinstance(error, pending)) or sqlstate(error) == _FAILED_TRANSACTION:
            return (
                "Your session's transaction failed earlier (a flush was refused) and must be rolled back "
                "first: call session.rollback(), then try again."
            )
        return super().advice(error)

    def transaction_open(self, connection: Any) -> bool:
        return True  # SQLAlchemy begins one by itself (autobegin); it is the caller's to commit

    @contextlib.contextmanager
    def transaction_scope(self, connection: Any, *, write: bool) -> Iterator[Session]:
        # SQLAlchemy names its savepoints and counts their depth itself.
        nested = connection.begin_nested()
        try:
            yield Session(self, connection, joined=True)
        except BaseException:
            with contextlib.suppress(Exception):
                nested.rollback()
            raise
        nested.commit()
        self.connected_once = True

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        result = self._sql_connection().exec_driver_sql(sql, params if params is not None else ())
        return [tuple(row) for row in result.fetchall()] if result.returns_rows else []


class ConnectionAdapter(_JoinedAdapter):
    """A SQLAlchemy ``Connection``."""

    def _bind(self) -> Any:
        return self._client.engine

    def _sql_connection(self) -> Any:
        return self._client


class SessionAdapter(_JoinedAdapter):
    """A SQLAlchemy ORM ``Session``, or a ``scoped_session`` standing for the one of the current scope."""

    def _bind(self) -> Any:
        return self._client.get_bind()

    def _sql_connection(self) -> Any:
        return self._client.connection()


_FAILED_TRANSACTION = "25P02"  # in_failed_sql_transaction: a statement of yours failed, roll back


def _sqlalchemy_error(name: str) -> type[BaseException] | None:
    found = getattr(sys.modules.get("sqlalchemy.exc"), name, None)
    return found if isinstance(found, type) else None


OFFLINE_ADVICE = (
    "PostgresCheckpointer cannot use a SQLAlchemy mock connection, which runs no SQL and answers no "
    "query: it is what Alembic's op.get_bind() returns in offline mode (alembic upgrade --sql), where "
    "migrate() cannot read the schema's version. In offline mode emit the DDL instead: "
    "for statement in PostgresCheckpointer.schema_sql(prefix): op.execute(statement) "
    "(or PostgresCheckpointer.upgrade_sql(from_version, prefix) for an upgrade); "
    "online, PostgresCheckpointer(op.get_bind()).migrate() works"
)
"""Why a mock connection is refused, and what to do instead."""


def adapt(client: Any, *, join_transaction: bool) -> Adapter | None:
    """The adapter for a SQLAlchemy Engine, Connection, Session or scoped_session, or ``None``.

    Raises:
        InvalidArgumentError: a client bound to another database than
            PostgreSQL (SQLite, say), naming it.
        InvalidArgumentError: ``join_transaction`` with an Engine (it lends
            connections of its own: there is no transaction of yours to join);
            or a mock connection (``create_mock_engine``, and Alembic's
            ``op.get_bind()`` in offline mode), which only records SQL: left
            to the generic adapter, its probe for an open transaction would
            land in the emitted script and then read as a transaction open
            (see :data:`OFFLINE_ADVICE`).
    """
    mock = sys.modules.get("sqlalchemy.engine.mock")
    if mock is not None and isinstance(client, mock.MockConnection):
        raise InvalidArgumentError(OFFLINE_ADVICE)
    adapter: _JoinedAdapter | EngineAdapter
    engine = sys.modules.get("sqlalchemy.engine")
    orm = sys.modules.get("sqlalchemy.orm")
    if engine is not None and isinstance(client, engine.Engine):
        if join_transaction:
            raise InvalidArgumentError(
                "join_transaction needs a connection of yours to join: an Engine lends connections of "
                "its own. Pass a SQLAlchemy Connection or Session (they always write inside your "
                "transaction), or drop join_transaction"
            )
        adapter = EngineAdapter(client)
    elif engine is not None and isinstance(client, engine.Connection):
        adapter = ConnectionAdapter(client)
    elif orm is not None and isinstance(client, (orm.Session, orm.scoped_session)):
        # A scoped_session (Flask-SQLAlchemy's db.session) passes every call on to
        # the Session of the current scope, so each use writes in that scope's transaction.
        adapter = SessionAdapter(client)
    else:
        return None
    _refuse_another_database(client, adapter.dialect)
    return adapter


def _refuse_another_database(client: Any, dialect: str) -> None:
    """Refuse a SQLAlchemy client bound to a database other than PostgreSQL, naming it."""
    if dialect == "postgresql":
        return
    advice = (
        " (for SQLite, SqliteCheckpointer(path) with the file the engine opens)"
        if dialect == "sqlite"
        else ""
    )
    raise InvalidArgumentError(
        f"PostgresCheckpointer was given a SQLAlchemy {type(client).__name__} on {dialect!r}: it "
        f"stores checkpoints in PostgreSQL only. Bind it to a PostgreSQL database, or use the "
        f"checkpointer of that database{advice}: SqliteCheckpointer, InMemoryCheckpointer"
    )
