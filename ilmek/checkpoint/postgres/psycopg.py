"""psycopg 3: a connection or a ``psycopg_pool.ConnectionPool`` of the caller's.

Recognized by type, only once the caller has imported psycopg itself; the
async classes are refused with the sync class to use. Cursors are asked
for tuple rows whatever the connection's ``row_factory`` (``dict_row`` pools
work), and statements are never prepared on the server, so a
transaction-mode pooler in front works.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from ...errors import InvalidArgumentError
from ...redact import connection_secrets
from .common import PoolAdapter, PostgresAdapter, SingleConnectionAdapter, refuse_join

__all__ = ["adapt"]


class _PsycopgCursors:
    """Tuple rows, no server-side prepares, and transaction status, the psycopg 3 way."""

    switches_autocommit = True

    def cursor(self, connection: Any) -> Any:
        rows = sys.modules["psycopg.rows"]
        return connection.cursor(row_factory=rows.tuple_row)

    def run_statement(self, connection: Any, cursor: Any, sql: str, params: Any) -> None:
        # Never prepare server-side, not even "SELECT 1": a transaction-mode
        # pooler may hand the next statement, or psycopg's DEALLOCATE, to
        # another session than the one that saw the PREPARE.
        cursor.execute(sql, params, prepare=False)

    def status(self, connection: Any) -> int:
        return int(connection.info.transaction_status)


class PsycopgConnection(_PsycopgCursors, SingleConnectionAdapter):
    """One psycopg 3 connection."""


class PsycopgPool(_PsycopgCursors, PoolAdapter):
    """A ``psycopg_pool.ConnectionPool``."""

    def __init__(self, pool: Any) -> None:
        super().__init__()
        self._pool = pool
        self.secrets = connection_secrets(getattr(pool, "conninfo", None), getattr(pool, "kwargs", None))

    def borrow(self) -> Any:
        return self._pool.getconn()

    def pool_closed(self) -> bool:
        return bool(getattr(self._pool, "closed", False))

    def give_back(self, connection: Any, *, broken: bool) -> None:
        if broken:
            # psycopg_pool has no close=; a closed connection is discarded.
            with contextlib.suppress(Exception):
                connection.close()
        with contextlib.suppress(Exception):
            self._pool.putconn(connection)


def adapt(client: Any, *, join_transaction: bool) -> PostgresAdapter | None:
    """The adapter for a psycopg 3 connection or pool, or ``None`` if ``client`` is neither.

    Raises:
        InvalidArgumentError: an async connection or pool.
    """
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        if isinstance(client, psycopg.AsyncConnection):
            raise InvalidArgumentError(
                "PostgresCheckpointer is synchronous: pass a psycopg.Connection (psycopg.connect(...)), "
                "not a psycopg.AsyncConnection"
            )
        if isinstance(client, psycopg.Connection):
            return PsycopgConnection(client, joins=join_transaction)
    pool = sys.modules.get("psycopg_pool")
    if pool is not None:
        if isinstance(client, pool.AsyncConnectionPool):
            raise InvalidArgumentError(
                "PostgresCheckpointer is synchronous: pass a psycopg_pool.ConnectionPool, "
                "not an AsyncConnectionPool"
            )
        if isinstance(client, pool.ConnectionPool):
            if join_transaction:
                refuse_join("psycopg_pool ConnectionPool")
            return PsycopgPool(client)
    return None
