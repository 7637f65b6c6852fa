"""A thread is held exactly as long as its run can still act, attacked where a hold's life ends early or
late: a stream closed (or collected, or Ctrl-C'd) inside a step, a reader that stops reading on a client
bound to the caller's thread, a lost answer on a run's only write, a release the database refuses, a
SQLite writer frozen with the lock, a lease confirmed just before it lapses.

Each test counts the effects of steps outside the database (an append-only file, or a counter) and runs
on real stores: a SQLite file and a fresh Postgres database.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import psycopg2
import psycopg2.extensions
import psycopg2.pool
import pytest

from ilmek import (
    END,
    START,
    HoldLostError,
    ThreadBusyError,
    TransientStorageError,
    channel,
    graph,
    run,
    stream,
)
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.graph import CompiledGraph
from tests.support.backends import ExecuteClient
from tests.support.helpers import Calls
from tests.support.hold_lifetime import effect_count, slow_charge_graph
from tests.support.stores import Store, execute, rows_of, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(90)

REPO = os.getcwd()


# --- a stream that ends while a step is running ---------------------------------------------------------


def store_argument(store: Store) -> str:
    return str(store.path) if store.kind == "sqlite" else store.dsn


class SecondProcess:
    """Another process that, once the thread exists, runs it (``run(g, None)``) until it gets in."""

    def __init__(self, store: Store, effects: str, thread_id: str) -> None:
        if store.kind == "sqlite":
            SqliteCheckpointer(store.path).close()  # the file and its tables, before both processes open it
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.hold_lifetime",
                store.kind,
                store_argument(store),
                effects,
                thread_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "trying" in line, self.process.communicate(timeout=30)[1]

    def outcome(self) -> dict[str, Any]:
        stdout, stderr = self.process.communicate(timeout=60)
        assert 0 == self.process.returncode, stderr
        return dict(json.loads(stdout.strip().splitlines()[-1]))


def started_stream(
    store: Store, effects: str, thread_id: str, seconds: float, lease: float
) -> tuple[Iterator[Any], threading.Event]:
    """A stream of the slow charge, read up to the moment its step's function is running."""
    started = threading.Event()
    checkpointer = store.open(lease_seconds=lease)
    events = stream(
        slow_charge_graph(effects, started, seconds), {}, thread_id=thread_id, checkpointer=checkpointer
    )
    for event in events:
        if event.type == "custom":  # emitted from inside the step's function
            break
    assert started.is_set(), "the step never started"
    return events, started


@pytest.mark.parametrize("ending", ["close", "ctrl-c", "collected"])
def test_a_stream_ended_inside_a_step_keeps_the_thread_until_the_step_is_recorded(
    store: Store, tmp_path: Any, ending: str
) -> None:
    """A stream abandoned while a step's function runs (``break``/close, Ctrl-C on the reading thread, a
    consumer garbage collected), with another process trying the thread all along: the thread is given back
    only once the step's function returned and its record landed, so the other process replays the step and
    never runs it beside the first. The effect happens once."""
    effects = str(tmp_path / "effects.txt")
    # Far longer than the step: the end must wait for the step, never for a lapse.
    lease = 10.0
    other = SecondProcess(store, effects, "closed")
    events, _ = started_stream(store, effects, "closed", seconds=1.5, lease=lease)
    began = time.monotonic()
    if ending == "close":
        events.close()  # type: ignore[attr-defined]
    elif ending == "ctrl-c":
        with pytest.raises(KeyboardInterrupt):
            events.throw(KeyboardInterrupt)  # type: ignore[attr-defined]
    else:
        del events
        gc.collect()
    waited = time.monotonic() - began
    outcome = other.outcome()
    assert ("done", {"receipt": "charged"}) == (outcome["status"], outcome["state"])
    assert 1 == effect_count(effects)
    # The end waited for the step (under its 1.5 s), not for the lease to lapse.
    assert 0.5 < waited < lease, waited
    assert outcome["refused"] > 0


def interrupt_when(started: threading.Event) -> list[float]:
    """Once ``started`` is set, a Ctrl-C (SIGINT) lands on the main thread; returns where its time goes."""
    sent: list[float] = []

    def fire() -> None:
        assert started.wait(30)
        time.sleep(0.1)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=fire, daemon=True).start()
    return sent


