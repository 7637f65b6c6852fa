"""The DB-API layer shared by the SQL backends; it imports no database driver.

* :class:`Statement`: SQL written once with ``:name`` parameters, rendered to
  whatever ``paramstyle`` the driver speaks (qmark, numeric, named, format,
  pyformat), doubling literal ``%`` where the driver needs it.
* :class:`Adapter`: one small subclass per kind of client (a sqlite3
  connection, a psycopg2 pool, a Django connection...). It says how to get a
  connection, whether the caller already has a transaction open, and how to
  classify the driver's errors. Everything else lives here, once:
  :meth:`Adapter.transaction` commits what it began and only that (a
  savepoint inside the caller's transaction), rolls back on any error and
  never commits in ``finally``; :meth:`Adapter.run` retries transient
  failures with bounded, jittered backoff and wraps the rest in
  :class:`~ilmek.errors.StorageError`, raised ``from`` the driver's error.
"""

from __future__ import annotations

import abc
import contextlib
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from .errors import IlmekError, StorageError, TransientStorageError

__all__ = [
    "Adapter",
    "ErrorKind",
    "Session",
    "Statement",
    "render",
]

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


class Statement:
    """SQL written once in named style (``:name``), rendered per paramstyle and cached."""

    __slots__ = ("_rendered", "sql")

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self._rendered: dict[str, tuple[str, tuple[str, ...]]] = {}

    def bind(self, paramstyle: str, params: Mapping[str, Any]) -> tuple[str, Any]:
        """The SQL text and the parameters as the driver wants them.

        Raises:
            KeyError: a parameter the SQL names is missing.
        """
        rendered = self._rendered.get(paramstyle)
        if rendered is None:
            rendered = self._rendered[paramstyle] = render(self.sql, paramstyle)
        text, names = rendered
        if paramstyle in ("named", "pyformat"):
            return text, {name: params[name] for name in names}
        return text, tuple(params[name] for name in names)

    def __repr__(self) -> str:
        return f"Statement({self.sql!r})"


class Session:
    """Statements run inside one transaction on one connection."""

    def __init__(self, adapter: Adapter, connection: Any, *, nested: bool = False) -> None:
        self.adapter = adapter
        self.connection = connection
        self.nested = nested

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


# A secret's value runs to the end of a quoted string (libpq allows spaces in
# quoted values, with \' inside) or else to the next space.
_SECRET = re.compile(
    r"""(password|passwd|pwd|secret)\s*=\s*(?:'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|\S+)""",
    re.IGNORECASE,
)


def describe_error(error: BaseException) -> str:
    """A one-line description of a driver error with anything like a password removed."""
    lines = str(error).strip().splitlines()
    first = _SECRET.sub(r"\1=***", lines[0]) if lines else ""
    code = getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)
    if code is None and getattr(error, "sqlite_errorname", None):
        code = error.sqlite_errorname  # type: ignore[attr-defined]
    suffix = f" [{code}]" if code else ""
    return f"{type(error).__name__}{suffix}: {first}"


