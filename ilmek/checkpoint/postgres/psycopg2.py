"""psycopg2: a connection or a pool (``getconn`` / ``putconn``) of the caller's.

Recognized by type (subclasses from ``connection_factory`` and proxies that
stand in for a connection included), only once the caller has imported
psycopg2 itself. Cursors are asked for tuple rows, whatever cursor factory
the caller's connection uses.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from .common import PoolAdapter, PostgresAdapter, SingleConnectionAdapter, refuse_join

__all__ = ["adapt"]


def _module(name: str) -> Any:
    return sys.modules.get(name)


class _Psycopg2Cursors:
    """Tuple rows and transaction status, the psycopg2 way."""

    switches_autocommit = True

    def cursor(self, connection: Any) -> Any:
        extensions = sys.modules["psycopg2.extensions"]
        return connection.cursor(cursor_factory=extensions.cursor)

    def status(self, connection: Any) -> int:
        return int(connection.get_transaction_status())


class Psycopg2Connection(_Psycopg2Cursors, SingleConnectionAdapter):
    """One psycopg2 connection."""


class Psycopg2Pool(_Psycopg2Cursors, PoolAdapter):
    """A psycopg2 pool (``SimpleConnectionPool``, ``ThreadedConnectionPool``...)."""

    def __init__(self, pool: Any) -> None:
        super().__init__()
        self._pool = pool

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
