"""Postgres misbehaving under load: backends killed, the server restarted, a pool's idle connections
killed, the server gone. Every run completes under the README's retry loop, and every failure a
caller sees is an ilmek error.

These tests start a Postgres cluster of their own (they restart it), on 127.0.0.1, as the rest of
the suite does.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest

from examples.retrying import run_reliably
from ilmek import START, IlmekError, StorageError, ThreadBusyError, channel, graph, run
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
        idle = [
            pid
            for (pid,) in admin(
                cluster,
                "SELECT pid FROM pg_stat_activity WHERE datname = 'postgres' "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            )
        ]
        assert idle
        admin(cluster, "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (idle,))
        deadline = time.monotonic() + 30  # the kills land, however slow the machine
        while admin(cluster, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (idle,)):
            assert time.monotonic() < deadline, "the killed backends did not end"
            time.sleep(0.01)
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


# --- outages while a run is inside a step ------------------------------------------------------------


def step_across(calls: Calls, seconds: float, inside: threading.Event | None = None) -> Any:
    """A node with a quick step, then a step whose function lasts ``seconds`` (an outage comes meanwhile)."""

    def body(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, f"{ctx.thread_id}:before")

        def during() -> str:
            calls.hit(f"{ctx.thread_id}:during")
            if inside is not None:
                inside.set()
            time.sleep(seconds)
            return "ok"

        return {"log": [ctx.step("during", during)]}

    return graph("across", {"log": channel.append()}).node("work", body).edge(START, "work").compile()


def test_a_run_inside_a_step_when_the_server_restarts_keeps_its_thread_and_finishes(
    cluster: PostgresCluster,
) -> None:
    """The server restarts (every session ends) while a run is inside a 3 s step: nobody takes the thread
    meanwhile, the run records the step over a new connection and finishes; each step ran once."""
    calls = Calls()
    inside = threading.Event()
    g = step_across(calls, 3.0, inside)
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, cluster.dsn)
    other_pool = psycopg2.pool.ThreadedConnectionPool(1, 2, cluster.dsn)
    outcome: dict[str, Any] = {}
    try:
        checkpointer = PostgresCheckpointer(pool)

        def first() -> None:
            try:
                outcome["result"] = run_reliably(
                    g, {"log": ["in"]}, thread_id="restarted", checkpointer=checkpointer
                )
            except BaseException as error:
                outcome["error"] = error

        runner = threading.Thread(target=first)
        runner.start()
        assert inside.wait(30)
        cluster.restart()
        with pytest.raises(ThreadBusyError):
            run(g, None, thread_id="restarted", checkpointer=PostgresCheckpointer(other_pool))
        runner.join(60)
    finally:
        pool.closeall()
        other_pool.closeall()
    assert "error" not in outcome, repr(outcome.get("error"))
    assert ("done", ["in", "ok"]) == (outcome["result"].status, outcome["result"].state["log"])
    assert {"restarted:before": 1, "restarted:during": 1} == dict(calls)


def test_fifty_runs_inside_steps_through_a_one_second_outage_all_finish_under_the_retry_loop(
    cluster: PostgresCluster,
) -> None:
    """The server is down for a second while 50 runs on a psycopg2 pool are inside steps. A storage failure
    is the run's, never the node's, so run() raises it and the README's retry loop continues the thread:
    all 50 finish, and no step whose record landed runs again."""
    calls = Calls()
    runs = 50
    inside = threading.Barrier(runs + 1)

    def body(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, f"{ctx.thread_id}:before")

        def during() -> str:
            calls.hit(f"{ctx.thread_id}:during")
            with contextlib.suppress(threading.BrokenBarrierError):
                inside.wait(30)
            time.sleep(0.5)
            return "ok"

        return {"log": [ctx.step("during", during)]}

    g = graph("outage", {"log": channel.append()}).node("work", body).edge(START, "work").compile()
    pool = psycopg2.pool.ThreadedConnectionPool(1, runs + 10, cluster.dsn)
    results: dict[str, Any] = {}
    failures: list[BaseException] = []
    checkpointer = PostgresCheckpointer(pool, lease_seconds=2.0)

    def work(n: int) -> None:
        try:
            results[f"r{n}"] = run_reliably(
                g, {"log": ["in"]}, thread_id=f"r{n}", checkpointer=checkpointer, attempts=12
            )
        except BaseException as error:
            failures.append(error)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(runs)]
    try:
        for worker in workers:
            worker.start()
        inside.wait(60)  # every run is inside its step
        cluster.stop_for(1.0)
        for worker in workers:
            worker.join(120)
    finally:
        pool.closeall()
    assert [] == failures
    assert runs == len(results)
    assert all(("done", ["in", "ok"]) == (r.status, r.state["log"]) for r in results.values())
    # Recorded before the outage: never again. The step the outage hit may have run twice (its record
    # did not land), never more.
    assert {f"r{n}:before": 1 for n in range(runs)} == {
        k: v for k, v in calls.items() if k.endswith(":before")
    }
    assert all(calls[f"r{n}:during"] in (1, 2) for n in range(runs))
