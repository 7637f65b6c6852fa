"""The server's own timeouts and cancels: sessions ended for idling, statements cancelled by
``statement_timeout`` or ``pg_cancel_backend``. Each ends one transaction, not the run: ilmek tries
again on a fresh connection, runs that would succeed succeed, and no step runs twice. Where ilmek
cannot try again (a connection of the caller's that the server closed, the caller's own
transaction) the error says so and what to do.

The settings are given per connection (``options='-c ...'``), so each test's clients have them and
nothing else on the server does.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.pool
import psycopg_pool
import pytest
from psycopg2.extensions import make_dsn

from examples.retrying import run_reliably
from ilmek import (
    START,
    CompiledGraph,
    PostgresCheckpointer,
    StorageError,
    TransientStorageError,
    channel,
    graph,
    run,
)
from tests.support.helpers import Calls
from tests.support.postgres import query, unique

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

RETRY_LOG = "ilmek.storage"


@contextlib.contextmanager
def client(kind: str, dsn: str, *, size: int = 6) -> Iterator[Any]:
    """A pool or one connection of ``kind`` on ``dsn``, closed afterwards."""
    made: Any
    if kind == "psycopg2-pool":
        made = psycopg2.pool.ThreadedConnectionPool(1, size, dsn)
        close = made.closeall
    elif kind == "psycopg-pool":
        made = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=size, open=True)
        close = made.close
    elif kind == "psycopg2-connection":
        made = psycopg2.connect(dsn)
        close = made.close
    elif kind == "psycopg-connection":
        made = psycopg.connect(dsn)
        close = made.close
    else:
        raise ValueError(kind)
    try:
        yield made
    finally:
        close()


def with_settings(dsn: str, name: str, **settings: str) -> str:
    """``dsn`` whose sessions start with ``settings`` and carry ``application_name`` ``name``."""
    options = " ".join(f"-c {key}={value}" for key, value in settings.items())
    return make_dsn(dsn, application_name=name, options=options)


def slow_steps(calls: Calls, steps: int, seconds: float) -> CompiledGraph:
    """``steps`` supersteps, each a journaled effect lasting ``seconds`` (the run's connection idles)."""

    def step(name: str) -> Callable[..., dict[str, Any]]:
        def body(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            def act() -> str:
                calls.hit(f"{ctx.thread_id}:{name}")
                time.sleep(seconds)
                return name

            return {"log": [ctx.step(name, act)]}

        return body

    builder = graph("idle", {"log": channel.append()})
    names = [f"s{n}" for n in range(steps)]
    for name in names:
        builder = builder.node(name, step(name))
    builder = builder.edge(START, names[0])
    for before, after in itertools.pairwise(names):
        builder = builder.edge(before, after)
    return builder.compile()


def retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The errors ilmek logged a retry after (``"OperationalError [57014]: ..."``)."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == RETRY_LOG and record.getMessage().startswith("retrying after")
    ]


def retried_sqlstates(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The SQLSTATEs of the transient errors ilmek logged a retry after."""
    return {message.split("[", 1)[1].split("]", 1)[0] for message in retries(caplog) if "[" in message}


# A session idle this long is ended; steps last longer. Long enough that a connection a pool has just
# made is used before it lapses, even on a loaded machine (as a real timeout of minutes is).
IDLE_TIMEOUT = "400ms"
STEP_SECONDS = 0.6


@pytest.mark.parametrize("kind", ["psycopg2-pool", "psycopg-pool"])
def test_runs_on_a_pool_whose_idle_sessions_the_server_ends_finish_and_act_once(
    postgres_dsn: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """idle_session_timeout ends a run's pooled connection while each step runs (and the pool's idle ones
    between runs): every run finishes under the README's retry loop, and every step ran once."""
    caplog.set_level(logging.INFO, logger=RETRY_LOG)
    calls = Calls()
    g = slow_steps(calls, steps=2, seconds=STEP_SECONDS)
    dsn = with_settings(postgres_dsn, unique("idle"), idle_session_timeout=IDLE_TIMEOUT)
    results: dict[str, Any] = {}
    failures: list[BaseException] = []
    with client(kind, dsn) as pool:
        checkpointer = PostgresCheckpointer(pool)

        def work(worker: int) -> None:
            try:
                for n in range(2):
                    thread_id = f"w{worker}-{n}"
                    results[thread_id] = run_reliably(
                        g, {"log": ["in"]}, thread_id=thread_id, checkpointer=checkpointer
                    )
                    time.sleep(STEP_SECONDS)  # the pool's connections idle past the timeout between runs
            except BaseException as error:
                failures.append(error)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(90)
    assert [] == failures
    assert 4 == len(results)
    for thread_id, result in results.items():
        assert ("done", ["in", "s0", "s1"]) == (result.status, result.state["log"]), thread_id
    assert {f"{thread_id}:s{n}": 1 for thread_id in results for n in range(2)} == dict(calls)
    assert retries(caplog), "no session was ended: the test tested nothing"


@pytest.mark.parametrize("whose", ["the caller's", "connect's own"])
def test_a_single_connection_the_server_ended_for_idling_says_it_cannot_be_reopened(
    postgres_dsn: str, whose: str
) -> None:
    """idle_session_timeout closes the one connection (the caller's, or the one connect() opened) while a
    step runs: the run fails with a StorageError naming the thread, saying ilmek cannot reopen it and what
    to pass instead; the step's effect ran once."""
    calls = Calls()
    dsn = with_settings(postgres_dsn, unique("idle-one"), idle_session_timeout=IDLE_TIMEOUT)
    with contextlib.ExitStack() as stack:
        if whose == "the caller's":
            checkpointer = PostgresCheckpointer(stack.enter_context(client("psycopg-connection", dsn)))
        else:
            checkpointer = stack.enter_context(PostgresCheckpointer.connect(dsn))
        with pytest.raises(StorageError) as caught:
            run(
                slow_steps(calls, steps=2, seconds=STEP_SECONDS),
                {"log": ["in"]},
                thread_id="ended",
                checkpointer=checkpointer,
            )
    message = str(caught.value)
    assert ("PostgresCheckpointer.connect opened" in message) == (whose == "connect's own")
    assert "'ended'" in message
    assert "cannot be reopened by ilmek" in message
    assert "pass a pool" in message
    assert {"ended:s0": 1} == dict(calls)


# --- statements cancelled while they wait ---------------------------------------------------------------


def waiting_for_a_lock(dsn: str, name: str) -> list[int]:
    """The backends of sessions named ``name`` that wait for a lock now."""
    rows = query(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (name,),
    )
    return [pid for (pid,) in rows]


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen in {seconds} s"
        time.sleep(0.01)


@contextlib.contextmanager
def table_locked(dsn: str, table: str) -> Iterator[None]:
    """``table`` locked against every statement of ilmek's, until the block ends."""
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield
        connection.commit()
    finally:
        connection.close()


def blocked_step(calls: Calls, inside: threading.Barrier, go_on: threading.Event) -> CompiledGraph:
    """A quick step, then a step that returns once told: its record then waits for the journals' lock."""

    def body(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, f"{ctx.thread_id}:before")

        def during() -> str:
            calls.hit(f"{ctx.thread_id}:during")
            inside.wait(30)
            assert go_on.wait(30)
            return "ok"

        return {"log": [ctx.step("during", during)]}

    return graph("cancelled", {"log": channel.append()}).node("work", body).edge(START, "work").compile()


CANCELS = ("statement_timeout", "pg_cancel_backend")
CLIENTS = ("psycopg2-pool", "psycopg-pool", "psycopg2-connection", "psycopg-connection")


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("cancel", CANCELS)
def test_a_statement_the_server_cancels_is_tried_again_and_the_run_finishes_acting_once(
    postgres_dsn: str, kind: str, cancel: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A step's record waits for a lock and the server cancels it (statement_timeout, or pg_cancel_backend
    of the run's backend): ilmek tries again on a fresh connection once the lock is gone, the runs finish,
    and each step ran once."""
    caplog.set_level(logging.INFO, logger=RETRY_LOG)
    name = unique("cancel")
    settings = {"statement_timeout": "150ms"} if cancel == "statement_timeout" else {}
    dsn = with_settings(postgres_dsn, name, **settings)
    runs = 3 if kind.endswith("pool") else 1
    calls = Calls()
    inside, go_on = threading.Barrier(runs + 1), threading.Event()
    g = blocked_step(calls, inside, go_on)
    results: dict[str, Any] = {}
    failures: list[BaseException] = []
    with client(kind, dsn) as made:
        checkpointer = PostgresCheckpointer(made)

        def work(n: int) -> None:
            try:
                results[f"r{n}"] = run_reliably(
                    g, {"log": ["in"]}, thread_id=f"r{n}", checkpointer=checkpointer
                )
            except BaseException as error:
                failures.append(error)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(runs)]
        for worker in workers:
            worker.start()
        try:
            inside.wait(30)
            with table_locked(postgres_dsn, "ilmek_journals"):
                go_on.set()
                wait_until(
                    lambda: len(waiting_for_a_lock(postgres_dsn, name)) == runs, 30, "every record waiting"
                )
                if cancel == "pg_cancel_backend":
                    for pid in waiting_for_a_lock(postgres_dsn, name):
                        query(postgres_dsn, "SELECT pg_cancel_backend(%s)", (pid,))
                wait_until(lambda: len(retries(caplog)) >= runs, 30, "a retry after each cancel")
        finally:
            go_on.set()
            for worker in workers:
                worker.join(60)
    assert [] == failures
    assert {f"r{n}": ("done", ["in", "ok"]) for n in range(runs)} == {
        thread_id: (result.status, result.state["log"]) for thread_id, result in results.items()
    }
    assert {f"r{n}:{step}": 1 for n in range(runs) for step in ("before", "during")} == dict(calls)
    assert {"57014"} == retried_sqlstates(caplog)


def test_a_statement_cancelled_inside_the_callers_transaction_is_not_retried_and_says_what_to_do(
    postgres_dsn: str,
) -> None:
    """With join_transaction, a statement of ilmek's that the server cancels is not tried again (the
    transaction is the caller's): run() raises at once a TransientStorageError naming the thread, saying
    ilmek does not retry inside the caller's transaction and to roll it back and run it again."""
    name = unique("joined")
    failures: list[BaseException] = []
    with client("psycopg2-connection", with_settings(postgres_dsn, name)) as connection:
        checkpointer = PostgresCheckpointer(connection, join_transaction=True)

        def work() -> None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")  # the caller's transaction is open
                run(
                    slow_steps(Calls(), 1, 0.0),
                    {"log": ["in"]},
                    thread_id="joined",
                    checkpointer=checkpointer,
                )
            except BaseException as error:
                failures.append(error)

        worker = threading.Thread(target=work)
        with table_locked(postgres_dsn, "ilmek_holds"):
            worker.start()
            wait_until(lambda: len(waiting_for_a_lock(postgres_dsn, name)) == 1, 30, "the run waiting")
            for pid in waiting_for_a_lock(postgres_dsn, name):
                query(postgres_dsn, "SELECT pg_cancel_backend(%s)", (pid,))
            worker.join(30)
        connection.rollback()
    assert 1 == len(failures)
    failure = failures[0]
    assert isinstance(failure, TransientStorageError), repr(failure)
    message = str(failure)
    assert "'joined'" in message
    assert "[57014]" in message
    assert "inside your transaction" in message
    assert "roll it back" in message
