"""PostgresCheckpointer's holds across processes, and connections lost mid-run.

A hold counts until its lease lapses, whatever happens to the holder's
database session: two processes resuming one pause charge once, a killed
holder frees its thread when its lease lapses (not when its session ends), a
run whose session was terminated keeps its thread and finishes on a new
connection, and a run whose lease lapsed performs no further step and loses
nothing committed. Cross-process tests run ``tests/support/pgworker.py``; side
effects are counted in an append-only effects file, so effects of a killed
process count too.
"""

from __future__ import annotations

import contextlib
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.pool
import psycopg_pool
import pytest

from ilmek import (
    CompiledGraph,
    PostgresCheckpointer,
    Result,
    ResumeError,
    StorageError,
    ThreadBusyError,
    resume,
    run,
    thread_state,
)
from ilmek.checkpoint import holds
from tests.support.pgworker import (
    CART,
    CHECKOUT_DONE,
    TWO_STEP_FINAL,
    TWO_STEP_INPUT,
    Effects,
    checkout_graph,
    run_checkout,
    two_step_graph,
)
from tests.support.postgres import Worker, application_dsn, fresh_checkpointer, query, unique

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


# --- holds across processes ----------------------------------------------------------------------


def test_two_processes_resuming_one_pause_charge_once(
    postgres_dsn: str, effects: Effects, tmp_path: pathlib.Path, workers: Callable[..., Worker]
) -> None:
    """A double-clicked approve from two processes: one completes, the other is refused; one charge."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        paused = run(checkout_graph(effects), CART, thread_id="race", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    go = tmp_path / "go"
    arguments = ["--dsn", postgres_dsn, "--thread", "race", "--effects", str(effects.path)]
    racers = [workers("resume", *arguments, "--answer", "yes", "--go-file", str(go)) for _ in range(2)]
    for racer in racers:
        racer.expect("ready")
    go.touch()
    outcomes = sorted(racer.outcome()["outcome"] for racer in racers)
    assert "done" in outcomes
    outcomes.remove("done")
    assert outcomes[0] in ("busy", "resume_error")
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        assert CHECKOUT_DONE == thread_state(checkout_graph(effects), checkpointer, "race")


def run_when_free(action: Callable[[], Result], seconds: float) -> tuple[Result, float]:
    """Retry ``action`` while the thread is busy; the result and how long it took to get in."""
    started = time.monotonic()
    while True:
        try:
            return action(), time.monotonic() - started
        except ThreadBusyError:
            if time.monotonic() - started > seconds:
                raise
            time.sleep(0.02)


@pytest.mark.parametrize("client", ["connection", "pool"])
def test_a_killed_holder_frees_its_thread_when_its_lease_lapses_not_before(
    postgres_dsn: str, effects: Effects, workers: Callable[..., Worker], client: str
) -> None:
    """A process SIGKILLed inside a long node: its session ends at once, but its thread stays held until
    its lease lapses (an ended session proves nothing); then another run takes it and the step replays."""
    lease = 1.5
    name = unique("lingerer")
    arguments = [
        "--dsn",
        application_dsn(postgres_dsn, name),
        "--thread",
        "killed",
        "--effects",
        str(effects.path),
    ]
    holder = workers("linger", *arguments, "--client", client, "--lease", str(lease))
    holder.expect("ready")
    holder.expect("lingering")
    two_step = two_step_graph(effects)
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        with pytest.raises(ThreadBusyError):
            run(two_step, None, thread_id="killed", checkpointer=checkpointer)
        holder.kill()
        killed_at = time.monotonic()
        # The session is gone at once; the hold is not.
        deadline = time.monotonic() + 10
        while query(postgres_dsn, "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        result, _ = run_when_free(
            lambda: run(two_step, None, thread_id="killed", checkpointer=checkpointer), seconds=lease + 4.0
        )
        waited = time.monotonic() - killed_at
    assert "done" == result.status, result.errors
    assert TWO_STEP_FINAL == result.state
    assert {"prepare": 1, "finish": 1} == effects.counts()
    # Free only once the lease (renewed every quarter of it) could have lapsed.
    assert waited >= lease * 0.5, waited
    print(f"\nthread free {waited * 1000:.0f} ms after SIGKILL ({client}, lease {lease} s)")


# --- connections lost mid-run -----------------------------------------------------------------


class Between:
    """Parks a node between its two steps until the test lets it go."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.released = threading.Event()

    def __call__(self, point: str) -> None:
        self.arrived.set()
        assert self.released.wait(30), "the test never let the node go on"


