"""os.fork() of a process that holds threads: the child never renews, confirms or gives back its parent's
holds, and its own runs work through connections of its own (gunicorn --preload, multiprocessing and
Celery prefork all fork).

The worker (``tests/support/forkworker.py``) holds a thread inside a long step, forks, and its child
runs threads of its own; the test then kills the parent and watches the parent's thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ilmek import ThreadBusyError, run
from tests.support.forkworker import lingering_graph, open_store
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(90)

LEASE = 1.0


class Forked:
    """The worker and its child, killed (both) at the end."""

    def __init__(self, store: Store, thread_id: str) -> None:
        target = str(store.path) if store.kind == "sqlite" else store.dsn
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkworker", store.kind, target, thread_id, str(LEASE)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=os.getcwd(),
        )
        self.events: dict[str, dict[str, Any]] = {}
        while not {"forked", "child"} <= set(self.events):
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"the worker ended early: {self.process.communicate(timeout=10)[1]}")
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            self.events[event["event"]] = event

    @property
    def child(self) -> int:
        return int(self.events["child"]["pid"])

    def kill_parent(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def close(self) -> None:
        for pid in (self.child, self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.communicate(timeout=30)


@pytest.fixture
def forked(store: Store) -> Iterator[Forked]:
    if store.kind == "sqlite":
        from ilmek.checkpoint.sqlite import SqliteCheckpointer

        SqliteCheckpointer(store.path).close()
    worker = Forked(store, "parents")
    try:
        yield worker
    finally:
        worker.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_forked_child_never_keeps_its_parents_thread_held(store: Store, forked: Forked) -> None:
    """The parent, holding a thread inside a step, forks; its child runs threads of its own (so a hold
    keeper runs in the child); then the parent is killed. The parent's thread frees up when its lease
    lapses although the child lives on: the child never renews a hold it inherited."""
    assert "done" == forked.events["child"]["status"]
    mine = store.open(lease_seconds=LEASE)
    with pytest.raises(ThreadBusyError):
        run(lingering_graph(_event(), 0.0), None, thread_id="parents", checkpointer=mine)
    forked.kill_parent()
    killed = time.monotonic()
    while True:
        try:
            result = run(lingering_graph(_event(), 0.0), None, thread_id="parents", checkpointer=mine)
            break
        except ThreadBusyError:
            assert time.monotonic() - killed < LEASE + 5, "the parent's thread stayed held after its death"
            time.sleep(0.05)
    assert alive(forked.child), "the child died: the test proved nothing"
    assert ("done", ["in", "woke"]) == (result.status, result.state["log"])
    # The child's own threads are still its own: its lingering run keeps its hold.
    with pytest.raises(ThreadBusyError):
        run(lingering_graph(_event(), 0.0), None, thread_id="parents-child2", checkpointer=mine)


def test_a_hold_copied_into_a_child_refuses_every_write(tmp_path: Any) -> None:
    """In a forked child, a hold of the parent's is inherited: renewing it is a lost hold, and giving it
    back deletes nothing (the parent's row stays the parent's)."""
    script = f"""
import json, os, sys
sys.path.insert(0, {os.getcwd()!r})
from ilmek import HoldLostError
from tests.support.forkworker import open_store
cp = open_store("sqlite", {str(tmp_path / "f.db")!r}, 30.0)
with cp.hold("t") as hold:
    child = os.fork()
    if child == 0:
        try:
            try:
                hold.renew()
                renewed = True
            except HoldLostError:
                renewed = False
            hold.release()
            print(json.dumps({{"inherited": hold.inherited, "renewed": renewed}}), flush=True)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    import sqlite3
    reader = sqlite3.connect({str(tmp_path / "f.db")!r})
    rows = reader.execute("SELECT count(*) FROM ilmek_holds").fetchone()[0]
    print(json.dumps({{"rows": rows}}), flush=True)
"""
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert 0 == finished.returncode, finished.stderr
    lines = [json.loads(line) for line in finished.stdout.splitlines()]
    assert {"inherited": True, "renewed": False} == lines[0]
    assert {"rows": 1} == lines[-1]


_HOLDS_A_LOCK_THEN_FORKS = """
import json, os, sys, time
sys.path.insert(0, {cwd!r})
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.dbapi import Statement
client = {client!r}
if client == "psycopg2-pool":
    import psycopg2.pool
    source = psycopg2.pool.ThreadedConnectionPool(1, 2, {dsn!r})
elif client == "psycopg2-connection":
    import psycopg2
    source = psycopg2.connect({dsn!r})
elif client == "psycopg-connection":
    import psycopg
    source = psycopg.connect({dsn!r})
elif client == "psycopg-pool":
    import psycopg_pool
    source = psycopg_pool.ConnectionPool({dsn!r}, min_size=1, max_size=2, open=True)
else:
    import sqlalchemy
    from tests.support.pgcluster import dsn_to_url
    url = dsn_to_url({dsn!r}).replace("postgresql://", "postgresql+psycopg2://", 1)
    source = sqlalchemy.create_engine(url)
checkpointer = PostgresCheckpointer(source)
# One of ilmek's own transactions, open when the process forks (as a hold's renewal may be).
with checkpointer._adapter.transaction() as session:
    session.query(Statement("SELECT pg_advisory_xact_lock(4242)"))
    child = os.fork()
    if child == 0:
        time.sleep(600)
        os._exit(0)
    print(json.dumps({{"child": child}}), flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(
    "client",
    ["psycopg2-pool", "psycopg-pool", "sqlalchemy-engine", "psycopg2-connection", "psycopg-connection"],
)
def test_a_parent_killed_inside_a_transaction_frees_its_locks_while_its_child_lives(
    postgres_dsn: str, client: str
) -> None:
    """The server ends a killed client's transaction when its socket closes; a forked child's copy of
    that socket must not keep it open (and the thread's hold row locked) for as long as the child lives."""
    import psycopg2

    script = _HOLDS_A_LOCK_THEN_FORKS.format(cwd=os.getcwd(), client=client, dsn=postgres_dsn)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, "the script ended early"
        child = int(json.loads(line)["child"])
        probe = psycopg2.connect(postgres_dsn)
        probe.autocommit = True
        try:
            with probe.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(4242)")
                assert (False,) == cursor.fetchone(), "the parent's transaction should hold the lock"
                parent.send_signal(signal.SIGKILL)
                parent.wait(timeout=30)
                killed = time.monotonic()
                while True:
                    cursor.execute("SELECT pg_try_advisory_lock(4242)")
                    if cursor.fetchone() == (True,):
                        break
                    assert time.monotonic() - killed < 20, "the dead parent's lock lived on in its child"
                    time.sleep(0.05)
        finally:
            probe.close()
        assert alive(child), "the child died: the test proved nothing"
    finally:
        for pid in (child, parent.pid):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        parent.communicate(timeout=30)


def _event() -> Any:
    import threading

    return threading.Event()


_ = open_store
