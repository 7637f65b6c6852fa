"""A closed connection, pool or generic client is permanent and says "closed"; a pool that timed out waiting
is not waited out six more times; a generic client that reconnects by itself is retried. Against the real
server the suite starts, with real psycopg2 and psycopg 3 clients.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import psycopg2
import psycopg2.pool
import psycopg_pool
import pytest

from ilmek import (
    PostgresCheckpointer,
    StorageError,
    TransientStorageError,
    run,
)
from tests.support.backends import ExecuteClient
from tests.support.helpers import one_node_graph

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


@pytest.mark.parametrize("connect", [psycopg2.connect, psycopg.connect], ids=["psycopg2", "psycopg"])
def test_a_closed_connection_is_a_storage_error_that_says_closed_at_once(
    postgres_dsn: str, connect: object
) -> None:
    """A connection the caller closed: the first use fails at once (not after six tries) with a permanent
    StorageError that says it is closed and what to do; never "try again later"."""
    connection = connect(postgres_dsn)  # type: ignore[operator]
    checkpointer = PostgresCheckpointer(connection)
    connection.close()
    began = time.monotonic()
    with pytest.raises(StorageError) as failed:
        run(one_node_graph(), {}, thread_id="closed", checkpointer=checkpointer)
    assert not isinstance(failed.value, TransientStorageError)
    assert "closed" in str(failed.value)
    assert "Try again later" not in str(failed.value)
    assert "'closed'" in str(failed.value)
    assert time.monotonic() - began < 0.5


@pytest.mark.parametrize("kind", ["psycopg2-pool", "psycopg-pool"])
def test_a_closed_pool_says_it_is_closed_not_that_it_lent_every_connection(
    postgres_dsn: str, kind: str
) -> None:
    """A pool the application closed (at shutdown, say): a permanent StorageError saying the pool is
    closed, not advice to enlarge it."""
    pool: object
    if kind == "psycopg2-pool":
        pool = psycopg2.pool.ThreadedConnectionPool(1, 2, postgres_dsn)
        checkpointer = PostgresCheckpointer(pool)
        pool.closeall()  # type: ignore[attr-defined]
    else:
        pool = psycopg_pool.ConnectionPool(postgres_dsn, min_size=1, max_size=2, open=True)
        checkpointer = PostgresCheckpointer(pool)
        pool.close()  # type: ignore[attr-defined]
    with pytest.raises(StorageError) as failed:
        run(one_node_graph(), {}, thread_id="pool-closed", checkpointer=checkpointer)
    assert not isinstance(failed.value, TransientStorageError)
    assert "pool" in str(failed.value)
    assert "closed" in str(failed.value)
    assert "size the pool" not in str(failed.value)


def test_a_pool_timeout_is_waited_once_not_once_per_try(postgres_dsn: str) -> None:
    """psycopg_pool waits its own timeout for a free connection: when it gives up, the run fails with a
    TransientStorageError after about that timeout, not six of them."""
    pool = psycopg_pool.ConnectionPool(postgres_dsn, min_size=1, max_size=1, timeout=0.5, open=True)
    try:
        checkpointer = PostgresCheckpointer(pool)
        with pool.connection():  # the application holds the only connection
            began = time.monotonic()
            with pytest.raises(TransientStorageError, match="size the pool"):
                run(one_node_graph(), {}, thread_id="starved", checkpointer=checkpointer)
            waited = time.monotonic() - began
    finally:
        pool.close()
    assert waited < 1.5, waited


@pytest.mark.parametrize("join_transaction", [False, True], ids=["own", "joined"])
def test_a_generic_client_whose_connection_is_closed_says_closed_at_once(
    postgres_dsn: str, join_transaction: bool
) -> None:
    """Closed under ilmek: one permanent StorageError saying closed, no retries, no "after 1 tries"."""
    client = ExecuteClient(postgres_dsn)
    checkpointer = PostgresCheckpointer(client, join_transaction=join_transaction)
    client.close()
    began = time.monotonic()
    with pytest.raises(StorageError) as failed:
        run(one_node_graph(), {}, thread_id="closed", checkpointer=checkpointer)
    message = str(failed.value)
    assert not isinstance(failed.value, TransientStorageError), message
    assert "closed" in message
    assert "tries" not in message
    assert "Try again later" not in message
    assert time.monotonic() - began < 0.5


class FlakyClient(ExecuteClient):
    """A generic client that loses its session once and reconnects by itself, as some wrappers do."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.dsn = dsn
        self.calls = 0
        self.dropped = False

    def execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        self.calls += 1
        if self.calls == 5:  # in the middle of the run's first transactions
            self.dropped = True
            self.connection.close()
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        if self.connection.closed:
            self.connection = psycopg2.connect(self.dsn)
            self.connection.autocommit = True
        return super().execute(sql, params)


def test_a_generic_client_that_reconnects_by_itself_is_retried(postgres_dsn: str) -> None:
    """A lost session that the client itself restores is transient: ilmek retries and the run ends done."""
    client = FlakyClient(postgres_dsn)
    try:
        result = run(one_node_graph(), {}, thread_id="flaky", checkpointer=PostgresCheckpointer(client))
    finally:
        client.close()
    assert client.dropped
    assert "done" == result.status
