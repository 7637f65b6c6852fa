"""ilmek behind PgBouncer in transaction pooling mode (SPEC §7: no session state outside the hold).

Every client here reaches Postgres through one throwaway pgbouncer
(``tests/support/pgbouncer.py``) in ``pool_mode = transaction`` that hands its few
server sessions out round-robin, so consecutive transactions of one client
land on different sessions. What that shows:

* the checkout flow and a long conversation work through psycopg2 and
  psycopg 3 pools and a SQLAlchemy engine, with no server-side prepared
  statement ever needed again in another transaction;
* holds (a transaction-scoped advisory lock on a pooled connection of the
  run's own) keep excluding other runs, and many concurrent runs share fewer
  server sessions than they have client connections.

Side effects are counted in an append-only file (``Effects``). Only pools
are tried: a single connection's session advisory lock cannot survive a
transaction-mode pooler, which the README says.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.errors
import psycopg2
import psycopg2.pool
import psycopg_pool
import pytest
import sqlalchemy
from psycopg2.extensions import parse_dsn

from ilmek import (
    END,
    START,
    CompiledGraph,
    PostgresCheckpointer,
    ResumeError,
    ThreadBusyError,
    channel,
    graph,
    resume,
    run,
    thread_state,
)
from tests.support.conftest_postgres import unavailable
from tests.support.crashworker import Effects
from tests.support.pgbouncer import PgBouncer
from tests.support.pgcluster import PostgresCluster, PostgresServer, dsn_to_url
from tests.support.pgworker import CART, CHECKOUT_DONE, checkout_graph, run_checkout

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

CLIENT_KINDS = ("psycopg2-pool", "psycopg-pool", "sqlalchemy-psycopg2")
# psycopg 3 prepares a statement the sixth time one connection runs it
# (prepare_threshold 5), unless told not to. The conversation and the
# six-thread test send ilmek's statements more often than that on one
# connection without a rollback in between (a rollback resets the count).
PSYCOPG_PREPARE_THRESHOLD = 5


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    """One pgbouncer in front of the test server, for the session; if missing: fails under CI, else skips."""
    try:
        bouncer = PgBouncer.start(postgres_server.dsn)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        problem = f"no pgbouncer available: {type(exc).__name__}: {exc}"
        bouncer = None
    # Outside the except block, so the report is not cluttered by exception chaining.
    if bouncer is None:
        unavailable(problem)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def bouncer_dsn(pgbouncer: PgBouncer, postgres_dsn: str) -> Iterator[str]:
    """The test's own database (``postgres_dsn``, ilmek's tables migrated), reached through pgbouncer."""
    yield pgbouncer.dsn_for(postgres_dsn)
    # Let go of the server sessions before the database is dropped.
    pgbouncer.kill_database(parse_dsn(postgres_dsn)["dbname"])


class ServerLog:
    """The lines the test cluster logged since the test began (nothing for an external server)."""

    def __init__(self, server: PostgresServer) -> None:
        self.path = server.logfile if isinstance(server, PostgresCluster) else None
        self.offset = os.path.getsize(self.path) if self.path is not None else 0

    def errors_about(self, words: str) -> list[str]:
        """The ERROR lines mentioning ``words`` logged since the test began."""
        if self.path is None:
            return []
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            return [line for line in f if "ERROR:" in line and words in line]


@pytest.fixture
def server_log(postgres_server: PostgresServer) -> ServerLog:
    """What the server logs during the test."""
    return ServerLog(postgres_server)


# --- helpers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def pooled_checkpointer(kind: str, dsn: str, *, size: int = 12) -> Iterator[PostgresCheckpointer]:
    """A checkpointer on a pool of ``kind`` connecting to ``dsn``; the pool is closed afterwards."""
    client: Any
    close: Any
    if kind == "psycopg2-pool":
        client = psycopg2.pool.ThreadedConnectionPool(2, size, dsn)
        close = client.closeall
    elif kind == "psycopg-pool":
        client = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=size, open=True)
        close = client.close
    elif kind == "sqlalchemy-psycopg2":
        url = dsn_to_url(dsn).replace("postgresql://", "postgresql+psycopg2://", 1)
        client = sqlalchemy.create_engine(url, pool_size=size, max_overflow=0)
        close = client.dispose
    else:
        raise ValueError(kind)
    checkpointer = PostgresCheckpointer(client)
    try:
        yield checkpointer
    finally:
        checkpointer.close()
        close()


@contextlib.contextmanager
def direct_checkpointer(dsn: str) -> Iterator[PostgresCheckpointer]:
    """A checkpointer straight on the server (no pgbouncer), to read what was really committed."""
    checkpointer = PostgresCheckpointer.connect(dsn)
    try:
        yield checkpointer
    finally:
        checkpointer.close()


def chat_graph(effects: Effects, tool_calls: int = 3) -> CompiledGraph:
    """A conversation, one run per message: the agent calls a tool ``tool_calls`` times, then replies.

    A turn is ``2 * tool_calls + 1`` supersteps, each committed: within one
    run the writing connection sends the same statements more than
    psycopg 3's prepare threshold. (Between runs that count starts again:
    ending a hold rolls its connection back, which resets it, and pool
    connections take turns holding and writing.)
    """

    def perform(key: str, value: Any) -> Any:
        effects.record(key)
        return value

    def agent(state: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
        if state["tools"] < tool_calls:
            return None
        turn = len(state["msgs"]) // 2
        return {"msgs": ctx.step("reply", perform, f"reply:{turn}", f"echo {turn}")}

    def tool(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        key = f"tool:{len(state['msgs']) // 2}:{state['tools']}"
        return {"tools": ctx.step("call", perform, key, state["tools"] + 1)}

    return (
        graph("bouncer-chat", {"msgs": channel.append(), "tools": channel.last_write(0)})
        .node("agent", agent)
        .node("tool", tool)
        .edge(START, "agent")
        .router("agent", lambda state, ctx: "tool" if state["tools"] < tool_calls else END)
        .edge("tool", "agent")
        .compile()
    )


def counter_graph(effects: Effects, supersteps: int) -> CompiledGraph:
    """``supersteps`` supersteps of one node, each counting itself in state and in the effects file."""

    def tick(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        effects.record(f"{ctx.thread_id}:tick")
        return {"n": state["n"] + 1, "log": f"tick {state['n'] + 1}"}

    return (
        graph("bouncer-counter", {"n": channel.last_write(0), "log": channel.append()})
        .node("tick", tick)
        .edge(START, "tick")
        .router("tick", lambda state, ctx: "tick" if state["n"] < supersteps else END)
        .compile()
    )


def many_steps_graph(effects: Effects, steps: int) -> CompiledGraph:
    """One node performing ``steps`` journaled steps in one run."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        done = [ctx.step(f"item-{i}", effects.perform, f"item-{i}", i) for i in range(steps)]
        return {"done": done}

    return (
        graph("bouncer-steps", {"done": channel.last_write()})
        .node("work", work)
        .edge(START, "work")
        .compile()
    )


