"""Any object whose ``execute(sql, params)`` returns rows, run on one session.

ilmek sends ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` through it. Such a client
cannot say whether you left a transaction open on it, so it may declare it:
an ``in_transaction`` attribute (a bool, or a method returning one). Without
it, ilmek asks the server before each transaction of its own (one extra
round trip) and refuses to commit work it did not start. With
``join_transaction=True`` it writes in savepoints inside yours instead.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ... import forks
from ...dbapi import ErrorKind
from ...errors import InvalidArgumentError
from .common import PostgresAdapter
from .errors import sqlstate

__all__ = ["GenericAdapter", "adapt"]

_NO_TRANSACTION = "25P01"  # SAVEPOINT outside a transaction block


class GenericAdapter(PostgresAdapter):
    """An ``execute(sql, params)`` client."""

    # Nothing says such a client may be used from another thread.
    any_thread = False

    def __init__(self, client: Any, *, joins: bool) -> None:
        super().__init__()
        self._client = client
        self.paramstyle = getattr(client, "paramstyle", "pyformat")
        self.joins = joins
        self._lock = forks.ForkSafeLock(threading.RLock)
        self._closed_error: BaseException | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Any]:
        with self._lock:
            yield self._client

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._locked()

    def transaction_open(self, connection: Any) -> bool:
        declared = getattr(connection, "in_transaction", None)
        if callable(declared):
            declared = declared()
        if isinstance(declared, bool):
            return declared
        try:
            self.execute(connection, "SAVEPOINT ilmek_probe", None)
        except Exception as error:
            if sqlstate(error) == _NO_TRANSACTION:
                return False
            raise
        self.execute(connection, "RELEASE SAVEPOINT ilmek_probe", None)
        return True

    def begin(self, connection: Any, *, write: bool) -> None:
        self.execute(connection, "BEGIN", None)

    def commit(self, connection: Any) -> None:
        self.execute(connection, "COMMIT", None)

    def rollback(self, connection: Any) -> None:
        self.execute(connection, "ROLLBACK", None)

    def status(self, connection: Any) -> int:
        return 0

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        rows = connection.execute(sql, params if params is not None else ())
        return [tuple(row) for row in rows] if rows else []

    def classify(self, error: BaseException) -> ErrorKind | None:
        if error is self._closed_error:
            return "permanent"  # asked again about the same error (once to discard, once to retry)
        kind = super().classify(error)
        if kind == "transient" and sqlstate(error) is None and not self._session_alive():
            # One session that ilmek cannot reopen: if it no longer answers, retrying
            # cannot help (a client that reconnects by itself answers, and is retried).
            self._closed_error = error
            return "permanent"
        return kind

    def _session_alive(self) -> bool:
        """Whether the client still reaches its database: ``SELECT 1`` answered, or refused by the server."""
        try:
            with self._locked() as client:
                self.execute(client, "SELECT 1", None)
        except Exception as error:
            # A refusal with a SQLSTATE (a failed transaction of yours) comes from a live session.
            return sqlstate(error) is not None
        return True

    def advice(self, error: BaseException) -> str:
        if error is self._closed_error:
            return (
                "The client given to PostgresCheckpointer has lost its connection for good (closed) and "
                "ilmek cannot reopen it: pass a client whose connection is open."
            )
        return super().advice(error)


def adapt(client: Any, *, join_transaction: bool) -> PostgresAdapter | None:
    """The adapter for an ``execute(sql, params)`` client, or ``None``.

    Raises:
        InvalidArgumentError: a ``sqlite3.Connection`` (it has ``execute`` too,
            but it is SQLite's: ``SqliteCheckpointer`` takes it).
    """
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(client, sqlite3.Connection):
        raise InvalidArgumentError(
            "PostgresCheckpointer was given a sqlite3.Connection: that is a SQLite database; use "
            "SqliteCheckpointer(connection) for it"
        )
    if callable(getattr(client, "execute", None)):
        return GenericAdapter(client, joins=join_transaction)
    return None
