"""Crashes and races, for real: workers killed with SIGKILL, processes racing for one thread.

The workers are ``tests/support/crashworker.py`` in subprocesses; their step
functions count every real execution in an effects file outside the
database, so "ran once" is checked against what happened, not against what
the database says. The tests that tamper with the database (a foreign schema
version, a forged type tag, a value that cannot be stored) need no second
process and run in this one.

Every test takes its database from ``crash_db``, a ``--db`` target for the
worker: today a SQLite file. Its ``"postgres"`` branch (a fresh database, as
a ``postgresql://`` URL) is ready: adding the param runs them all on
Postgres, and the helpers here already speak both.

``ILMEK_CRASH_ROUNDS`` sets how many kill rounds the kill -9 test runs (8 by
default) and ``ILMEK_CRASH_SEED`` its first seed, to replay a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import random
import select
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from ilmek import (
    END,
    START,
    Checkpoint,
    Checkpointer,
    CompiledGraph,
    ResumeError,
    SchemaVersionError,
    SerializationError,
    ThreadBusyError,
    channel,
    graph,
    history,
    pending_interrupts,
    resume,
    run,
    stream,
    thread_state,
)
from ilmek.events import CheckpointEvent, Event, RunEnd
from tests.support.crashworker import (
    INPUTS,
    LEASE_SECONDS,
    LOOP_ROUNDS,
    Effects,
    checkout_graph,
    is_postgres,
    loop_graph,
    open_target,
    slow_graph,
)

pytestmark = pytest.mark.timeout(90)

T = TypeVar("T")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
KILL_ROUNDS = int(os.environ.get("ILMEK_CRASH_ROUNDS", "8"))
FIRST_SEED = int(os.environ.get("ILMEK_CRASH_SEED", "7001"))
MAX_KILLS_PER_ROUND = 3
# After the chosen effect line appears, the kill waits up to this long more,
# so that kills also land inside journal writes and checkpoint commits.
KILL_JITTER_SECONDS = 0.015
RACE_ROUNDS = 5
# Generous: the machine is small and shared, and a timeout only bounds a failure.
STARTUP_SECONDS = 30.0
FINISH_SECONDS = 60.0
BUSY_RETRY_SECONDS = 20 * LEASE_SECONDS


# --- the database -----------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def crash_db(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """A ``--db`` target on a fresh, empty database, one per backend."""
    if request.param == "sqlite":
        yield str(tmp_path / "crash.db")
    elif request.param == "postgres":
        from tests.support.pgcluster import dsn_to_url

        # The worker takes a URL; the fixture gives a fresh cloned database as a DSN.
        yield dsn_to_url(request.getfixturevalue("postgres_dsn"))
    else:
        raise AssertionError(f"no database for crash_db param {request.param!r}")


@pytest.fixture
def lease_db(tmp_path: pathlib.Path) -> str:
    """A database whose holds are leases (SQLite): what a frozen holder can outlive."""
    return str(tmp_path / "crash.db")


@pytest.fixture
def crash_checkpointer(crash_db: str) -> Iterator[Checkpointer]:
    """This process's checkpointer on ``crash_db`` (the workers open their own)."""
    checkpointer = open_target(crash_db)
    try:
        yield checkpointer
    finally:
        checkpointer.close()


def holds_by_lease(target: str) -> bool:
    """Whether a dead holder keeps its thread until a lease lapses (rather than at once)."""
    return not is_postgres(target)