def server_sessions(bouncer: PgBouncer, dsn: str) -> list[tuple[int, list[str]]]:
    """Every server session behind pgbouncer's pool for ``dsn``: its pid and its prepared statements.

    Holds ``pool_size`` transactions open at once through pgbouncer, so each
    sits on a session of its own and together they cover the whole pool.
    """
    connections = [psycopg2.connect(dsn) for _ in range(bouncer.pool_size)]
    try:
        sessions = []
        for connection in connections:
            with connection.cursor() as cursor:  # psycopg2 never prepares
                cursor.execute("SELECT pg_backend_pid(), array(SELECT name FROM pg_prepared_statements)")
                pid, names = cursor.fetchone()
            sessions.append((pid, sorted(names)))
        return sessions
    finally:
        for connection in connections:
            connection.rollback()
            connection.close()


def one_statement_per_transaction(connection: psycopg.Connection[Any], times: int) -> None:
    """Run one parameterized statement ``times`` times, a transaction each, as psycopg 3 pleases."""
    for value in range(times):
        connection.execute("SELECT %s::int", [value]).fetchone()
        connection.commit()


# --- the pgbouncer itself -------------------------------------------------------------------------


def test_the_bouncer_pools_by_transaction_and_breaks_a_client_that_prepares(
    pgbouncer: PgBouncer, bouncer_dsn: str
) -> None:
    """A psycopg 3 client left to prepare fails through this pgbouncer: the tests below would catch ilmek."""
    config = {row["key"]: row["value"] for row in pgbouncer.show("CONFIG")}
    assert ("transaction", "") == (config["pool_mode"], config["server_reset_query"])
    connections = [psycopg.connect(bouncer_dsn) for _ in range(3)]
    try:
        # Three transactions open at once: three server sessions to rotate over.
        for connection in connections:
            connection.execute("SELECT 1")
        for connection in connections:
            connection.commit()
        client = connections[0]
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            one_statement_per_transaction(client, 4 * PSYCOPG_PREPARE_THRESHOLD)
    finally:
        for connection in connections:
            connection.close()


