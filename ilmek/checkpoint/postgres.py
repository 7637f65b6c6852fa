"""PostgresCheckpointer: threads shared by processes and machines through Postgres.

It takes the caller's own client: a psycopg2 connection or pool, a psycopg 3
connection or pool, a Django connection, a SQLAlchemy ``Engine``, or any
object whose ``execute(sql, params)`` returns rows. One small adapter per
kind is chosen once, by looking at the object; no driver is imported until
the caller's own client has already imported it.

Values are stored as JSONB. Holds are Postgres advisory locks, so a holder
that dies releases its threads the moment its session ends; a generic client
that cannot pin a session falls back to leases. Nothing relies on
server-side prepared statements or session state other than the hold, so a
transaction-mode pooler in front of the server works.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

from .. import serde
from ..dbapi import CONNECTING, Adapter, ErrorKind, LockedConnection, Session, Statement, describe_error
from ..errors import StorageError
from ._sql import SqlCheckpointer, validate_prefix
from .base import ThreadHold, busy_error

__all__ = ["PostgresCheckpointer"]

_MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE IF NOT EXISTS {p}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        'CREATE TABLE IF NOT EXISTS {p}_threads (thread_id TEXT COLLATE "C" PRIMARY KEY,'
        " created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,"
        ' status TEXT NOT NULL, step BIGINT NOT NULL, checkpoint_id TEXT COLLATE "C",'
        " metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb) WITH (fillfactor = 85)",
        "CREATE INDEX IF NOT EXISTS {p}_threads_updated ON {p}_threads (updated_at DESC, thread_id DESC)",
        "CREATE INDEX IF NOT EXISTS {p}_threads_status ON {p}_threads (status, updated_at DESC)",
        "CREATE INDEX IF NOT EXISTS {p}_threads_metadata ON {p}_threads USING GIN (metadata jsonb_path_ops)",
        'CREATE TABLE IF NOT EXISTS {p}_checkpoints (thread_id TEXT COLLATE "C" NOT NULL,'
        ' checkpoint_id TEXT COLLATE "C" NOT NULL, parent_id TEXT COLLATE "C", plan_id TEXT COLLATE "C",'
        " step BIGINT NOT NULL, ts DOUBLE PRECISION NOT NULL, manifest JSONB NOT NULL,"
        " next JSONB NOT NULL, pending JSONB NOT NULL, task_journals JSONB NOT NULL,"
        " metadata JSONB NOT NULL, PRIMARY KEY (thread_id, checkpoint_id))",
        "CREATE TABLE IF NOT EXISTS {p}_blobs (blob_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        ' thread_id TEXT COLLATE "C" NOT NULL, channel TEXT NOT NULL, value JSONB NOT NULL)',
        "CREATE INDEX IF NOT EXISTS {p}_blobs_thread ON {p}_blobs (thread_id)",
        "CREATE TABLE IF NOT EXISTS {p}_logs (log_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        ' thread_id TEXT COLLATE "C" NOT NULL, channel TEXT NOT NULL, parent_id BIGINT,'
        " base BIGINT NOT NULL, length BIGINT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {p}_logs_thread ON {p}_logs (thread_id)",
        "CREATE TABLE IF NOT EXISTS {p}_items (log_id BIGINT NOT NULL, idx BIGINT NOT NULL,"
        " value JSONB NOT NULL, PRIMARY KEY (log_id, idx))",
        'CREATE TABLE IF NOT EXISTS {p}_journals (task_id TEXT COLLATE "C" PRIMARY KEY,'
        ' thread_id TEXT COLLATE "C" NOT NULL, entries JSONB NOT NULL)',
        "CREATE INDEX IF NOT EXISTS {p}_journals_thread ON {p}_journals (thread_id)",
        'CREATE TABLE IF NOT EXISTS {p}_holds (thread_id TEXT COLLATE "C" PRIMARY KEY,'
        " owner TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
    ],
]

# Worth a retry: serialization failure, deadlock, lock not available, the
# server shutting down or starting up, too many clients; and class 08, every
# connection exception.
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})
_DRIVER_MODULES = ("psycopg2", "psycopg", "psycopg_pool")
_STATUS_IDLE = 0  # psycopg2 and psycopg 3 number transaction states alike

_TABLE_EXISTS = Statement("SELECT to_regclass(:name) IS NOT NULL")
_TRY_SESSION_LOCK = Statement("SELECT pg_try_advisory_lock(:key)")
_SESSION_UNLOCK = Statement("SELECT pg_advisory_unlock(:key)")
_TRY_XACT_LOCK = Statement("SELECT pg_try_advisory_xact_lock(:key)")
_XACT_LOCK = Statement("SELECT pg_advisory_xact_lock(:key)")


def _sqlstate(error: BaseException) -> str | None:
    for candidate in (error, error.__cause__):
        if candidate is None:
            continue
        code = getattr(candidate, "pgcode", None) or getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def _is_driver_error(error: BaseException) -> bool:
    module = type(error).__module__
    return module.split(".")[0] in _DRIVER_MODULES


def classify_postgres_error(error: BaseException) -> ErrorKind | None:
    """Classify a psycopg2 / psycopg 3 error by SQLSTATE, never by its text."""
    cause = error.__cause__ if error.__cause__ is not None and _is_driver_error(error.__cause__) else None
    driver_error = error if _is_driver_error(error) else cause
    code = _sqlstate(error)
    if code is not None and (code in _TRANSIENT_SQLSTATES or code.startswith("08")):
        return "transient"
    if driver_error is None:
        return "permanent" if code is not None else None
    if code is None and type(driver_error).__name__ in ("OperationalError", "InterfaceError"):
        if _while_connecting(error) or _while_connecting(driver_error):
            # Logging in failed (a refused login, a wrong password, no such
            # host): retrying in the next second would not change that.
            return "permanent"
        # No SQLSTATE on a connection in use: it broke (reset, closed, server gone).
        return "transient"
    return "permanent"


def _while_connecting(error: BaseException) -> bool:
    """Whether a driver error was raised by a connection attempt, not by a connection in use."""
    # ilmek marks the errors of the connections it asks for; psycopg 3 also
    # keeps the failed attempt on the error itself.
    return bool(getattr(error, CONNECTING, False)) or getattr(error, "pgconn", None) is not None


def advisory_key(table_prefix: str, thread_id: str) -> int:
    """The 64-bit advisory lock key of a thread under a table prefix."""
    digest = hashlib.blake2b(f"{table_prefix}\0{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class _PostgresAdapter(Adapter):
    """What every Postgres client kind shares: pyformat, SQLSTATE classification."""

    paramstyle = "pyformat"
    #: Whether holds can pin a session (advisory locks) or need leases.
    holds: ClassVar[str] = "session"
    #: Whether :meth:`dedicated` can lend a connection of its own for a hold.
    dedicates: ClassVar[bool] = False

    def classify(self, error: BaseException) -> ErrorKind | None:
        return classify_postgres_error(error)

    def run_statement(self, connection: Any, cursor: Any, sql: str, params: Any) -> None:
        if _is_psycopg3(connection):
            # Never prepare server-side, not even "SELECT 1": a transaction-mode
            # pooler may hand the next statement, or psycopg's DEALLOCATE, to
            # another session than the one that saw the PREPARE.
            cursor.execute(sql, params, prepare=False)
        else:
            super().run_statement(connection, cursor, sql, params)

    def in_transaction(self, connection: Any) -> bool:
        return _transaction_status(connection) != _STATUS_IDLE

    def begin(self, connection: Any, *, write: bool) -> None:
        if connection.autocommit:
            self.execute(connection, "BEGIN", None)

    def commit(self, connection: Any) -> None:
        if connection.autocommit:
            self.execute(connection, "COMMIT", None)
        else:
            connection.commit()

    def rollback(self, connection: Any) -> None:
        if connection.autocommit:
            if _transaction_status(connection) != _STATUS_IDLE:
                self.execute(connection, "ROLLBACK", None)
        else:
            connection.rollback()

    def dedicated(self) -> contextlib.AbstractContextManager[Any]:
        """A connection of its own for a hold (only where :attr:`dedicates`)."""
        raise NotImplementedError(f"{type(self).__name__} has one connection only")


def _transaction_status(connection: Any) -> int:
    info = getattr(connection, "info", None)
    status = getattr(info, "transaction_status", None)
    if status is None:
        status = connection.get_transaction_status()
    return int(status)


class _SingleConnection(_PostgresAdapter):
    """A psycopg2 or psycopg 3 connection of the caller's (or ours, from ``connect``)."""

    def __init__(self, connection: Any, *, owned: bool = False) -> None:
        self._shared = LockedConnection(connection)
        self._owned = owned

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._shared.borrow()

    def close(self) -> None:
        if self._owned:
            self._shared.connection.close()


