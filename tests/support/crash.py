"""Crash-worker processes and what the crash tests read straight from the database.

A ``Worker`` is one ``python -m tests.support.crashworker`` process and the
JSON lines it announces; ``Workers`` starts them for one test and kills any
still running at its end (the ``workers`` fixture, used by the crash tests and
the operations commands' tests). The helpers speak both a SQLite file and a
``postgresql://`` URL, the worker's ``--db`` targets.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from ilmek import Checkpoint, Checkpointer, ThreadBusyError
from tests.support.crashworker import LEASE_SECONDS, is_postgres

T = TypeVar("T")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# Generous: the machine is small and shared, and a timeout only bounds a failure.
STARTUP_SECONDS = 30.0
FINISH_SECONDS = 60.0
BUSY_RETRY_SECONDS = 20 * LEASE_SECONDS


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


@pytest.fixture(name="workers")
def workers_fixture(tmp_path: pathlib.Path) -> Iterator[Workers]:
    """Worker processes for one test; any still running at the end are killed."""
    pool = Workers(tmp_path)
    try:
        yield pool
    finally:
        pool.close()
