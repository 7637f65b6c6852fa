"""The stores the ``checkpointer`` fixture runs a test on: one ``Backend`` class per store.

Add a backend by adding one entry to ``BACKENDS``; ``tests/conftest.py`` turns
them into the ``backend``, ``checkpointer`` and ``reopen`` fixtures, and the
reference suite's conftest picks three of them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest

from ilmek import Checkpointer, InMemoryCheckpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.pgcluster import dsn_to_url


class Backend:
    """Opens checkpointers on one store for one test."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.request = request
        self.tmp_path_factory = tmp_path_factory
        self.opened: list[Checkpointer] = []

    def open(self, **options: Any) -> Checkpointer:
        """A checkpointer on the store; ``options`` are the backend's keywords (``cipher=``...)."""
        raise NotImplementedError

    def close(self) -> None:
        for checkpointer in reversed(self.opened):
            checkpointer.close()


class MemoryBackend(Backend):
    shared: InMemoryCheckpointer | None = None

    def open(self, **options: Any) -> Checkpointer:
        # One process: every "reopen" sees the same memory (options count on the first open).
        if self.shared is None:
            self.shared = InMemoryCheckpointer(**options)
        return self.shared


class SqliteFileBackend(Backend):
    """A SQLite file; every reopen is a new checkpointer on the same file."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__(request, tmp_path_factory)
        self.path = tmp_path_factory.mktemp("sqlite") / "checkpoints.db"

    def open(self, **options: Any) -> Checkpointer:
        checkpointer = SqliteCheckpointer(self.path, lease_seconds=2.0, **options)
        self.opened.append(checkpointer)
        return checkpointer


class SqliteMemoryBackend(MemoryBackend):
    """``:memory:`` lives in one connection: every reopen shares the one checkpointer."""

    def open(self, **options: Any) -> Checkpointer:
        if self.shared is None:
            self.shared = SqliteCheckpointer(":memory:", **options)  # type: ignore[assignment]
            self.opened.append(self.shared)  # type: ignore[arg-type]
        return self.shared  # type: ignore[return-value]


class SqliteCallerConnectionBackend(Backend):
    """A connection the caller opened and keeps; ilmek must never close it."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__(request, tmp_path_factory)
        self.path = tmp_path_factory.mktemp("sqlite-conn") / "app.db"
        self.connections: list[sqlite3.Connection] = []

    def open(self, **options: Any) -> Checkpointer:
        connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self.connections.append(connection)
        checkpointer = SqliteCheckpointer(connection, lease_seconds=2.0, **options)
        self.opened.append(checkpointer)
        return checkpointer

    def close(self) -> None:
        super().close()
        for connection in self.connections:
            # Still open and usable: ilmek never closes a caller's connection.
            connection.execute("SELECT 1")
            connection.close()


class PostgresBackend(Backend):
    """A fresh database per test, cloned from a migrated template."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__(request, tmp_path_factory)
        self.dsn: str = request.getfixturevalue("postgres_dsn")
        self.resources: list[Any] = []

    def client(self) -> Any:
        raise NotImplementedError

    def open(self, **options: Any) -> Checkpointer:
        checkpointer = PostgresCheckpointer(self.client(), lease_seconds=2.0, **options)
        self.opened.append(checkpointer)
        return checkpointer

    def close(self) -> None:
        super().close()
        for resource in reversed(self.resources):
            resource.close()


class PostgresConnectionBackend(PostgresBackend):
    """A psycopg2 connection the caller opened (ilmek never closes it)."""

    def client(self) -> Any:
        connection = psycopg2.connect(self.dsn)
        self.resources.append(connection)
        return connection


class PostgresPoolBackend(PostgresBackend):
    """A psycopg2 pool: ilmek borrows with getconn and gives back with putconn."""

    def client(self) -> Any:
        # psycopg2 closes a returned connection when minconn others are idle:
        # keep a few, or every burst reconnects.
        pool = psycopg2.pool.ThreadedConnectionPool(4, 12, self.dsn)
        self.resources.append(_ClosingPool(pool))
        return pool


class _ClosingPool:
    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def close(self) -> None:
        self.pool.closeall()


class PostgresPsycopg3PoolBackend(PostgresBackend):
    """A psycopg 3 ``ConnectionPool``: the other driver, its own transaction states."""

    def client(self) -> Any:
        import psycopg_pool

        pool = psycopg_pool.ConnectionPool(self.dsn, min_size=1, max_size=12, open=True)
        self.resources.append(pool)
        return pool


class PostgresSqlAlchemyBackend(PostgresBackend):
    """A SQLAlchemy ``Engine``: raw DB-API connections from its pool."""

    def client(self) -> Any:
        import sqlalchemy

        url = dsn_to_url(self.dsn).replace("postgresql://", "postgresql+psycopg2://", 1)
        engine = sqlalchemy.create_engine(url, pool_size=12)
        self.resources.append(_DisposingEngine(engine))
        return engine


class _DisposingEngine:
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def close(self) -> None:
        self.engine.dispose()


class PostgresDictRowsBackend(PostgresBackend):
    """A psycopg 3 pool handing out dict-row connections (the settings LangGraph documents)."""

    def client(self) -> Any:
        import psycopg
        import psycopg_pool

        pool = psycopg_pool.ConnectionPool(
            self.dsn,
            min_size=1,
            max_size=12,
            kwargs={"row_factory": psycopg.rows.dict_row, "autocommit": True, "prepare_threshold": None},
            open=True,
        )
        self.resources.append(pool)
        return pool


class Proxy:
    """A stand-in for a connection, as APM tools (ddtrace, OpenTelemetry, wrapt) put in front of one."""

    def __init__(self, wrapped: Any) -> None:
        object.__setattr__(self, "_wrapped", wrapped)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._wrapped, name, value)


class PostgresProxyBackend(PostgresBackend):
    """A psycopg2 connection seen through a proxy: recognized as the connection it stands for."""

    def client(self) -> Any:
        connection = psycopg2.connect(self.dsn)
        self.resources.append(connection)
        return Proxy(connection)


class ExecuteClient:
    """The smallest client ilmek accepts: ``execute(sql, params)`` returning rows."""

    paramstyle = "pyformat"

    def __init__(self, dsn: str) -> None:
        self.connection = psycopg2.connect(dsn)
        self.connection.autocommit = True

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params or None)
            return cursor.fetchall() if cursor.description is not None else []

    def close(self) -> None:
        self.connection.close()


class PostgresGenericBackend(PostgresBackend):
    """Any object with ``execute(sql, params)``: holds become leases."""

    def client(self) -> Any:
        client = ExecuteClient(self.dsn)
        self.resources.append(client)
        return client


BACKENDS: dict[str, type[Backend]] = {
    "memory": MemoryBackend,
    "sqlite-file": SqliteFileBackend,
    "sqlite-memory": SqliteMemoryBackend,
    "sqlite-conn": SqliteCallerConnectionBackend,
    "postgres-conn": PostgresConnectionBackend,
    "postgres-dict-rows": PostgresDictRowsBackend,
    "postgres-proxy": PostgresProxyBackend,
    "postgres-pool": PostgresPoolBackend,
    "postgres-generic": PostgresGenericBackend,
    "postgres-psycopg3-pool": PostgresPsycopg3PoolBackend,
    "postgres-sqlalchemy": PostgresSqlAlchemyBackend,
}


@contextlib.contextmanager
def opened_backend(
    name: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """The backend called ``name`` for one test; every checkpointer it opened is closed at the end."""
    store = BACKENDS[name](request, tmp_path_factory)
    try:
        yield store
    finally:
        store.close()