class _Pool(_PostgresAdapter):
    """A psycopg2 pool or a psycopg_pool ``ConnectionPool``: getconn / putconn."""

    dedicates: ClassVar[bool] = True

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._broken: set[int] = set()

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[Any]:
        connection = self._pool.getconn()
        try:
            if _transaction_status(connection) != _STATUS_IDLE:
                # Someone returned it mid-transaction: that work is not ours to keep.
                connection.rollback()
            yield connection
        finally:
            broken = id(connection) in self._broken or bool(getattr(connection, "closed", False))
            self._broken.discard(id(connection))
            if broken:
                self._give_back_broken(connection)
            else:
                self._pool.putconn(connection)

    def _give_back_broken(self, connection: Any) -> None:
        try:
            self._pool.putconn(connection, close=True)
        except TypeError:
            # psycopg_pool has no close=; closing first makes it discard the connection.
            with contextlib.suppress(Exception):
                connection.close()
            self._pool.putconn(connection)

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._borrow()

    def in_transaction(self, connection: Any) -> bool:
        # A borrowed connection carries no transaction of the caller's.
        return False

    def discard(self, connection: Any) -> None:
        self._broken.add(id(connection))

    def dedicated(self) -> contextlib.AbstractContextManager[Any]:
        return self._borrow()


