"""``ilmek worker``: a loop of tick (and recover) in a real process; SIGTERM mid-superstep finishes that
superstep, commits, gives the hold back and exits 0, and nothing is lost or repeated."""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import recover, run
from ilmek.checkpoint.sqlite import SqliteCheckpointer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(120)

FLOWS = """
import datetime as dt
import os
import time

from ilmek import START, channel, graph

EFFECTS = os.environ["TEST_EFFECTS"]


def note(what):
    with open(EFFECTS, "a", encoding="utf-8") as out:
        out.write(what + "\\n")
    return what


def slow():
    note("slow started")
    time.sleep(3)
    return note("slow done")


def wait(state, ctx):
    ctx.sleep("nap", until=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    ctx.step("slow", slow)
    return {"log": ["waited"]}


def finish(state, ctx):
    ctx.step("finish", note, "finish")
    return {"log": ["finished"]}


napping = (graph("napping", {"log": channel.append()}).node("wait", wait).node("finish", finish)
           .edge(START, "wait").edge("wait", "finish").compile())
"""


def _effects(path: pathlib.Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def worker_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> tuple[str, Callable[[], Any]]:
    """The store a worker sweeps (its --db argument) and how the test opens it: a SQLite file or Postgres."""
    if request.param == "sqlite":
        database = str(tmp_path / "store.db")
        return database, lambda: SqliteCheckpointer(database)
    from ilmek.checkpoint.postgres import PostgresCheckpointer
    from tests.support.pgcluster import dsn_to_url

    dsn = request.getfixturevalue("postgres_dsn")
    return dsn_to_url(dsn), lambda: PostgresCheckpointer.connect(dsn)


def test_sigterm_mid_superstep_finishes_it_gives_the_thread_back_and_exits_0(
    tmp_path: pathlib.Path, worker_store: tuple[str, Callable[[], Any]]
) -> None:
    """The worker wakes a due timer and runs a 3 s step; SIGTERM during it: the step completes and is
    committed, the run stops at the boundary, the thread is not held, the process exits 0 with a stop
    line; recover then finishes the thread without running the slow step again. SQLite and Postgres."""
    (tmp_path / "flows.py").write_text(textwrap.dedent(FLOWS), encoding="utf-8")
    effects = tmp_path / "effects.txt"
    database, opened = worker_store
    environment = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}",
        "TEST_EFFECTS": str(effects),
    }
    sys.path.insert(0, str(tmp_path))
    os.environ["TEST_EFFECTS"] = str(effects)
    try:
        # The test's own module, written above: by name, as no installed package provides it.
        flows = importlib.import_module("flows")

        with opened() as store:
            assert "interrupted" == run(flows.napping, {}, thread_id="nap", checkpointer=store).status
        worker = subprocess.Popen(
            [sys.executable, "-m", "ilmek", "worker", "--db", database, "--graph", "flows:napping", "--json"],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while "slow started" not in _effects(effects):
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "the worker never woke the timer"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        assert 0 == worker.returncode, err
        events = [json.loads(line)["event"] for line in out.splitlines()]
        assert "started" == events[0]
        assert "stopped" == events[-1]
        assert ["slow started", "slow done"] == _effects(effects)
        with opened() as store:
            info = store.get_thread("nap")
            assert info is not None
            assert not info.running
            assert "unfinished" == info.status  # the superstep committed; finish is planned
            (done,) = recover(flows.napping, store)
            assert ("done", ["waited", "finished"]) == (done.status, done.state["log"])
        assert ["slow started", "slow done", "finish"] == _effects(effects)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("flows", None)
        os.environ.pop("TEST_EFFECTS", None)


def test_worker_help_names_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    """`ilmek worker --help` lists --graph, --every, --recover-after and --json."""
    from ilmek.cli import main

    assert 0 == main(["worker", "--help"])
    out = capsys.readouterr().out
    assert all(option in out for option in ("--graph", "--every", "--recover-after", "--json"))


LEDGER = """
import datetime as dt
import os

from ilmek import START, answers, channel, graph

EFFECTS = os.environ["TEST_EFFECTS"]
LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


def note(what):
    with open(EFFECTS, "a", encoding="utf-8") as out:
        out.write(what + "\\n")
    return what


def settle(state, ctx):
    ctx.sleep("nap", until=LONG_AGO)
    ctx.step("woke", note, f"woke {ctx.thread_id}")
    answer = ctx.interrupt({"question": "Charge?"}, answers=answers.choice("yes", "no"),
                           deadline=LONG_AGO, on_timeout="no")
    ctx.step("decided", note, f"decided {ctx.thread_id} {answer}")
    return {"log": [answer]}


ledger = graph("ledger", {"log": channel.append()}).node("settle", settle).edge(START, "settle").compile()
"""


@pytest.mark.postgres
def test_two_workers_on_one_postgres_wake_and_time_out_each_thread_once(
    tmp_path: pathlib.Path, postgres_dsn: str
) -> None:
    """Two `ilmek worker` processes sweep one Postgres: each thread's timer wakes once and its deadline
    applies once (every step runs exactly once), and both stop on SIGTERM with exit 0."""
    from ilmek.checkpoint.postgres import PostgresCheckpointer
    from tests.support.pgcluster import dsn_to_url

    (tmp_path / "ledger.py").write_text(textwrap.dedent(LEDGER), encoding="utf-8")
    effects = tmp_path / "effects.txt"
    environment = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}",
        "TEST_EFFECTS": str(effects),
    }
    sys.path.insert(0, str(tmp_path))
    os.environ["TEST_EFFECTS"] = str(effects)
    threads = [f"order-{n}" for n in range(12)]
    try:
        ledger = importlib.import_module("ledger")
        with PostgresCheckpointer.connect(postgres_dsn) as store:
            for thread_id in threads:
                assert "interrupted" == run(ledger.ledger, {}, thread_id=thread_id, checkpointer=store).status
        command = [sys.executable, "-m", "ilmek", "worker", "--db", dsn_to_url(postgres_dsn)]
        command += ["--graph", "ledger:ledger", "--every", "1s", "--json"]
        workers = [
            subprocess.Popen(
                command,
                cwd=tmp_path,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 90
        while len(_effects(effects)) < 2 * len(threads):
            assert all(worker.poll() is None for worker in workers), [w.communicate() for w in workers]
            assert time.monotonic() < deadline, _effects(effects)
            time.sleep(0.1)
        time.sleep(1.5)  # a full sweep more: a second delivery of any step would show now
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            out, err = worker.communicate(timeout=60)
            assert 0 == worker.returncode, err
            assert "stopped" == json.loads(out.splitlines()[-1])["event"]
        expected = sorted([f"woke {t}" for t in threads] + [f"decided {t} no" for t in threads])
        assert expected == sorted(_effects(effects))
        with PostgresCheckpointer.connect(postgres_dsn) as store:
            for thread_id in threads:
                info = store.get_thread(thread_id)
                assert info is not None
                assert ("done", False) == (info.status, info.running)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ledger", None)
        os.environ.pop("TEST_EFFECTS", None)
