"""One run per thread and one record per step, attacked: streams past the lease, lost COMMIT
answers, deletes mid-run, tight pools, persist failures, late emits, Ctrl-C.

Each test tries to break a promise of the README's "What a step promises" and
hold sections, on real stores: a SQLite file (a lease) and Postgres (a lease
whose holder's session is watched). Effects are counted outside the database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.pool
import pytest

from ilmek import (
    END,
    START,
    HoldLostError,
    InMemoryCheckpointer,
    RetryPolicy,
    StorageError,
    ThreadBusyError,
    TransientStorageError,
    channel,
    graph,
    request_cancel,
    resume,
    run,
    stream,
)
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.helpers import Calls, reply_chat
from tests.support.stores import LEASE, Store, rows_of, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(90)

# --- a stream that outlives its lease -------------------------------------------------------------


def streaming_graph(calls: Calls, seconds: float) -> Any:
    """A node that charges once, then streams a token every few milliseconds for ``seconds``."""

    def talk(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("charge", calls.hit, "charge")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ctx.emit_token("x")
            time.sleep(0.003)
        return {"log": ["spoken"]}

    return (
        graph("talk", {"log": channel.append()})
        .node("talk", talk)
        .edge(START, "talk")
        .edge("talk", END)
        .compile()
    )


def test_a_stream_longer_than_three_leases_keeps_its_hold(store: Store) -> None:
    """Tokens stream for 3x the lease while another checkpointer keeps trying the thread: it never gets it."""
    calls = Calls()
    checkpointer, contender = store.open(), store.open()
    g = streaming_graph(calls, LEASE * 3)
    taken: list[str] = []
    done = threading.Event()

    def contend() -> None:
        while not done.is_set():
            try:
                with contender.hold("talk"):
                    latest = contender.get("talk")
                    # The run's last commit gives the hold back: after it, taking it is fair.
                    if latest is None or latest.next:
                        taken.append("taken while the stream ran")
            except ThreadBusyError:
                pass
            time.sleep(0.02)

    tokens = 0
    for event in stream(g, {}, thread_id="talk", checkpointer=checkpointer):
        if event.type == "step_start":
            watcher = threading.Thread(target=contend)
            watcher.start()
        if event.type == "custom":
            tokens += 1
    done.set()
    watcher.join()
    assert [] == taken
    assert tokens > 50
    assert {"charge": 1} == dict(calls)
    # Released at the end: the contender gets it now.
    with contender.hold("talk"):
        pass


def test_a_stream_whose_reader_stalls_past_the_lease_keeps_its_hold(store: Store) -> None:
    """The reader stops reading for 3 leases mid-stream: the hold is renewed in the background meanwhile."""
    calls = Calls()
    checkpointer, contender = store.open(), store.open()
    g = streaming_graph(calls, 0.05)
    events = stream(g, {}, thread_id="stall", checkpointer=checkpointer)
    for event in events:
        if event.type == "node_start":
            break
    time.sleep(LEASE * 3)  # the reader does other things
    with pytest.raises(ThreadBusyError):
        contender.hold("stall").__enter__()
    assert "done" == next(e for e in events if e.type == "run_end").status
    assert {"charge": 1} == dict(calls)


# --- persisting, then remembering -------------------------------------------------------------------


class JournalRefusal:
    """A switch in the database itself: while on, every journal insert fails (a full disk, say)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        if store.kind == "sqlite":
            import sqlite3

            SqliteCheckpointer(store.path).close()  # the tables exist
            self.connection: Any = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
            self.connection.execute("CREATE TABLE refuse_journals (refusing INTEGER NOT NULL)")
            self.connection.execute("INSERT INTO refuse_journals VALUES (0)")
            self.connection.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON ilmek_journals "
                "WHEN (SELECT refusing FROM refuse_journals) = 1 "
                "BEGIN SELECT RAISE(ABORT, 'the disk said no'); END"
            )
        else:
            self.connection = psycopg2.connect(store.dsn)
            self.connection.autocommit = True
            with self.connection.cursor() as cursor:
                cursor.execute("CREATE TABLE refuse_journals (refusing INTEGER NOT NULL)")
                cursor.execute("INSERT INTO refuse_journals VALUES (0)")
                cursor.execute(
                    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "IF (SELECT refusing FROM refuse_journals) = 1 THEN RAISE EXCEPTION 'the disk said no'; "
                    "END IF; RETURN NEW; END $$"
                )
                cursor.execute(
                    "CREATE TRIGGER refuse BEFORE INSERT ON ilmek_journals "
                    "FOR EACH ROW EXECUTE FUNCTION refuse()"
                )

    def set(self, refusing: bool) -> None:
        value = 1 if refusing else 0
        if self.store.kind == "sqlite":
            self.connection.execute("UPDATE refuse_journals SET refusing = ?", (value,))
        else:
            with self.connection.cursor() as cursor:
                cursor.execute("UPDATE refuse_journals SET refusing = %s", (value,))

    def close(self) -> None:
        self.connection.close()


