"""The DB-API layer shared by the SQL backends; it imports no database driver.

* :class:`Statement`: SQL written once with ``:name`` parameters, rendered to
  whatever ``paramstyle`` the driver speaks (qmark, numeric, named, format,
  pyformat), doubling literal ``%`` where the driver needs it.
* :class:`Adapter`: one small subclass per kind of client (a sqlite3
  connection, a psycopg2 pool, a Django connection...). It says how to get a
  connection and how to classify the driver's errors. Who owns transactions
  is decided once, when the adapter is made (:attr:`Adapter.joins`), never
  by asking the driver on each call: an adapter that owns its transactions
  begins, commits and rolls back its own (refusing a connection on which
  someone else left a transaction open, rather than committing it); one
  that joins writes inside the caller's transaction, in savepoints with
  names of its own, and never commits. :meth:`Adapter.run` retries transient
  failures of its own transactions with bounded, jittered backoff, and wraps
  every driver error in :class:`~ilmek.errors.StorageError` (raised ``from``
  it). Work that must wait for a commit (filling a cache) registers with
  :meth:`Session.after_commit`, which runs only after a COMMIT ilmek issued
  itself succeeded.
* :class:`Pin`: the connection a run keeps from start to end, so that a run
  uses one connection of a pool, never two.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import operator
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from . import forks
from .errors import IlmekError, InvalidArgumentError, StorageError, TransientStorageError
from .logs import logger
from .redact import mask_secrets

__all__ = [
    "Adapter",
    "ConnectionClosed",
    "ErrorKind",
    "LockedConnection",
    "Pin",
    "Session",
    "Statement",
    "describe_error",
    "render",
]

_LOG = logger("ilmek.storage")

T = TypeVar("T")
ErrorKind = Literal["transient", "permanent"]
PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")

# A token is a quoted string, a quoted identifier, a ``::`` cast, a
# ``:name`` parameter or a literal ``%``; anything else is copied as it is.
_TOKENS = re.compile(
    r"""
    (?P<string>'(?:[^']|'')*')
  | (?P<ident>"(?:[^"]|"")*")
  | (?P<cast>::)
  | :(?P<param>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<percent>%)
    """,
    re.VERBOSE,
)


def render(sql: str, paramstyle: str) -> tuple[str, tuple[str, ...]]:
    """Render named-style SQL for a paramstyle.

    Returns:
        The SQL text and the parameter names in the order a positional style
        binds them (each occurrence, so a name used twice is bound twice).

    Raises:
        ValueError: an unknown paramstyle.
    """
    if paramstyle not in PARAMSTYLES:
        raise ValueError(f"unknown DB-API paramstyle {paramstyle!r}; expected one of {PARAMSTYLES}")
    doubles_percent = paramstyle in ("format", "pyformat")
    names: list[str] = []
    out: list[str] = []
    position = 0
    for match in _TOKENS.finditer(sql):
        out.append(sql[position : match.start()])
        position = match.end()
        kind = match.lastgroup
        text = match.group(0)
        if kind == "param":
            name = match.group("param")
            names.append(name)
            if paramstyle == "qmark":
                out.append("?")
            elif paramstyle == "numeric":
                out.append(f":{len(names)}")
            elif paramstyle == "named":
                out.append(f":{name}")
            elif paramstyle == "format":
                out.append("%s")
            else:
                out.append(f"%({name})s")
        elif doubles_percent and kind in ("percent", "string", "ident"):
            # The driver formats the whole text, literals included, whenever
            # parameters are passed: every literal % must be doubled.
            out.append(text.replace("%", "%%"))
        else:
            out.append(text)
    out.append(sql[position:])
    return "".join(out), tuple(names)


def _binder(paramstyle: str, names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], Any]:
    """What turns a statement's named parameters into what the driver takes, made once per statement."""
    if paramstyle in ("named", "pyformat"):
        return lambda params: {name: params[name] for name in names}
    if len(names) > 1:
        pick = operator.itemgetter(*names)  # a tuple, in C
        return lambda params: pick(params)
    if names:
        (only,) = names
        return lambda params: (params[only],)
    return lambda params: ()