class Background:
    """``run`` on a thread of its own, keeping its result or exception."""

    def __init__(self, action: Callable[[], Result]) -> None:
        self.result: Result | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(action,))
        self._thread.start()

    def _run(self, action: Callable[[], Result]) -> None:
        try:
            self.result = action()
        except BaseException as error:
            self.error = error

    def join(self) -> None:
        self._thread.join(45)
        assert not self._thread.is_alive(), "the run never returned"


def terminate_sessions(dsn: str, application_name: str, *, spare_the_hold: bool = False) -> int:
    """``pg_terminate_backend`` the sessions with that application name; wait until they are gone.

    With ``spare_the_hold``, the session holding an advisory lock (the run's hold) is left alive.
    """
    spare = (
        " AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)"
        if spare_the_hold
        else ""
    )
    victims = query(
        dsn, f"SELECT pid FROM pg_stat_activity WHERE application_name = %s{spare}", (application_name,)
    )
    pids = [pid for (pid,) in victims]
    for pid in pids:
        query(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while pids and query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)):
        assert time.monotonic() < deadline, "terminated sessions did not go away"
        time.sleep(0.01)
    return len(pids)


@contextlib.contextmanager
def a_run_between_its_two_steps(
    checkpointer: PostgresCheckpointer, effects: Effects
) -> Iterator[tuple[Background, CompiledGraph]]:
    """The two-step graph run on thread ``lost`` in the background, and that graph.

    The block runs while the run waits between its two steps; then the run is let go and joined.
    """
    between = Between()
    two_step = two_step_graph(effects, between)
    background = Background(
        lambda: run(two_step, TWO_STEP_INPUT, thread_id="lost", checkpointer=checkpointer)
    )
    try:
        assert between.arrived.wait(30)
        yield background, two_step
    finally:
        between.released.set()
        background.join()


POOLS: dict[str, Callable[[str], Any]] = {
    "psycopg2-pool": lambda dsn: psycopg2.pool.ThreadedConnectionPool(1, 6, dsn),
    "psycopg-pool": lambda dsn: psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=6, open=True),
}


def close_client(client: Any) -> None:
    if hasattr(client, "closeall"):
        client.closeall()
    else:
        client.close()


@pytest.mark.parametrize("kind", sorted(POOLS))
def test_a_pool_survives_its_connections_being_terminated_mid_run(
    postgres_dsn: str, effects: Effects, kind: str
) -> None:
    """Pooled write sessions killed between two steps: the next write retries on a new connection.

    The hold's own session is spared: losing it is a lost hold, which must stop the run (see below).
    """
    name = unique("victim")
    pool = POOLS[kind](application_dsn(postgres_dsn, name))
    try:
        checkpointer = PostgresCheckpointer(pool)
        with a_run_between_its_two_steps(checkpointer, effects) as (background, two_step):
            assert terminate_sessions(postgres_dsn, name, spare_the_hold=True) >= 1
        assert background.error is None
        assert background.result is not None
        assert "done" == background.result.status, background.result.errors
        assert TWO_STEP_FINAL == background.result.state
    finally:
        close_client(pool)
    assert {"prepare": 1, "finish": 1} == effects.counts()
    with fresh_checkpointer(postgres_dsn) as other:
        assert TWO_STEP_FINAL == thread_state(two_step, other, "lost")


def terminate_the_hold(dsn: str, thread_id: str) -> None:
    """Terminate the session a run holds its thread through (the one its hold row names)."""
    [(pid,)] = query(dsn, "SELECT holder FROM ilmek_holds WHERE thread_id = %s", (thread_id,))
    query(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while query(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)):
        assert time.monotonic() < deadline, "the terminated session did not go away"
        time.sleep(0.01)