class Adapter(abc.ABC):
    """How ilmek talks to one kind of database client.

    Subclasses provide a connection, the driver's paramstyle and its error
    classification; this class provides transactions and retries.

    Attributes:
        paramstyle: The driver's DB-API paramstyle.
        retry_attempts: Tries of a transaction that fails transiently.
        retry_backoff: Seconds before the first retry (doubling, jittered).
        retry_max_backoff: The longest wait between tries.
    """

    paramstyle: str = "qmark"
    retry_attempts: int = 6
    retry_backoff: float = 0.02
    retry_max_backoff: float = 1.0

    # --- what a driver adapter provides -----------------------------------------

    @abc.abstractmethod
    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for this thread's exclusive use until the block exits."""

    @abc.abstractmethod
    def classify(self, error: BaseException) -> ErrorKind | None:
        """``transient`` (worth retrying), ``permanent``, or ``None`` if not a database error."""

    def in_transaction(self, connection: Any) -> bool:
        """Whether the caller has a transaction open on this connection."""
        return False

    def begin(self, connection: Any, *, write: bool) -> None:
        """Start a transaction (drivers that begin implicitly need nothing)."""

    def commit(self, connection: Any) -> None:
        """Commit the transaction :meth:`begin` started."""
        connection.commit()

    def rollback(self, connection: Any) -> None:
        """Roll back the transaction :meth:`begin` started."""
        connection.rollback()

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows."""
        cursor = connection.cursor()
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

    # --- transactions and retries, once for every driver --------------------------

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on any error.

        Inside a transaction the caller already has open, a savepoint is used
        instead and the commit is left to the caller.
        """
        with _connecting(self.connection()) as connection:
            if self.in_transaction(connection):
                with self._savepoint(connection) as session:
                    yield session
                return
            self.begin(connection, write=write)
            try:
                yield Session(self, connection)
            except BaseException:
                self._rollback_quietly(connection)
                raise
            self.commit(connection)

    @contextlib.contextmanager
    def _savepoint(self, connection: Any) -> Iterator[Session]:
        self.execute(connection, "SAVEPOINT ilmek_write", None)
        try:
            yield Session(self, connection, nested=True)
        except BaseException:
            with contextlib.suppress(Exception):
                self.execute(connection, "ROLLBACK TO SAVEPOINT ilmek_write", None)
                self.execute(connection, "RELEASE SAVEPOINT ilmek_write", None)
            raise
        self.execute(connection, "RELEASE SAVEPOINT ilmek_write", None)

    def _rollback_quietly(self, connection: Any) -> None:
        try:
            self.rollback(connection)
        except Exception:
            # The connection is unusable (the error that brought us here is
            # usually why); the original error is the one worth raising.
            self.discard(connection)

    def run(
        self,
        work: Callable[[Session], T],
        *,
        what: str,
        thread_id: str | None = None,
        write: bool = True,
    ) -> T:
        """Run ``work`` in a transaction, retrying transient failures.

        Args:
            work: Does the reads and writes; runs again from the start on a retry.
            what: Named in errors (``"commit a checkpoint"``).
            thread_id: Named in errors.
            write: Whether the transaction writes.

        Raises:
            TransientStorageError: the database kept failing transiently.
            StorageError: any other database error, raised ``from`` it.
            IlmekError: whatever ``work`` raised on its own account, unchanged.
        """
        delay = self.retry_backoff
        attempt = 1
        while True:
            # Inside the caller's transaction a failure has already aborted it:
            # retrying would run our statements in a transaction that is gone.
            nested = False
            try:
                with self.transaction(write=write) as session:
                    nested = session.nested
                    return work(session)
            except IlmekError:
                raise
            except Exception as error:
                kind = self.classify(error)
                if kind is None:
                    raise
                where = f" for thread {thread_id!r}" if thread_id is not None else ""
                if kind == "transient" and attempt < self.retry_attempts and not nested:
                    time.sleep(delay * (0.5 + random.random() / 2))
                    delay = min(delay * 2, self.retry_max_backoff)
                    attempt += 1
                    continue
                if kind == "transient":
                    raise TransientStorageError(
                        f"could not {what}{where}: the database kept failing after {attempt} "
                        f"tries ({describe_error(error)}); nothing was written. Try again later",
                        thread_id=thread_id,
                    ) from error
                raise StorageError(
                    f"could not {what}{where}: {describe_error(error)}; nothing was written",
                    thread_id=thread_id,
                ) from error


CONNECTING = "ilmek_while_connecting"
"""The attribute set on an error raised while a connection was being obtained."""


@contextlib.contextmanager
def _connecting(source: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
    """Enter ``source``, marking an error raised while connecting as such.

    Drivers do not always say whether an error came from logging in or from
    a connection in use; the difference decides whether a retry can help.
    """
    try:
        connection = source.__enter__()
    except BaseException as error:
        setattr(error, CONNECTING, True)
        raise
    try:
        yield connection
    except BaseException as error:
        if not source.__exit__(type(error), error, error.__traceback__):
            raise
    else:
        source.__exit__(None, None, None)


class LockedConnection:
    """One connection shared by threads, used by one of them at a time."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Any]:
        with self._lock:
            yield self.connection