class ConnectionClosed(Exception):
    """The connection (or pool) ilmek was given is closed: nothing ilmek can do will reopen it.

    Raised by an adapter before it uses a closed client, so the failure is
    permanent and says so, instead of being retried as a passing outage.
    """


class Statement:
    """SQL written once in named style (``:name``), rendered per paramstyle and cached."""

    __slots__ = ("_rendered", "sql")

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self._rendered: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {}

    def bind(self, paramstyle: str, params: Mapping[str, Any]) -> tuple[str, Any]:
        """The SQL text and the parameters as the driver wants them.

        Raises:
            KeyError: a parameter the SQL names is missing.
        """
        rendered = self._rendered.get(paramstyle)
        if rendered is None:
            text, names = render(self.sql, paramstyle)
            rendered = self._rendered[paramstyle] = (text, _binder(paramstyle, names))
        text, bind = rendered
        return text, bind(params)

    def __repr__(self) -> str:
        return f"Statement({self.sql!r})"


class Session:
    """Statements run inside one transaction (or one savepoint) on one connection.

    Attributes:
        joined: Whether the statements run inside a transaction of the
            caller's, which decides whether they ever become durable.
    """

    def __init__(self, adapter: Adapter, connection: Any, *, joined: bool = False) -> None:
        self.adapter = adapter
        self.connection = connection
        self.joined = joined
        self._after_commit: list[Callable[[], None]] = []

    def query(self, statement: Statement, **params: Any) -> list[tuple[Any, ...]]:
        """Run a statement and return its rows (empty for a statement without rows)."""
        text, bound = statement.bind(self.adapter.paramstyle, params)
        return self.adapter.execute(self.connection, text, bound)

    def execute(self, statement: Statement, **params: Any) -> None:
        """Run a statement whose rows, if any, do not matter."""
        self.query(statement, **params)

    def run_script(self, statements: Sequence[str]) -> None:
        """Run parameterless statements (DDL) in order."""
        for text in statements:
            self.adapter.execute(self.connection, text, None)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this transaction is committed by ilmek itself.

        It is never called for work inside the caller's transaction (which the
        caller may still roll back), nor when the commit fails: what it
        remembers can never run ahead of the database.
        """
        if not self.joined:
            self._after_commit.append(callback)

    def committed(self) -> None:
        """Run the after-commit callbacks (the adapter calls this after COMMIT)."""
        callbacks, self._after_commit = self._after_commit, []
        for callback in callbacks:
            callback()


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE a driver error carries (psycopg2's ``pgcode``, psycopg's ``sqlstate``), or its cause's.

    Also an error SQLAlchemy wrapped (``orig``).
    """
    for candidate in (error, error.__cause__, getattr(error, "orig", None)):
        if candidate is None:
            continue
        code = getattr(candidate, "pgcode", None) or getattr(candidate, "sqlstate", None)
        if isinstance(code, str) and code:
            return code
    return None


def describe_error(error: BaseException, secrets: Iterable[str] = ()) -> str:
    """A one-line description of a driver error with anything like a password removed.

    ``secrets``: the passwords the driver was given (:func:`ilmek.redact.dsn_secrets`),
    which its message may quote in pieces.
    """
    lines = str(error).strip().splitlines()
    first = mask_secrets(lines[0], secrets) if lines else ""
    code = getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)
    if code is None and getattr(error, "sqlite_errorname", None):
        code = error.sqlite_errorname  # type: ignore[attr-defined]
    suffix = f" [{code}]" if isinstance(code, str) and code else ""
    return f"{type(error).__name__}{suffix}: {first}"


def scrubbed(error: BaseException, secrets: Iterable[str] = ()) -> BaseException:
    """``error`` with its text, and that of the errors chained to it, masked in place.

    ilmek's errors chain the driver's (``raise ... from error``), and a
    traceback prints the driver's own message, which may quote pieces of
    the connection string it was given: the message is masked as
    :func:`describe_error` masks it, so the chained error keeps its type
    and codes but never shows a password.
    """
    known = tuple(secrets)
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        with contextlib.suppress(Exception):  # an exception type whose args cannot be set keeps them
            current.args = tuple(mask_secrets(a, known) if isinstance(a, str) else a for a in current.args)
        current = current.__cause__ or current.__context__
    return error


