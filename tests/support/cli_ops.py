"""What the operations commands' tests share: real stores, graph modules a command loads, running ``ilmek``.

``tests/integration/cli/ops/conftest.py`` turns these into fixtures. Graph
modules are written into the test's folder and named ``MODULE:NAME`` as a user
would; their steps count effects in a file outside the database.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg2
import pytest

from ilmek import run
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.loading import load_graph
from tests.support.cli_support import REPO_ROOT
from tests.support.crashworker import LEASE_SECONDS, Effects
from tests.support.pgcluster import dsn_to_url

EVIL = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b"
# Generous: the machine is small and shared; a timeout only bounds a failure.
WAIT_SECONDS = 30.0
DAY = 86400.0


# --- the stores -------------------------------------------------------------------------------


class Store:
    """One real database for a test: its ``--db`` text, checkpointers on it, and plain SQL.

    SQLite checkpointers get a one-second lease, as the crash worker's do, so a
    killed holder frees its thread quickly.
    """

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> None:
        self.kind = kind
        self.opened: list[Checkpointer] = []
        if kind == "sqlite":
            self.path = tmp_path / "ops.db"
            self.db = str(self.path)
        else:
            self.dsn: str = request.getfixturevalue("postgres_dsn")
            self.db = dsn_to_url(self.dsn)
        # Create (and on Postgres migrate) the tables before any command runs.
        self.open()

    def open(self) -> Checkpointer:
        checkpointer: Checkpointer
        if self.kind == "sqlite":
            checkpointer = SqliteCheckpointer(self.path, lease_seconds=LEASE_SECONDS)
        else:
            checkpointer = PostgresCheckpointer.connect(self.dsn, lease_seconds=LEASE_SECONDS)
            checkpointer.migrate()  # type: ignore[attr-defined]
        self.opened.append(checkpointer)
        return checkpointer

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement straight on the database (``?`` placeholders) and commit."""
        if self.kind == "sqlite":
            connection = sqlite3.connect(self.path, timeout=30)
            try:
                with connection:
                    return connection.execute(statement, params).fetchall()
            finally:
                connection.close()
        connection = psycopg2.connect(self.dsn)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(statement.replace("?", "%s"), params)
                return cursor.fetchall() if cursor.description is not None else []
        finally:
            connection.close()

    def age(self, thread_id: str, days: float) -> None:
        """Make a thread read as last updated ``days`` earlier than it was."""
        self.sql(
            "UPDATE ilmek_threads SET updated_at = updated_at - ? WHERE thread_id = ?", days * DAY, thread_id
        )

    def close(self) -> None:
        for checkpointer in self.opened:
            checkpointer.close()


# --- graph modules the commands load ------------------------------------------------------------


FLAKY_MODULE = '''
"""A graph whose node raises until a flag file exists; every step counts its effect."""
import os
import time

from ilmek import END, START, channel, graph
from tests.support.crashworker import Effects

EFFECTS = Effects({effects!r})
FLAG = {flag!r}


def work(state, ctx):
    ctx.step("one", EFFECTS.perform, "one:" + ctx.thread_id, 1)
    ctx.step("two", EFFECTS.perform, "two:" + ctx.thread_id, 2)
    if not os.path.exists(FLAG):
        raise ValueError("card declined\\n" + {evil!r})
    # Slow enough that two recoverers started together overlap.
    time.sleep({pause!r})
    ctx.step("three", EFFECTS.perform, "three:" + ctx.thread_id, 3)
    return {{"log": ["worked"]}}


def finish(state, ctx):
    EFFECTS.record("finish:" + ctx.thread_id)
    return {{"log": ["finished"]}}


flaky = (
    graph("ops-flaky", {{"log": channel.append()}})
    .node("work", work)
    .node("finish", finish)
    .edge(START, "work")
    .edge("work", "finish")
    .edge("finish", END)
    .compile()
)
'''

CRASH_MODULE = '''
"""The crash worker's graphs, as a user's module would name them for `ilmek recover`."""
from tests.support.crashworker import Effects, loop_graph, slow_graph

EFFECTS = Effects({effects!r})
loop = loop_graph(EFFECTS)
slow = slow_graph(EFFECTS)
'''

LOOP_MODULE = '''
"""A graph that loops many supersteps, each a little slow: a run to cancel from outside."""
import time

from ilmek import END, START, channel, graph


def tick(state, ctx):
    time.sleep(0.02)
    return {"n": state["n"] + 1}


def again(state, ctx):
    return "tick" if state["n"] < 100000 else END


looping = (
    graph("ops-loop", {"n": channel.last_write(0)})
    .node("tick", tick)
    .edge(START, "tick")
    .router("tick", again, destinations=["tick", END])
    .compile()
)
'''

RUNNER = '''
"""Run a graph on a thread until it ends; print how it ended as one JSON line."""
import json
import logging
import sys

from ilmek import run
from ilmek.cli import open_checkpointer
from ilmek.loading import load_graph
from ilmek.types import ThreadInfo

database, reference, thread_id = sys.argv[1:4]
checkpointer = open_checkpointer(database)
try:
    print(json.dumps({"event": "starting"}), flush=True)
    result = run(
        load_graph(reference), {}, thread_id=thread_id, checkpointer=checkpointer, recursion_limit=10**6
    )
    # An aborted run's result carries no state (as in the reference): read the thread's.
    latest = checkpointer.get(thread_id)
    ending = {"status": result.status, "reason": result.abort_reason, "n": latest.channels["n"]}
    print(json.dumps(ending), flush=True)
finally:
    checkpointer.close()
'''


class Modules:
    """Writes graph modules into a folder on ``sys.path``, each under a name of its own.

    In-process commands import them (a fresh name per module: ``sys.modules``
    would hand back an earlier test's module of the same name); subprocess
    commands run with the folder as their working directory.
    """

    def __init__(self, folder: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.names: list[str] = []
        monkeypatch.syspath_prepend(str(folder))

    def write(self, source: str) -> str:
        name = f"ops_graphs_{uuid.uuid4().hex[:12]}"
        (self.folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        self.names.append(name)
        return name

    def flaky(self, effects: Effects, flag: pathlib.Path, pause: float = 0.0) -> str:
        """A module with ``flaky`` (graph ``ops-flaky``); returns ``MODULE:flaky``."""
        source = FLAKY_MODULE.format(effects=str(effects.path), flag=str(flag), evil=EVIL, pause=pause)
        return f"{self.write(source)}:flaky"

    def close(self) -> None:
        for name in self.names:
            sys.modules.pop(name, None)


def ilmek_process(cwd: pathlib.Path, *argv: str) -> subprocess.Popen[str]:
    """Start ``python -m ilmek ...`` in another process, working in ``cwd`` (where graph modules are)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    environment.pop("ILMEK_DB", None)
    return subprocess.Popen(
        [sys.executable, "-m", "ilmek", *argv],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ilmek_command(cwd: pathlib.Path, *argv: str) -> tuple[int, str, str]:
    """Run ``python -m ilmek ...`` in another process; its exit status, stdout and stderr."""
    process = ilmek_process(cwd, *argv)
    out, err = process.communicate(timeout=WAIT_SECONDS * 2)
    return process.returncode, out, err


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def failed_threads(checkpointer: Checkpointer, reference: str, thread_ids: list[str]) -> None:
    """Run the flaky graph on each thread; each ends ``error`` with its task still planned."""
    flaky = load_graph(reference)
    for thread_id in thread_ids:
        assert "error" == run(flaky, {}, thread_id=thread_id, checkpointer=checkpointer).status
