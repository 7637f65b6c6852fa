"""Key rotation on a live store: runs go on beside ``rekey``, and a ``rekey`` killed halfway resumes.

On a real SQLite file and a real Postgres database. The application is
deployed with k2 current and k1 still on its ring; ``rekey`` moves what k1
sealed to k2. Afterwards a keyring of k2 alone reads every value, each
run's items are there once and in order, and no row names k1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from ilmek import END, START, channel, graph, run
from tests.support.backends import Backend, SqliteFileBackend
from tests.support.cli_support import REPO_ROOT
from tests.support.pgcluster import dsn_to_url
from tests.support.sealed import KEY_TEXTS, SQL_BACKENDS, keyring, raw_sql, secret_graph, stored_text

pytestmark = pytest.mark.timeout(180)

RUNS = 24
WORKER_THREADS = 3
SEEDS = 12


def _counter_graph() -> Any:
    """Each run appends its number once, after recording it in a step."""

    def add(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        number = ctx.step("record", lambda: state["n"])
        return {"log": [f"run-{number}"]}

    return (
        graph("counter", {"n": channel.last_write(None), "log": channel.append()})
        .node("add", add)
        .edge(START, "add")
        .edge("add", END)
        .compile()
    )


def _seed(backend: Backend, threads: int) -> None:
    """Paused threads of the secret graph, sealed with k1 (the store before the rotation)."""
    old = backend.open(cipher=keyring("k1"))
    g = secret_graph()
    for number in range(threads):
        run(g, {}, thread_id=f"seed-{number}", checkpointer=old)


def _names_k1(backend: Backend) -> bool:
    with raw_sql(backend) as execute:
        text = stored_text(execute, isinstance(backend, SqliteFileBackend))
    return '"k1"' in text or "'k1'" in text


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_runs_beside_rekey_lose_and_repeat_nothing(backend: Backend) -> None:
    """Runs committing while rekey walks the tables in small batches: every item once, all under k2."""
    _seed(backend, 6)
    app = backend.open(cipher=keyring("k2", "k1"))
    counter = _counter_graph()
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for number in range(RUNS):
                result = run(
                    counter, {"n": number}, thread_id=f"w{number % WORKER_THREADS}", checkpointer=app
                )
                assert result.status == "done"
        except BaseException as error:  # reported by the test below
            failures.append(error)

    runner = threading.Thread(target=work)
    runner.start()
    rekeyed = backend.open(cipher=keyring("k2", "k1")).rekey(batch=2)
    runner.join(120)
    assert failures == []
    assert rekeyed.rewritten > 0
    after = backend.open(cipher=keyring("k2"))
    for worker in range(WORKER_THREADS):
        expected = [f"run-{number}" for number in range(RUNS) if number % WORKER_THREADS == worker]
        assert after.read_channel(f"w{worker}", "log") == expected
    for number in range(6):
        assert after.get(f"seed-{number}") is not None
    assert not _names_k1(backend)


def _database(backend: Backend) -> str:
    return str(backend.path) if isinstance(backend, SqliteFileBackend) else dsn_to_url(backend.dsn)  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_rekey_killed_halfway_is_finished_by_the_next(backend: Backend) -> None:
    """``ilmek rekey`` killed (SIGKILL) after a few batches leaves a readable store; a rerun finishes it."""
    _seed(backend, SEEDS)
    before = [backend.open(cipher=keyring("k1")).get(f"seed-{n}") for n in range(SEEDS)]
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "ROTATE_KEYS": f"k2:{KEY_TEXTS[1]},k1:{KEY_TEXTS[0]}",
    }
    command = [
        sys.executable,
        "-m",
        "ilmek",
        "rekey",
        "--db",
        _database(backend),
        "--keys-env",
        "ROTATE_KEYS",
    ]
    with subprocess.Popen(
        [*command, "--batch", "1"], stdout=subprocess.PIPE, text=True, env=environment, cwd=REPO_ROOT
    ) as process:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(5)]
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    assert all(line.startswith("rekey: ") for line in lines), lines
    assert _names_k1(backend)  # killed halfway: k1 rows remain
    # Mid-rotation the application, with both keys, reads every thread as it was.
    both = backend.open(cipher=keyring("k2", "k1"))
    assert [both.get(f"seed-{n}") for n in range(SEEDS)] == before
    finished = both.rekey(batch=50)
    assert finished.rewritten > 0
    assert not _names_k1(backend)
    assert [backend.open(cipher=keyring("k2")).get(f"seed-{n}") for n in range(SEEDS)] == before
    assert both.rekey().rewritten == 0
