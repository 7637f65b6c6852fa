"""Postgres misbehaving under load: backends killed, the server restarted, a pool's idle connections
killed, the server gone. Every run completes under the README's retry loop, and every failure a
caller sees is an ilmek error.

These tests start a Postgres cluster of their own (they restart it), on 127.0.0.1, as the rest of
the suite does.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest

from examples.retrying import run_reliably
from ilmek import START, IlmekError, StorageError, channel, graph, run
from ilmek.checkpoint.postgres import PostgresCheckpointer
from tests.support.conftest_postgres import unavailable
from tests.support.helpers import Calls
from tests.support.pgcluster import PostgresCluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    """A throwaway cluster these tests may kill backends of and restart."""
    try:
        started = PostgresCluster.start()
    except RuntimeError as error:
        unavailable(f"no PostgreSQL server for the fault tests: {error}")
    try:
        with PostgresCheckpointer.connect(started.dsn) as checkpointer:
            checkpointer.migrate()
        yield started
    finally:
        started.stop()


def admin(cluster: PostgresCluster, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    connection = psycopg2.connect(cluster.dsn)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []
    finally:
        connection.close()


def three_steps(calls: Calls) -> Any:
    """Three supersteps, each with one journaled effect counted per thread."""

    def step(name: str) -> Any:
        def body(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            ctx.step(name, calls.hit, f"{ctx.thread_id}:{name}")
            time.sleep(0.005)
            return {"log": [name]}

        return body

    return (
        graph("three", {"log": channel.append()})
        .node("a", step("a"))
        .node("b", step("b"))
        .node("c", step("c"))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .compile()
    )


def test_runs_complete_through_killed_backends_and_server_restarts(cluster: PostgresCluster) -> None:
    """Workers run threads while backends are killed (20 times) and the server restarts twice: all finish."""
    calls = Calls()
    g = three_steps(calls)
    pool = psycopg2.pool.ThreadedConnectionPool(1, 8, cluster.dsn)
    checkpointer = PostgresCheckpointer(pool)
    plan_done = threading.Event()
    chaos: list[str] = []
    failures: list[BaseException] = []
    results: dict[str, Any] = {}
    rng = random.Random(20261201)

    def misbehave() -> None:
        for n in range(22):
            time.sleep(rng.uniform(0.05, 0.15))
            if n in (7, 15):
                cluster.restart()
                chaos.append("restart")
                continue
            victims = admin(
                cluster,
                "SELECT pid FROM pg_stat_activity WHERE datname = 'postgres' AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'",
            )
            if victims:
                admin(cluster, "SELECT pg_terminate_backend(%s)", (rng.choice(victims)[0],))
            chaos.append("kill")
        plan_done.set()

    def work(worker: int) -> None:
        try:
            n = 0
            # Runs go on until the troublemaker is done, and a few more after.
            while not plan_done.is_set() or n < 5:
                thread_id = f"w{worker}-{n}"
                results[thread_id] = run_reliably(
                    g, {"log": ["start"]}, thread_id=thread_id, checkpointer=checkpointer
                )
                n += 1
        except BaseException as error:
            failures.append(error)

    troublemaker = threading.Thread(target=misbehave)
    workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    troublemaker.start()
    for worker in workers:
        worker.start()
    troublemaker.join()
    for worker in workers:
        worker.join()
    pool.closeall()

    assert [] == failures
    assert (2, 20) == (chaos.count("restart"), chaos.count("kill"))
    for thread_id, result in results.items():
        assert ("done", ["start", "a", "b", "c"]) == (result.status, result.state["log"]), thread_id
    # Each effect was recorded once; only one whose record was lost with a killed connection
    # may have run again.
    assert 3 * len(results) == len(calls)
    assert all(count in (1, 2) for count in calls.values())


def test_a_pooled_connection_killed_while_idle_is_replaced_not_fatal(cluster: PostgresCluster) -> None:
    """The pool's idle connections are killed between runs: the next run discards them and succeeds."""
    pool = psycopg2.pool.ThreadedConnectionPool(2, 4, cluster.dsn)
    try:
        checkpointer = PostgresCheckpointer(pool)
        g = three_steps(Calls())
        assert "done" == run(g, {"log": ["start"]}, thread_id="idle-1", checkpointer=checkpointer).status
        admin(
            cluster,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'postgres' "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )
        time.sleep(0.2)
        assert "done" == run(g, {"log": ["start"]}, thread_id="idle-2", checkpointer=checkpointer).status
    finally:
        pool.closeall()


def test_with_the_server_gone_a_run_fails_with_an_ilmek_error(cluster: PostgresCluster) -> None:
    """No server at the address: the pool's own error reaches the caller as an ilmek StorageError."""
    dead = cluster.dsn.replace(f"port={cluster.port}", "port=1")
    pool = psycopg2.pool.ThreadedConnectionPool(0, 2, dead)
    try:
        checkpointer = PostgresCheckpointer(pool)
        with pytest.raises(IlmekError) as caught:
            run(three_steps(Calls()), {"log": ["start"]}, thread_id="gone", checkpointer=checkpointer)
        assert isinstance(caught.value, StorageError)
        assert isinstance(caught.value.__cause__, psycopg2.OperationalError)
    finally:
        pool.closeall()