def test_stop_ends_the_process_and_removes_its_folder(postgres_server: PostgresServer) -> None:
    """stop() shuts a pgbouncer down and deletes its folder; a second stop() does nothing."""
    try:
        bouncer = PgBouncer.start(postgres_server.dsn, pool_size=2)
    except RuntimeError as exc:
        unavailable(f"no pgbouncer available: {exc}")
    pid = bouncer.pid
    assert pid is not None
    assert "transaction" == {row["key"]: row["value"] for row in bouncer.show("CONFIG")}["pool_mode"]
    bouncer.stop()
    bouncer.stop()
    assert not os.path.exists(bouncer.base)
    assert not os.path.exists(f"/proc/{pid}")
    with pytest.raises(psycopg2.OperationalError):
        bouncer.admin(lambda cursor: cursor.execute("SHOW VERSION"))


# --- 1. the checkout flow and a conversation ------------------------------------------------------


@pytest.mark.parametrize("kind", CLIENT_KINDS)
def test_a_conversation_then_the_checkout_flow_through_pgbouncer(
    kind: str,
    pgbouncer: PgBouncer,
    bouncer_dsn: str,
    postgres_dsn: str,
    effects: Effects,
    server_log: ServerLog,
    tmp_path: pathlib.Path,
) -> None:
    """20 turns of 7 supersteps, then pause, resume, done; each step once; no prepared statement needed."""
    replies = Effects(tmp_path / "replies.log")
    chat = chat_graph(replies)
    # Open every server session of the pool first, so that round-robin moves
    # each transaction to another session than the one before.
    assert pgbouncer.pool_size == len(server_sessions(pgbouncer, bouncer_dsn))
    with pooled_checkpointer(kind, bouncer_dsn) as checkpointer:
        for turn in range(20):
            result = run(
                chat, {"msgs": f"turn {turn}", "tools": 0}, thread_id="chat", checkpointer=checkpointer
            )
            assert "done" == result.status, result.errors
        run_checkout(checkpointer, effects, "checkout")
    expected_chat = [message for turn in range(20) for message in (f"turn {turn}", f"echo {turn}")]
    assert expected_chat == result.state["msgs"]
    expected_effects = {
        **{f"tool:{turn}:{call}": 1 for turn in range(20) for call in range(3)},
        **{f"reply:{turn}": 1 for turn in range(20)},
    }
    assert expected_effects == replies.counts()
    with direct_checkpointer(postgres_dsn) as checkpointer:
        assert {"msgs": expected_chat, "tools": 3} == thread_state(chat, checkpointer, "chat")
        assert CHECKOUT_DONE == thread_state(checkout_graph(effects), checkpointer, "checkout")
    assert [] == server_log.errors_about("prepared statement")
    assert [] == [(pid, names) for pid, names in server_sessions(pgbouncer, bouncer_dsn) if names]