class _Django(_PostgresAdapter):
    """A Django connection: Django's ``atomic`` decides between transaction and savepoint."""

    paramstyle = "format"

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    @contextlib.contextmanager
    def _this_thread(self) -> Iterator[Any]:
        yield self._connection

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._this_thread()

    def in_transaction(self, connection: Any) -> bool:
        return bool(connection.in_atomic_block)

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Session]:
        from django.db import transaction  # the caller's Django is already imported

        nested = bool(self._connection.in_atomic_block)
        with transaction.atomic(using=self._connection.alias):
            yield Session(self, self._connection, nested=nested)

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            if cursor.description is None:
                return []
            return [tuple(row) for row in cursor.fetchall()]


class _SqlAlchemy(_Pool):
    """A SQLAlchemy ``Engine``: raw DB-API connections from its pool."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.paramstyle = engine.dialect.paramstyle

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[Any]:
        proxy = self._pool.raw_connection()
        try:
            driver_connection = getattr(proxy, "driver_connection", None) or proxy.dbapi_connection
            if _transaction_status(driver_connection) != _STATUS_IDLE:
                proxy.rollback()
            yield _EngineConnection(proxy, driver_connection)
        finally:
            if id(proxy) in self._broken:
                self._broken.discard(id(proxy))
                with contextlib.suppress(Exception):
                    proxy.invalidate()
            # Closing the proxy returns it to the engine's pool (which rolls back
            # what is uncommitted: everything of ours was committed by then).
            proxy.close()

    def discard(self, connection: Any) -> None:
        self._broken.add(id(connection.proxy))


class _EngineConnection:
    """A SQLAlchemy pooled connection, seen through the attributes the adapters read."""

    def __init__(self, proxy: Any, driver_connection: Any) -> None:
        self.proxy = proxy
        self.driver_connection = driver_connection

    @property
    def autocommit(self) -> bool:
        return bool(self.driver_connection.autocommit)

    @property
    def info(self) -> Any:
        return getattr(self.driver_connection, "info", None)

    def get_transaction_status(self) -> int:
        return int(self.driver_connection.get_transaction_status())

    def cursor(self) -> Any:
        return self.proxy.cursor()

    def commit(self) -> None:
        self.proxy.commit()

    def rollback(self) -> None:
        self.proxy.rollback()

    @property
    def closed(self) -> bool:
        return bool(getattr(self.driver_connection, "closed", False))


class _Generic(_PostgresAdapter):
    """Any object whose ``execute(sql, params)`` returns rows.

    ilmek sends ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` through it, so consecutive
    calls must run on one session. It cannot pin a session for a hold, so
    holds are leases.
    """

    holds: ClassVar[str] = "lease"

    def __init__(self, client: Any) -> None:
        self._client = client
        self.paramstyle = getattr(client, "paramstyle", "pyformat")
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Any]:
        with self._lock:
            yield self._client

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._locked()

    def in_transaction(self, connection: Any) -> bool:
        return False

    def begin(self, connection: Any, *, write: bool) -> None:
        self.execute(connection, "BEGIN", None)

    def commit(self, connection: Any) -> None:
        self.execute(connection, "COMMIT", None)

    def rollback(self, connection: Any) -> None:
        self.execute(connection, "ROLLBACK", None)

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        rows = connection.execute(sql, params if params is not None else ())
        return [tuple(row) for row in rows] if rows else []


def _is_psycopg3(connection: Any) -> bool:
    driver_connection = getattr(connection, "driver_connection", connection)
    return type(driver_connection).__module__.split(".")[0] == "psycopg"


def _module_root(client: Any) -> str:
    return type(client).__module__.split(".")[0]


def adapter_for(client: Any) -> _PostgresAdapter:
    """Choose the adapter for a caller's client, once.

    Raises:
        TypeError: the object is none of the supported client kinds.
    """
    root = _module_root(client)
    if getattr(client, "vendor", None) == "postgresql" and hasattr(client, "in_atomic_block"):
        return _Django(client)
    if hasattr(client, "raw_connection") and hasattr(client, "dialect"):
        return _SqlAlchemy(client)
    if hasattr(client, "getconn") and hasattr(client, "putconn"):
        return _Pool(client)
    if root in _DRIVER_MODULES and hasattr(client, "cursor"):
        return _SingleConnection(client)
    if callable(getattr(client, "execute", None)):
        return _Generic(client)
    raise TypeError(
        f"PostgresCheckpointer cannot use a {type(client).__module__}.{type(client).__qualname__}: "
        "pass a psycopg2 or psycopg connection or pool, a Django connection, a SQLAlchemy "
        "Engine, or an object whose execute(sql, params) returns rows"
    )


class _SessionLockHold(ThreadHold):
    """A session-level advisory lock on the one connection the adapter has."""

    def __init__(self, owner: PostgresCheckpointer, thread_id: str, key: int) -> None:
        super().__init__(thread_id)
        self._owner = owner
        self._key = key
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with contextlib.suppress(StorageError):
            self._owner._adapter.run(
                lambda session: session.execute(_SESSION_UNLOCK, key=self._key),
                what="release the hold",
                thread_id=self.thread_id,
            )


class _DedicatedLockHold(ThreadHold):
    """A transaction-level advisory lock held open on a connection of its own.

    A transaction pins its session even behind a transaction-mode pooler, and
    the lock goes the moment that session ends, however the holder died.
    """

    keep_alive_interval = 5.0
    # Writes go through other pooled connections, which keep working after
    # this one died: so a lost hold must be noticed before each step.
    verifies = True

    def __init__(self, owner: PostgresCheckpointer, thread_id: str) -> None:
        super().__init__(thread_id)
        self._owner = owner
        self._adapter = owner._adapter
        self._borrowed: contextlib.AbstractContextManager[Any] | None = None
        self._connection: Any = None

    def acquire(self, key: int) -> bool:
        borrowed = self._adapter.dedicated()
        connection = borrowed.__enter__()
        try:
            self._adapter.begin(connection, write=False)
            text, params = _TRY_XACT_LOCK.bind(self._adapter.paramstyle, {"key": key})
            granted = bool(self._adapter.execute(connection, text, params)[0][0])
        except BaseException as error:
            self._adapter.discard(connection)
            borrowed.__exit__(type(error), error, error.__traceback__)
            kind = self._adapter.classify(error)
            if kind is None:
                raise
            raise StorageError(
                f"could not hold thread {self.thread_id!r}: {type(error).__name__}", thread_id=self.thread_id
            ) from error
        if not granted:
            self._adapter.rollback(connection)
            borrowed.__exit__(None, None, None)
            return False
        self._borrowed, self._connection = borrowed, connection
        return True

    def keep_alive(self) -> None:
        try:
            # A statement also resets the server's idle-in-transaction timer.
            self._adapter.execute(self._connection, "SELECT 1", None)
        except Exception as error:
            kind = self._adapter.classify(error)
            if kind is None:
                raise
            self._adapter.discard(self._connection)
            if kind == "permanent":
                raise StorageError(
                    f"could not keep thread {self.thread_id!r} held: {describe_error(error)}",
                    thread_id=self.thread_id,
                ) from error
            # The hold's session is gone, and its lock with it.
            raise busy_error(self.thread_id) from error

    def verify(self) -> None:
        self.keep_alive()

    def release(self) -> None:
        if self._borrowed is None:
            return
        borrowed, self._borrowed = self._borrowed, None
        try:
            self._adapter.rollback(self._connection)
        except Exception:
            self._adapter.discard(self._connection)
        borrowed.__exit__(None, None, None)


class _BothHolds(ThreadHold):
    """The database's hold and this process's, released together."""

    def __init__(self, database: ThreadHold, local: ThreadHold) -> None:
        super().__init__(database.thread_id)
        self._database = database
        self._local = local
        self.keep_alive_interval = database.keep_alive_interval
        self.verifies = database.verifies

    def keep_alive(self) -> None:
        self._database.keep_alive()

    def verify(self) -> None:
        self._database.verify()

    def release(self) -> None:
        try:
            self._database.release()
        finally:
            self._local.release()


class PostgresCheckpointer(SqlCheckpointer):
    """Checkpoints in Postgres, through the client the application already has.

    Args:
        client: A psycopg2 connection or pool (``getconn``/``putconn``), a
            psycopg 3 connection or ``psycopg_pool.ConnectionPool``, a Django
            connection (``django.db.connection``), a SQLAlchemy ``Engine``, or
            any object whose ``execute(sql, params)`` returns rows (it must run
            consecutive calls on one session). ilmek never opens or closes the
            caller's connections, and commits only what it began: inside the
            caller's open transaction it uses a savepoint and leaves the commit
            to the caller.
        table_prefix: Tables are ``<prefix>_checkpoints``, ``<prefix>_journals``
            and a few more; ``[A-Za-z_][A-Za-z0-9_]*``, at most 40 characters.
        lease_seconds: Only for a generic client, which holds threads by lease.

    The tables are not created until :meth:`migrate` runs (or an operator runs
    the SQL of :meth:`ddl`).

    Raises:
        ValueError: an invalid ``table_prefix`` (before any SQL is sent).
        TypeError: an unsupported client.
    """

    MIGRATIONS: ClassVar[list[list[str]]] = _MIGRATIONS
    JSON_IN: ClassVar[str] = "CAST({} AS jsonb)"
    JSON_OUT: ClassVar[str] = "{}::text"
    NOW: ClassVar[str] = "EXTRACT(EPOCH FROM clock_timestamp())"

    _adapter: _PostgresAdapter

    def __init__(self, client: Any, *, table_prefix: str = "ilmek", lease_seconds: float = 5.0) -> None:
        adapter = client if isinstance(client, _PostgresAdapter) else adapter_for(client)
        super().__init__(adapter, table_prefix=table_prefix, lease_seconds=lease_seconds)

    @classmethod
    def connect(cls, dsn: str, *, table_prefix: str = "ilmek", **options: Any) -> PostgresCheckpointer:
        """Open a connection of ilmek's own (closed by :meth:`close`) with psycopg2, or psycopg 3."""
        validate_prefix(table_prefix)  # before a session is opened for nothing
        try:
            import psycopg2

            connection = psycopg2.connect(dsn)
        except ImportError:
            import psycopg

            connection = psycopg.connect(dsn)
        return cls(_SingleConnection(connection, owned=True), table_prefix=table_prefix, **options)

    def table_exists(self, session: Session, table: str) -> bool:
        return bool(session.query(_TABLE_EXISTS, name=table)[0][0])

    def lock_for_migration(self, session: Session) -> None:
        session.execute(_XACT_LOCK, key=advisory_key(self.table_prefix, "\0migrate"))

    def metadata_filter(self, index: int, key: str, value: Any) -> tuple[str, dict[str, Any]]:
        # Containment lets the GIN index find candidates; jsonb equality then
        # demands the whole value (containment alone would match a sub-dict).
        whole = serde.encode({key: value}, where=f"the metadata filter {key!r}")
        single = serde.encode(value, where=f"the metadata filter {key!r}")
        fragment = (
            f"metadata @> CAST(:mf{index} AS jsonb) "
            f"AND metadata -> CAST(:mk{index} AS text) = CAST(:mv{index} AS jsonb)"
        )
        return fragment, {f"mf{index}": whole, f"mk{index}": key, f"mv{index}": single}

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[ThreadHold]:
        if self._adapter.holds == "lease":
            with super().hold(thread_id) as lease:
                yield lease
            return
        self._ensure_schema()
        # A session lock is re-entrant within its session, so a second run in
        # this process sharing the connection must be stopped here first.
        with self.local_hold(thread_id) as local:
            key = advisory_key(self.table_prefix, thread_id)
            database: ThreadHold
            if self._adapter.dedicates:
                dedicated = _DedicatedLockHold(self, thread_id)
                if not dedicated.acquire(key):
                    raise busy_error(thread_id)
                database = dedicated
            else:

                def take(session: Session) -> tuple[bool, bool]:
                    # Inside the caller's open transaction, ilmek's writes only
                    # land when the caller commits: the hold must last until
                    # then too, so it is a transaction lock the commit releases.
                    lock = _TRY_XACT_LOCK if session.nested else _TRY_SESSION_LOCK
                    return bool(session.query(lock, key=key)[0][0]), session.nested

                granted, in_callers_transaction = self._adapter.run(
                    take, what="hold the thread", thread_id=thread_id
                )
                if not granted:
                    raise busy_error(thread_id)
                database = (
                    ThreadHold(thread_id)
                    if in_callers_transaction
                    else _SessionLockHold(self, thread_id, key)
                )
            handle = _BothHolds(database, local)
            try:
                yield handle
            finally:
                handle.release()

    def __repr__(self) -> str:
        return f"PostgresCheckpointer({type(self._adapter).__name__}, table_prefix={self.table_prefix!r})"