@pytest.mark.parametrize(
    ("connection", "ending"), [("pool", "close"), ("pool", "ctrl-c"), ("one-connection", "ctrl-c")]
)
def test_a_step_outlasting_its_closed_stream_keeps_the_thread_until_it_is_recorded(
    store: Store, tmp_path: Any, connection: str, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream closed (or Ctrl-C'd while it waits for the next event) while its step's function runs four
    leases, with another process trying the thread all along: the hold is renewed until the step returned
    and its record landed, then given back, so the other process replays the step instead of running it
    again beside the first. On a pool the end returns after one lease (the keeping is handed over, and the
    warning says so); on one connection bound to the caller's thread (where no event reaches the reader
    during a step, so only a Ctrl-C can end it there) the end returns once the step is recorded."""
    effects = str(tmp_path / "effects.txt")
    # A lease a loaded machine still renews in time (renewals come every quarter
    # of it), and a step four leases long.
    lease, seconds = 1.0, 4.0
    other = SecondProcess(store, effects, "long")
    if connection == "pool":
        checkpointer = store.open(lease_seconds=lease)
    else:
        kind = "sqlite-connection" if store.kind == "sqlite" else "psycopg2-connection"
        checkpointer = thread_bound_checkpointer(kind, store, lease)
    started = threading.Event()
    events = stream(
        slow_charge_graph(effects, started, seconds), {}, thread_id="long", checkpointer=checkpointer
    )
    with caplog.at_level(logging.INFO, logger="ilmek"):
        if ending == "close":
            for event in events:
                if event.type == "custom":  # emitted from inside the step's function
                    break
            began = time.monotonic()
            events.close()  # type: ignore[attr-defined]
        else:
            sent = interrupt_when(started)
            with pytest.raises(KeyboardInterrupt):
                for _ in events:
                    pass
            [began] = sent
        waited = time.monotonic() - began
        outcome = other.outcome()
    assert ("done", {"receipt": "charged"}) == (outcome["status"], outcome["state"])
    assert 1 == effect_count(effects)
    assert outcome["refused"] > 0
    if connection == "pool":
        assert waited < seconds - lease, waited
        [said] = [r.getMessage() for r in caplog.records if "still running" in r.getMessage()]
        assert "given back once it returns and its record is written" in said, said
    else:
        assert waited > seconds - 2 * lease, waited


# --- Ctrl-C while a step's record is written ----------------------------------------------------------------


class InterruptedRecord(psycopg2.extensions.connection):  # type: ignore[misc]
    """A pooled connection on which a Ctrl-C lands as the next statement recording a step is sent."""

    armed = False

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cursor_factory"] = _InterruptedRecordCursor
        return super().cursor(*args, **kwargs)


class _InterruptedRecordCursor(psycopg2.extensions.cursor):  # type: ignore[misc]
    def execute(self, query: Any, params: Any = None) -> Any:
        if InterruptedRecord.armed and "INSERT INTO ilmek_journals" in str(query):
            InterruptedRecord.armed = False
            raise KeyboardInterrupt
        return super().execute(query, params)


class InterruptedSqliteRecord(sqlite3.Connection):
    """A caller's sqlite3 connection where a Ctrl-C lands as the next statement recording a step is sent."""

    armed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if InterruptedSqliteRecord.armed and sql.startswith("INSERT INTO ilmek_journals"):
            InterruptedSqliteRecord.armed = False
            raise KeyboardInterrupt
        return super().execute(sql, *args)


@pytest.mark.parametrize("reading", ["stream", "run"])
def test_a_ctrl_c_while_a_steps_record_is_written_still_records_it(
    store: Store, tmp_path: Any, reading: str
) -> None:
    """A Ctrl-C lands on the thread writing a finished step's record (a pool on Postgres, the caller's
    connection on SQLite; the driver serving a worker in a stream, the node's own thread in run()): the run
    still ends with KeyboardInterrupt, but the record is written before the thread is given back, so the
    next run replays the step instead of charging again."""
    effects = str(tmp_path / "effects.txt")
    armed: Any
    if store.kind == "sqlite":
        SqliteCheckpointer(store.path).close()
        connection = sqlite3.connect(store.path, factory=InterruptedSqliteRecord, check_same_thread=False)
        connection.isolation_level = None
        store.closing.append(connection)
        checkpointer: Checkpointer = SqliteCheckpointer(connection, lease_seconds=5.0)
        armed = InterruptedSqliteRecord
    else:
        pool = psycopg2.pool.ThreadedConnectionPool(1, 4, store.dsn, connection_factory=InterruptedRecord)
        store.pools.append(pool)
        checkpointer = PostgresCheckpointer(pool, lease_seconds=5.0)
        armed = InterruptedRecord
    g = slow_charge_graph(effects)

    def interrupted_run() -> None:
        if reading == "stream":
            for _ in stream(g, {}, thread_id="ctrl-c", checkpointer=checkpointer):
                pass
        else:
            run(g, {}, thread_id="ctrl-c", checkpointer=checkpointer)

    armed.armed = True
    try:
        with pytest.raises(KeyboardInterrupt):
            interrupted_run()
    finally:
        was_armed, armed.armed = armed.armed, False
    assert not was_armed, "no Ctrl-C landed: the test attacked nothing"
    again = run(g, None, thread_id="ctrl-c", checkpointer=store.open())
    assert ("done", {"receipt": "charged"}) == (again.status, again.state)
    assert 1 == effect_count(effects)


# --- one renewal blocked on a row lock ----------------------------------------------------------------------


def waiting_charge_graph(effects: str, seconds: float) -> CompiledGraph:
    """One node that emits ``waiting``, then a step appending ``charge`` to ``effects`` for ``seconds``."""

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.emit("waiting")

        def charge() -> str:
            with open(effects, "a", encoding="utf-8") as out:
                out.write("charge\n")
            time.sleep(seconds)
            return "charged"

        return {"receipt": ctx.step("charge", charge)}

    return (
        graph("waiting-pay", {"receipt": channel.last_write()})
        .node("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )


@pytest.mark.postgres
def test_a_renewal_blocked_on_a_row_lock_stalls_no_other_holds_renewal(
    postgres_dsn: str, tmp_path: Any
) -> None:
    """Two streams whose readers are away while their steps run, so only the keeper renews their holds;
    another session locks the first hold's row (SELECT ... FOR UPDATE) for several leases, blocking that
    renewal: the second hold is still renewed on time, so another run trying the second thread all along is
    refused until its step is recorded, and no step runs twice."""
    lease = 1.0  # its last three quarters (the slack of a renewal) outlast a loaded machine's delays
    effects = {name: str(tmp_path / f"{name}.txt") for name in ("locked", "free")}
    pool = psycopg2.pool.ThreadedConnectionPool(1, 8, postgres_dsn)
    other_pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn)
    locker = psycopg2.connect(postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(pool, lease_seconds=lease)
        checkpointer.migrate()
        streams = {}
        for name in effects:
            events = stream(
                waiting_charge_graph(effects[name], 5 * lease), {}, thread_id=name, checkpointer=checkpointer
            )
            for event in events:
                if event.type == "custom":
                    break
            streams[name] = events
        with locker.cursor() as cursor:  # a transaction left open, holding the row lock
            cursor.execute("SELECT owner FROM ilmek_holds WHERE thread_id = 'locked' FOR UPDATE")
        other = PostgresCheckpointer(other_pool, lease_seconds=lease)
        refused, taken = 0, []
        deadline = time.monotonic() + 3 * lease
        while time.monotonic() < deadline and not taken:
            try:
                taken.append(
                    run(
                        waiting_charge_graph(effects["free"], 0.0), None, thread_id="free", checkpointer=other
                    )
                )
            except ThreadBusyError:
                refused += 1
                time.sleep(0.05)
        locker.rollback()
        for events in streams.values():
            for _ in events:
                pass
    finally:
        locker.close()
        pool.closeall()
        other_pool.closeall()
    assert [] == taken, "another run took a thread whose hold the keeper should have renewed"
    assert refused > 0
    assert [1, 1] == [effect_count(path) for path in effects.values()]


# --- ilmek delete --force under a live run ------------------------------------------------------------------


def test_a_thread_deleted_by_force_under_a_live_sqlite_run_lets_it_start_no_step(tmp_path: Any) -> None:
    """``ilmek delete --force`` (the real command, in its own process) deletes a thread while its run, on a
    SQLite file, is between two steps with a fresh lease: the run's next step is refused (HoldLostError)
    before its effect, instead of running on a thread that is gone while a new run may already act on the
    same thread id."""
    path = tmp_path / "live.db"
    calls = Calls()
    between = threading.Event()
    go_on = threading.Event()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("first", calls.hit, "first")
        between.set()
        assert go_on.wait(30)
        ctx.step("second", calls.hit, "second")
        return {"log": ["done"]}

    g = graph("forced", {"log": channel.append()}).node("work", work).edge(START, "work").compile()
    checkpointer = SqliteCheckpointer(path, lease_seconds=60.0)
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            run(g, {}, thread_id="forced", checkpointer=checkpointer)
        except BaseException as error:
            failures.append(error)

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        assert between.wait(30)
        deleted = subprocess.run(
            [
                sys.executable,
                "-m",
                "ilmek",
                "delete",
                "forced",
                "--db",
                str(path),
                "--yes",
                "--force",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert 0 == deleted.returncode, deleted.stderr
        assert json.loads(deleted.stdout)["forced"] is True
    finally:
        go_on.set()
        driver.join(30)
    checkpointer.close()
    [failure] = failures
    assert isinstance(failure, HoldLostError), failure
    assert {"first": 1} == dict(calls)


# --- a reader that stops reading, on clients bound to the caller's thread -----------------------------


def thread_bound_checkpointer(kind: str, store: Store, lease: float) -> Checkpointer:
    """A checkpointer whose storage only the caller's thread may use (nothing renews its hold meanwhile):
    a ``sqlite3`` connection, a psycopg2 connection or a generic ``execute`` client of the caller's."""
    if kind == "sqlite-connection":
        SqliteCheckpointer(store.path).close()
        connection = sqlite3.connect(store.path, check_same_thread=False, timeout=30, isolation_level=None)
        store.closing.append(connection)
        return SqliteCheckpointer(connection, lease_seconds=lease)
    if kind == "psycopg2-connection":
        own = psycopg2.connect(store.dsn)
        store.closing.append(own)
        return PostgresCheckpointer(own, lease_seconds=lease)
    client = ExecuteClient(store.dsn)
    store.closing.append(client)
    return PostgresCheckpointer(client, lease_seconds=lease)


@pytest.mark.parametrize(
    ("kind", "store"),
    [("sqlite-connection", "sqlite"), pytest.param("generic-client", "postgres", marks=pytest.mark.postgres)],
    indirect=["store"],
)
def test_a_slow_reader_on_a_thread_bound_client_never_lets_a_step_run_twice(store: Store, kind: str) -> None:
    """A stream on a caller's sqlite3 connection or a generic ``execute`` client, whose reader sleeps three
    leases on an event a step emits from inside its function, while another run tries the thread: the event
    reaches the reader only once the step is recorded, so the other run (which gets the lapsed thread)
    replays the step; no step runs twice, and the first run's next step is refused before it acts."""
    lease = 0.4
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def charge() -> str:
            calls.hit("charge")
            ctx.emit("charging")
            time.sleep(0.05)
            return "charged"

        receipt = ctx.step("charge", charge)
        shipped = ctx.step("ship", lambda: calls.hit("ship") or "shipped")
        return {"log": [receipt, shipped]}

    g = graph("slow-reader", {"log": channel.append()}).node("work", work).edge(START, "work").compile()
    checkpointer = thread_bound_checkpointer(kind, store, lease)
    other = store.open(lease_seconds=lease)
    taken: list[Any] = []

    def take_over() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                taken.append(run(g, None, thread_id="slow", checkpointer=other))
                return
            except ThreadBusyError:
                time.sleep(0.02)

    seen: list[str] = []
    recorded_when_seen: list[int] = []
    taker = threading.Thread(target=take_over)

    def read_slowly() -> None:
        for event in stream(g, {}, thread_id="slow", checkpointer=checkpointer):
            if event.type == "custom":
                seen.append(event.payload)
                # The step that emitted this is recorded by now: sleeping cannot let it run twice.
                base = checkpointer.get("slow")
                assert base is not None
                recorded_when_seen.append(len(checkpointer.load_journals(base, ["work"]).get("work", ())))
                taker.start()
                time.sleep(3 * lease)

    with pytest.raises(HoldLostError):
        read_slowly()
    taker.join(30)
    assert [1] == recorded_when_seen
    assert ["charging"] == seen
    assert [["charged", "shipped"]] == [result.state["log"] for result in taken]
    assert {"charge": 1, "ship": 1} == dict(calls)


# --- a lost answer on the one write of a run ----------------------------------------------------------------


class LosingCallAnswer(psycopg2.extensions.connection):  # type: ignore[misc]
    """A connection whose next call of the schema's superstep function lands (it is a transaction by
    itself) but whose answer is lost with the connection."""

    armed = False

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cursor_factory"] = _LosingCallCursor
        return super().cursor(*args, **kwargs)


class _LosingCallCursor(psycopg2.extensions.cursor):  # type: ignore[misc]
    def execute(self, query: Any, params: Any = None) -> Any:
        result = super().execute(query, params)
        if LosingCallAnswer.armed and "_superstep(" in str(query):
            LosingCallAnswer.armed = False
            self.connection.close()
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        return result


class LosingCommitAnswer(sqlite3.Connection):
    """A caller's sqlite3 connection whose next write transaction's COMMIT lands but answers as a lock
    error (the answer lost)."""

    armed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = super().execute(sql, *args)
        if sql == "BEGIN IMMEDIATE":
            self.writing = True
        elif sql == "COMMIT":
            writing, self.writing = getattr(self, "writing", False), False
            if LosingCommitAnswer.armed and writing:
                LosingCommitAnswer.armed = False
                lost = sqlite3.OperationalError("database is locked")
                lost.sqlite_errorcode = 5  # type: ignore[attr-defined]
                raise lost
        return cursor


def nothing_to_do_graph() -> CompiledGraph:
    """A router sends a run straight to END: the input's commit is the run's first and last write."""
    return (
        graph("no-op", {"note": channel.last_write()})
        .node("never", lambda state: {"note": "ran"})
        .router(START, lambda state: END if state["note"] == "skip" else "never")
        .compile()
    )


def test_a_lost_answer_on_a_runs_only_write_leaves_no_hold_behind(store: Store) -> None:
    """The one write of a run (its input, which takes the hold and gives it back: the graph has nothing to
    do) lands but its answer is lost: the retry finds its own write and deletes the hold row it wrote
    again, so the thread is free at once, not after a lease."""
    if store.kind == "sqlite":
        SqliteCheckpointer(store.path).close()
        connection = sqlite3.connect(store.path, factory=LosingCommitAnswer, check_same_thread=False)
        connection.isolation_level = None
        store.closing.append(connection)
        checkpointer: Checkpointer = SqliteCheckpointer(connection, lease_seconds=30)
        losing: Any = LosingCommitAnswer
    else:
        pool = psycopg2.pool.ThreadedConnectionPool(1, 4, store.dsn, connection_factory=LosingCallAnswer)
        store.pools.append(pool)
        checkpointer = PostgresCheckpointer(pool, lease_seconds=30)
        losing = LosingCallAnswer
    losing.armed = True
    try:
        result = run(
            nothing_to_do_graph(), {"note": "skip"}, thread_id="one-write", checkpointer=checkpointer
        )
    finally:
        armed, losing.armed = losing.armed, False
    assert not armed, "no answer was lost: the test attacked nothing"
    assert ("done", {"note": "skip"}) == (result.status, result.state)
    info = checkpointer.get_thread("one-write")
    assert info is not None
    assert not info.running
    assert 0 == rows_of(store, "one-write")["holds"]
    # Free at once for another process too, not after the 30 s lease.
    again = run(nothing_to_do_graph(), {"note": "skip"}, thread_id="one-write", checkpointer=store.open())
    assert "done" == again.status


# --- a release the database refuses -------------------------------------------------------------------------


class HoldDeleteRefusal:
    """A switch in the database: while on, deleting a hold row fails (a full disk, an outage)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        if store.kind == "sqlite":
            SqliteCheckpointer(store.path).close()
            execute(store, "CREATE TABLE refuse_hold_deletes (refusing INTEGER NOT NULL)")
            execute(store, "INSERT INTO refuse_hold_deletes VALUES (0)")
            execute(
                store,
                "CREATE TRIGGER refuse_hold_delete BEFORE DELETE ON ilmek_holds "
                "WHEN (SELECT refusing FROM refuse_hold_deletes) = 1 "
                "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
            )
        else:
            execute(store, "CREATE TABLE refuse_hold_deletes (refusing INTEGER NOT NULL)")
            execute(store, "INSERT INTO refuse_hold_deletes VALUES (0)")
            execute(
                store,
                "CREATE FUNCTION refuse_hold_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF (SELECT refusing FROM refuse_hold_deletes) = 1 THEN "
                "RAISE EXCEPTION 'could not extend file: No space left on device'; END IF; "
                "RETURN OLD; END $$",
            )
            execute(
                store,
                "CREATE TRIGGER refuse_hold_delete BEFORE DELETE ON ilmek_holds "
                "FOR EACH ROW EXECUTE FUNCTION refuse_hold_delete()",
            )

    def set(self, refusing: bool) -> None:
        execute(self.store, f"UPDATE refuse_hold_deletes SET refusing = {1 if refusing else 0}")


def failing_graph() -> CompiledGraph:
    """One node that fails on its own account."""

    def boom(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("the node's own failure")

    return graph("boom", {"n": channel.last_write(0)}).node("boom", boom).edge(START, "boom").compile()


def test_a_release_the_database_refuses_never_replaces_the_runs_outcome(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A run fails on its node's error, then giving its hold back fails too: the caller still gets the
    run's own outcome (status error, the node's ValueError) and the release failure is logged once."""
    refusal = HoldDeleteRefusal(store)
    checkpointer = store.open(lease_seconds=5.0)
    refusal.set(True)
    with caplog.at_level(logging.WARNING, logger="ilmek"):
        result = run(failing_graph(), {}, thread_id="refused-release", checkpointer=checkpointer)
    refusal.set(False)
    assert "error" == result.status
    [(node, error)] = result.errors
    assert ("boom", ValueError, "the node's own failure") == (node, type(error), str(error))
    warnings = [r.getMessage() for r in caplog.records if "could not give back the hold" in r.getMessage()]
    assert 1 == len(warnings), warnings
    assert "refused-release" in warnings[0]


def test_a_hold_the_database_refused_to_delete_is_mended_by_the_same_process(store: Store) -> None:
    """The disk fills as a run gives its hold back, so the row stays; once space returns, the same
    checkpointer runs the thread again at once (it deletes its own leftover row), not after a lease."""
    refusal = HoldDeleteRefusal(store)
    checkpointer = store.open(lease_seconds=60.0)
    refusal.set(True)
    run(failing_graph(), {}, thread_id="full-disk", checkpointer=checkpointer)
    assert 1 == rows_of(store, "full-disk")["holds"]
    refusal.set(False)
    # Another process has no way to know the row is dead: it waits for the lease.
    with pytest.raises(ThreadBusyError):
        run(failing_graph(), None, thread_id="full-disk", checkpointer=store.open(lease_seconds=60.0))
    result = run(failing_graph(), None, thread_id="full-disk", checkpointer=checkpointer)
    assert "error" == result.status
    assert 0 == rows_of(store, "full-disk")["holds"]


# --- a SQLite writer frozen with the lock -------------------------------------------------------------------


FROZEN_WRITER = textwrap.dedent(
    """
    import sqlite3, sys, os, signal
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("CREATE TABLE IF NOT EXISTS frozen (x)")
    print("locked", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    """
)


def test_a_sqlite_writer_frozen_with_the_lock_delays_others_one_busy_timeout_not_six(tmp_path: Any) -> None:
    """Another process took SQLite's write lock and was frozen (SIGSTOP) before it committed: a run waits at
    most about its busy timeout in all (not one per retry), then fails with a TransientStorageError."""
    path = tmp_path / "frozen.db"
    SqliteCheckpointer(path).close()
    frozen = subprocess.Popen(
        [sys.executable, "-c", FROZEN_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert frozen.stdout is not None
        assert "locked" == frozen.stdout.readline().strip()
        with SqliteCheckpointer(path, busy_timeout=0.5) as checkpointer:
            began = time.monotonic()
            with pytest.raises(TransientStorageError, match="'frozen'"):
                run(failing_graph(), {}, thread_id="frozen", checkpointer=checkpointer)
            waited = time.monotonic() - began
    finally:
        frozen.send_signal(signal.SIGKILL)
        frozen.communicate(timeout=10)
    # One busy timeout (0.5 s) and the time to fail, not 6 x 0.5 s and the backoff between them.
    assert waited < 1.5, waited


# --- a lease confirmed just before it lapses ----------------------------------------------------------------


class FrozenBetweenSteps:
    """Another process whose run took one step and waits for a line before the next, frozen by SIGSTOP.

    Freezing it stops its keeper too: its lease is renewed by nobody, as on a suspended machine or in a
    process stalled by a long pause.
    """

    def __init__(self, store: Store, effects: str, lease: float) -> None:
        if store.kind == "sqlite":
            SqliteCheckpointer(store.path).close()
        else:
            PostgresCheckpointer.connect(store.dsn).close()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.hold_lifetime",
                "two-steps",
                store.kind,
                store_argument(store),
                effects,
                "frozen",
                str(lease),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "between" in line, self.process.communicate(timeout=30)[1]

    def freeze(self, seconds: float) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)
        time.sleep(seconds)

    def go_on(self) -> dict[str, Any]:
        os.kill(self.process.pid, signal.SIGCONT)
        stdout, stderr = self.process.communicate("\n", timeout=60)
        assert 0 == self.process.returncode, stderr
        return dict(json.loads(stdout.strip().splitlines()[-1]))


def steps_run(effects: str) -> list[str]:
    with open(effects, encoding="utf-8") as found:
        return [line.strip() for line in found]


def test_a_step_does_not_start_after_another_run_took_the_thread(store: Store, tmp_path: Any) -> None:
    """A run frozen between two steps for longer than its lease, while another run takes its thread: on
    waking, the run starts no further step (HoldLostError), however fresh its lease looked before."""
    effects = str(tmp_path / "effects.txt")
    frozen = FrozenBetweenSteps(store, effects, lease=1.0)
    try:
        frozen.freeze(2.5)
        with store.open().hold("frozen"):
            outcome = frozen.go_on()
    finally:
        frozen.process.kill()
    assert "HoldLostError" == outcome.get("error"), outcome
    assert "'frozen'" in outcome["message"]
    assert ["first"] == steps_run(effects)


def test_a_step_starts_only_with_lease_left_to_record_it(store: Store, tmp_path: Any) -> None:
    """A run comes back to a lease about to lapse (frozen past three quarters of it, as by a suspended
    machine or a long pause): before the step's function runs, the hold is renewed, so the record can
    still land under it."""
    effects = str(tmp_path / "effects.txt")
    frozen = FrozenBetweenSteps(store, effects, lease=2.0)
    try:
        frozen.freeze(1.7)
        outcome = frozen.go_on()
    finally:
        frozen.process.kill()
    assert "done" == outcome.get("status"), outcome
    assert ["first", "second"] == steps_run(effects)
    assert outcome["left"] > 1.0, outcome


#: The wall clock in seconds since the epoch, as SQLite computes it (any version).
NOW_IN_SQLITE = "((julianday('now') - 2440587.5) * 86400.0)"


def test_a_sqlite_step_starts_only_with_lease_left_to_record_it(tmp_path: Any) -> None:
    """On SQLite too: another connection leaves the run's lease about to lapse (as a machine suspended past
    it would find it) while the node is between steps; the check before the next step sees the commit, reads
    the lease, and renews it, so the step's record can still land under it."""
    path = tmp_path / "margin.db"
    left_before: list[float] = []

    def query(sql: str) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(path)
        try:
            with connection:
                return connection.execute(sql).fetchall()
        finally:
            connection.close()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("first", lambda: None)
        query(f"UPDATE ilmek_holds SET expires_at = {NOW_IN_SQLITE} + 0.2")

        def charge() -> float:
            [(left,)] = query(f"SELECT expires_at - {NOW_IN_SQLITE} FROM ilmek_holds")
            left_before.append(left)
            return float(left)

        return {"left": ctx.step("charge", charge)}

    checkpointer = SqliteCheckpointer(path, lease_seconds=4.0)
    g = graph("margin", {"left": channel.last_write()}).node("work", work).edge(START, "work").compile()
    result = run(g, {}, thread_id="margin", checkpointer=checkpointer)
    checkpointer.close()
    assert "done" == result.status
    [left] = left_before
    assert left > 2.0, left


# --- the keeper and a connection the caller uses too --------------------------------------------------------


class RecordingThreads(psycopg2.extensions.connection):  # type: ignore[misc]
    """A connection that notes which thread sent each statement."""

    senders: ClassVar[set[int]] = set()

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        RecordingThreads.senders.add(threading.get_ident())
        return super().cursor(*args, **kwargs)


@pytest.mark.postgres
def test_a_callers_single_connection_is_never_written_from_another_thread(postgres_dsn: str) -> None:
    """A stream on the caller's own psycopg2 connection, read slowly past several renewals: ilmek sends
    every statement from the thread reading the stream, never from the hold keeper's, so no statement of
    the caller's (from its own thread) can land inside a transaction ilmek commits."""
    connection = psycopg2.connect(postgres_dsn, connection_factory=RecordingThreads)
    RecordingThreads.senders = set()
    try:
        checkpointer = PostgresCheckpointer(connection, lease_seconds=0.4)
        checkpointer.migrate()

        def talk(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            for n in range(3):
                ctx.emit(n)
            return {"n": 1}

        g = graph("talk", {"n": channel.last_write(0)}).node("talk", talk).edge(START, "talk").compile()
        RecordingThreads.senders = set()
        for event in stream(g, {}, thread_id="talk", checkpointer=checkpointer):
            if event.type == "custom":
                time.sleep(0.3)  # several quarters of the lease
        assert {threading.get_ident()} == RecordingThreads.senders
    finally:
        connection.close()


# --- recover() and the pool -------------------------------------------------------------------------------


@pytest.mark.postgres
def test_recover_runs_a_stalled_thread_on_a_pool_of_one(postgres_dsn: str) -> None:
    """recover() continues a stalled thread through a pool of one connection: the run checks the thread is
    unchanged through its own connection, not a second one."""
    from ilmek import recover

    calls = Calls()

    def flaky(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("once", calls.hit, "once")
        calls.hit("attempt")
        if calls["attempt"] == 1:
            raise RuntimeError("failed mid-superstep")
        return {"done": True}

    g = (
        graph("stall", {"done": channel.last_write(False)})
        .node("flaky", flaky)
        .edge(START, "flaky")
        .compile()
    )
    pool = psycopg2.pool.ThreadedConnectionPool(1, 1, postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(pool)
        checkpointer.migrate()
        assert "error" == run(g, {}, thread_id="stalled", checkpointer=checkpointer).status
        [result] = recover(g, checkpointer)
    finally:
        pool.closeall()
    assert ("done", True) == (result.status, result.state["done"])
    assert {"once": 1, "attempt": 2} == dict(calls)


# --- a hold lost while the run waits ------------------------------------------------------------------------


def test_a_hold_lost_while_the_run_waits_is_logged_once_and_never_renewed_again(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Another writer takes the hold's row while the node waits through many renewal times: one WARNING
    says the hold was lost, nothing spins on it (the driver once retried the renewal of a lost hold in a
    tight loop, logging tens of thousands of WARNINGs a second), and the next step is refused."""
    lease = 0.4
    calls = Calls()
    caplog.set_level(logging.DEBUG, logger="ilmek")

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        execute(store, "UPDATE ilmek_holds SET owner = 'another-run'")
        time.sleep(4 * lease)
        ctx.step("charge", calls.hit, "charge")
        return {"log": ["charged"]}

    g = graph("stolen", {"log": channel.append()}).node("work", work).edge(START, "work").compile()
    checkpointer = store.open(lease_seconds=lease)
    with pytest.raises(HoldLostError):
        for _ in stream(g, {}, thread_id="stolen", checkpointer=checkpointer):
            pass
    ilmek_records = [record for record in caplog.records if record.name.startswith("ilmek")]
    warnings = [record.getMessage() for record in ilmek_records if record.levelno >= logging.WARNING]
    assert 1 == len(warnings), warnings
    assert "lost the hold on thread 'stolen'" in warnings[0]
    assert len(ilmek_records) < 40, f"{len(ilmek_records)} records in {4 * lease} s"
    assert {} == dict(calls)