def test_a_step_whose_record_failed_ends_the_run_and_runs_again_when_it_is_continued(store: Store) -> None:
    """The journal write of a step fails: that is the run's failure, not the node's. run() raises it (the
    node's retry policy does not take it for its own), the thread is left as a crash leaves it, and the
    continued run runs the step again (its record never landed) and records it."""
    calls = Calls()
    checkpointer = store.open()
    refusal = JournalRefusal(store)

    def charge() -> str:
        calls.hit("charge")
        # The first time, the record of this effect will not land.
        refusal.set(calls["charge"] == 1)
        return "r-1"

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        try:
            return {"receipt": ctx.step("charge", charge)}
        except Exception:  # a node's blanket handler cannot swallow the run's storage failure
            return {"receipt": "swallowed"}

    g = (
        graph("pay", {"receipt": channel.last_write()})
        .node("pay", pay, retry=RetryPolicy(max_attempts=3, backoff=0.01))
        .edge(START, "pay")
        .compile()
    )
    try:
        with pytest.raises(StorageError) as raised:
            run(g, {}, thread_id="persist", checkpointer=checkpointer)
        assert "the disk said no" in str(raised.value.__cause__)
        assert "'persist'" in str(raised.value)
        assert {"charge": 1} == dict(calls)
        info = checkpointer.get_thread("persist")
        assert info is not None
        # As a crash leaves it: its plan stands, no failure is recorded, nobody holds it.
        assert ("unfinished", None, False) == (info.status, info.error, info.running)
        result = run(g, None, thread_id="persist", checkpointer=checkpointer)
    finally:
        refusal.close()
    assert ("done", "r-1") == (result.status, result.state["receipt"])
    # At least once: the effect whose record did not land ran again; its second record landed.
    assert {"charge": 2} == dict(calls)
    assert [] == [e for e in result.events if e.type == "node_retry"]