@pytest.mark.parametrize("kind", sorted(POOLS))
def test_a_run_whose_hold_session_is_terminated_keeps_its_thread_and_finishes(
    postgres_dsn: str, effects: Effects, kind: str
) -> None:
    """The session a run holds its thread through is terminated between two steps (a failover, an idle
    timeout, a pooler recycling it): the thread stays the run's (another run is refused), the run goes on
    over a new connection, and each step runs once."""
    name = unique("hold-killed")
    pool = POOLS[kind](application_dsn(postgres_dsn, name))
    try:
        checkpointer = PostgresCheckpointer(pool)
        with a_run_between_its_two_steps(checkpointer, effects) as (background, _):
            terminate_the_hold(postgres_dsn, "lost")
            with fresh_checkpointer(postgres_dsn) as other, pytest.raises(ThreadBusyError):
                run(two_step_graph(effects), None, thread_id="lost", checkpointer=other)
        assert background.error is None, repr(background.error)
        assert background.result is not None
        assert ("done", TWO_STEP_FINAL) == (background.result.status, background.result.state)
    finally:
        close_client(pool)
    assert {"prepare": 1, "finish": 1} == effects.counts()


def test_a_run_whose_lease_lapsed_and_was_taken_performs_no_further_step(
    postgres_dsn: str, effects: Effects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run parked past its lease (a suspended machine, say) while another run took the thread: its next
    step is refused before its function runs; the thread was finished by the other run, each step once."""
    name = unique("hold-lapsed")
    pool = psycopg2.pool.ThreadedConnectionPool(1, 6, application_dsn(postgres_dsn, name))
    try:
        checkpointer = PostgresCheckpointer(pool)
        with a_run_between_its_two_steps(checkpointer, effects) as (background, _):
            # The lease lapses by the database's clock while the run is away, and the run's own
            # clock, which counts a suspension, sees it was away that long.
            query(postgres_dsn, "UPDATE ilmek_holds SET expires_at = 0 WHERE thread_id = 'lost'")
            real_clock = holds.lease_clock
            away = checkpointer.lease_seconds + 1.0
            monkeypatch.setattr(holds, "lease_clock", lambda: real_clock() + away)
            with fresh_checkpointer(postgres_dsn) as other:
                second = run(two_step_graph(effects), None, thread_id="lost", checkpointer=other)
            assert "done" == second.status
        assert isinstance(background.error, ThreadBusyError), repr(background.error)
    finally:
        pool.closeall()
    assert {"prepare": 1, "finish": 1} == effects.counts()


SINGLE_CONNECTIONS: dict[str, Callable[[str], Any]] = {
    "psycopg2-connection": psycopg2.connect,
    "psycopg-connection": psycopg.connect,
}


@pytest.mark.parametrize("kind", sorted(SINGLE_CONNECTIONS))
def test_a_single_connection_terminated_mid_run_fails_clearly_and_loses_nothing_committed(
    postgres_dsn: str, effects: Effects, kind: str
) -> None:
    """The caller's one connection killed between two steps: run() raises a storage error naming the thread
    (a connection of the caller's cannot be replaced); its hold lapses and a new run replays what landed."""
    name = unique("victim")
    connection = SINGLE_CONNECTIONS[kind](application_dsn(postgres_dsn, name))
    lease = 1.0
    try:
        checkpointer = PostgresCheckpointer(connection, lease_seconds=lease)
        with a_run_between_its_two_steps(checkpointer, effects) as (background, _):
            assert 1 == terminate_sessions(postgres_dsn, name)
    finally:
        connection.close()
    failure = background.error
    assert isinstance(failure, StorageError), repr(failure)
    assert "'lost'" in str(failure)
    with fresh_checkpointer(postgres_dsn) as other:
        result, _ = run_when_free(
            lambda: run(two_step_graph(effects), None, thread_id="lost", checkpointer=other),
            seconds=lease + 4,
        )
    assert "done" == result.status, result.errors
    assert TWO_STEP_FINAL == result.state
    # ``prepare`` was recorded before the kill, so it replays. Before ``finish``
    # the run confirmed its hold through its connection, found it dead, and did
    # not run the step: the new run performs it, once.
    assert {"prepare": 1, "finish": 1} == effects.counts()


def test_a_resume_with_nothing_paused_is_resume_error_on_postgres(
    postgres_dsn: str, effects: Effects
) -> None:
    """A resume racing a finished one finds nothing paused: ResumeError naming the thread, no charge."""
    with fresh_checkpointer(postgres_dsn) as checkpointer:
        run_checkout(checkpointer, effects, "finished")
        with pytest.raises(ResumeError, match="'finished'"):
            resume(checkout_graph(effects), "yes", thread_id="finished", checkpointer=checkpointer)
    assert {"create_order": 1, "charge:yes": 1} == effects.counts()


class _SeenCursor(psycopg2.extensions.cursor):
    """A real cursor that notes each statement with whether its connection was in autocommit."""

    def execute(self, query: Any, vars: Any = None) -> Any:
        sql = query.decode() if isinstance(query, bytes) else str(query)
        self.connection.seen.append((sql, self.connection.autocommit))
        return super().execute(query, vars)


class _SeenConnection(psycopg2.extensions.connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, bool]] = []
        self.cursor_factory = _SeenCursor


@pytest.mark.parametrize("autocommit", [False, True])
def test_a_renewal_is_one_statement_that_leaves_no_transaction_open(
    postgres_dsn: str, autocommit: bool
) -> None:
    """A lease renewal is the fenced UPDATE alone, sent in autocommit (with the pool's connections in
    either mode): no BEGIN ... COMMIT in which a process stopped or killed between statements would
    leave the hold's row locked, and every other run's take of the thread waiting, until its socket
    closed; and the renewal still extends the lease."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 1, postgres_dsn, connection_factory=_SeenConnection)
    connection = pool.getconn()
    connection.autocommit = autocommit
    pool.putconn(connection)
    checkpointer = PostgresCheckpointer(pool, lease_seconds=30.0)
    try:
        with checkpointer.hold("renewed") as hold:
            before = query(postgres_dsn, "SELECT expires_at FROM ilmek_holds WHERE thread_id = 'renewed'")
            connection.seen.clear()
            time.sleep(0.01)
            hold.renew()
            assert [(True, True)] == [
                ("UPDATE" in sql and "_holds" in sql, on) for sql, on in connection.seen
            ]
            assert psycopg2.extensions.TRANSACTION_STATUS_IDLE == connection.get_transaction_status()
            assert autocommit == connection.autocommit
            after = query(postgres_dsn, "SELECT expires_at FROM ilmek_holds WHERE thread_id = 'renewed'")
            assert after[0][0] > before[0][0]
    finally:
        checkpointer.close()
        pool.closeall()


def test_a_step_recorded_when_a_renewal_is_due_leaves_no_transaction_open(postgres_dsn: str) -> None:
    """A step recorded once a renewal is due renews the lease in a statement of its own, then inserts the
    step in another, each in autocommit (none in a BEGIN ... COMMIT that would keep the hold's row locked
    across round trips); both land."""
    from ilmek import START, channel, graph
    from ilmek.types import JournalEntry

    pool = psycopg2.pool.ThreadedConnectionPool(1, 1, postgres_dsn, connection_factory=_SeenConnection)
    connection = pool.getconn()
    pool.putconn(connection)
    checkpointer = PostgresCheckpointer(pool, lease_seconds=30.0)
    g = graph("due", {"log": channel.append()}).node("n", lambda s: {"log": ["x"]}).edge(START, "n").compile()
    try:
        latest = run(g, {}, thread_id="due", checkpointer=checkpointer)
        with checkpointer.hold("due") as hold:
            before = query(postgres_dsn, "SELECT expires_at FROM ilmek_holds WHERE thread_id = 'due'")
            hold._renewed -= 100.0  # a quarter of the lease has long passed: the record renews first
            assert hold.renewal_due()
            connection.seen.clear()
            checkpointer.append_journal(hold, latest.checkpoint_id, "n", JournalEntry(key="charge", value=1))
            sent = [
                ("_holds" in sql and "UPDATE" in sql, "_journals" in sql, on) for sql, on in connection.seen
            ]
            assert [(True, False, True), (False, True, True)] == sent
            assert psycopg2.extensions.TRANSACTION_STATUS_IDLE == connection.get_transaction_status()
            assert not hold.renewal_due()
            after = query(postgres_dsn, "SELECT expires_at FROM ilmek_holds WHERE thread_id = 'due'")
            assert after[0][0] > before[0][0]
            recorded = query(postgres_dsn, "SELECT count(*) FROM ilmek_journals WHERE thread_id = 'due'")
            assert [(1,)] == recorded
    finally:
        checkpointer.close()
        pool.closeall()
