"""SqliteCheckpointer: checkpoints in one SQLite file, with the standard library only.

WAL lets readers run beside the one writer; every write transaction starts
with ``BEGIN IMMEDIATE``, because a deferred transaction that reads and then
writes fails at once under WAL when another connection wrote meanwhile,
whatever the busy timeout. Many threads and several processes may share a
file: each thread gets its own connection to a file we opened (closed when
that thread ends), holds are leases in the ``holds`` table, and ``database
is locked`` is retried.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import threading
import time
import weakref
from typing import Any, ClassVar

from .. import checks, forks, serde
from ..crypto import Keyring
from ..dbapi import Adapter, ErrorKind, LockedConnection, Pin, Session, Statement
from ..errors import InvalidArgumentError, StorageError, TransientStorageError
from .django import DjangoAdapter, check_sqlite_transaction_mode, is_django_connection
from .sql import Migration, SqlCheckpointer, copy_v1_journals, validate_prefix
from .sql.notices import notices_table

__all__ = ["DEFAULT_PATH", "SqliteCheckpointer"]

DEFAULT_PATH = pathlib.Path("~/.ilmek/checkpoints.db")
"""Where :class:`SqliteCheckpointer` keeps its file when given none."""

# SQLITE_BUSY and SQLITE_LOCKED: another connection holds the lock, try again.
_TRANSIENT_CODES = frozenset({5, 6})
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_MIN_VERSION = (3, 35, 0)  # RETURNING

# What tick() asks: the threads with something due by now. Partial: only
# threads with an open deadline or timer are in it, so it stays as small as
# the due work, whatever the number of threads.
_DUE_INDEX = (
    "CREATE INDEX IF NOT EXISTS {p}_threads_due ON {p}_threads (due_at, thread_id) WHERE due_at IS NOT NULL"
)

# The pause notices' outbox (version 4).
_NOTICES = notices_table("TEXT", "REAL")

_SCHEMA: list[str] = [
    "CREATE TABLE IF NOT EXISTS {p}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {p}_threads ("
    " thread_id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,"
    " status TEXT NOT NULL, step INTEGER NOT NULL, checkpoint_id TEXT,"
    " metadata TEXT NOT NULL DEFAULT '{{}}', error TEXT, due_at REAL)",
    "CREATE INDEX IF NOT EXISTS {p}_threads_updated ON {p}_threads (updated_at DESC, thread_id DESC)",
    "CREATE INDEX IF NOT EXISTS {p}_threads_status ON {p}_threads (status, updated_at DESC)",
    _DUE_INDEX,
    "CREATE TABLE IF NOT EXISTS {p}_checkpoints ("
    " thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT, plan_id TEXT,"
    " step INTEGER NOT NULL, ts REAL NOT NULL, manifest TEXT NOT NULL, next TEXT NOT NULL,"
    " pending TEXT NOT NULL, task_journals TEXT NOT NULL, metadata TEXT NOT NULL,"
    " journal_chain TEXT NOT NULL DEFAULT '[]',"
    " PRIMARY KEY (thread_id, checkpoint_id)) WITHOUT ROWID",
    # origin: the checkpoint that wrote the row, which a sealed value is bound
    # to (version 5; NULL in older rows until rekey gives them one).
    "CREATE TABLE IF NOT EXISTS {p}_blobs ("
    " blob_id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL,"
    " channel TEXT NOT NULL, value TEXT NOT NULL, origin TEXT)",
    "CREATE INDEX IF NOT EXISTS {p}_blobs_thread ON {p}_blobs (thread_id)",
    # length: how many items the log was created with; appends claim the next
    # index of items (a primary key) instead of rewriting this row.
    "CREATE TABLE IF NOT EXISTS {p}_logs ("
    " log_id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL, channel TEXT NOT NULL,"
    " parent_id INTEGER, base INTEGER NOT NULL, length INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS {p}_logs_thread ON {p}_logs (thread_id)",
    "CREATE TABLE IF NOT EXISTS {p}_items ("
    " log_id INTEGER NOT NULL, idx INTEGER NOT NULL, value TEXT NOT NULL, origin TEXT,"
    " PRIMARY KEY (log_id, idx)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS {p}_journals ("
    " entry_id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL, base_id TEXT NOT NULL,"
    " task_key TEXT NOT NULL, entry_key TEXT NOT NULL, entry TEXT NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS {p}_journals_entry"
    " ON {p}_journals (thread_id, base_id, task_key, entry_key)",
    "CREATE TABLE IF NOT EXISTS {p}_holds ("
    " thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL,"
    " acquired_at REAL NOT NULL DEFAULT 0, holder INTEGER, cancel_reason TEXT) WITHOUT ROWID",
    *_NOTICES,
]


_UPGRADES: dict[int, list[Migration]] = {
    1: [
        "ALTER TABLE {p}_threads ADD COLUMN error TEXT",
        "ALTER TABLE {p}_checkpoints ADD COLUMN journal_chain TEXT NOT NULL DEFAULT '[]'",
        "ALTER TABLE {p}_holds ADD COLUMN acquired_at REAL NOT NULL DEFAULT 0",
        "ALTER TABLE {p}_holds ADD COLUMN holder INTEGER",
        "ALTER TABLE {p}_holds ADD COLUMN cancel_reason TEXT",
        "DROP INDEX IF EXISTS {p}_journals_thread",
        "ALTER TABLE {p}_journals RENAME TO {p}_journals_v1",
        _SCHEMA[-3],
        _SCHEMA[-2],
        copy_v1_journals,
        "DROP TABLE {p}_journals_v1",
    ],
    # Version 3: pauses with a deadline or a timer; the thread keeps the earliest (NULL before).
    2: ["ALTER TABLE {p}_threads ADD COLUMN due_at REAL", _DUE_INDEX],
    # Version 4: the outbox of pause notices (on_pause hooks).
    3: [*_NOTICES],
    # Version 5: each channel row records the checkpoint that wrote it (what its sealed value is bound to).
    4: ["ALTER TABLE {p}_blobs ADD COLUMN origin TEXT", "ALTER TABLE {p}_items ADD COLUMN origin TEXT"],
}


class _SqliteAdapter(Adapter):
    """sqlite3 connections: explicit BEGIN IMMEDIATE / COMMIT, errors by error code."""

    paramstyle = "qmark"

    def __init__(self, connections: _Connections, *, joins: bool, busy_timeout: float | None = None) -> None:
        super().__init__()
        self._connections = connections
        self.joins = joins
        self.any_thread = connections.any_thread and not joins
        # Each try already waits up to the busy timeout for the lock: the
        # tries together wait no longer than one busy timeout.
        self.retry_for = busy_timeout

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._connections.borrow()

    def transaction_open(self, connection: Any) -> bool:
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
            return [tuple(row) for row in cursor.fetchall()] if cursor.description is not None else []
        finally:
            cursor.close()

    def classify(self, error: BaseException) -> ErrorKind | None:
        return classify_sqlite_error(error)

    def close(self) -> None:
        self._connections.close()


def classify_sqlite_error(error: BaseException) -> ErrorKind | None:
    """``transient`` for a lock held by another connection; ``permanent`` for other sqlite3 errors."""
    if not isinstance(error, sqlite3.Error):
        return None
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _TRANSIENT_CODES:
        return "transient"
    return "permanent"


class _Connections:
    """Where connections come from: a caller's one, our one, or ours per thread."""

    #: Whether a connection may be borrowed from any thread (the hold keeper's too).
    any_thread = True

    def borrow(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Close what we opened (never a caller's connection)."""


class _CallerConnection(_Connections):
    # The caller's connection may insist on its own thread (check_same_thread).
    any_thread = False

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


class _ThreadConnection:
    """A thread's connection; closed when the thread ends and its locals go.

    It remembers the fork generation it was opened in: a forked child never
    uses (nor closes) a connection of its parent's, and opens its own.
    """

    __slots__ = ("__weakref__", "closer", "connection", "generation")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.generation = forks.generation()
        self.closer = weakref.finalize(self, _close_quietly, connection)


def _close_quietly(connection: sqlite3.Connection) -> None:
    with contextlib.suppress(Exception):
        connection.close()


class _ThisThreads:
    """Lends the calling thread's connection (a class: it wraps every transaction)."""

    __slots__ = ("_connections",)

    def __init__(self, connections: _PerThreadConnections) -> None:
        self._connections = connections

    def __enter__(self) -> sqlite3.Connection:
        return self._connections.this_threads()

    def __exit__(self, *exc_info: object) -> None:
        return None


class _PerThreadConnections(_Connections):
    """A connection per thread to a file we opened, so readers never wait on each other.

    A thread-per-request server makes and ends threads all day: a thread's
    connection is closed when the thread ends, so open files stay bounded.
    """

    def __init__(self, open_connection: Any) -> None:
        self._open = open_connection
        self._local = threading.local()
        self._live: weakref.WeakSet[_ThreadConnection] = weakref.WeakSet()
        self._lock = forks.ForkSafeLock()
        self._closed = False

    def borrow(self) -> contextlib.AbstractContextManager[Any]:
        return _ThisThreads(self)

    def this_threads(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use."""
        holder: _ThreadConnection | None = getattr(self._local, "holder", None)
        if holder is not None and holder.generation != forks.generation():
            # The parent's connection, inherited by a forked child: SQLite must
            # not see it used (or closed) across the fork. The child opens its own.
            holder.closer.detach()
            holder = None
        if holder is None:
            with self._lock:
                if self._closed:
                    raise StorageError("the SqliteCheckpointer is closed; open a new one")
            holder = _ThreadConnection(self._open())
            with self._lock:
                self._live.add(holder)
            self._local.holder = holder
        return holder.connection

    def _own(self) -> list[_ThreadConnection]:
        """The open connections of this process (not a forked child's inherited ones)."""
        current = forks.generation()
        return [holder for holder in self._live if holder.generation == current]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            holders = self._own()
        for holder in holders:
            _close_quietly(holder.connection)

    def open_count(self) -> int:
        """How many thread connections are open now (for tests of thread-per-request servers)."""
        with self._lock:
            return len(self._own())


_INT64 = 2**63


def _metadata_fragment(index: int, key: str, value: Any) -> tuple[str, dict[str, Any]] | None:
    """A WHERE fragment matching ``key`` equal to the scalar ``value`` in a thread's metadata, or ``None``.

    SQLite's ``json_each`` types each stored value (``text``, ``integer``,
    ``real``, ``true``, ``false``, ``null``), so a text never equals a
    number, nor a number a boolean, as :func:`ilmek.checkpoint._records.json_equal`
    has it. Values stored tagged (a tuple, a text holding NUL, a dict, a
    list) and integers beyond 64 bits are left to the Python filter.
    """
    stored = serde.to_jsonable(value, where=f"the metadata filter {key!r}")
    row = f"m{index}"
    params: dict[str, Any]
    if stored is None or isinstance(stored, bool):
        kind = "null" if stored is None else "true" if stored else "false"
        condition, params = f"{row}.type = '{kind}'", {}
    elif isinstance(stored, str):
        condition, params = f"{row}.type = 'text' AND {row}.value = :mv{index}", {f"mv{index}": stored}
    elif isinstance(stored, (int, float)) and -_INT64 <= stored < _INT64:
        condition = f"{row}.type IN ('integer', 'real') AND {row}.value = :mv{index}"
        params = {f"mv{index}": stored}
    else:
        return None
    # A row whose metadata is not a JSON object (a damaged one) is let through
    # to the Python filter, which names its thread: json_each would fail the
    # whole listing on it. CASE tries its branches in order, so json_each only
    # ever sees an object.
    fragment = (
        "CASE WHEN NOT json_valid(t.metadata) THEN 1 WHEN json_type(t.metadata) <> 'object' THEN 1 ELSE "
        f"EXISTS (SELECT 1 FROM json_each(t.metadata) AS {row} WHERE {row}.key = :mk{index} AND {condition})"
        " END"
    )
    return fragment, {f"mk{index}": key, **params}


class SqliteCheckpointer(SqlCheckpointer):
    """Checkpoints in a SQLite file (or ``:memory:``), through the standard ``sqlite3``.

    Args:
        conn_or_path: A path (created with its folders if missing), ``":memory:"``,
            an open ``sqlite3.Connection`` or a Django connection to a SQLite
            database (used as they are, never closed), or ``None`` for
            ``~/.ilmek/checkpoints.db``.
        table_prefix: Tables are named ``<prefix>_checkpoints`` and so on.
        lease_seconds: How long a thread stays held after its holder stops
            renewing (a killed process's threads free up this long after it died).
        busy_timeout: Seconds a write waits for another writer's lock.
        synchronous: SQLite's ``synchronous`` pragma for files we open:
            ``FULL`` (the default) survives power loss; ``NORMAL`` is faster and
            still survives a crashed process.
        join_transaction: Only with your own ``sqlite3.Connection``: write
            inside the transaction you have open on it (in savepoints; the
            writes land when you commit, and vanish if you roll back) instead
            of in transactions of ilmek's own. Without it, ilmek refuses a
            connection on which you left a transaction open rather than
            commit your work.
        cipher: An :class:`ilmek.crypto.Keyring`: every stored value is sealed
            (AES-256-GCM) and bound to its place; see :doc:`/encryption`.

    The tables are created, or upgraded, when the checkpointer is built.

    Raises:
        InvalidArgumentError: a bad ``table_prefix`` (checked before any file is touched).
        SchemaVersionError: the file was written by a newer ilmek.
        StorageError: the file cannot be opened or created.
    """

    SCHEMA: ClassVar[list[str]] = _SCHEMA
    UPGRADES: ClassVar[dict[int, list[Migration]]] = _UPGRADES
    SCHEMA_VERSION: ClassVar[int] = 5
    AUTO_MIGRATE: ClassVar[bool] = True
    REWRITES_ASSIGNED_INDEXES: ClassVar[bool] = True
    # A step's effect waits for a check of the hold: a thread deleted by force
    # (ilmek delete --force) or taken over starts no step. It costs no query
    # while no other connection committed (PRAGMA data_version, commits_seen).
    CONFIRMS_EACH_STEP: ClassVar[bool] = True

    def metadata_filter(self, index: int, key: str, value: Any) -> tuple[str, dict[str, Any]] | None:
        # In SQL, so that a filtered page reads its page and not every thread: a
        # scan of the threads in C (no index can serve any key a caller may tag by).
        return _metadata_fragment(index, key, value)

    def commits_seen(self, pin: Pin) -> object | None:
        try:
            with pin.connection() as connection:
                [(version,)] = connection.execute("PRAGMA data_version").fetchall()
        except Exception:  # the full check that follows says what is wrong
            return None
        # The connection itself is part of it: another connection's numbers say nothing of this one.
        return (connection, version)

    def __init__(
        self,
        conn_or_path: Any = None,
        *,
        table_prefix: str = "ilmek",
        lease_seconds: float = 5.0,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        join_transaction: bool = False,
        cipher: Keyring | None = None,
    ) -> None:
        table_prefix = validate_prefix(table_prefix)
        if sqlite3.sqlite_version_info < _MIN_VERSION:
            raise RuntimeError(
                f"SqliteCheckpointer needs SQLite {'.'.join(map(str, _MIN_VERSION))} or newer; "
                f"this Python has {sqlite3.sqlite_version}"
            )
        if not isinstance(synchronous, str) or synchronous.upper() not in _SYNCHRONOUS:
            raise InvalidArgumentError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
        busy_timeout = checks.seconds(busy_timeout, "busy_timeout")
        checks.seconds(lease_seconds, "lease_seconds", positive=True)  # before a file is opened for nothing
        self.path: str | None
        adapter: Adapter
        if is_django_connection(conn_or_path, "sqlite"):
            check_sqlite_transaction_mode(conn_or_path)
            self.path = None
            adapter = DjangoAdapter(conn_or_path, classify=classify_sqlite_error)
        elif isinstance(conn_or_path, sqlite3.Connection):
            self.path = None
            if getattr(conn_or_path, "autocommit", None) is False and not join_transaction:
                raise InvalidArgumentError(
                    "this sqlite3 connection has autocommit=False, so a transaction is always open on it: "
                    "pass join_transaction=True to write inside it, or open it with "
                    "autocommit=sqlite3.LEGACY_TRANSACTION_CONTROL"
                )
            adapter = _SqliteAdapter(_CallerConnection(conn_or_path), joins=join_transaction)
        elif conn_or_path is None or isinstance(conn_or_path, (str, os.PathLike)):
            if join_transaction:
                raise InvalidArgumentError("join_transaction needs a connection of yours to join")
            self.path, adapter = _open_file(conn_or_path, float(busy_timeout), synchronous)
        else:
            raise InvalidArgumentError(
                f"SqliteCheckpointer takes a path, ':memory:', a sqlite3.Connection or a Django SQLite "
                f"connection, got {type(conn_or_path).__name__}"
            )
        super().__init__(adapter, table_prefix=table_prefix, lease_seconds=lease_seconds, cipher=cipher)
        try:
            self.ensure_schema()
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

    def open_connections(self) -> int:
        """How many connections of ilmek's own are open on the file right now."""
        connections = getattr(self._adapter, "_connections", None)
        return connections.open_count() if isinstance(connections, _PerThreadConnections) else 0

    def __repr__(self) -> str:
        where = self.path if self.path is not None else "a caller's connection"
        return f"SqliteCheckpointer({where!r}, table_prefix={self.table_prefix!r})"


_TABLE_EXISTS = Statement("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name")


def _open_file(
    conn_or_path: str | os.PathLike[str] | None, busy_timeout: float, synchronous: str
) -> tuple[str, _SqliteAdapter]:
    target = os.fspath(conn_or_path) if conn_or_path is not None else str(DEFAULT_PATH.expanduser())
    if not isinstance(target, str) or not target or "\0" in target:
        raise InvalidArgumentError(f"a SQLite path is a non-empty string without NUL, got {target!r}")
    try:
        if target == ":memory:":
            return target, _SqliteAdapter(
                _OwnedConnection(_connect(target, busy_timeout, synchronous)),
                joins=False,
                busy_timeout=busy_timeout,
            )
        path = pathlib.Path(target).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        target = str(path)
        # WAL is a property of the file: set it once, before the pool starts.
        _connect(target, busy_timeout, synchronous, wal=True).close()
    except (OSError, sqlite3.Error) as error:
        kind = classify_sqlite_error(error)
        error_class = TransientStorageError if kind == "transient" else StorageError
        raise error_class(
            f"could not open the SQLite file {target!r}: {type(error).__name__}: {error}",
        ) from error
    return target, _SqliteAdapter(
        _PerThreadConnections(lambda: _connect(target, busy_timeout, synchronous)),
        joins=False,
        busy_timeout=busy_timeout,
    )


def _connect(path: str, busy_timeout: float, synchronous: str, *, wal: bool = False) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves, so the
    # module never opens a deferred transaction behind our back.
    connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        if wal:
            _enable_wal(connection, busy_timeout)
    except BaseException:
        connection.close()
        raise
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
