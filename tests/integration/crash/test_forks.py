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


def _event() -> Any:
    import threading

    return threading.Event()


_ = open_store
