"""psycopg2: a connection or a pool (``getconn`` / ``putconn``) of the caller's.

Recognized by type (subclasses from ``connection_factory`` and proxies that
stand in for a connection included), only once the caller has imported
psycopg2 itself. Cursors come from the connection's own cursor factory, so
an application's instrumentation (OpenTelemetry's psycopg2 instrumentor, an
APM agent) sees ilmek's statements as it sees its own; only a factory whose
rows are not read by position (``RealDictCursor``, ``DictCursor``) is
replaced by a plain cursor.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from ...redact import connection_secrets
from .common import PoolAdapter, PostgresAdapter, SingleConnectionAdapter, refuse_join

__all__ = ["adapt"]


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _rows_by_position(factory: Any) -> bool:
    """Whether cursors of ``factory`` return rows ilmek can read as tuples (psycopg2's own, traced ones)."""
    extensions = sys.modules["psycopg2.extensions"]
    if not (isinstance(factory, type) and issubclass(factory, extensions.cursor)):
        return False
    extras = sys.modules.get("psycopg2.extras")
    return extras is None or not issubclass(factory, extras.DictCursorBase)


class _Psycopg2Cursors:
    """Tuple rows and transaction status, the psycopg2 way."""

    switches_autocommit = True

    def cursor(self, connection: Any) -> Any:
        factory = getattr(connection, "cursor_factory", None)
        if factory is not None and _rows_by_position(factory):
            return connection.cursor()
        # No factory set may still mean dict rows: RealDictConnection's cursor() picks its own.
        return connection.cursor(cursor_factory=sys.modules["psycopg2.extensions"].cursor)

    def status(self, connection: Any) -> int:
        return int(connection.get_transaction_status())


class Psycopg2Connection(_Psycopg2Cursors, SingleConnectionAdapter):
    """One psycopg2 connection."""


class Psycopg2Pool(_Psycopg2Cursors, PoolAdapter):
    """A psycopg2 pool (``SimpleConnectionPool``, ``ThreadedConnectionPool``...)."""

    def __init__(self, pool: Any) -> None:
        super().__init__()
        self._pool = pool
        # What the pool passes to psycopg2.connect(): a DSN first, keywords after.
        args = getattr(pool, "_args", ())
        self.secrets = connection_secrets(args[0] if args else None, getattr(pool, "_kwargs", None))

    def borrow(self) -> Any:
        return self._pool.getconn()

    def pool_closed(self) -> bool:
        return bool(getattr(self._pool, "closed", False))

    def give_back(self, connection: Any, *, broken: bool) -> None:
        with contextlib.suppress(Exception):
            self._pool.putconn(connection, close=broken)


def adapt(client: Any, *, join_transaction: bool) -> PostgresAdapter | None:
    """The adapter for a psycopg2 connection or pool, or ``None`` if ``client`` is neither."""
    extensions = _module("psycopg2.extensions")
    if extensions is not None and isinstance(client, extensions.connection):
        return Psycopg2Connection(client, joins=join_transaction)
    pool = _module("psycopg2.pool")
    if pool is not None and isinstance(client, pool.AbstractConnectionPool):
        if join_transaction:
            refuse_join("psycopg2 pool")
        return Psycopg2Pool(client)
    return None
