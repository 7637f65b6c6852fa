"""A script that abandons a stream mid-run and exits: it exits at once, and nothing about its hold is logged.

The script (written into the test's folder and run as its own process)
logs everything, DEBUG up, to stderr; it takes a stream's first events,
stops iterating without closing the stream, and ends, its checkpointer
closed by a ``with`` block or left open. Between supersteps that exits
cleanly on SQLite and on Postgres. With a step still running, the process
exits too: the open stream is closed before the workers are joined, its
step waited for and recorded.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tests.support.cli_support import REPO_ROOT

pytestmark = pytest.mark.timeout(90)

SCRIPT = """
import contextlib
import logging
import os
import sys
import time

from ilmek import END, START, PostgresCheckpointer, SqliteCheckpointer, channel, graph, run, stream

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="LOG %(levelname)s %(name)s: %(message)s")
store, where, moment, closing, thread_id = sys.argv[1:6]


def sleepy(ctx, seconds):
    # "calls" is in the test's folder, the script's working directory.
    with open("calls", "a") as calls:
        calls.write("called\\n")
    ctx.emit("the step started")
    time.sleep(seconds)
    return seconds


def slow(state, ctx):
    ctx.step("slow", sleepy, ctx, 0.5)
    return {"n": state["n"] + 1}


g = (
    graph("abandoned", {"n": channel.last_write(0)})
    .node("a", slow)
    .node("b", slow)
    .edge(START, "a")
    .edge("a", "b")
    .edge("b", END)
    .compile()
)
if store == "sqlite":
    checkpointer = SqliteCheckpointer(where)
else:
    checkpointer = PostgresCheckpointer.connect(where)
    checkpointer.migrate()
if moment == "finish":
    # A later process: the thread is free, and the step the abandoned stream waited for is not re-run.
    result = run(g, None, thread_id=thread_id, checkpointer=checkpointer)
    print("finished", result.status, result.state["n"], flush=True)
    sys.exit(0)
with checkpointer if closing == "with" else contextlib.nullcontext():
    events = stream(g, {"n": 0}, thread_id=thread_id, checkpointer=checkpointer)
    for event in events:
        if moment == "between" and event.type == "checkpoint":
            break
        if moment == "step" and event.type == "custom":
            break
print("abandoned the stream at", event.type, flush=True)
"""

# How long a clean exit may take here (a shared, small machine); a hang is far longer.
EXIT_SECONDS = 15


def abandon(
    tmp_path: pathlib.Path, store: str, where: str, moment: str, closing: str
) -> tuple[int, str, str]:
    """Run the script; its exit status (-1 if it was still running and had to be killed), stdout, stderr."""
    script = tmp_path / "abandon.py"
    script.write_text(SCRIPT, encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, str(script), store, where, moment, closing, tmp_path.name],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        return -1, out, err
    return process.returncode, out, err


def assert_clean_exit(status: int, out: str, err: str) -> None:
    """Exit status 0, the script's last line printed, and no error, warning or traceback on stderr."""
    assert 0 == status, f"exit status {status} (-1: still running after {EXIT_SECONDS} s)\n{err[-3000:]}"
    assert out.startswith("abandoned the stream at ")
    complaints = [
        line
        for line in err.splitlines()
        if not line.startswith(("LOG DEBUG ", "LOG INFO "))
        or ("release" in line.lower() and ("fail" in line.lower() or "error" in line.lower()))
    ]
    assert [] == complaints


@pytest.mark.parametrize("closing", ["with", "open"])
@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_stream_abandoned_between_supersteps_exits_cleanly(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest, store: str, closing: str
) -> None:
    """Abandoned after its first checkpoint, checkpointer closed or not: exit 0, nothing logged above INFO."""
    where = str(tmp_path / "store.db") if store == "sqlite" else request.getfixturevalue("postgres_dsn")
    assert_clean_exit(*abandon(tmp_path, store, where, "between", closing))


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_stream_abandoned_while_a_step_runs_exits_and_records_the_step(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest, store: str
) -> None:
    """Abandoned while a node's step sleeps: the process exits, the step is recorded, the thread is free.

    Before, the node's worker waited for ever for the forgotten stream to
    record its step, and ``concurrent.futures`` joined that worker at exit.
    """
    where = str(tmp_path / "store.db") if store == "sqlite" else request.getfixturevalue("postgres_dsn")
    assert_clean_exit(*abandon(tmp_path, store, where, "step", "open"))
    status, out, err = abandon(tmp_path, store, where, "finish", "open")
    assert (0, "finished done 2\n") == (status, out), err[-3000:]
    # Node a's step ran once, in the abandoned process, and was replayed here; node b's ran here.
    assert ["called", "called"] == (tmp_path / "calls").read_text().split()


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_stream_abandoned_while_a_step_runs_and_its_checkpointer_closed_exits_saying_so(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest, store: str
) -> None:
    """The checkpointer closed under the open stream: the process exits, one warning says the hold lapses."""
    where = str(tmp_path / "store.db") if store == "sqlite" else request.getfixturevalue("postgres_dsn")
    status, out, err = abandon(tmp_path, store, where, "step", "with")
    assert (0, "abandoned the stream at custom\n") == (status, out), err[-3000:]
    warnings = [line for line in err.splitlines() if not line.startswith(("LOG DEBUG ", "LOG INFO "))]
    assert 1 == len(warnings), warnings
    assert repr(tmp_path.name) in warnings[0]
    assert "lapses with its lease" in warnings[0]