def test_steps_from_a_nodes_own_threads_are_each_stored_before_they_return(store: Store) -> None:
    """Eight threads of one node call ctx.step at once: each record is readable elsewhere on return."""
    checkpointer, reader = store.open(), store.open()
    missing: list[str] = []
    task_ids: list[str] = []

    def fan(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        task_ids.append(ctx.task_id)
        start = threading.Barrier(8)

        def worker(n: int) -> None:
            start.wait()
            ctx.step(f"part-{n}", lambda: n * n)
            keys = {entry.key for entry in reader.get_journal(ctx.task_id)}
            if f"part-{n}#0" not in keys:
                missing.append(f"part-{n}#0")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return {"log": ["fanned"]}

    g = graph("fan", {"log": channel.append()}).node("fan", fan).edge(START, "fan").compile()
    assert "done" == run(g, {}, thread_id="fan", checkpointer=checkpointer).status
    assert [] == missing


# --- worker messages carry their task ----------------------------------------------------------------


def test_a_late_emit_from_a_nodes_background_thread_is_dropped_not_misattributed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node's thread emits after the node returned: the run does not crash, no other node gets it."""
    gone = threading.Event()

    def early(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def later() -> None:
            time.sleep(0.05)
            ctx.emit("late from early")
            gone.set()

        threading.Thread(target=later).start()
        return {"log": ["early"]}

    def slow(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        assert gone.wait(5)
        time.sleep(0.05)
        return {"log": ["slow"]}

    g = (
        graph("late", {"log": channel.append()})
        .node("early", early)
        .node("slow", slow)
        .edge(START, "early")
        .edge("early", "slow")
        .compile()
    )
    with caplog.at_level(logging.INFO, logger="ilmek.run"):
        result = run(g, {})
    assert ("done", ["early", "slow"]) == (result.status, result.state["log"])
    assert [] == [e for e in result.events if e.type == "custom"]
    assert any("no longer running" in record.getMessage() for record in caplog.records)


# --- a lost COMMIT answer -----------------------------------------------------------------------------


class LosingAnswers(psycopg2.extensions.connection):  # type: ignore[misc]
    """A connection (made through ``connection_factory``) whose Nth COMMIT lands but its answer is lost."""

    countdown: int = 0

    def commit(self) -> None:
        super().commit()
        cls = type(self)
        cls.countdown -= 1
        if cls.countdown == 0:
            # What the driver raises when the server's answer never arrives.
            self.close()
            raise psycopg2.OperationalError("server closed the connection unexpectedly")


def checkout_graph(calls: Calls) -> Any:
    """create_order, a pause, charge: each effect counted."""

    def checkout(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", lambda: calls.hit("create_order") or "order-1")
        answer = ctx.interrupt({"question": f"Charge for {order}?"})
        ctx.step("charge", lambda: calls.hit("charge") or "charged")
        return {"log": [answer]}

    return (
        graph("checkout", {"log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


@pytest.mark.postgres
@pytest.mark.parametrize("lost", range(1, 16))
def test_any_commit_whose_answer_is_lost_is_retried_without_harm(postgres_dsn: str, lost: int) -> None:
    """The answer to the Nth COMMIT of a checkout (hold, input, steps, pause, answers...) is lost:
    the retry finds its own write, and the flow ends with each effect once."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, connection_factory=LosingAnswers)
    calls = Calls()
    g = checkout_graph(calls)
    try:
        checkpointer = PostgresCheckpointer(pool)
        checkpointer.migrate()
        LosingAnswers.countdown = lost
        paused = run(g, {}, thread_id="lossy", checkpointer=checkpointer)
        assert "interrupted" == paused.status
        done = resume(g, "yes", thread_id="lossy", checkpointer=checkpointer)
        assert ("done", ["yes"]) == (done.status, done.state["log"])
        # The hold went back: another run could take the thread now.
        with checkpointer.hold("lossy"):
            pass
    finally:
        LosingAnswers.countdown = 0
        pool.closeall()
    assert {"create_order": 1, "charge": 1} == dict(calls)


class LosingCallAnswers(psycopg2.extensions.connection):  # type: ignore[misc]
    """A connection whose Nth call of a schema function (``functions``: the superstep's by
    default), made as a transaction of its own (autocommit), lands but its answer is lost; it
    counts the calls it sees."""

    countdown: int = 0
    calls: int = 0
    functions: tuple[str, ...] = ("_superstep(",)
    #: The autocommit mode the pool's owner chose for every connection.
    chosen_autocommit: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.autocommit = type(self).chosen_autocommit

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cursor_factory"] = _LosingCallCursor
        return super().cursor(*args, **kwargs)


class _LosingCallCursor(psycopg2.extensions.cursor):  # type: ignore[misc]
    def execute(self, query: Any, params: Any = None) -> Any:
        result = super().execute(query, params)
        owner = type(self.connection)
        if any(function in str(query) for function in owner.functions) and self.connection.autocommit:
            owner = type(self.connection)
            owner.calls += 1
            owner.countdown -= 1
            if owner.countdown == 0:
                self.connection.close()
                raise psycopg2.OperationalError("server closed the connection unexpectedly")
        return result


def _chat_with_losses(
    dsn: str, thread_id: str, lost: int, *, autocommit: bool = False
) -> tuple[list[Any], int, list[Any]]:
    """Three turns of a chat, losing the answer of the ``lost``-th superstep call.

    Returns the thread's list, how many checkpoints it has, and the
    autocommit setting of each pooled connection afterwards.
    """
    LosingCallAnswers.chosen_autocommit = autocommit
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, dsn, connection_factory=LosingCallAnswers)
    g = reply_chat("chat")
    try:
        checkpointer = PostgresCheckpointer(pool)
        checkpointer.migrate()
        LosingCallAnswers.countdown, LosingCallAnswers.calls = lost, 0
        for turn in ("one", "two", "three"):
            done = run(g, {"log": [turn]}, thread_id=thread_id, checkpointer=checkpointer)
            assert "done" == done.status
        with checkpointer.hold(thread_id):  # the hold went back
            pass
        with PostgresCheckpointer.connect(dsn) as fresh:  # nothing cached
            latest = fresh.get(thread_id)
            checkpoints = len(fresh.list(thread_id))
        assert latest is not None
        lent = [pool.getconn() for _ in range(4)]
        settings = [connection.autocommit for connection in lent]
        for connection in lent:
            pool.putconn(connection)
    finally:
        LosingCallAnswers.countdown = 0
        pool.closeall()
    return list(latest.channels["log"]), checkpoints, settings


CHAT = ["one", "reply to one", "two", "reply to two", "three", "reply to three"]


@pytest.mark.postgres
def test_turns_on_a_thread_are_superstep_calls_of_their_own(postgres_dsn: str) -> None:
    """The calls the next test loses happen, in autocommit: each turn's input (which takes the
    hold; the first one also makes the thread and its list) and its superstep (which gives the
    hold back), one call each."""
    log, checkpoints, settings = _chat_with_losses(postgres_dsn, "clean", lost=0)
    assert 6 == LosingCallAnswers.calls
    assert (CHAT, 6) == (log, checkpoints)
    assert [False] * 4 == settings


@pytest.mark.postgres
@pytest.mark.parametrize("lost", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("autocommit", [False, True])
def test_a_superstep_call_whose_answer_is_lost_is_retried_without_harm(
    postgres_dsn: str, lost: int, autocommit: bool
) -> None:
    """The Nth superstep call lands (it is its own transaction) but its answer is lost: the retry
    finds the call's own write, no item or checkpoint is written twice, the hold goes back, and
    every pooled connection is in the autocommit mode its owner chose."""
    log, checkpoints, settings = _chat_with_losses(postgres_dsn, "lossy", lost=lost, autocommit=autocommit)
    assert (CHAT, 6) == (log, checkpoints)
    assert [autocommit] * 4 == settings


@pytest.mark.postgres
def test_a_pause_call_whose_answer_is_lost_is_retried_without_harm(postgres_dsn: str) -> None:
    """A checkout's pause is one call in autocommit (its step and its pause recorded in it) whose
    answer is lost: the retry finds it, the resume charges once, and the hold goes back."""
    lost = 2  # the first call makes the thread; the second is the pause's
    LosingCallAnswers.chosen_autocommit = False
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, connection_factory=LosingCallAnswers)
    calls = Calls()
    g = checkout_graph(calls)
    try:
        checkpointer = PostgresCheckpointer(pool)
        LosingCallAnswers.countdown, LosingCallAnswers.calls = lost, 0
        paused = run(g, {}, thread_id="lossy", checkpointer=checkpointer)
        assert "interrupted" == paused.status
        done = resume(g, "yes", thread_id="lossy", checkpointer=checkpointer)
        assert ("done", ["yes"]) == (done.status, done.state["log"])
        with checkpointer.hold("lossy"):
            pass
        made = LosingCallAnswers.calls
    finally:
        LosingCallAnswers.countdown = 0
        pool.closeall()
    # The new thread's first write, the pause's (its retry finds it the long way) and the last
    # superstep, which starts the thread's list.
    assert 3 == made
    assert {"create_order": 1, "charge": 1} == dict(calls)


@pytest.mark.postgres
@pytest.mark.parametrize("autocommit", [False, True])
def test_an_answer_call_whose_answer_is_lost_is_retried_without_harm(
    postgres_dsn: str, autocommit: bool
) -> None:
    """A resume's answers are one call in autocommit that takes the hold; its answer is lost. The
    retry (the same token) finds its own hold and entry, the resume charges once with the answer
    given, the hold goes back, and the pooled connections keep their owner's autocommit mode."""
    LosingCallAnswers.chosen_autocommit = autocommit
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, connection_factory=LosingCallAnswers)
    calls = Calls()
    g = checkout_graph(calls)
    try:
        checkpointer = PostgresCheckpointer(pool)
        assert "interrupted" == run(g, {}, thread_id="lossy-answer", checkpointer=checkpointer).status
        LosingCallAnswers.functions = ("_answer(",)
        LosingCallAnswers.countdown, LosingCallAnswers.calls = 1, 0
        done = resume(g, "yes", thread_id="lossy-answer", checkpointer=checkpointer)
        made = LosingCallAnswers.calls
        assert ("done", ["yes"]) == (done.status, done.state["log"])
        with checkpointer.hold("lossy-answer"):
            pass
        lent = [pool.getconn() for _ in range(4)]
        settings = [connection.autocommit for connection in lent]
        for connection in lent:
            pool.putconn(connection)
    finally:
        LosingCallAnswers.countdown = 0
        LosingCallAnswers.functions = ("_superstep(",)
        pool.closeall()
    assert 2 == made  # the lost call and its retry
    assert {"create_order": 1, "charge": 1} == dict(calls)
    assert [autocommit] * 4 == settings


# --- deleting a thread while it runs -----------------------------------------------------------------


def test_deleting_a_running_thread_ends_the_run_at_its_next_write_and_leaves_nothing(store: Store) -> None:
    """delete_thread while a run holds the thread: the run fails clearly, and no row of the thread remains."""
    checkpointer, other = store.open(), store.open()
    deleted, go_on = threading.Event(), threading.Event()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", lambda: "recorded")
        deleted.set()
        assert go_on.wait(10)
        ctx.step("after", lambda: "never recorded")
        return {"log": ["done"]}

    g = graph("doomed", {"log": channel.append()}).node("work", work).edge(START, "work").compile()
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(_run_catching(g, "doomed", checkpointer)))
    runner.start()
    assert deleted.wait(10)
    other.delete_thread("doomed")
    go_on.set()
    runner.join()
    [failure] = outcome
    assert isinstance(failure, HoldLostError), failure
    assert "'doomed'" in str(failure)
    assert {
        "threads": 0,
        "checkpoints": 0,
        "blobs": 0,
        "logs": 0,
        "journals": 0,
        "holds": 0,
        "items": 0,
    } == rows_of(store, "doomed")


def _run_catching(g: Any, thread_id: str, checkpointer: Checkpointer) -> Any:
    try:
        result = run(g, {}, thread_id=thread_id, checkpointer=checkpointer)
    except Exception as error:
        return error
    if result.status == "error":
        return result.errors[0][1]
    return result


# --- a pool lends a run one connection ------------------------------------------------------------


def waiting_graph(barrier: threading.Barrier) -> Any:
    """A node that waits until every run is inside it: the runs overlap for sure."""

    def wait(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("check-in", lambda: "in")
        barrier.wait(20)
        ctx.step("check-out", lambda: "out")
        return {"log": ["met"]}

    return graph("meet", {"log": channel.append()}).node("wait", wait).edge(START, "wait").compile()


@pytest.mark.postgres
def test_a_pool_of_two_runs_two_threads_at_once(postgres_dsn: str) -> None:
    """maxconn=2: two runs in flight together both finish (a run keeps one connection, never two)."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 2, postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(pool)
        g = waiting_graph(threading.Barrier(2))
        results: list[Any] = []
        runners = [
            threading.Thread(target=lambda n=n: results.append(_run_catching(g, f"meet-{n}", checkpointer)))
            for n in range(2)
        ]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
        assert ["done", "done"] == [getattr(r, "status", r) for r in results]
    finally:
        pool.closeall()


class FirstRun:
    """A slow graph's run on thread ``first``, in a thread of its own, holding a pool's connection."""

    def __init__(self, pool: Any) -> None:
        self.checkpointer = PostgresCheckpointer(pool)
        self.entered, self.release = threading.Event(), threading.Event()
        self.outcome: list[Any] = []

        def hold_on(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            self.entered.set()
            self.release.wait(20)
            return {"log": ["first"]}

        self.slow = graph("slow", {"log": channel.append()}).node("n", hold_on).edge(START, "n").compile()
        self.runner = threading.Thread(
            target=lambda: self.outcome.append(_run_catching(self.slow, "first", self.checkpointer))
        )


@contextlib.contextmanager
def a_first_run_holding_a_connection(pool: Any) -> Iterator[FirstRun]:
    """While the block runs, ``FirstRun`` is inside its node with the pool's connection; then it finishes."""
    first = FirstRun(pool)
    first.runner.start()
    assert first.entered.wait(20)
    try:
        yield first
    finally:
        first.release.set()
        first.runner.join()


@pytest.mark.postgres
def test_a_run_beyond_the_pools_size_says_how_to_size_it(postgres_dsn: str) -> None:
    """maxconn=1 and a second run while the first holds its connection: an ilmek error with sizing advice."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 1, postgres_dsn)
    try:
        with a_first_run_holding_a_connection(pool) as first:
            with pytest.raises(TransientStorageError, match="size the pool") as caught:
                run(first.slow, {}, thread_id="second", checkpointer=first.checkpointer)
            assert isinstance(caught.value.__cause__, psycopg2.pool.PoolError)
        assert "done" == first.outcome[0].status
    finally:
        pool.closeall()


@pytest.mark.postgres
def test_a_run_beyond_a_psycopg_pools_size_says_how_to_size_it(postgres_dsn: str) -> None:
    """psycopg_pool max_size=1, timeout=0.3: the second run gets an ilmek StorageError, not PoolTimeout.

    The message says to size the pool (naming max_size), the driver's error is only its cause,
    the second thread is not written, and the pool serves it once the first run gave its connection back.
    """
    import psycopg
    import psycopg_pool

    pool = psycopg_pool.ConnectionPool(postgres_dsn, min_size=1, max_size=1, timeout=0.3, open=True)
    try:
        with a_first_run_holding_a_connection(pool) as first, pytest.raises(StorageError) as caught:
            run(first.slow, {}, thread_id="second", checkpointer=first.checkpointer)
        failure = caught.value
        assert "ilmek.errors" == type(failure).__module__
        assert not isinstance(failure, psycopg.Error)
        assert isinstance(failure.__cause__, psycopg_pool.PoolTimeout)
        assert "size the pool" in str(failure)
        assert "psycopg_pool max_size" in str(failure)
        assert "done" == first.outcome[0].status
        assert first.checkpointer.get_thread("second") is None
        # Nothing leaked: the pool's one connection serves the next run.
        assert "done" == run(first.slow, {}, thread_id="second", checkpointer=first.checkpointer).status
    finally:
        pool.close()


# --- one checkpointer object per hold ----------------------------------------------------------------


@pytest.mark.postgres
def test_two_checkpointers_on_one_connection_cannot_both_hold_a_thread(postgres_dsn: str) -> None:
    """Session locks are re-entrant, so holds are rows: a second holder on the same session is refused."""
    connection = psycopg2.connect(postgres_dsn)
    try:
        first, second = PostgresCheckpointer(connection), PostgresCheckpointer(connection)
        with first.hold("shared"), pytest.raises(ThreadBusyError), second.hold("shared"):
            pytest.fail("held twice")
    finally:
        connection.close()


# --- cancel from another process -------------------------------------------------------------------


def looping_graph() -> Any:
    """A node that takes a little while per superstep, looping until told to stop."""

    def tick(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.cancel.wait(0.05)
        return {"n": state["n"] + 1}

    return (
        graph("loop", {"n": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .edge("tick", "tick", when=lambda s: s["n"] < 10_000)
        .compile()
    )


def test_a_cancel_requested_by_another_checkpointer_ends_the_run_aborted(store: Store) -> None:
    """request_cancel through another checkpointer (another process's): the run stops at a boundary."""
    checkpointer, operator = store.open(), store.open()
    g = looping_graph()
    results: list[Any] = []
    runner = threading.Thread(
        target=lambda: results.append(
            run(g, {}, thread_id="loop", checkpointer=checkpointer, recursion_limit=100_000)
        )
    )
    runner.start()
    deadline = time.monotonic() + 10
    while not request_cancel(operator, "loop", "operator said stop"):
        assert time.monotonic() < deadline, "the run never held its thread"
        time.sleep(0.02)
    runner.join(20)
    [result] = results
    assert ("aborted", "operator said stop") == (result.status, result.abort_reason)
    latest = operator.get("loop")
    assert latest is not None
    assert latest.channels["n"] < 10_000
    # The request died with that run: the next one runs freely.
    assert False is request_cancel(operator, "loop", "too late")


def test_request_cancel_of_a_thread_nobody_runs_is_false() -> None:
    """Nothing holds the thread: the request is refused (False), and nothing is stored for a later run."""
    checkpointer = InMemoryCheckpointer()
    assert False is request_cancel(checkpointer, "idle", "nobody listens")


# --- Ctrl-C ----------------------------------------------------------------------------------------------


def test_ctrl_c_on_the_driving_thread_stops_the_program(tmp_path: Any) -> None:
    """SIGINT arrives while the run records a step: KeyboardInterrupt leaves run(), not a node error."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {os.getcwd()!r})
        from ilmek import START, SqliteCheckpointer, channel, graph, run

        def work(state, ctx):
            def interrupt_me():
                os.kill(os.getpid(), signal.SIGINT)
                return "effect"
            ctx.step("first", interrupt_me)
            ctx.step("second", lambda: "never")
            return {{"log": ["done"]}}

        g = graph("ctrl-c", {{"log": channel.append()}}).node("work", work).edge(START, "work").compile()
        result = run(g, {{}}, thread_id="ctrl-c", checkpointer=SqliteCheckpointer({str(tmp_path / "c.db")!r}))
        print("RUN ENDED", result.status, result.errors)
        """
    )
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "RUN ENDED" not in finished.stdout
    assert "KeyboardInterrupt" in finished.stderr
    assert 0 != finished.returncode