class Pin(abc.ABC):
    """The connection one run keeps from its start to its end.

    A run reads and writes through its pin only, so a pool lends it one
    connection, never two; a run's hold renewal, which may come from another
    thread, goes through the same pin under the same lock.
    """

    @abc.abstractmethod
    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """The run's connection, for one transaction."""

    def discard(self, connection: Any) -> None:
        """The connection broke: the next transaction gets another one."""

    def release(self) -> None:
        """The run ended: give the connection back."""


class _BorrowEachTime(Pin):
    """A pin for clients that need none: every transaction borrows as usual."""

    def __init__(self, adapter: Adapter) -> None:
        self._adapter = adapter

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._adapter.connection()

    def discard(self, connection: Any) -> None:
        self._adapter.discard(connection)


class Adapter(abc.ABC):
    """How ilmek talks to one kind of database client.

    Subclasses provide connections, the driver's paramstyle and its error
    classification; this class provides transactions and retries.

    Attributes:
        paramstyle: The driver's DB-API paramstyle.
        joins: Whether ilmek writes inside the caller's transaction (in
            savepoints, never committing) instead of in transactions of its
            own. Decided when the adapter is made.
        retry_attempts: Tries of a transaction that fails transiently.
        retry_backoff: Seconds before the first retry (doubling, jittered).
        retry_max_backoff: The longest wait between tries.
        retry_for: At most this many seconds of tries in all (``None``: no
            bound but the attempts). Where the driver already waits out a
            lock before it fails (SQLite's busy timeout), trying again after
            each full wait would multiply it: the whole wait is bounded instead.
        replaces_lost_connections: Whether a run whose connection died goes
            on over a new one (a pool): then a step may start on a lease
            known fresh, since its record can still be written. Over a
            single connection a read before each step also proves the
            connection alive before the step's effect.
    """

    paramstyle: str = "qmark"
    replaces_lost_connections: bool = False
    joins: bool = False
    retry_attempts: int = 6
    retry_backoff: float = 0.02
    retry_max_backoff: float = 1.0
    retry_for: float | None = None
    secrets: tuple[str, ...] = ()
    #: Whether connections reach the server over a socket (see :meth:`socket_of`).
    over_a_socket: bool = False

    def __init__(self) -> None:
        self._savepoints = itertools.count(1)
        #: Whether a transaction has ever succeeded: a connection refused
        #: after that is a server coming back, not a wrong address.
        self.connected_once = False

    # --- what a driver adapter provides -----------------------------------------

    @abc.abstractmethod
    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for this thread's exclusive use until the block exits."""

    @abc.abstractmethod
    def classify(self, error: BaseException) -> ErrorKind | None:
        """``transient`` (worth retrying), ``permanent``, or ``None`` if not a database error."""

    def pin(self) -> Pin:
        """A connection source for one run (clients with a pool lend one connection)."""
        return _BorrowEachTime(self)

    def socket_of(self, connection: Any) -> int | None:
        """The descriptor of the connection's socket to the server, or None (a file database)."""
        fileno = getattr(connection, "fileno", None)
        return int(fileno()) if callable(fileno) else None

    def transaction_open(self, connection: Any) -> bool:
        """Whether someone else left a transaction open on a connection ilmek is about to use.

        Asked only to refuse such a connection (ilmek would otherwise commit
        that work); never to decide who owns a transaction.
        """
        return False

    def begin(self, connection: Any, *, write: bool) -> None:
        """Start a transaction (drivers that begin implicitly need nothing)."""

    def commit(self, connection: Any) -> None:
        """Commit the transaction :meth:`begin` started."""
        connection.commit()

    def rollback(self, connection: Any) -> None:
        """Roll back the transaction :meth:`begin` started."""
        connection.rollback()

    def cursor(self, connection: Any) -> Any:
        """A cursor that returns rows as tuples, whatever the connection's row factory."""
        return connection.cursor()

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows."""
        cursor = self.cursor(connection)
        try:
            self.run_statement(connection, cursor, sql, params)
            if cursor.description is None:
                return []
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def run_statement(self, connection: Any, cursor: Any, sql: str, params: Any) -> None:
        """``cursor.execute``: a driver that needs more arguments overrides this."""
        if params is None:
            cursor.execute(sql)
        else:
            cursor.execute(sql, params)

    def discard(self, connection: Any) -> None:
        """Forget a connection that broke (a pool adapter closes it instead of reusing it)."""

    def close(self) -> None:
        """Close what the adapter opened itself; never the caller's connections."""

    def advice(self, error: BaseException) -> str:
        """What to do about a database error, appended to its message (empty: nothing special)."""
        return ""

    def worth_retrying(self, error: BaseException) -> bool:
        """Whether a transient ``error`` may pass in a moment (``False``: the client already waited).

        A pool that timed out waiting for a free connection has waited its
        own timeout: waiting it out again, try after try, only multiplies it.
        """
        return True

    # --- transactions and retries, once for every driver --------------------------

    def alone_scope(self, connection: Any) -> contextlib.AbstractContextManager[Session] | None:
        """A scope in which one statement is its own transaction, or None where there is none.

        The database commits the statement when it completes (it is atomic
        by itself), which spares the round trips of a BEGIN and a COMMIT.
        """
        return None

    def transaction_scope(
        self, connection: Any, *, write: bool
    ) -> contextlib.AbstractContextManager[Session]:
        """A transaction of ilmek's own or a savepoint in the caller's, as the adapter was made.

        A read of a joining adapter with no transaction of the caller's open
        runs in a short one of ilmek's own, which ends with the read, leaving
        the connection as it was found (a write there is refused).
        """
        if self.joins:
            if not write and not self.transaction_open(connection):
                return self._own_transaction(connection, write=False)
            return self._savepoint(connection)
        return self._own_transaction(connection, write=write)

    def _own_transaction(self, connection: Any, *, write: bool) -> contextlib.AbstractContextManager[Session]:
        return _OwnTransaction(self, connection, write=write)

    @contextlib.contextmanager
    def _savepoint(self, connection: Any) -> Iterator[Session]:
        if not self.transaction_open(connection):
            # Writes "joined" to no transaction would sit in one the driver
            # opened by itself, durable only if somebody commits it, holding
            # the thread's lock meanwhile; or fail with a raw SAVEPOINT error.
            raise InvalidArgumentError(
                "join_transaction=True, but no transaction of yours is open on this connection, so there "
                "is nothing to join: call ilmek after your own statements, inside your transaction (and "
                "commit it after), or build the checkpointer without join_transaction to let ilmek "
                "commit its own"
            )
        name = f"ilmek_sp{next(self._savepoints)}"
        self.execute(connection, f"SAVEPOINT {name}", None)
        try:
            yield Session(self, connection, joined=True)
        except BaseException:
            with contextlib.suppress(Exception):
                self.execute(connection, f"ROLLBACK TO SAVEPOINT {name}", None)
                self.execute(connection, f"RELEASE SAVEPOINT {name}", None)
            raise
        self.execute(connection, f"RELEASE SAVEPOINT {name}", None)
        self.connected_once = True

    def commit_own(self, connection: Any) -> None:
        """Commit a transaction ilmek began, rolling it back if the COMMIT fails.

        A COMMIT that failed (or whose answer was lost) must not leave the
        connection inside a transaction that a later call would take for
        somebody else's.
        """
        try:
            self.commit(connection)
        except BaseException:
            self._rollback_quietly(connection)
            raise

    def _rollback_quietly(self, connection: Any) -> None:
        try:
            self.rollback(connection)
        except Exception:
            # The connection is unusable (the error that brought us here is
            # usually why); the original error is the one worth raising.
            self.discard(connection)

    def transaction(
        self, *, write: bool = True, pin: Pin | None = None
    ) -> contextlib.AbstractContextManager[Session]:
        """One transaction (or savepoint) on a connection of the pin's, or a borrowed one."""
        return _Transaction(self, write=write, pin=pin)

    def run(
        self,
        work: Callable[[Session], T],
        *,
        what: str,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        write: bool = True,
        pin: Pin | None = None,
        alone: bool = False,
    ) -> T:
        """Run ``work`` in a transaction, retrying transient failures.

        Args:
            work: Does the reads and writes; runs again from the start on a
                retry, so it must be idempotent (a retry may follow a COMMIT
                that landed but whose answer was lost).
            what: Named in errors (``"commit a checkpoint"``).
            thread_id: Named in errors.
            checkpoint_id: The checkpoint being written, named in errors and logs.
            write: Whether the transaction writes.
            pin: The run's connection source, if the work is a run's.
            alone: The work is one statement, which the adapter may run as
                its own transaction (no BEGIN or COMMIT of ours) where it
                can (see :meth:`alone_scope`).

        Raises:
            TransientStorageError: the database kept failing transiently.
            StorageError: any other database error, raised ``from`` it.
            IlmekError: whatever ``work`` raised on its own account, unchanged.
        """
        delay = self.retry_backoff
        attempt = 1
        deadline = None if self.retry_for is None else time.monotonic() + self.retry_for
        while True:
            joined = self.joins
            try:
                with _Transaction(self, write=write, pin=pin, alone=alone) as session:
                    joined = session.joined
                    return work(session)
            except IlmekError:
                raise
            except Exception as error:
                kind = "permanent" if isinstance(error, ConnectionClosed) else self.classify(error)
                # Not a database error, but no connection either: a driver
                # that could not read its settings (psycopg2 raises
                # UnicodeDecodeError for a DSN's bad percent-escape) or a
                # pool that failed its own way. Raised as ilmek's, chained.
                unconnected = kind is None and while_connecting(error)
                if unconnected:
                    kind = "permanent"
                if kind is None:
                    raise
                where = f" for thread {thread_id!r}" if thread_id is not None else ""
                # Inside the caller's transaction a failure has already aborted
                # it: a retry would run in a transaction that is gone.
                in_time = deadline is None or time.monotonic() + delay < deadline
                retry = kind == "transient" and attempt < self.retry_attempts and in_time and not joined
                if retry and self.worth_retrying(error):
                    _LOG.info(
                        "retrying after a transient database error (%s), attempt %d",
                        describe_error(error, self.secrets),
                        attempt,
                        extra={"thread_id": thread_id, "checkpoint_id": checkpoint_id},
                    )
                    time.sleep(delay * (0.5 + random.random() / 2))
                    delay = min(delay * 2, self.retry_max_backoff)
                    attempt += 1
                    continue
                scrubbed(error, self.secrets)
                failure = self._failure(
                    error,
                    kind,
                    what=f"{what}{where}",
                    attempt=attempt,
                    joined=joined,
                    unconnected=unconnected,
                )
                failure.thread_id, failure.checkpoint_id = thread_id, checkpoint_id
                raise failure from error

    def _failure(
        self,
        error: Exception,
        kind: ErrorKind,
        *,
        what: str,
        attempt: int,
        joined: bool,
        unconnected: bool = False,
    ) -> StorageError:
        """The error :meth:`run` raises once it stops trying (its ids are set by the caller).

        ``unconnected``: no connection could be had, for a reason that is not a database error.
        """
        advice = self.advice(error)
        tail = f" {advice}" if advice else ""
        said = describe_error(error, self.secrets)
        if unconnected:
            return StorageError(
                f"could not {what}: no connection could be had ({said}); check the connection settings "
                f"or the pool; nothing was written.{tail}"
            )
        if kind == "permanent":
            return StorageError(f"could not {what}: {said}; nothing was written.{tail}")
        if joined:
            # The failure ended ilmek's savepoint in a transaction that is the
            # caller's to replay (or its connection is gone): a retry of ours
            # could not bring back what that transaction held.
            return TransientStorageError(
                f"could not {what}: the database ended a statement inside your transaction "
                f"({said}), and ilmek does not try again inside a transaction of yours. "
                "Nothing of this call was written: roll it back (on a new connection if this one is "
                f"closed) and run the whole transaction again.{tail}"
            )
        failing = f"kept failing after {attempt} tries" if attempt > 1 else "failed"
        return TransientStorageError(
            f"could not {what}: the database {failing} ({said}); nothing was written. Try again later.{tail}"
        )


