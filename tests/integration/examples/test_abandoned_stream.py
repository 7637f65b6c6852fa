"""A script that abandons a stream mid-run and exits: it exits at once, and nothing about its hold is logged.

The script (written into the test's folder and run as its own process)
logs everything, DEBUG up, to stderr; it takes a stream's first events,
stops iterating without closing the stream, and ends, its checkpointer
closed by a ``with`` block or left open. Between supersteps that exits
cleanly on SQLite and on Postgres. With a step still running, the process
does not exit at all (see the xfail): found here, owned by the engine.
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

from ilmek import END, START, PostgresCheckpointer, SqliteCheckpointer, channel, graph, stream

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="LOG %(levelname)s %(name)s: %(message)s")
store, where, moment, closing = sys.argv[1:5]
STARTED = where + ".step-started"


def sleepy(seconds):
    open(STARTED, "w").close()
    time.sleep(seconds)
    return seconds


def slow(state, ctx):
    ctx.step("slow", sleepy, 0.5)
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
with checkpointer if closing == "with" else contextlib.nullcontext():
    events = stream(g, {"n": 0}, thread_id="t", checkpointer=checkpointer)
    for event in events:
        if moment == "between" and event.type == "checkpoint":
            break
        if moment == "step" and event.type == "node_start":
            while not os.path.exists(STARTED):
                time.sleep(0.01)
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
        [sys.executable, str(script), store, where, moment, closing],
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


@pytest.mark.xfail(
    strict=True,
    reason="the process never exits: at interpreter shutdown concurrent.futures joins the node's worker "
    "before the abandoned stream is closed, and the worker waits for the stream's driver to store its "
    "step (ilmek/execution/tasks.py, _on_driver) — engine-owned, reported",
)
def test_a_stream_abandoned_while_a_step_runs_exits_cleanly(tmp_path: pathlib.Path) -> None:
    """Abandoned while a node's step sleeps, the checkpointer left open: the process still exits at once."""
    assert_clean_exit(*abandon(tmp_path, "sqlite", str(tmp_path / "store.db"), "step", "open"))
