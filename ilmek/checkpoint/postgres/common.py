"""What every Postgres client kind shares: paramstyle, errors, transactions, pools.

A driver module (``psycopg2``, ``psycopg``, ``sqlalchemy``) says how to make
a cursor that returns tuples and how to read a connection's transaction
status; the pool logic here lends a run one connection for its whole
length (:class:`PoolPin`), so a pool of N connections runs N threads at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

from ... import forks
from ...dbapi import Adapter, ConnectionClosed, ErrorKind, LockedConnection, Pin, Session
from ...errors import InvalidArgumentError, StorageError
from .errors import classify_postgres_error, is_pool_exhausted, is_pool_timeout

__all__ = [
    "POOL_ADVICE",
    "PoolAdapter",
    "PoolPin",
    "PostgresAdapter",
    "SingleConnectionAdapter",
    "refuse_join",
]

POOL_ADVICE = (
    "The pool lent every connection it has: a run keeps one connection from its start to its end, so "
    "size the pool for the number of threads you run at once, plus what the rest of your application "
    "uses at the same time (psycopg2 maxconn, psycopg_pool max_size, SQLAlchemy pool_size + max_overflow)."
)
_STATUS_IDLE = 0  # psycopg2 and psycopg 3 number transaction states alike
# Active, in a transaction, in a failed transaction: someone's work is open.
# (4, unknown, is a broken connection: its next statement says so.)
_STATUS_OPEN = frozenset({1, 2, 3})


def refuse_join(kind: str) -> NoReturn:
    """Refuse ``join_transaction`` with a client that lends connections of its own."""
    raise InvalidArgumentError(
        f"join_transaction needs a connection of yours to join: a {kind} lends connections of its own. "
        "Pass the connection whose transaction ilmek should write in, or drop join_transaction"
    )


class PostgresAdapter(Adapter):
    """A Postgres client: pyformat parameters, SQLSTATE classification, explicit BEGIN in autocommit."""

    paramstyle = "pyformat"
    any_thread = True
    over_a_socket = True

    def classify(self, error: BaseException) -> ErrorKind | None:
        return classify_postgres_error(error, connected_once=self.connected_once)

    def advice(self, error: BaseException) -> str:
        return POOL_ADVICE if is_pool_exhausted(error) else ""

    def worth_retrying(self, error: BaseException) -> bool:
        return not is_pool_timeout(error)

    @staticmethod
    def is_closed(connection: Any) -> bool:
        """Whether a connection is closed for good (psycopg2: ``closed`` non-zero; psycopg 3: True)."""
        try:
            return bool(getattr(connection, "closed", False))
        except Exception:
            return False

    def status(self, connection: Any) -> int:
        """The connection's transaction status (0 when idle)."""
        raise NotImplementedError

    def autocommit(self, connection: Any) -> bool:
        return bool(connection.autocommit)

    def transaction_open(self, connection: Any) -> bool:
        return self.status(connection) in _STATUS_OPEN

    #: Whether the driver's connections can be switched to autocommit for
    #: one statement and back, with no round trip (psycopg2 and psycopg 3).
    switches_autocommit = False

    def alone_scope(self, connection: Any) -> contextlib.AbstractContextManager[Session] | None:
        if not self.switches_autocommit or self.joins or self.status(connection) != _STATUS_IDLE:
            return None
        return _Alone(self, connection)

    def begin(self, connection: Any, *, write: bool) -> None:
        if self.autocommit(connection):
            self.execute(connection, "BEGIN", None)

    def commit(self, connection: Any) -> None:
        if self.autocommit(connection):
            self.execute(connection, "COMMIT", None)
        else:
            connection.commit()

    def rollback(self, connection: Any) -> None:
        if self.autocommit(connection):
            if self.status(connection) != _STATUS_IDLE:
                self.execute(connection, "ROLLBACK", None)
        else:
            connection.rollback()


class _Alone:
    """One statement as its own transaction: the connection in autocommit for its length.

    The server commits the statement as it completes, before it answers, so
    a statement that returned is durable and one that failed left nothing.
    """

    __slots__ = ("_adapter", "_connection", "_session", "_switched")

    def __init__(self, adapter: PostgresAdapter, connection: Any) -> None:
        self._adapter = adapter
        self._connection = connection

    def __enter__(self) -> Session:
        self._switched = not self._connection.autocommit
        if self._switched:
            self._connection.autocommit = True
        self._session = Session(self._adapter, self._connection)
        return self._session

    def __exit__(self, exc_type: type[BaseException] | None, *rest: Any) -> None:
        adapter, connection = self._adapter, self._connection
        if exc_type is None:
            if adapter.status(connection) != _STATUS_IDLE:
                # The switch did not reach the driver (a proxy that keeps
                # attributes set on it to itself): the driver began a
                # transaction, which must be committed like any of ours.
                adapter.commit_own(connection)
            if self._switched:
                connection.autocommit = False
            adapter.connected_once = True
            self._session.committed()
            return
        with contextlib.suppress(Exception):
            if adapter.status(connection) != _STATUS_IDLE:
                adapter._rollback_quietly(connection)
        if self._switched:
            # A broken connection cannot even be switched back; it is discarded.
            with contextlib.suppress(Exception):
                connection.autocommit = False