CONNECTING = "ilmek_while_connecting"
"""The attribute set on an error raised while a connection was being obtained."""


class _Connecting:
    """Enter a connection source, marking an error raised while connecting as such.

    Drivers do not always say whether an error came from logging in or from
    a connection in use; the difference decides whether a retry can help.
    (A class, not a generator: it wraps every transaction.)
    """

    __slots__ = ("_source",)

    def __init__(self, source: contextlib.AbstractContextManager[Any]) -> None:
        self._source = source

    def __enter__(self) -> Any:
        try:
            return self._source.__enter__()
        except BaseException as error:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(error, CONNECTING, True)
            raise

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._source.__exit__(*exc_info)


class _Transaction:
    """What Adapter.transaction() gives: a connection from the source, a scope on it.

    On the way out, a connection that failed transiently is discarded (the
    next transaction gets another one) before it is given back. A class,
    not nested generators: it wraps every read and write.
    """

    __slots__ = ("_adapter", "_alone", "_borrowed", "_connection", "_scope", "_source", "_write")

    def __init__(self, adapter: Adapter, *, write: bool, pin: Pin | None, alone: bool = False) -> None:
        self._adapter = adapter
        self._write = write
        self._alone = alone
        self._source: Pin = pin if pin is not None else _BorrowEachTime(adapter)

    def __enter__(self) -> Session:
        borrowed = _Connecting(self._source.connection())
        connection = borrowed.__enter__()
        self._borrowed, self._connection = borrowed, connection
        try:
            scope = (self._adapter.alone_scope(connection) if self._alone else None) or (
                self._adapter.transaction_scope(connection, write=self._write)
            )
            session = scope.__enter__()
        except BaseException as error:
            if not self._give_back(error):
                raise
            raise RuntimeError("a connection source swallowed an error as a transaction began") from error
        self._scope = scope
        return session

    def __exit__(
        self, exc_type: type[BaseException] | None, error: BaseException | None, traceback: Any
    ) -> bool:
        try:
            suppressed = self._scope.__exit__(exc_type, error, traceback)
        except BaseException as failure:  # the scope's own failure, a COMMIT's say
            if not self._give_back(failure):
                raise
            return True
        if error is None or suppressed:
            self._borrowed.__exit__(None, None, None)
            return bool(suppressed)
        return self._give_back(error)

    def _give_back(self, error: BaseException) -> bool:
        """After ``error``: discard a connection that failed transiently, give it back.

        Returns whether the source swallowed the error.
        """
        if isinstance(error, Exception) and self._adapter.classify(error) == "transient":
            self._source.discard(self._connection)
        return bool(self._borrowed.__exit__(type(error), error, error.__traceback__))


