"""Which Postgres failures are worth a retry, told by SQLSTATE and error class, never by text.

Transient: serialization failures and deadlocks, lock timeouts, the server
shutting down or starting up, too many clients, a session ended for idling
or a statement cancelled by the server (its timeouts, ``pg_cancel_backend``),
every connection exception (class 08), a connection that broke while in use
(even one broken while a pool's first connect probed it), a psycopg 3
connection whose replies no longer match its commands (an InternalError with
no SQLSTATE), and a pool with no free connection. A connection refused while logging in is transient only once
this client has worked before (the server is coming back); the first login
failing (a wrong password, no such database) is permanent.
"""

from __future__ import annotations

import sys
from typing import Any

from ...dbapi import ErrorKind, sqlstate, while_connecting

__all__ = ["classify_postgres_error", "is_pool_exhausted", "is_pool_timeout", "sqlstate"]

# Worth a retry: serialization failure, deadlock, lock not available, the
# server shutting down (admin or crash) or starting up, too many clients, a
# session the server ended for idling (idle_session_timeout, or
# idle_in_transaction_session_timeout), a statement it cancelled
# (statement_timeout, pg_cancel_backend). Each ends only the transaction it
# hit; a retry on a fresh connection starts clean.
_TRANSIENT_SQLSTATES = frozenset(
    {"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "57P05", "25P03", "57014", "53300"}
)
_DRIVER_ROOTS = ("psycopg2", "psycopg", "psycopg_pool")


def _classes(module: str, *names: str) -> tuple[type[BaseException], ...]:
    found = sys.modules.get(module)
    if found is None:
        return ()
    return tuple(cls for name in names if isinstance(cls := getattr(found, name, None), type))


def is_pool_exhausted(error: BaseException) -> bool:
    """Whether a pool refused to lend a connection (all lent, or none came in time)."""
    pool_errors = (
        *_classes("psycopg2.pool", "PoolError"),
        *_classes("psycopg_pool", "PoolTimeout", "TooManyRequests"),
        *_classes("sqlalchemy.exc", "TimeoutError"),
    )
    return bool(pool_errors) and isinstance(error, pool_errors)


def is_pool_timeout(error: BaseException) -> bool:
    """Whether a pool gave up after waiting its own timeout for a free connection."""
    waited = (*_classes("psycopg_pool", "PoolTimeout"), *_classes("sqlalchemy.exc", "TimeoutError"))
    return bool(waited) and isinstance(error, waited)


def _driver_error(error: BaseException) -> BaseException | None:
    """The driver's own error: the error itself, or what a wrapper (SQLAlchemy, Django) chained."""
    for candidate in (error, getattr(error, "orig", None), error.__cause__):
        if candidate is None:
            continue
        root = type(candidate).__module__.split(".")[0]
        if root in _DRIVER_ROOTS:
            return candidate
    return None


def classify_postgres_error(error: BaseException, *, connected_once: bool = False) -> ErrorKind | None:
    """Classify a psycopg2 / psycopg 3 error (or one SQLAlchemy or a pool raised).

    Args:
        error: What was raised.
        connected_once: Whether this client has completed a transaction
            before: a refused connection is then a server restarting.
    """
    if is_pool_exhausted(error):
        return "transient"
    code = sqlstate(error)
    connecting = while_connecting(error) or any(
        while_connecting(e) for e in (error.__cause__, getattr(error, "orig", None)) if e is not None
    )
    if code is not None:
        if code in _TRANSIENT_SQLSTATES or code.startswith("08"):
            return "transient"
        return "permanent"
    driver_error = _driver_error(error)
    if driver_error is None:
        # SQLAlchemy's own refusals (a session whose flush failed and awaits a
        # rollback, a closed connection) are the caller's state, not an outage.
        return "permanent" if _is_sqlalchemy_error(error) else None
    if type(driver_error).__name__ in ("OperationalError", "InterfaceError"):
        if connecting or _from_connect_attempt(driver_error):
            # A login that never worked (a wrong address or password) will not
            # start working in a second; one that worked before is a server
            # coming back after a restart.
            return "transient" if connected_once else "permanent"
        # No SQLSTATE on a connection in use: it broke (reset, closed, server gone).
        return "transient"
    if _lost_the_protocol(driver_error):
        return "transient"
    return "permanent"


def _lost_the_protocol(error: BaseException) -> bool:
    # psycopg 3 raises InternalError with no SQLSTATE when the server's replies
    # no longer match what it sent (``received 2 results from command``): the
    # connection's protocol state is lost, as when a pooler recycles the server
    # connection under it. The connection is discarded and the work retried on
    # a fresh one, as for a broken connection.
    return type(error).__module__.split(".")[0] == "psycopg" and type(error).__name__ == "InternalError"


def _from_connect_attempt(error: BaseException) -> bool:
    # psycopg 3 keeps the failed connection attempt on the error.
    return getattr(error, "pgconn", None) is not None


def _is_sqlalchemy_error(error: Any) -> bool:
    errors = _classes("sqlalchemy.exc", "SQLAlchemyError")
    return bool(errors) and isinstance(error, errors)