class SingleConnectionAdapter(PostgresAdapter):
    """One connection of the caller's (or ours, from ``connect``), shared by threads in turn.

    The caller may use their connection too, from their own thread, without
    ilmek's lock: ilmek then uses it only from the thread driving a run (the
    hold keeper never writes through it), so no statement of the caller's
    can land inside a transaction ilmek commits. A connection ilmek opened
    itself is ilmek's alone, renewed from any thread, and refused in a
    forked child (it is the parent's socket).
    """

    def __init__(self, connection: Any, *, joins: bool, owned: bool = False) -> None:
        super().__init__()
        self._shared = LockedConnection(connection)
        self.joins = joins
        self._owned = owned
        self.any_thread = owned
        self._generation = forks.generation()

    @property
    def owned(self) -> bool:
        """Whether ilmek opened the connection (``connect``), and so closes it."""
        return self._owned

    @owned.setter
    def owned(self, value: bool) -> None:
        self._owned = value
        self.any_thread = value

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        if self._owned and self._generation != forks.generation():
            raise StorageError(
                "this PostgresCheckpointer's own connection was opened before os.fork(), so it is the "
                "parent's socket: open a new checkpointer in the child (PostgresCheckpointer.connect)"
            )
        if self.is_closed(self._shared.connection):
            if self._owned:
                raise ConnectionClosed(
                    "the connection PostgresCheckpointer.connect opened is closed (the server ended its "
                    "session); it cannot be reopened by ilmek: open a new checkpointer, or pass a pool (it "
                    "replaces broken connections)"
                )
            raise ConnectionClosed(
                "the connection given to PostgresCheckpointer is closed; a connection of yours cannot be "
                "reopened by ilmek: pass a pool (it replaces broken connections), or open a new connection "
                "and a new checkpointer"
            )
        return self._shared.borrow()

    def close(self) -> None:
        if self._owned and self._generation == forks.generation():
            self._shared.connection.close()


class PoolPin(Pin):
    """One pooled connection lent to a run until it ends; a broken one is swapped for a fresh one."""

    def __init__(self, adapter: PoolAdapter) -> None:
        self._adapter = adapter
        self._connection: Any = None
        self._lock = forks.ForkSafeLock(threading.RLock)

    @contextlib.contextmanager
    def _use(self) -> Iterator[Any]:
        with self._lock:
            if self._connection is None:
                self._connection = self._adapter.take()
            yield self._connection

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._use()

    def discard(self, connection: Any) -> None:
        with self._lock:
            if connection is self._connection:
                self._connection = None
                self._adapter.give_back(connection, broken=True)

    def release(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            self._adapter.give_back(connection, broken=self._adapter.is_broken(connection))


class PoolAdapter(PostgresAdapter):
    """A pool of the caller's: connections are borrowed, given back, and never closed by ilmek."""

    replaces_lost_connections = True

    def take(self) -> Any:
        """Borrow a connection, rolling back what someone left open on it.

        Work left open on a pooled connection is not ours to keep, nor to
        commit. A connection that cannot even roll back goes back as broken.

        Raises:
            ConnectionClosed: the pool itself is closed.
        """
        if self.pool_closed():
            raise ConnectionClosed(
                "the pool given to PostgresCheckpointer is closed (closeall() or close() was called): "
                "open a new pool and a new checkpointer"
            )
        connection = self.borrow()
        try:
            if self.status(connection) != _STATUS_IDLE:
                self.roll_back(connection)
        except BaseException:
            self.give_back(connection, broken=True)
            raise
        return connection

    def borrow(self) -> Any:
        """Get a connection from the pool (``getconn``), as it is."""
        raise NotImplementedError

    def pool_closed(self) -> bool:
        """Whether the caller's pool is closed for good (the default: pools that cannot tell never are)."""
        return False

    def roll_back(self, connection: Any) -> None:
        """Roll back the transaction open on a borrowed connection."""
        connection.rollback()

    def give_back(self, connection: Any, *, broken: bool) -> None:
        """Return a connection (``putconn``); a broken one is closed so the pool replaces it."""
        raise NotImplementedError

    def is_broken(self, connection: Any) -> bool:
        return bool(getattr(connection, "closed", False))

    def __init__(self) -> None:
        super().__init__()
        self._broken: set[int] = set()
        self._broken_lock = forks.ForkSafeLock()

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[Any]:
        connection = self.take()
        try:
            yield connection
        finally:
            with self._broken_lock:
                broken = id(connection) in self._broken
                self._broken.discard(id(connection))
            self.give_back(connection, broken=broken or self.is_broken(connection))

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._borrow()

    def discard(self, connection: Any) -> None:
        with self._broken_lock:
            self._broken.add(id(connection))

    def pin(self) -> Pin:
        return PoolPin(self)

    def transaction_open(self, connection: Any) -> bool:
        # A borrowed connection carries no transaction of the caller's.
        return False
