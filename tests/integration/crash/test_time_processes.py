"""Time across processes, on a SQLite file and on Postgres: a timer whose process was killed (``kill -9``)
is continued by ``tick`` in another process, and tickers in several processes at once wake each due thread
exactly once."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ilmek import pending_interrupts, run, tick
from ilmek.cli import open_checkpointer
from tests.support.pgcluster import dsn_to_url
from tests.support.timeworker import DUE, sleeper

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """The store the processes share: a SQLite file, or a fresh Postgres database as a URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "time.db")
    else:
        yield dsn_to_url(request.getfixturevalue("postgres_dsn"))


def _worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.timeworker", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _lines(effects: pathlib.Path) -> list[str]:
    return effects.read_text(encoding="utf-8").splitlines() if effects.exists() else []


def test_a_timer_of_a_killed_process_is_continued_by_tick_elsewhere(
    database: str, tmp_path: pathlib.Path
) -> None:
    """The sleeping run commits its timer pause; its process is killed with SIGKILL; tick in this process
    continues the thread once due, and the step before the sleep never runs again."""
    effects = tmp_path / "effects.txt"
    with _worker("sleep", database, "nap", str(effects)) as sleeping:
        try:
            assert sleeping.stdout is not None
            assert {"status": "interrupted"} == json.loads(sleeping.stdout.readline())
        finally:
            sleeping.send_signal(signal.SIGKILL)
            sleeping.wait(30)
    assert -signal.SIGKILL == sleeping.returncode
    with open_checkpointer(database) as checkpointer:
        (pause,) = pending_interrupts(checkpointer, "nap")
        assert ("timer", DUE) == (pause.kind, pause.deadline)
        (woke,) = tick(sleeper(str(effects)), checkpointer, now=DUE)
        assert ("done", ["woke"]) == (woke.status, woke.state["log"])
    assert ["nap before", "nap after"] == _lines(effects)


def test_tickers_in_three_processes_wake_each_thread_once(database: str, tmp_path: pathlib.Path) -> None:
    """Three tick processes started together over six due timers: every thread is woken by exactly one
    of them, and every step after a sleep runs once."""
    effects = tmp_path / "effects.txt"
    with open_checkpointer(database) as checkpointer:
        for n in range(6):
            assert (
                "interrupted"
                == run(sleeper(str(effects)), {}, thread_id=f"t{n}", checkpointer=checkpointer).status
            )
    tickers = [_worker("tick", database, str(effects)) for _ in range(3)]
    woke: list[str] = []
    for ticker in tickers:
        out, _ = ticker.communicate(timeout=90)
        assert 0 == ticker.returncode
        report = json.loads(out)
        assert all(status == "done" for status in report["status"])
        woke.extend(report["woke"])
    assert [f"t{n}" for n in range(6)] == sorted(woke)
    assert sorted([f"t{n} before" for n in range(6)] + [f"t{n} after" for n in range(6)]) == sorted(
        _lines(effects)
    )