def test_a_run_of_many_steps_through_a_psycopg_pool_leaves_no_prepared_statement_on_the_server(
    pgbouncer: PgBouncer, bouncer_dsn: str, effects: Effects
) -> None:
    """Eight steps in one run (a hold check before each) leave no prepared statement on any server session."""
    steps = many_steps_graph(effects, PSYCOPG_PREPARE_THRESHOLD + 3)
    with pooled_checkpointer("psycopg-pool", bouncer_dsn) as checkpointer:
        result = run(steps, {}, thread_id="steps", checkpointer=checkpointer)
    assert "done" == result.status
    assert {f"item-{i}": 1 for i in range(PSYCOPG_PREPARE_THRESHOLD + 3)} == effects.counts()
    sessions = server_sessions(pgbouncer, bouncer_dsn)
    assert pgbouncer.pool_size == len({pid for pid, _ in sessions})
    assert [] == [(pid, names) for pid, names in sessions if names]


# --- 2. holds behind the pooler -------------------------------------------------------------------


def test_six_threads_share_one_pool_and_fewer_server_sessions(
    pgbouncer: PgBouncer, bouncer_dsn: str, postgres_dsn: str, effects: Effects, server_log: ServerLog
) -> None:
    """Six threads, ten supersteps each, at once through one pool of 12 over 7 server sessions: all right."""
    threads = [f"worker-{i}" for i in range(6)]
    counter = counter_graph(effects, 10)
    barrier = threading.Barrier(len(threads))
    results: dict[str, Any] = {}
    # Twelve client connections (two per running thread, as the README asks),
    # all open from the start: pgbouncer has only pool_size servers for them.
    pool = psycopg_pool.ConnectionPool(bouncer_dsn, min_size=12, max_size=12, open=True)
    try:
        pool.wait(30)
        checkpointer = PostgresCheckpointer(pool)

        def work(thread_id: str) -> None:
            barrier.wait(30)
            try:
                results[thread_id] = run(counter, {"n": 0}, thread_id=thread_id, checkpointer=checkpointer)
            except Exception as error:  # reported by the assertion below
                results[thread_id] = error

        workers = [threading.Thread(target=work, args=(thread_id,)) for thread_id in threads]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        database = parse_dsn(postgres_dsn)["dbname"]
        clients = [row for row in pgbouncer.show("CLIENTS") if row["database"] == database]
        servers = [row for row in pgbouncer.show("SERVERS") if row["database"] == database]
        checkpointer.close()
    finally:
        pool.close()
    final = {"n": 10, "log": [f"tick {i}" for i in range(1, 11)]}
    assert dict.fromkeys(threads, ("done", final)) == {
        thread_id: (getattr(result, "status", result), getattr(result, "state", None))
        for thread_id, result in results.items()
    }
    assert {f"{thread_id}:tick": 10 for thread_id in threads} == effects.counts()
    assert 12 <= len(clients)
    assert 1 < len(servers) <= pgbouncer.pool_size < len(clients)
    with direct_checkpointer(postgres_dsn) as direct:
        for thread_id in threads:
            assert final == thread_state(counter, direct, thread_id)
            assert 11 == len(direct.list(thread_id))  # the input, then one per superstep
    assert [] == server_log.errors_about("prepared statement")


