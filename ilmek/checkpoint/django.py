"""Django's database connections, for SQLite and Postgres alike.

Django owns its connections and decides, with its own depth counter, whether
a block is a transaction or a savepoint: ilmek writes inside
``transaction.atomic(using=...)``. Outside your atomic block that is a
transaction of ilmek's own, committed when the write ends; inside it, a
savepoint, and the write lands when your block commits (and vanishes if it
rolls back) — so nothing ilmek remembers is filled from it. Django is
imported only when the caller's connection already is one.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..dbapi import Adapter, ErrorKind, Session
from .callers import caller_in_atomic_block

__all__ = ["DjangoAdapter", "caller_in_atomic_block", "check_sqlite_transaction_mode", "is_django_connection"]

_WAITING_MODES = ("IMMEDIATE", "EXCLUSIVE")


def _sqlite_transaction_mode(connection: Any) -> str:
    """The ``transaction_mode`` option of a Django SQLite connection, upper-cased ("" when unset)."""
    options = connection.settings_dict.get("OPTIONS") or {}
    return str(options.get("transaction_mode") or "").upper()


def check_sqlite_transaction_mode(connection: Any) -> None:
    """Refuse a Django SQLite connection whose transactions begin deferred.

    Django's ``atomic`` begins SQLite transactions ``DEFERRED`` unless told
    otherwise; a deferred transaction that has read and then wants to write
    cannot wait for another writer, so two concurrent requests fail with
    "database is locked" at once, whatever the busy timeout. Said when the
    checkpointer is built, not at the first conflict in production.

    Raises:
        InvalidArgumentError: the connection's ``transaction_mode`` is not
            ``IMMEDIATE`` (or ``EXCLUSIVE``).
    """
    from ..errors import InvalidArgumentError

    mode = _sqlite_transaction_mode(connection)
    if mode in _WAITING_MODES:
        return
    shown = f"transaction_mode {mode!r}" if mode else "no transaction_mode"
    raise InvalidArgumentError(
        f"Django's SQLite database {connection.alias!r} has {shown}, so its transactions begin deferred and "
        "concurrent requests fail with 'database is locked' instead of waiting for each other: give it "
        '"OPTIONS": {"transaction_mode": "IMMEDIATE"} in settings.DATABASES (Django 5.1+)'
    )


def is_django_connection(client: Any, vendor: str) -> bool:
    """Whether ``client`` is a Django connection (or ``django.db.connection``) to ``vendor``."""
    if "django.db" not in sys.modules or client is None:
        return False
    try:
        return (
            getattr(client, "vendor", None) == vendor
            and hasattr(client, "in_atomic_block")
            and isinstance(getattr(client, "alias", None), str)
        )
    except Exception:  # a proxy that cannot answer is not a Django connection
        return False


class DjangoAdapter(Adapter):
    """A Django connection: Django's ``atomic`` decides between transaction and savepoint."""

    # Django's cursors take %s, and format the SQL whenever parameters are passed.
    paramstyle = "format"
    # A Django connection belongs to the thread that uses it.
    any_thread = False

    def __init__(self, connection: Any, *, classify: Callable[[BaseException], ErrorKind | None]) -> None:
        super().__init__()
        self._connection = connection
        self._classify_driver = classify

    def worker_finished(self) -> None:
        """Close the calling worker thread's Django connections (it serves no request that would)."""
        from django.db import connections  # the caller's Django is already imported

        with contextlib.suppress(Exception):
            connections.close_all()

    @property
    def tasks_on_caller_thread(self) -> bool | None:
        """Inside the caller's ``atomic`` block ilmek writes in the caller's transaction: tasks run on the
        caller's thread, so a step's ORM writes and its record commit (or roll back) together."""
        try:
            return True if self._connection.in_atomic_block else None
        except Exception:  # a connection that cannot say: let the default decide
            return None

    @contextlib.contextmanager
    def _this_thread(self) -> Iterator[Any]:
        yield self._connection

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return self._this_thread()

    @contextlib.contextmanager
    def transaction_scope(self, connection: Any, *, write: bool) -> Iterator[Session]:
        from django.db import transaction  # the caller's Django is already imported

        joined = bool(connection.in_atomic_block)
        session = Session(self, connection, joined=joined)
        with transaction.atomic(using=connection.alias):
            yield session
        self.connected_once = True
        session.committed()

    def execute(self, connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            if cursor.description is None:
                return []
            return [tuple(row) for row in cursor.fetchall()]

    def classify(self, error: BaseException) -> ErrorKind | None:
        # Django re-raises the driver's errors as its own, chained from them.
        for candidate in (error, error.__cause__):
            if candidate is None:
                continue
            kind = self._classify_driver(candidate)
            if kind is not None:
                return kind
        if type(error).__module__ == "django.db.utils":
            return "permanent"
        return None
