"""SqliteCheckpointer: checkpoints in one SQLite file, with the standard library only.

WAL lets readers run beside the one writer; every write transaction starts
with ``BEGIN IMMEDIATE``, because a deferred transaction that reads and then
writes fails at once under WAL when another connection wrote meanwhile,
whatever the busy timeout. Many threads and several processes may share a
file: each thread gets its own connection to a file we opened, holds are
leases in the ``holds`` table, and ``database is locked`` is retried.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from ..dbapi import Adapter, ErrorKind, LockedConnection, Session, Statement
from ._sql import SqlCheckpointer

__all__ = ["DEFAULT_PATH", "SqliteCheckpointer"]

DEFAULT_PATH = pathlib.Path("~/.ilmek/checkpoints.db")
"""Where :class:`SqliteCheckpointer` keeps its file when given none."""

# SQLITE_BUSY and SQLITE_LOCKED: another connection holds the lock, try again.
_TRANSIENT_CODES = frozenset({5, 6})
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_MIN_VERSION = (3, 35, 0)  # RETURNING

_MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE IF NOT EXISTS {p}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {p}_threads ("
        " thread_id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,"
        " status TEXT NOT NULL, step INTEGER NOT NULL, checkpoint_id TEXT,"
        " metadata TEXT NOT NULL DEFAULT '{{}}')",
        "CREATE INDEX IF NOT EXISTS {p}_threads_updated ON {p}_threads (updated_at DESC, thread_id DESC)",
        "CREATE INDEX IF NOT EXISTS {p}_threads_status ON {p}_threads (status, updated_at DESC)",
        "CREATE TABLE IF NOT EXISTS {p}_checkpoints ("
        " thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT, plan_id TEXT,"
        " step INTEGER NOT NULL, ts REAL NOT NULL, manifest TEXT NOT NULL, next TEXT NOT NULL,"
        " pending TEXT NOT NULL, task_journals TEXT NOT NULL, metadata TEXT NOT NULL,"
        " PRIMARY KEY (thread_id, checkpoint_id)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS {p}_blobs ("
        " blob_id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL,"
        " channel TEXT NOT NULL, value TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {p}_blobs_thread ON {p}_blobs (thread_id)",
        "CREATE TABLE IF NOT EXISTS {p}_logs ("
        " log_id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL, channel TEXT NOT NULL,"
        " parent_id INTEGER, base INTEGER NOT NULL, length INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {p}_logs_thread ON {p}_logs (thread_id)",
        "CREATE TABLE IF NOT EXISTS {p}_items ("
        " log_id INTEGER NOT NULL, idx INTEGER NOT NULL, value TEXT NOT NULL,"
        " PRIMARY KEY (log_id, idx)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS {p}_journals ("
        " task_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, entries TEXT NOT NULL) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS {p}_journals_thread ON {p}_journals (thread_id)",
        "CREATE TABLE IF NOT EXISTS {p}_holds ("
        " thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID",
    ],
]


class _SqliteAdapter(Adapter):
    """sqlite3 connections: explicit BEGIN IMMEDIATE / COMMIT, errors by error code."""

    paramstyle = "qmark"

    def __init__(self, connections: _Connections) -> None:
        self._connections = connections

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._connections.borrow()

    def in_transaction(self, connection: Any) -> bool:
        return bool(connection.in_transaction)

    def begin(self, connection: Any, *, write: bool) -> None:
        connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def commit(self, connection: Any) -> None:
        connection.execute("COMMIT")

    def rollback(self, connection: Any) -> None:
        if connection.in_transaction:
            connection.execute("ROLLBACK")

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        cursor = connection.execute(sql, params if params is not None else ())
        try:
            return cursor.fetchall() if cursor.description is not None else []
        finally:
            cursor.close()

    def classify(self, error: BaseException) -> ErrorKind | None:
        if not isinstance(error, sqlite3.Error):
            return None
        code = getattr(error, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _TRANSIENT_CODES:
            return "transient"
        return "permanent"

    def close(self) -> None:
        self._connections.close()


class _Connections:
    """Where connections come from: a caller's one, our one, or ours per thread."""

    def borrow(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Close what we opened (never a caller's connection)."""


class _CallerConnection(_Connections):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._shared = LockedConnection(connection)

    def borrow(self) -> contextlib.AbstractContextManager[Any]:
        return self._shared.borrow()


class _OwnedConnection(_Connections):
    """One connection of ours, shared under a lock (``:memory:`` is per connection)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._shared = LockedConnection(connection)

    def borrow(self) -> contextlib.AbstractContextManager[Any]:
        return self._shared.borrow()

    def close(self) -> None:
        self._shared.connection.close()


class _PerThreadConnections(_Connections):
    """A connection per thread to a file we opened, so readers never wait on each other."""

    def __init__(self, open_connection: Any) -> None:
        self._open = open_connection
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Any]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            with self._lock:
                if self._closed:
                    raise sqlite3.ProgrammingError("the checkpointer is closed")
                connection = self._open()
                self._all.append(connection)
            self._local.connection = connection
        yield connection

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for connection in self._all:
                connection.close()
            self._all.clear()


class SqliteCheckpointer(SqlCheckpointer):
    """Checkpoints in a SQLite file (or ``:memory:``), through the standard ``sqlite3``.

    Args:
        conn_or_path: A path (created with its folders if missing), ``":memory:"``,
            an open ``sqlite3.Connection`` (used as it is, never closed, and its
            open transactions never committed by ilmek), or ``None`` for
            ``~/.ilmek/checkpoints.db``.
        table_prefix: Tables are named ``<prefix>_checkpoints`` and so on.
        lease_seconds: How long a thread stays held after its holder stops
            renewing (a killed process's threads free up this long after it died).
        busy_timeout: Seconds a write waits for another writer's lock.
        synchronous: SQLite's ``synchronous`` pragma for files we open:
            ``FULL`` (the default) survives power loss; ``NORMAL`` is faster and
            still survives a crashed process.

    The tables are created, or upgraded, when the checkpointer is built.

    Raises:
        SchemaVersionError: the file was written by a newer ilmek.
    """

    MIGRATIONS: ClassVar[list[list[str]]] = _MIGRATIONS
    AUTO_MIGRATE: ClassVar[bool] = True

    def __init__(
        self,
        conn_or_path: sqlite3.Connection | str | os.PathLike[str] | None = None,
        *,
        table_prefix: str = "ilmek",
        lease_seconds: float = 5.0,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
    ) -> None:
        if sqlite3.sqlite_version_info < _MIN_VERSION:
            raise RuntimeError(
                f"SqliteCheckpointer needs SQLite {'.'.join(map(str, _MIN_VERSION))} or newer; "
                f"this Python has {sqlite3.sqlite_version}"
            )
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
        self.path: str | None
        connections: _Connections
        if isinstance(conn_or_path, sqlite3.Connection):
            self.path = None
            connections = _CallerConnection(conn_or_path)
        else:
            target = os.fspath(conn_or_path) if conn_or_path is not None else str(DEFAULT_PATH.expanduser())
            self.path = target
            if target == ":memory:":
                connections = _OwnedConnection(_connect(target, busy_timeout, synchronous))
            else:
                pathlib.Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
                target = str(pathlib.Path(target).expanduser())
                self.path = target
                # WAL is a property of the file: set it once, before the pool starts.
                _connect(target, busy_timeout, synchronous, wal=True).close()
                connections = _PerThreadConnections(lambda: _connect(target, busy_timeout, synchronous))
        super().__init__(_SqliteAdapter(connections), table_prefix=table_prefix, lease_seconds=lease_seconds)
        try:
            self._ensure_schema()
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike[str], **options: Any) -> SqliteCheckpointer:
        """Open (creating and migrating) the SQLite file at ``path``."""
        return cls(path, **options)

    def table_exists(self, session: Session, table: str) -> bool:
        rows = session.query(_TABLE_EXISTS, name=table)
        return bool(rows)

    def __repr__(self) -> str:
        where = self.path if self.path is not None else "a caller's connection"
        return f"SqliteCheckpointer({where!r}, table_prefix={self.table_prefix!r})"


_TABLE_EXISTS = Statement("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name")


def _connect(path: str, busy_timeout: float, synchronous: str, *, wal: bool = False) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves, so the
    # module never opens a deferred transaction behind our back.
    connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    if wal:
        _enable_wal(connection, busy_timeout)
    return connection


def _enable_wal(connection: sqlite3.Connection, busy_timeout: float) -> None:
    # Switching a fresh file to WAL needs it to itself, and SQLite answers
    # "database is locked" at once, without its busy handler, while another
    # process creates the same file: so wait here, as the busy timeout would.
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        try:
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF not in _TRANSIENT_CODES or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            continue
        if str(mode).lower() == "wal":
            return
        raise sqlite3.OperationalError(f"could not switch the database to WAL (it stays in {mode!r} mode)")