def test_two_runs_racing_on_one_paused_thread_through_pgbouncer_charge_once(
    bouncer_dsn: str, postgres_dsn: str, effects: Effects
) -> None:
    """A double-clicked approve, a pool per click: one completes, the other is refused; one charge."""
    slow_checkout = checkout_graph(effects, charge_seconds=0.3)
    with pooled_checkpointer("psycopg-pool", bouncer_dsn, size=4) as checkpointer:
        assert "interrupted" == run(slow_checkout, CART, thread_id="race", checkpointer=checkpointer).status
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def approve() -> None:
        with pooled_checkpointer("psycopg-pool", bouncer_dsn, size=4) as mine:
            barrier.wait(30)
            try:
                outcome: str = resume(slow_checkout, "yes", thread_id="race", checkpointer=mine).status
            except (ThreadBusyError, ResumeError) as error:
                outcome = type(error).__name__
        with lock:
            outcomes.append(outcome)

    racers = [threading.Thread(target=approve) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert 2 == len(outcomes), outcomes
    assert "done" in outcomes, outcomes
    outcomes.remove("done")
    assert outcomes[0] in ("ThreadBusyError", "ResumeError")
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()
    with direct_checkpointer(postgres_dsn) as direct:
        assert CHECKOUT_DONE == thread_state(slow_checkout, direct, "race")


# --- 3. a hold excludes across pgbouncer ----------------------------------------------------------


@pytest.mark.parametrize("kind", CLIENT_KINDS)
def test_a_run_inside_a_node_holds_its_thread_against_another_pool(
    kind: str, bouncer_dsn: str, postgres_dsn: str, effects: Effects
) -> None:
    """While a run waits inside its node, a run of the same thread via another pool is refused at once."""
    inside, release = threading.Event(), threading.Event()

    def slow(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        effects.record("slow")
        inside.set()
        release.wait(30)
        return {"n": state["n"] + 1}

    held = (
        graph("bouncer-hold", {"n": channel.last_write(0)}).node("slow", slow).edge(START, "slow").compile()
    )
    first: list[Any] = []
    with (
        pooled_checkpointer(kind, bouncer_dsn, size=4) as one,
        pooled_checkpointer(kind, bouncer_dsn, size=4) as other,
    ):
        holder = threading.Thread(
            target=lambda: first.append(run(held, {"n": 1}, thread_id="held", checkpointer=one))
        )
        holder.start()
        try:
            assert inside.wait(30)
            before = [checkpoint.id for checkpoint in other.list("held")]
            started = time.monotonic()
            with pytest.raises(ThreadBusyError) as busy:
                run(held, {"n": 5}, thread_id="held", checkpointer=other)
            waited = time.monotonic() - started
            assert holder.is_alive()  # the first run was still inside its node all along
            assert before == [checkpoint.id for checkpoint in other.list("held")]
        finally:
            release.set()
            holder.join(30)
        assert "thread 'held'" in str(busy.value)
        assert waited < 10  # refused, not queued behind the holder
        assert "done" == first[0].status
        assert {"n": 2} == first[0].state
        assert "done" == run(held, {"n": 5}, thread_id="held", checkpointer=other).status
    assert {"slow": 2} == effects.counts()
    with direct_checkpointer(postgres_dsn) as direct:
        assert {"n": 6} == thread_state(held, direct, "held")


@pytest.mark.parametrize("kind", CLIENT_KINDS)
def test_a_run_inside_a_step_keeps_its_thread_while_pgbouncer_recycles_its_server_connections(
    kind: str, bouncer_dsn: str, postgres_dsn: str, effects: Effects
) -> None:
    """Behind a transaction-mode pooler the session recorded in a hold row is a server connection of the
    pooler's, which it recycles at will (here every one is terminated while a run is inside a step): the
    run keeps its thread (another run is refused), goes on through the pooler and finishes; its step runs
    once."""
    inside, release = threading.Event(), threading.Event()

    def slow(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def charge() -> str:
            effects.record("charge")
            inside.set()
            assert release.wait(30)
            return "charged"

        return {"n": state["n"] + 1, "receipt": ctx.step("charge", charge)}

    held = (
        graph("bouncer-recycled", {"n": channel.last_write(0), "receipt": channel.last_write()})
        .node("slow", slow)
        .edge(START, "slow")
        .compile()
    )
    first: list[Any] = []
    with (
        pooled_checkpointer(kind, bouncer_dsn, size=4) as one,
        pooled_checkpointer(kind, bouncer_dsn, size=4) as other,
    ):
        holder = threading.Thread(
            target=lambda: first.append(run(held, {"n": 1}, thread_id="recycled", checkpointer=one))
        )
        holder.start()
        try:
            assert inside.wait(30)
            killed = admin_query(
                postgres_dsn,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'",
            )
            assert killed[0][0] >= 1
            with pytest.raises(ThreadBusyError):
                run(held, {"n": 5}, thread_id="recycled", checkpointer=other)
        finally:
            release.set()
            holder.join(30)
        assert 1 == len(first), "the first run did not return"
        assert ("done", {"n": 2, "receipt": "charged"}) == (first[0].status, first[0].state)
    assert {"charge": 1} == effects.counts()


def admin_query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    """A statement straight on the server (not through the pooler), committed."""
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description is not None else []
    finally:
        connection.close()