def direct_sql(target: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement straight on the database and commit, as an operator (or an attacker) would.

    ``sql`` uses ``?`` placeholders.
    """
    if is_postgres(target):
        import psycopg

        with psycopg.connect(target, autocommit=True) as connection:
            # No parameters, no placeholder parsing: a LIKE pattern keeps its % as it is.
            cursor = connection.execute(sql.replace("?", "%s") if params else sql, params or None)
            return cursor.fetchall() if cursor.description is not None else []
    database = sqlite3.connect(target, timeout=30)
    try:
        with database:
            return database.execute(sql, params).fetchall()
    finally:
        database.close()


def assert_database_intact(target: str) -> None:
    """The database is undamaged and every ilmek table reads to the end."""
    if is_postgres(target):
        # A client killed mid-transaction cannot damage a Postgres database;
        # what is left to check is that every table still reads.
        listing = "SELECT tablename FROM pg_tables WHERE tablename LIKE 'ilmek\\_%'"
    else:
        assert [("ok",)] == direct_sql(target, "PRAGMA integrity_check")
        listing = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ilmek\\_%' ESCAPE '\\'"
    tables = [name for (name,) in direct_sql(target, listing)]
    assert "ilmek_checkpoints" in tables
    for table in tables:
        direct_sql(target, f"SELECT count(*) FROM {table}")


def leftovers(target: str, thread_id: str) -> list[tuple[Any, ...]]:
    """Journal rows and lease rows a finished thread should not have.

    Steps recorded before a pause stay while that pause checkpoint is kept (a
    fork from it replays them), and so do a pause's answers and what its task
    did after them (readable history); every other journal row is gone once
    its superstep committed.
    """
    chains = stored_json(target, "SELECT journal_chain FROM ilmek_checkpoints WHERE thread_id = ?", thread_id)
    pauses = [
        checkpoint_id
        for checkpoint_id, pending in direct_sql(
            target, "SELECT checkpoint_id, pending FROM ilmek_checkpoints WHERE thread_id = ?", thread_id
        )
        if (json.loads(pending) if isinstance(pending, str) else pending)
    ]
    inherited = {base for chain in chains for base in chain} | set(pauses)
    found = [
        ("journal", base_id, task_key)
        for base_id, task_key in direct_sql(
            target, "SELECT base_id, task_key FROM ilmek_journals WHERE thread_id = ?", thread_id
        )
        if base_id not in inherited
    ]
    if holds_by_lease(target):
        found += direct_sql(target, "SELECT 'hold', owner FROM ilmek_holds WHERE thread_id = ?", thread_id)
    return found


def stored_json(target: str, sql: str, *params: Any) -> list[Any]:
    """The JSON values a query returns, parsed (a JSONB column comes back parsed already)."""
    return [
        json.loads(value) if isinstance(value, str) else value
        for (value,) in direct_sql(target, sql, *params)
    ]


def status_of(checkpointer: Checkpointer, thread_id: str) -> str | None:
    """The thread's status as the host API lists it (``None``: no such thread)."""
    info = checkpointer.get_thread(thread_id)
    return info.status if info is not None else None


def latest_id(checkpointer: Checkpointer, thread_id: str) -> str | None:
    """The id of the thread's latest checkpoint (``None``: it has none)."""
    latest = checkpointer.get(thread_id)
    return latest.id if latest is not None else None


def assert_consistent_tree(checkpoints: Sequence[Checkpoint]) -> None:
    """One root; every parent exists; ids grow and steps count up by one along each branch.

    A pause checkpoint keeps its parent's step (the superstep it paused has not run).
    """
    by_id = {c.id: c for c in checkpoints}
    assert len(checkpoints) == len(by_id), "checkpoint ids repeat"
    assert 1 == sum(c.parent_id is None for c in checkpoints), "a thread has exactly one root"
    for checkpoint in checkpoints:
        if checkpoint.parent_id is None:
            continue
        parent = by_id.get(checkpoint.parent_id)
        assert parent is not None, f"checkpoint {checkpoint.id} names a missing parent"
        assert checkpoint.id > parent.id, f"checkpoint {checkpoint.id} sorts before its parent"
        expected_step = parent.step if checkpoint.metadata.get("source") == "pause" else parent.step + 1
        assert expected_step == checkpoint.step, f"checkpoint {checkpoint.id} skips or repeats a step"


def retry_while_busy(action: Callable[[], T], timeout: float = BUSY_RETRY_SECONDS) -> T:
    """Call ``action`` until it stops raising ThreadBusyError (a dead holder's lease lapsing)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except ThreadBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --- the workers ------------------------------------------------------------------------


class Worker:
    """One ``tests.support.crashworker`` process, and the JSON lines it announces on stdout."""

    def __init__(self, arguments: Sequence[str], stderr_path: pathlib.Path) -> None:
        self.arguments = list(arguments)
        self.stderr_path = stderr_path
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.crashworker", *self.arguments],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self._pending = b""

    def alive(self) -> bool:
        return self.process.poll() is None

    def _describe(self) -> str:
        stderr = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        return f"worker {self.arguments} (exit {self.process.poll()}); stderr:\n{stderr}"

    def _next_announcement(self, deadline: float) -> dict[str, Any] | None:
        """The next line the worker announced, or None once its stdout is closed."""
        assert self.process.stdout is not None
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {self._describe()}")
            readable, _, _ = select.select([descriptor], [], [], remaining)
            if readable:
                chunk = os.read(descriptor, 65536)
                if not chunk:
                    return None
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        announcement: dict[str, Any] = json.loads(line)
        return announcement

    def expect(self, event: str, timeout: float = STARTUP_SECONDS) -> dict[str, Any]:
        """Read announcements until ``event``; fail if the worker ends or reports an outcome first."""
        deadline = time.monotonic() + timeout
        while True:
            announcement = self._next_announcement(deadline)
            if announcement is None:
                raise AssertionError(f"expected {event!r}, but stdout closed: {self._describe()}")
            if announcement["event"] == event:
                return announcement
            if announcement["event"] == "outcome":
                raise AssertionError(f"expected {event!r}, got outcome {announcement}: {self._describe()}")

    def finish(self, timeout: float = FINISH_SECONDS) -> dict[str, Any]:
        """The outcome the worker reports, once it exited cleanly."""
        outcome = self.expect("outcome", timeout)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"reported {outcome} but did not exit: {self._describe()}") from None
        assert 0 == self.process.returncode, self._describe()
        return outcome

    def kill(self) -> bool:
        """SIGKILL the worker; True if the signal is what ended it (it had not exited already)."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(FINISH_SECONDS)
        return -signal.SIGKILL == self.process.returncode

    def close(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(FINISH_SECONDS)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Workers:
    """Starts workers for one test and makes sure none outlives it."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.started: list[Worker] = []

    def spawn(self, graph_name: str, action: str, **options: Any) -> Worker:
        """Start ``python -m tests.support.crashworker graph action --option value...``."""
        arguments = [graph_name, action]
        for name, value in options.items():
            arguments += [f"--{name.replace('_', '-')}", str(value)]
        worker = Worker(arguments, self.folder / f"worker-{len(self.started)}.stderr")
        self.started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.started:
            worker.close()


@pytest.fixture
def workers(tmp_path: pathlib.Path) -> Iterator[Workers]:
    """Worker processes for one test; any still running at the end are killed."""
    pool = Workers(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


# --- 1. kill -9 at random points -----------------------------------------------------------


def uninterrupted_loop(folder: pathlib.Path) -> tuple[Any, list[str]]:
    """The state and the effects of the loop graph run once, start to end, without a crash."""
    effects = Effects(folder / "uninterrupted.effects")
    result = run(loop_graph(effects), INPUTS["loop"])
    assert "done" == result.status
    return result.state, effects.lines()


def kill_at_random_points(
    workers: Workers, target: str, thread_id: str, effects: Effects, seed: int
) -> list[str]:
    """Run the loop on ``thread_id``, SIGKILLing workers at random points until one finishes.

    The first worker is always killed, later ones at random (at most
    ``MAX_KILLS_PER_ROUND`` kills). A kill waits for a random number of new
    effect lines and then a random jitter, so it lands wherever the run has
    got to, whatever the machine's speed.

    Returns:
        The last effect line (or ``""``) at each kill: the one step that may
        have been in flight, taken effect but not yet recorded.
    """
    rng = random.Random(seed)
    kills: list[str] = []
    for launch in range(MAX_KILLS_PER_ROUND + 1):
        done_before = effects.lines()
        worker = workers.spawn(
            "loop",
            "start" if launch == 0 else "continue",
            db=target,
            thread=thread_id,
            effects=effects.path,
            wait_busy=BUSY_RETRY_SECONDS,
        )
        kill = len(kills) < MAX_KILLS_PER_ROUND and (launch == 0 or rng.random() < 0.5)
        new_lines = rng.randint(0, 2 * LOOP_ROUNDS - len(set(done_before)))
        jitter = rng.uniform(0, KILL_JITTER_SECONDS)
        worker.expect("started")
        if kill:
            deadline = time.monotonic() + FINISH_SECONDS
            while worker.alive() and len(effects.lines()) < len(done_before) + new_lines:
                assert time.monotonic() < deadline, f"seed {seed}: the worker made no progress"
                time.sleep(0.002)
            time.sleep(jitter)
            if worker.kill():
                lines = effects.lines()
                kills.append(lines[-1] if lines else "")
                continue
        outcome = worker.finish()
        assert "done" == outcome["outcome"], f"seed {seed}: {outcome}"
        return kills
    raise AssertionError(f"seed {seed}: the last worker was not to be killed, yet the loop went on")


@pytest.mark.slow
@pytest.mark.timeout(60 + 20 * KILL_ROUNDS)
def test_kill_9_at_random_points_loses_nothing_and_repeats_only_the_step_in_flight(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """Runs killed at random points, then continued, end exactly as an uninterrupted run did.

    Each effect happens once, except that a kill may repeat the one step in
    flight (its effect happened, its record was not yet durable); the
    history is one consistent chain and the database stays intact.
    """
    expected_state, expected_effects = uninterrupted_loop(tmp_path)
    assert 2 * LOOP_ROUNDS == len(expected_effects)
    reader = loop_graph(Effects(os.devnull))
    all_kills = 0
    for seed in range(FIRST_SEED, FIRST_SEED + KILL_ROUNDS):
        thread_id = f"loop-{seed}"
        effects = Effects(tmp_path / f"{thread_id}.effects")
        kills = kill_at_random_points(workers, crash_db, thread_id, effects, seed)
        all_kills += len(kills)
        context = f"seed {seed}, effects at kills {kills}"

        assert "done" == status_of(crash_checkpointer, thread_id), context
        assert expected_state == thread_state(reader, crash_checkpointer, thread_id), context
        lines = effects.lines()
        assert expected_effects == list(dict.fromkeys(lines)), context
        counts = Counter(lines)
        in_flight = Counter(kills)
        assert {} == {key: n for key, n in counts.items() if n > 1 + in_flight[key]}, context
        assert len(lines) - len(counts) <= len(kills), context

        checkpoints = history(crash_checkpointer, thread_id)
        assert_consistent_tree(checkpoints)
        chain = list(reversed(checkpoints))
        assert list(range(LOOP_ROUNDS + 1)) == [c.step for c in chain], context
        assert ["input"] + ["loop"] * LOOP_ROUNDS == [c.metadata["source"] for c in chain], context
        assert [] == leftovers(crash_db, thread_id), context
    # Not a timing bound: the seeds decide where kills go, and only a run that
    # outpaces its whole kill window escapes one.
    assert all_kills >= KILL_ROUNDS // 2
    assert_database_intact(crash_db)


# --- 2. two processes resume one pause -------------------------------------------------------


@pytest.mark.slow
def test_two_processes_answering_one_pause_at_once_charge_exactly_once(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """Two workers resume one paused checkout at the same moment: one finishes, the other is busy.

    The winner stays inside the charge until the loser has reported, so the
    two runs always overlap and the hold alone decides the race (a loser
    arriving after the winner finished would get a ResumeError instead: the
    third, late answer checks that).
    """
    for round_ in range(RACE_ROUNDS):
        thread_id = f"race-{round_}"
        effects = Effects(tmp_path / f"{thread_id}.effects")
        paused = run(
            checkout_graph(effects), INPUTS["checkout"], thread_id=thread_id, checkpointer=crash_checkpointer
        )
        assert "interrupted" == paused.status
        go = tmp_path / f"{thread_id}.go"
        reports = [tmp_path / f"{thread_id}-{side}.json" for side in ("a", "b")]
        rivals = [
            workers.spawn(
                "checkout",
                "resume",
                db=crash_db,
                thread=thread_id,
                effects=effects.path,
                answer="yes",
                go_file=go,
                outcome_file=reports[side],
                wait_at="charging",
                wait_for=reports[1 - side],
            )
            for side in (0, 1)
        ]
        for rival in rivals:
            rival.expect("ready")
        go.touch()
        outcomes = sorted((rival.finish() for rival in rivals), key=lambda outcome: outcome["outcome"])

        assert ["busy", "done"] == [outcome["outcome"] for outcome in outcomes], f"round {round_}"
        assert repr(thread_id) in outcomes[0]["message"]
        assert {"cart": ["coffee", "mug"], "log": ["charged"]} == outcomes[1]["state"]
        assert Counter({"create_order": 1, "charge:yes": 1}) == Counter(effects.lines()), f"round {round_}"
        # A third answer arriving after the winner finished finds nothing to answer.
        with pytest.raises(ResumeError, match="not interrupted"):
            resume(checkout_graph(effects), "yes", thread_id=thread_id, checkpointer=crash_checkpointer)
        assert 1 == effects.lines().count("charge:yes")
        assert_consistent_tree(history(crash_checkpointer, thread_id))
        assert [] == leftovers(crash_db, thread_id)
    assert_database_intact(crash_db)


@pytest.mark.slow
def test_processes_opening_a_new_database_at_once_all_create_it_and_run(
    crash_db: str, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """Workers opening one brand-new database at the same moment all get its schema and finish their runs."""
    go = tmp_path / "go"
    effects = Effects(tmp_path / "boot.effects")
    booting = [
        workers.spawn("slow", "start", db=crash_db, thread=f"boot-{n}", effects=effects.path, go_file=go)
        for n in range(3)
    ]
    for worker in booting:
        worker.expect("ready")
    go.touch()

    assert ["done"] * 3 == [worker.finish()["outcome"] for worker in booting]
    assert Counter({"prepare": 3, "finish": 3}) == Counter(effects.lines())
    with open_target(crash_db) as checkpointer:
        expected_version = checkpointer.schema_version  # type: ignore[attr-defined]
        assert ["done"] * 3 == [status_of(checkpointer, f"boot-{n}") for n in range(3)]
    assert [(str(expected_version),)] == direct_sql(
        crash_db, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'"
    )
    assert_database_intact(crash_db)


# --- 3. a killed holder ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_holder_blocks_the_thread_only_until_its_lease_lapses(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """A live holder keeps its thread past its lease; killed, it blocks only until the lease lapses.

    The continuation then replays the step the killed holder recorded.
    """
    thread_id = "held by the dead"
    effects = Effects(tmp_path / "slow.effects")
    holder = workers.spawn(
        "slow", "start", db=crash_db, thread=thread_id, effects=effects.path, linger_at="prepared"
    )
    holder.expect("lingering")
    continuation = slow_graph(effects)
    # Alive, the holder renews its hold however long its node takes.
    time.sleep(2.5 * LEASE_SECONDS)
    with pytest.raises(ThreadBusyError):
        run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
    assert holder.kill()

    if holds_by_lease(crash_db):
        with pytest.raises(ThreadBusyError) as busy:
            run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
        assert thread_id == busy.value.thread_id
        assert repr(thread_id) in str(busy.value)
    finished = retry_while_busy(
        lambda: run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
    )

    assert "done" == finished.status
    assert {"log": ["begun", "prepared", "finished"]} == finished.state
    assert ["prepare", "finish"] == effects.lines()
    assert [] == leftovers(crash_db, thread_id)


@pytest.mark.slow
def test_a_holder_frozen_past_its_lease_writes_nothing_when_it_wakes(
    lease_db: str, workers: Workers, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """A holder stopped (SIGSTOP) while another run took and finished the thread is fenced off on waking.

    Only leases can lapse under a live process: a Postgres session lock stays with its frozen holder.
    """
    crash_db = lease_db
    crash_checkpointer = open_target(crash_db)
    request.addfinalizer(crash_checkpointer.close)
    thread_id = "frozen holder"
    effects = Effects(tmp_path / "slow.effects")
    wake = tmp_path / "wake"
    sleeper = workers.spawn(
        "slow",
        "start",
        db=crash_db,
        thread=thread_id,
        effects=effects.path,
        wait_at="prepared",
        wait_for=wake,
    )
    sleeper.expect("waiting")
    sleeper.process.send_signal(signal.SIGSTOP)
    try:
        continuation = slow_graph(effects)
        finished = retry_while_busy(
            lambda: run(continuation, None, thread_id=thread_id, checkpointer=crash_checkpointer)
        )
        assert "done" == finished.status
        written = [c.id for c in history(crash_checkpointer, thread_id)]
        wake.touch()
    finally:
        sleeper.process.send_signal(signal.SIGCONT)
    outcome = sleeper.finish()

    assert outcome["outcome"] in ("busy", "error"), outcome
    assert "busy" == outcome["outcome"] or "ThreadBusyError" in str(outcome["errors"]), outcome
    assert written == [c.id for c in history(crash_checkpointer, thread_id)]
    assert {"log": ["begun", "prepared", "finished"]} == thread_state(
        continuation, crash_checkpointer, thread_id
    )
    assert 1 == effects.lines().count("prepare")
    assert [] == leftovers(crash_db, thread_id)


# --- 4. kill -9 during a resume -----------------------------------------------------------------


@pytest.mark.slow
def test_a_resume_killed_after_charging_finishes_with_the_same_answer_without_charging_again(
    crash_db: str, crash_checkpointer: Checkpointer, workers: Workers, tmp_path: pathlib.Path
) -> None:
    """A resume killed after its charge: another answer is refused, the same answer finishes, one charge."""
    thread_id = "killed mid-resume"
    effects = Effects(tmp_path / "checkout.effects")
    checkout = checkout_graph(effects)
    paused = run(checkout, INPUTS["checkout"], thread_id=thread_id, checkpointer=crash_checkpointer)
    assert "interrupted" == paused.status
    resumer = workers.spawn(
        "checkout",
        "resume",
        db=crash_db,
        thread=thread_id,
        effects=effects.path,
        answer="yes",
        linger_at="charged",
    )
    resumer.expect("lingering")
    assert resumer.kill()
    assert ["create_order", "charge:yes"] == effects.lines()

    with pytest.raises(ResumeError) as refused:
        retry_while_busy(lambda: resume(checkout, "no", thread_id=thread_id, checkpointer=crash_checkpointer))
    assert "already answered" in str(refused.value)
    assert repr(thread_id) in str(refused.value)
    assert ["create_order", "charge:yes"] == effects.lines()
    assert paused.checkpoint_id == latest_id(crash_checkpointer, thread_id)
    assert [p.id for p in paused.pending] == [p.id for p in pending_interrupts(crash_checkpointer, thread_id)]

    finished = retry_while_busy(
        lambda: resume(checkout, "yes", thread_id=thread_id, checkpointer=crash_checkpointer)
    )
    assert "done" == finished.status
    assert {"cart": ["coffee", "mug"], "log": ["charged"]} == finished.state
    assert ["create_order", "charge:yes"] == effects.lines()
    assert_consistent_tree(history(crash_checkpointer, thread_id))
    assert [] == leftovers(crash_db, thread_id)


# --- 5. a foreign schema version ----------------------------------------------------------------


def open_and_read(target: str) -> None:
    """Open the database and read from it (a backend may check the schema on open or on first use)."""
    with open_target(target) as checkpointer:
        checkpointer.get("any thread")


def test_a_database_at_another_schema_version_is_refused_with_what_to_do(crash_db: str) -> None:
    """A schema_version edited to 999 is a SchemaVersionError naming found, expected and the remedy."""
    checkpointer = open_target(crash_db)
    expected = checkpointer.schema_version  # type: ignore[attr-defined]
    checkpointer.close()
    direct_sql(crash_db, "UPDATE ilmek_meta SET value = '999' WHERE key = 'schema_version'")

    with pytest.raises(SchemaVersionError) as refused:
        open_and_read(crash_db)

    assert (999, expected) == (refused.value.found, refused.value.expected)
    message = str(refused.value)
    assert "version 999" in message
    assert f"version {expected}" in message
    assert "upgrade ilmek" in message
    assert [("999",)] == direct_sql(crash_db, "SELECT value FROM ilmek_meta WHERE key = 'schema_version'")


# --- 6. a forged type tag -----------------------------------------------------------------------

MARKER_MODULE = "ilmek_forged_marker"


def forged_values(marker: pathlib.Path) -> dict[str, Any]:
    """Stored values naming something that, were it imported or called, would write ``marker``."""
    shell = f"echo forged > {shlex.quote(str(marker))}"
    return {
        "module-on-path": {"__ilmek__": "obj", "type": f"{MARKER_MODULE}.Evil", "v": {}},
        "popen": {"__ilmek__": "obj", "type": "subprocess.Popen", "v": {"args": ["/bin/sh", "-c", shell]}},
        "os-system": {"__ilmek__": "enum", "type": "os.system", "v": shell},
    }


@pytest.fixture
def marker(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """A file that appears if a forged value imports or calls anything; its module is importable."""
    marker_file = tmp_path / "marker"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / f"{MARKER_MODULE}.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker_file)!r}).write_text('imported')\n"
        "class Evil:\n"
        "    def __init__(self, **fields):\n"
        f"        pathlib.Path({str(marker_file)!r}).write_text('called')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(modules))
    # Importable, so a decoder that imported names would have found it.
    assert importlib.util.find_spec(MARKER_MODULE) is not None
    yield marker_file
    sys.modules.pop(MARKER_MODULE, None)


def fragile_graph(effects: Effects, behaviour: dict[str, str]) -> CompiledGraph:
    """One node: step ``pay``, then per ``behaviour["mode"]`` raise, return ``object()``, or succeed."""

    def settle(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        receipt = ctx.step("pay", effects.perform, "pay", "receipt-1")
        if behaviour["mode"] == "raise":
            raise RuntimeError("the node broke after paying")
        if behaviour["mode"] == "unstorable":
            return {"result": object()}
        return {"result": receipt}

    return (
        graph("crash-fragile", {"result": channel.last_write(None), "log": channel.append()})
        .node("settle", settle)
        .edge(START, "settle")
        .edge("settle", END)
        .compile()
    )


@pytest.mark.parametrize("forgery", ["module-on-path", "popen", "os-system"])
def test_a_forged_type_tag_in_a_channel_imports_and_runs_nothing(
    crash_db: str, marker: pathlib.Path, tmp_path: pathlib.Path, forgery: str
) -> None:
    """A channel value edited to name a class or function is a SerializationError; nothing imported or run."""
    effects = Effects(tmp_path / "checkout.effects")
    checkout = checkout_graph(effects)
    with open_target(crash_db) as writer:
        paused = run(checkout, INPUTS["checkout"], thread_id="forged", checkpointer=writer)
    assert "interrupted" == paused.status
    forged = json.dumps(forged_values(marker)[forgery])
    direct_sql(
        crash_db, "UPDATE ilmek_blobs SET value = ? WHERE thread_id = 'forged' AND channel = 'cart'", forged
    )
    assert [json.loads(forged)] == stored_json(
        crash_db, "SELECT value FROM ilmek_blobs WHERE channel = 'cart'"
    )

    # A fresh checkpointer: nothing decoded before the edit is cached.
    with open_target(crash_db) as reader:
        with pytest.raises(SerializationError):
            thread_state(checkout, reader, "forged")
        with pytest.raises(SerializationError):
            resume(checkout, "yes", thread_id="forged", checkpointer=reader)

    assert not marker.exists()
    assert MARKER_MODULE not in sys.modules
    assert ["create_order"] == effects.lines()


@pytest.mark.parametrize("forgery", ["module-on-path", "popen", "os-system"])
def test_a_forged_type_tag_in_a_journal_imports_and_runs_nothing(
    crash_db: str, marker: pathlib.Path, tmp_path: pathlib.Path, forgery: str
) -> None:
    """A journal entry edited to name a class or function is a SerializationError; nothing imported or run."""
    effects = Effects(tmp_path / "fragile.effects")
    behaviour = {"mode": "raise"}
    fragile = fragile_graph(effects, behaviour)
    with open_target(crash_db) as writer:
        failed = run(fragile, {"log": ["begun"]}, thread_id="forged", checkpointer=writer)
    assert "error" == failed.status
    entry = json.dumps({"key": "pay#0", "kind": "step", "value": forged_values(marker)[forgery]})
    direct_sql(crash_db, "UPDATE ilmek_journals SET entry = ? WHERE thread_id = 'forged'", entry)
    assert [json.loads(entry)] == stored_json(crash_db, "SELECT entry FROM ilmek_journals")

    behaviour["mode"] = "succeed"
    with open_target(crash_db) as reader, pytest.raises(SerializationError):
        run(fragile, None, thread_id="forged", checkpointer=reader)

    assert not marker.exists()
    assert MARKER_MODULE not in sys.modules
    assert ["pay"] == effects.lines()


# --- 7. a write that fails ----------------------------------------------------------------------


def note_commits(events: Iterator[Event], committed: list[str]) -> None:
    """Consume a run's events, noting each committed checkpoint's id as it comes."""
    for event in events:
        if isinstance(event, CheckpointEvent):
            committed.append(event.id)


def test_an_unstorable_update_leaves_the_thread_at_its_previous_checkpoint(
    crash_db: str, tmp_path: pathlib.Path
) -> None:
    """A node returning object() fails its node (channel, type named); nothing moves; a fix finishes."""
    effects = Effects(tmp_path / "fragile.effects")
    behaviour = {"mode": "unstorable"}
    fragile = fragile_graph(effects, behaviour)
    committed: list[str] = []
    with open_target(crash_db) as first:
        events = list(stream(fragile, {"log": ["begun"]}, thread_id="fragile", checkpointer=first))
        note_commits(iter(events), committed)
    end = events[-1]
    assert isinstance(end, RunEnd)
    assert "error" == end.status
    ((_, refused),) = end.errors
    assert isinstance(refused, SerializationError)
    message = str(refused)
    assert "channel 'result'" in message
    assert "object" == refused.type_name
    assert "object" in message
    assert 1 == len(committed), "only the input checkpoint was committed"
    with open_target(crash_db) as second:
        assert committed == [c.id for c in history(second, "fragile")]
        assert "error" == status_of(second, "fragile")
        behaviour["mode"] = "succeed"
        finished = run(fragile, None, thread_id="fragile", checkpointer=second)
    assert "done" == finished.status
    assert {"result": "receipt-1", "log": ["begun"]} == finished.state
    assert ["pay"] == effects.lines()
    assert [] == leftovers(crash_db, "fragile")