class _OwnTransaction:
    """A transaction ilmek begins and commits itself on a connection (see Adapter.transaction_scope)."""

    __slots__ = ("_adapter", "_connection", "_session", "_write")

    def __init__(self, adapter: Adapter, connection: Any, *, write: bool) -> None:
        self._adapter = adapter
        self._connection = connection
        self._write = write

    def __enter__(self) -> Session:
        adapter, connection = self._adapter, self._connection
        if adapter.transaction_open(connection):
            raise StorageError(
                "the connection has a transaction open that ilmek did not start, and ilmek "
                "commits only its own work: commit or roll it back first, or build the "
                "checkpointer with join_transaction=True to write inside it (the writes then "
                "land when you commit)"
            )
        if adapter.over_a_socket:
            # Named before BEGIN: a fork from here on must not keep the server's locks alive.
            forks.in_transaction(connection, lambda: adapter.socket_of(connection))
        try:
            adapter.begin(connection, write=self._write)
        except BaseException:
            forks.out_of_transaction(connection)
            raise
        self._session = Session(adapter, connection)
        return self._session

    def __exit__(self, exc_type: type[BaseException] | None, *rest: Any) -> None:
        adapter, connection = self._adapter, self._connection
        try:
            if exc_type is not None:
                adapter._rollback_quietly(connection)
                return
            adapter.commit_own(connection)
        finally:
            forks.out_of_transaction(connection)
        adapter.connected_once = True
        self._session.committed()


def while_connecting(error: BaseException) -> bool:
    """Whether an error was raised while a connection was being obtained."""
    return bool(getattr(error, CONNECTING, False))


class LockedConnection:
    """One connection shared by threads, used by one of them at a time."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        # A forked child gets a fresh lock (a parent thread may have held this one).
        self._lock = forks.ForkSafeLock(threading.RLock)

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Any]:
        with self._lock:
            yield self.connection
