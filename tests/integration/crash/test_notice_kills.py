"""Pause notices across a crash, on a SQLite file and on Postgres: a process killed (``kill -9``) inside its
``on_pause`` hook, after the pause's commit and before the notice was marked delivered, leaves the notice
in the outbox, and ``tick`` in another process delivers it once, with the same id."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ilmek import PauseNotice, pending_interrupts, tick
from ilmek.checkpoint.outbox import DELIVERY_GRACE
from ilmek.cli import open_checkpointer
from tests.support.noticeworker import approval
from tests.support.pgcluster import dsn_to_url

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """The store both processes use: a SQLite file, or a fresh Postgres database as a URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "notices.db")
    else:
        yield dsn_to_url(request.getfixturevalue("postgres_dsn"))


def test_a_notice_whose_process_died_in_the_hook_is_delivered_by_tick(
    database: str, tmp_path: pathlib.Path
) -> None:
    """The worker commits its pause, calls the hook and dies by SIGKILL in it; tick here delivers the same
    notice once the grace has passed, and never again."""
    seen = tmp_path / "seen.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    started = time.time()
    worker = subprocess.run(
        [sys.executable, "-m", "tests.support.noticeworker", database, "order-7", str(seen)],
        cwd=REPO_ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert -signal.SIGKILL == worker.returncode
    first_id = seen.read_text(encoding="utf-8")
    delivered: list[PauseNotice] = []
    with open_checkpointer(database) as checkpointer:
        (pause,) = pending_interrupts(checkpointer, "order-7")
        graph = approval(delivered.append)
        tick(graph, checkpointer, now=dt.datetime.fromtimestamp(started + DELIVERY_GRACE - 5, dt.UTC))
        assert [] == delivered  # the pausing process may still be delivering it
        later = dt.datetime.fromtimestamp(time.time() + DELIVERY_GRACE + 1, dt.UTC)
        tick(graph, checkpointer, now=later)
        assert [(first_id, "order-7", pause.id)] == [(n.id, n.thread_id, n.pending.id) for n in delivered]
        tick(graph, checkpointer, now=later + dt.timedelta(days=1))
        assert 1 == len(delivered)
