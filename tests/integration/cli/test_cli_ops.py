"""The operations commands: ``threads --status error|running``, ``show`` of a failed thread,
``recover``, ``cancel`` and ``gc``, and the log records operators watch.

Every store is a real SQLite file or the real Postgres the test session
starts (never a mock). Stalled threads are made for real: a worker process
killed with SIGKILL mid-superstep (``tests/support/crashworker.py``), or a node that
raised. Graph modules are written into the test's folder and named
``MODULE:NAME`` as a user would; effects are counted in a file outside the
database, so "ran once" is checked against what happened.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest

from ilmek import (
    END,
    START,
    HoldLostError,
    channel,
    graph,
    recover,
    request_cancel,
    run,
)
from ilmek.checkpoint.base import Checkpointer, checkpoints_to_keep
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.graph import CompiledGraph
from ilmek.loading import load_graph
from ilmek.types import ThreadInfo
from tests.support.cli_support import (
    REPO_ROOT,
    cli,
    finished_order,
    forked_order,
    history_rows,
    home_fixture,  # noqa: F401 - a fixture, used by name
    paused_order,
    raw_controls,
)
from tests.support.crash import Workers
from tests.support.crashworker import LEASE_SECONDS, Effects
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(120)

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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    """A SQLite file or a fresh Postgres database, with ilmek's tables."""
    opened = Store(request.param, request, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def checkpointer(store: Store) -> Checkpointer:
    """This process's checkpointer on the test's store (the commands open their own)."""
    return store.open()


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


@pytest.fixture
def modules(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Modules]:
    """Graph modules in the test's working folder (the ``home`` fixture's ``cwd``)."""
    written = Modules(tmp_path / "cwd", monkeypatch)
    yield written
    written.close()


@pytest.fixture(name="workers")
def workers_fixture(tmp_path: pathlib.Path) -> Iterator[Workers]:
    """Crash-worker processes (``tests/support/crashworker.py``); any still running at the end are killed."""
    pool = Workers(tmp_path)
    yield pool
    pool.close()


@pytest.fixture
def effects(tmp_path: pathlib.Path) -> Effects:
    """The test's effects file: one line per real execution of a step."""
    return Effects(tmp_path / "effects.txt")


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


@pytest.fixture
def broken(checkpointer: Checkpointer, modules: Modules, effects: Effects) -> ThreadInfo:
    """Thread ``broken``, whose run failed in its node (the message full of escapes); its info."""
    failed_threads(checkpointer, modules.flaky(effects, modules.folder / "never"), ["broken"])
    info = checkpointer.get_thread("broken")
    assert info is not None
    assert info.error is not None
    return info


# --- threads --status error|running, and show ---------------------------------------------------


def test_threads_lists_failed_threads_with_the_error_shortened_and_escaped(
    capsys: pytest.CaptureFixture[str],
    store: Store,
    checkpointer: Checkpointer,
    modules: Modules,
    effects: Effects,
) -> None:
    """`threads --status error` lists failed threads; NOTE shows the error's type and message, escaped."""
    reference = modules.flaky(effects, modules.folder / "never")
    failed_threads(checkpointer, reference, ["failed " + EVIL])
    forked_order(checkpointer, "fine")

    status, out, err = cli(capsys, "--db", store.db, "threads", "--status", "error")
    assert (0, "") == (status, err)
    assert [] == raw_controls(out)
    header, row = out.splitlines()
    assert ["THREAD", "STATUS", "STEP", "UPDATED", "LATEST", "CHECKPOINT", "NOTE"] == header.split()
    assert row.startswith("failed \\x1b]0;pwned\\x07")
    assert "  error  " in row
    # One line: the message's own line break is escaped, and it is cut short.
    assert row.endswith("ValueError: card declined; \\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b")

    status, out, _ = cli(capsys, "--db", store.db, "threads")
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows["fine"].endswith("  -")  # the column is there, the finished thread has nothing to say


def test_threads_json_carries_status_running_and_the_error(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer, broken: ThreadInfo
) -> None:
    """`threads --json` gives each thread `running`, `held_since` and `error` (type, message, node...)."""

    info, error = broken, broken.error
    assert error is not None
    status, out, _ = cli(capsys, "--db", store.db, "threads", "--json", "--status", "error")
    assert 0 == status
    [thread] = json.loads(out)["threads"]
    assert {
        "id": "broken",
        "status": "error",
        "running": False,
        "held_since": None,
        "error": {
            "type": "ValueError",
            "message": "card declined\n" + EVIL,
            "node": "work",
            "checkpoint_id": info.checkpoint_id,
            "at": error.at.isoformat(),
        },
    } == {key: thread[key] for key in ("id", "status", "running", "held_since", "error")}


def test_threads_status_running_lists_a_held_thread_with_its_start(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """A thread a run holds is listed by `--status running`, NOTE saying since when; released, it is not."""
    forked_order(checkpointer, "busy")
    forked_order(checkpointer, "idle")
    with checkpointer.hold("busy"):
        status, out, _ = cli(capsys, "--db", store.db, "threads", "--status", "running")
        info = checkpointer.get_thread("busy")
        assert info is not None
        assert info.held_since is not None
        _, out_json, _ = cli(capsys, "--db", store.db, "threads", "--status", "running", "--json")
    assert 0 == status
    [row] = history_rows(out)[1:]
    assert "busy" == row[0]
    assert ["running", "since"] == row[-4:-2]
    [thread] = json.loads(out_json)["threads"]
    assert (True, info.held_since.isoformat()) == (thread["running"], thread["held_since"])
    assert (0, "no threads\n") == cli(capsys, "--db", store.db, "threads", "--status", "running")[:2]


def test_threads_filters_by_when_each_thread_was_last_updated(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """--updated-before / --updated-after take an age (40d, 1w2d) or an ISO date and select by last update."""
    for thread_id in ("recent", "month-old", "year-old"):
        forked_order(checkpointer, thread_id)
    store.age("month-old", 40)
    store.age("year-old", 400)

    def listed(*options: str) -> list[str]:
        status, out, err = cli(capsys, "--db", store.db, "threads", "--json", *options)
        assert (0, "") == (status, err)
        return [thread["id"] for thread in json.loads(out)["threads"]]

    assert ["month-old", "year-old"] == listed("--updated-before", "30d")
    assert ["recent"] == listed("--updated-after", "4w2d")
    assert ["month-old"] == listed("--updated-before", "1w", "--updated-after", "365 d")
    year_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 365 * DAY))
    assert ["year-old"] == listed("--updated-before", year_ago)
    assert ["recent", "month-old", "year-old"] == listed("--updated-after", "1970-01-01")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["threads", "--updated-before", "soon"], "argument --updated-before: not an age (10m, 2h, 30d)"),
        (["threads", "--updated-after", "10"], "argument --updated-after: not an age"),
        (["threads", "--updated-after=-3d"], "argument --updated-after: not an age"),
        (["threads", "--updated-before", "9" * 5000 + "d"], "argument --updated-before: not an age"),
        (["threads", "--updated-before", "999999999999w"], "must be at most a century"),
        (["gc", "--older-than", "2999-01-01"], "argument --older-than: is in the future: '2999-01-01'"),
        (["gc"], "the following arguments are required: --older-than"),
        (["gc", "--older-than", "1d", "--status", "running"], "argument --status: invalid choice"),
        (["recover"], "the following arguments are required: MODULE:GRAPH"),
        (["recover", "m:g", "--limit", "0"], "argument --limit: must be at least 1"),
        (["cancel"], "the following arguments are required: THREAD"),
    ],
)
def test_bad_ages_and_missing_arguments_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """A malformed age, a date in the future for --older-than, or a missing argument: exit 2, one line."""
    status, out, err = cli(capsys, *argv)
    assert (2, "") == (status, out)
    assert err.startswith("ilmek: ")
    assert message in err
    assert 1 == err.count("\n")
    assert len(err) < 400


def test_show_says_why_the_last_run_failed_and_whether_a_run_holds_the_thread(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer, broken: ThreadInfo
) -> None:
    """`show` of a failed thread: its error (type, message escaped, node, checkpoint, time) and `running`."""

    info, error = broken, broken.error
    assert error is not None
    status, out, err = cli(capsys, "--db", store.db, "show", "broken")
    assert (0, "") == (status, err)
    assert [] == raw_controls(out)
    lines = out.splitlines()
    assert "status       unfinished (the thread: error)" in lines
    assert "running      no" in lines
    assert "failed       ValueError: card declined\\n\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b" in lines
    assert (
        f"             in node 'work', running from checkpoint {info.checkpoint_id!r}, "
        f"at {error.at.strftime('%Y-%m-%d %H:%M:%SZ')}"
    ) in lines

    with checkpointer.hold("broken"):
        status, out, _ = cli(capsys, "--db", store.db, "show", "broken")
        _, shown, _ = cli(capsys, "--db", store.db, "show", "broken", "--json")
    assert 0 == status
    assert any(
        line.startswith("running      yes: a live run holds the thread since ") for line in out.splitlines()
    )
    document = json.loads(shown)
    assert ("error", True) == (document["thread_status"], document["running"])
    assert {"type": "ValueError", "node": "work", "checkpoint_id": info.checkpoint_id} == {
        key: document["error"][key] for key in ("type", "node", "checkpoint_id")
    }


# --- recover ------------------------------------------------------------------------------------


def test_recover_continues_failed_threads_without_repeating_their_completed_steps(
    capsys: pytest.CaptureFixture[str],
    store: Store,
    checkpointer: Checkpointer,
    modules: Modules,
    effects: Effects,
) -> None:
    """Threads whose node raised: --dry-run lists them and runs nothing; recover finishes each, steps once."""
    flag = modules.folder / "fixed"
    reference = modules.flaky(effects, flag)
    failed_threads(checkpointer, reference, ["a", "b"])
    before = effects.counts()
    assert Counter({"one:a": 1, "two:a": 1, "one:b": 1, "two:b": 1}) == before

    status, out, err = cli(capsys, "--db", store.db, "recover", reference, "--dry-run")
    assert (0, "") == (status, err)
    assert ["THREAD", "STATUS", "UPDATED", "GRAPH", "WOULD"] == out.splitlines()[0].split()
    assert [["a", "error", "ops-flaky", "continue"], ["b", "error", "ops-flaky", "continue"]] == [
        [row[0], row[1], row[4], row[5]] for row in history_rows(out)[1:]
    ]
    assert before == effects.counts()

    flag.touch()
    status, out, err = cli(capsys, "--db", store.db, "recover", reference)
    assert (0, "") == (status, err)
    assert ["thread 'a': done", "thread 'b': done", "continued 2 threads"] == out.splitlines()
    assert (
        Counter({f"{step}:{t}": 1 for step in ("one", "two", "three", "finish") for t in "ab"})
        == effects.counts()
    )
    assert ["done", "done"] == [checkpointer.get_thread(t).status for t in "ab"]  # type: ignore[union-attr]
    assert (0, "no stalled threads\n") == cli(capsys, "--db", store.db, "recover", reference)[:2]


def test_recover_leaves_threads_of_graphs_not_given_and_idle_less_than_older_than(
    capsys: pytest.CaptureFixture[str],
    store: Store,
    checkpointer: Checkpointer,
    modules: Modules,
    effects: Effects,
) -> None:
    """A thread of another graph is named and skipped; --older-than spares recent ones; --limit caps."""
    flag = modules.folder / "fixed"
    reference = modules.flaky(effects, flag)
    failed_threads(checkpointer, reference, ["old-1", "old-2", "new"])
    store.age("old-1", 2)
    store.age("old-2", 1)
    other = modules.write(CRASH_MODULE.format(effects=str(effects.path))) + ":slow"
    flag.touch()

    status, out, _ = cli(capsys, "--db", store.db, "recover", other, "--dry-run", "--older-than", "1h")
    assert 0 == status
    assert ["old-1", "old-2"] == [row[0] for row in history_rows(out)[1:]]
    assert all(line.endswith("skip: its graph was not given") for line in out.splitlines()[1:])

    status, out, _ = cli(capsys, "--db", store.db, "recover", other, "--older-than", "1h")
    assert 0 == status
    assert [
        "thread 'old-1': not continued here (its graph 'ops-flaky' was not given)",
        "thread 'old-2': not continued here (its graph 'ops-flaky' was not given)",
        "continued 0 threads",
    ] == out.splitlines()

    status, out, _ = cli(
        capsys, "--db", store.db, "recover", other, reference, "--older-than", "1h", "--limit", "1"
    )
    assert (0, ["thread 'old-1': done", "continued 1 thread"]) == (status, out.splitlines())
    assert ["done", "error", "error"] == [
        checkpointer.get_thread(t).status for t in ("old-1", "old-2", "new")
    ]  # type: ignore[union-attr]


def test_recover_reports_a_module_that_cannot_be_loaded_in_one_line(
    capsys: pytest.CaptureFixture[str], store: Store, modules: Modules
) -> None:
    """A missing module or name, a module that raises on import: `ilmek: ...`, exit 1, no traceback."""
    broken = modules.write("raise RuntimeError('no settings \\x1b[2J configured')\n")
    for reference, message in [
        ("no_such_module_here:g", "cannot import module 'no_such_module_here'"),
        (f"{broken}:g", "cannot load"),
        ("json:__name__", "is a str, not a compiled graph"),
        ("nocolon", "a graph is named MODULE:NAME"),
    ]:
        status, out, err = cli(capsys, "--db", store.db, "recover", reference)
        assert (1, "") == (status, out), reference
        assert err.startswith("ilmek: ")
        assert message in err
        assert 1 == err.count("\n")
        assert [] == raw_controls(err)


def test_recover_after_kill_9_mid_superstep_runs_only_what_did_not_complete(
    store: Store, checkpointer: Checkpointer, workers: Workers, modules: Modules, effects: Effects
) -> None:
    """A worker SIGKILLed inside a node after one step: `ilmek recover` finishes it, that step not again."""
    reference = modules.write(CRASH_MODULE.format(effects=str(effects.path))) + ":slow"
    worker = workers.spawn(
        "slow", "start", db=store.db, thread="killed", effects=effects.path, linger_at="prepared"
    )
    worker.expect("lingering")
    assert worker.kill()
    assert Counter({"prepare": 1}) == effects.counts()
    # SQLite frees the thread when the dead worker's lease lapses; Postgres at once.
    wait_until(lambda: not checkpointer.get_thread("killed").running, "the dead holder's hold lapses")  # type: ignore[union-attr]

    status, out, err = ilmek_command(modules.folder, "--db", store.db, "recover", reference, "--dry-run")
    assert (0, "") == (status, err)
    assert ["killed", "unfinished", "crash-slow", "continue"] == [
        history_rows(out)[1][i] for i in (0, 1, 4, 5)
    ]
    status, out, err = ilmek_command(modules.folder, "--db", store.db, "recover", reference)
    assert (0, "", ["thread 'killed': done", "continued 1 thread"]) == (status, err, out.splitlines())
    assert Counter({"prepare": 1, "finish": 1}) == effects.counts()
    latest = checkpointer.get("killed")
    assert latest is not None
    assert ["begun", "prepared", "finished"] == latest.channels["log"]


def test_recover_after_kill_9_in_a_loop_repeats_no_completed_superstep(
    store: Store, checkpointer: Checkpointer, workers: Workers, modules: Modules, effects: Effects
) -> None:
    """The loop graph killed some supersteps in, recovered: every step ran once but the one in flight."""
    reference = modules.write(CRASH_MODULE.format(effects=str(effects.path))) + ":loop"
    worker = workers.spawn("loop", "start", db=store.db, thread="looping", effects=effects.path)
    worker.expect("started")
    wait_until(lambda: len(effects.lines()) >= 7 or not worker.alive(), "the loop is some supersteps in")
    assert worker.kill(), "the loop finished before it could be killed"
    in_flight = effects.lines()[-1]
    wait_until(lambda: not checkpointer.get_thread("looping").running, "the dead holder's hold lapses")  # type: ignore[union-attr]

    status, out, err = ilmek_command(modules.folder, "--db", store.db, "recover", reference)
    assert (0, "", "thread 'looping': done") == (status, err, out.splitlines()[0])
    counts = effects.counts()
    assert 24 == len(counts)  # LOOP_ROUNDS supersteps, steps a and b
    assert {key: 1 for key in counts if key != in_flight} == {
        k: v for k, v in counts.items() if k != in_flight
    }
    assert counts[in_flight] in (1, 2)


def test_two_recover_processes_at_once_recover_each_thread_exactly_once(
    store: Store, checkpointer: Checkpointer, modules: Modules, effects: Effects
) -> None:
    """Two `ilmek recover` started together: every thread is continued by one of them, its steps once."""
    flag = modules.folder / "fixed"
    reference = modules.flaky(effects, flag, pause=0.05)
    threads = [f"t{i}" for i in range(8)]
    failed_threads(checkpointer, reference, threads)
    flag.touch()

    first = ilmek_process(modules.folder, "--db", store.db, "recover", reference)
    second = ilmek_process(modules.folder, "--db", store.db, "recover", reference)
    outputs = [process.communicate(timeout=WAIT_SECONDS * 2) for process in (first, second)]
    assert [0, 0] == [first.returncode, second.returncode], outputs
    assert ["", ""] == [err for _, err in outputs]

    counts = effects.counts()
    assert {f"{step}:{t}": 1 for step in ("one", "two", "three", "finish") for t in threads} == dict(counts)
    done_lines = [line for out, _ in outputs for line in out.splitlines() if line.endswith(": done")]
    assert sorted(f"thread {t!r}: done" for t in threads) == sorted(done_lines)
    assert all(checkpointer.get_thread(t).status == "done" for t in threads)  # type: ignore[union-attr]


# --- recover() racing: the library the command relies on -----------------------------------------


class SecondRecoverer(SqliteCheckpointer):
    """A checkpointer whose next read of a thread lets another recoverer finish it first.

    It reproduces, deterministically, the interleaving of two processes
    calling :func:`ilmek.recover` at once: this one has read the thread's
    latest checkpoint (still stalled) and is about to run it, when the other
    one runs it to its end.
    """

    meanwhile: Callable[[], None] | None = None

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Any:
        found = super().get(thread_id, checkpoint_id)
        if self.meanwhile is not None:
            action, self.meanwhile = self.meanwhile, None
            action()
        return found


def racing_graph(flag: pathlib.Path, calls: Counter[str], ending: str) -> CompiledGraph:
    """One node that raises until ``flag`` exists, then ends its run ``ending`` (done or interrupted)."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls["work"] += 1
        if not flag.exists():
            raise ValueError("not yet")
        return {"answer": ctx.interrupt("ok?") if ending == "interrupted" else "fine"}

    return (
        graph("ops-race", {"answer": channel.last_write(None)})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


@pytest.mark.parametrize("ending", ["done", "interrupted", "error"])
def test_a_recoverer_that_lost_the_race_neither_reports_nor_reruns_the_thread(
    tmp_path: pathlib.Path, ending: str
) -> None:
    """recover() whose stalled thread another recoverer continued after it looked: no result, error or rerun.

    Two processes calling recover() at once: the second has read the
    thread's latest checkpoint (still stalled) and is about to run it when
    the first runs it to its end (done, paused, or failed again). The thread
    was recovered once; the second must leave it alone.
    """
    path = tmp_path / "race.db"
    flag = tmp_path / "fixed"
    calls: Counter[str] = Counter()
    g = racing_graph(flag, calls, ending)
    with SqliteCheckpointer(path) as first, SecondRecoverer(path) as second:
        assert "error" == run(g, {}, thread_id="t", checkpointer=first).status
        if ending != "error":
            flag.touch()
        firsts: list[Any] = []
        second.meanwhile = lambda: firsts.extend(recover(g, first))
        seconds = recover(g, second)
        assert [ending] == [result.status for result in firsts]
        # The failed run, then the first recoverer's: nobody else ran the node.
        assert ([], 2) == (seconds, calls["work"])


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_from_another_process_ends_a_looping_run_aborted_with_the_reason(
    store: Store, checkpointer: Checkpointer, modules: Modules, tmp_path: pathlib.Path
) -> None:
    """A run loops in one process; `ilmek cancel` from another stops it: it ends aborted, the reason kept."""
    reference = modules.write(LOOP_MODULE) + ":looping"
    runner_path = tmp_path / "runner.py"
    runner_path.write_text(RUNNER, encoding="utf-8")
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    runner = subprocess.Popen(
        [sys.executable, str(runner_path), store.db, reference, "looping"],
        cwd=modules.folder,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                (info := checkpointer.get_thread("looping")) is not None and info.running and info.step >= 3
            ),
            "the run holds its thread and has looped a few supersteps",
        )
        status, out, err = ilmek_command(
            modules.folder, "--db", store.db, "cancel", "looping", "--reason", "operator: stop " + EVIL
        )
        out_runner, err_runner = runner.communicate(timeout=WAIT_SECONDS)
    finally:
        runner.kill()
        runner.wait()
    assert (0, "") == (status, err)
    assert [] == raw_controls(out)
    assert (
        "asked the run holding thread 'looping' to stop: it ends aborted "
        "(operator: stop \\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b) at its next superstep\n"
    ) == out
    assert 0 == runner.returncode, err_runner
    ending = json.loads(out_runner.splitlines()[-1])
    assert ("aborted", "operator: stop " + EVIL) == (ending["status"], ending["reason"])
    assert ending["n"] < 100_000
    # The request died with that run: nothing holds the thread now.
    status, out, err = ilmek_command(modules.folder, "--db", store.db, "cancel", "looping")
    assert (1, "", "ilmek: no run holds thread 'looping' now: nothing to cancel\n") == (status, out, err)


def test_cancel_of_a_thread_nobody_runs_or_that_does_not_exist_exits_1(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """Nothing holds the thread: exit 1, saying so; an unknown thread is named missing; nothing is stored."""
    long_thread(checkpointer, "idle", 3)
    assert (1, "", "ilmek: no run holds thread 'idle' now: nothing to cancel\n") == cli(
        capsys, "--db", store.db, "cancel", "idle"
    )
    status, out, err = cli(capsys, "--db", store.db, "cancel", "ghost " + EVIL)
    assert (1, "") == (status, out)
    assert err.startswith("ilmek: thread 'ghost \\x1b]0;pwned\\x07")
    assert "does not exist" in err
    assert [] == raw_controls(err)
    # A later run is not cancelled by the refused request.
    long_thread(checkpointer, "idle", 3)


# --- gc -----------------------------------------------------------------------------------------


def thread_ids(checkpointer: Checkpointer) -> set[str]:
    return {info.id for info in checkpointer.list_threads()}


def test_gc_deletes_exactly_the_old_threads_and_never_a_held_one(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """`gc --older-than 30d` deletes every thread idle that long but a held one; --dry-run only lists."""
    for thread_id in ("old-done", "old-paused", "old-held", "young"):
        forked_order(checkpointer, thread_id)
    paused_order(checkpointer, "old-waiting")
    for thread_id in ("old-done", "old-paused", "old-held", "old-waiting"):
        store.age(thread_id, 40)
    everything = thread_ids(checkpointer)

    with checkpointer.hold("old-held"):
        status, out, err = cli(capsys, "--db", store.db, "gc", "--older-than", "30d", "--dry-run")
        assert (0, "") == (status, err)
        assert everything == thread_ids(checkpointer)
        listed = [line.split()[-1] for line in out.splitlines()[:-2]]
        assert ["old-done", "old-paused", "old-waiting"] == sorted(listed)
        assert out.splitlines()[-2].startswith("would delete 3 threads last updated before ")
        assert "kept 1 thread that a run holds now" == out.splitlines()[-1]

        status, out, err = cli(capsys, "--db", store.db, "gc", "--older-than", "30d")
        assert (0, "") == (status, err)
        assert out.splitlines()[0].startswith("deleted 3 threads last updated before ")
        assert "kept 1 thread that a run holds now" == out.splitlines()[1]
        assert {"old-held", "young"} == thread_ids(checkpointer)
    # Released, the held one goes too; the young one stays whatever is asked.
    status, out, _ = cli(capsys, "--db", store.db, "gc", "--older-than", "30d")
    assert out.startswith("deleted 1 thread ")
    assert {"young"} == thread_ids(checkpointer)
    assert [] == store.sql("SELECT thread_id FROM ilmek_checkpoints WHERE thread_id <> 'young'")
    assert [] == store.sql("SELECT thread_id FROM ilmek_journals WHERE thread_id <> 'young'")


def test_gc_status_narrows_what_goes(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """`gc --status done` deletes old finished threads only; an old pause waiting for a person stays."""
    finished_order(checkpointer, "old-done")
    paused_order(checkpointer, "old-waiting")
    finished_order(checkpointer, "young-done")
    store.age("old-done", 31)
    store.age("old-waiting", 31)

    status, out, err = cli(capsys, "--db", store.db, "gc", "--older-than", "30d", "--status", "done")
    assert (0, "") == (status, err)
    assert out.startswith("deleted 1 thread last updated before ")
    assert out.rstrip().endswith(", status done")
    assert {"old-waiting", "young-done"} == thread_ids(checkpointer)


def long_thread(checkpointer: Checkpointer, thread_id: str, supersteps: int) -> None:
    """A thread with a linear history of ``supersteps`` + 1 checkpoints."""

    def count(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    g = (
        graph("ops-count", {"n": channel.last_write(0)})
        .node("count", count)
        .edge(START, "count")
        .router(
            "count", lambda state: "count" if state["n"] < supersteps else END, destinations=["count", END]
        )
        .compile()
    )
    assert "done" == run(g, {}, thread_id=thread_id, checkpointer=checkpointer, recursion_limit=1000).status


def test_gc_keep_last_prunes_old_threads_to_their_newest_and_what_prune_must_keep(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """`gc --keep-last 2` keeps old threads with their 2 newest checkpoints, branch tips and fork points."""
    long_thread(checkpointer, "old-long", 12)
    forked_order(checkpointer, "old-forked")
    long_thread(checkpointer, "young-long", 12)
    store.age("old-long", 40)
    store.age("old-forked", 40)

    def lineage(thread_id: str) -> dict[str, str | None]:
        return {c.id: c.parent_id for c in checkpointer.list(thread_id)}

    before = {thread_id: lineage(thread_id) for thread_id in ("old-long", "old-forked", "young-long")}
    expected = {thread_id: checkpoints_to_keep(list(found), found, 2) for thread_id, found in before.items()}
    assert 2 == len(expected["old-long"])
    assert len(expected["old-forked"]) > 2  # a fork point and two tips

    status, out, err = cli(
        capsys, "--db", store.db, "gc", "--older-than", "30d", "--keep-last", "2", "--dry-run"
    )
    assert (0, "") == (status, err)
    dropped_long = len(before["old-long"]) - 2
    dropped_forked = len(before["old-forked"]) - len(expected["old-forked"])
    assert f"thread 'old-long': would drop {dropped_long} checkpoints, 2 kept" in out.splitlines()
    assert before == {thread_id: lineage(thread_id) for thread_id in before}

    status, out, err = cli(capsys, "--db", store.db, "gc", "--older-than", "30d", "--keep-last", "2")
    assert (0, "") == (status, err)
    assert f"thread 'old-long': dropped {dropped_long} checkpoints, 2 kept" in out.splitlines()
    assert out.splitlines()[-1].startswith(
        f"dropped {dropped_long + dropped_forked} checkpoints of {1 + (dropped_forked > 0)} threads "
        "(2 last updated"
    )
    assert expected["old-long"] == set(lineage("old-long"))
    assert expected["old-forked"] == set(lineage("old-forked"))
    assert before["young-long"] == lineage("young-long")
    assert {"old-long", "old-forked", "young-long"} == thread_ids(checkpointer)
    # The pruned threads still read whole.
    latest = checkpointer.get("old-long")
    assert latest is not None
    assert 12 == latest.channels["n"]


def test_gc_keep_last_skips_a_held_thread(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """A thread a run holds is not pruned by `gc --keep-last`: its checkpoints stay as they were."""
    long_thread(checkpointer, "old-held", 5)
    store.age("old-held", 40)
    before = [c.id for c in checkpointer.list("old-held")]
    with checkpointer.hold("old-held"):
        status, out, err = cli(capsys, "--db", store.db, "gc", "--older-than", "30d", "--keep-last", "1")
    assert (0, "") == (status, err)
    assert "kept 1 thread that a run holds now" == out.splitlines()[-1]
    assert before == [c.id for c in checkpointer.list("old-held")]


# --- what the library logs for operators ----------------------------------------------------------


def ilmek_records(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[logging.LogRecord]:
    """The records of ``logger`` whose message contains ``text``."""
    return [record for record in caplog.records if record.name == logger and text in record.getMessage()]


def counting_graph() -> CompiledGraph:
    """One node, one step: the smallest run that writes."""

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"n": ctx.step("count", lambda: state["n"] + 1)}

    return (
        graph("ops-log", {"n": channel.last_write(0)})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def test_a_sqlite_write_lock_held_elsewhere_is_retried_and_logged_with_the_thread(
    caplog: pytest.LogCaptureFixture, tmp_path: pathlib.Path
) -> None:
    """Another connection holds BEGIN IMMEDIATE a moment: the run's write retries, `ilmek.storage` says so."""
    path = tmp_path / "locked.db"
    with SqliteCheckpointer(path, busy_timeout=0.01) as checkpointer:
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            release = threading.Timer(0.2, lambda: blocker.execute("COMMIT"))
            release.start()
            with caplog.at_level(logging.INFO, logger="ilmek"):
                result = run(counting_graph(), {}, thread_id="locked-out", checkpointer=checkpointer)
            release.join()
        finally:
            blocker.close()
    assert "done" == result.status
    retries = ilmek_records(caplog, "ilmek.storage", "retrying after a transient database error")
    assert retries, [record.getMessage() for record in caplog.records]
    assert {"locked-out"} == {getattr(record, "thread_id", None) for record in retries}
    assert all("database is locked" in record.getMessage() for record in retries)


@pytest.mark.postgres
def test_a_postgres_lock_timeout_is_retried_and_logged_with_the_thread(
    caplog: pytest.LogCaptureFixture, postgres_dsn: str
) -> None:
    """A table lock held elsewhere past lock_timeout (55P03): retried; `ilmek.storage` names the thread."""
    pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, options="-c lock_timeout=50")
    blocker = psycopg2.connect(postgres_dsn)
    try:
        checkpointer = PostgresCheckpointer(pool)
        checkpointer.migrate()
        with blocker.cursor() as cursor:
            cursor.execute("LOCK TABLE ilmek_threads IN ACCESS EXCLUSIVE MODE")
        release = threading.Timer(0.3, blocker.commit)
        release.start()
        with caplog.at_level(logging.INFO, logger="ilmek"):
            checkpointer.put_thread_metadata("locked-out", {"owner": "ops"})
        release.join()
        checkpointer.close()
    finally:
        blocker.close()
        pool.closeall()
    retries = ilmek_records(caplog, "ilmek.storage", "retrying after a transient database error")
    assert retries, [record.getMessage() for record in caplog.records]
    assert {"locked-out"} == {getattr(record, "thread_id", None) for record in retries}


def test_a_run_whose_thread_is_deleted_logs_its_lost_hold_with_the_thread(
    caplog: pytest.LogCaptureFixture, store: Store
) -> None:
    """delete_thread while a run holds the thread: its hold is lost, `ilmek.holds` warns naming the thread."""
    checkpointer, other = store.open(), store.open()
    started, go_on = threading.Event(), threading.Event()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", lambda: "recorded")
        started.set()
        assert go_on.wait(WAIT_SECONDS)
        ctx.step("after", lambda: "never recorded")
        return {"n": 1}

    g = graph("ops-doomed", {"n": channel.last_write(0)}).node("work", work).edge(START, "work").compile()
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            run(g, {}, thread_id="doomed", checkpointer=checkpointer)
        except HoldLostError as error:
            failures.append(error)

    with caplog.at_level(logging.INFO, logger="ilmek"):
        runner = threading.Thread(target=drive)
        runner.start()
        assert started.wait(WAIT_SECONDS)
        other.delete_thread("doomed")
        go_on.set()
        runner.join(WAIT_SECONDS)
    assert 1 == len(failures)
    [lost] = ilmek_records(caplog, "ilmek.holds", "lost the hold on thread 'doomed'")
    assert (logging.WARNING, "doomed") == (lost.levelno, getattr(lost, "thread_id", None))
    [deleted] = ilmek_records(caplog, "ilmek.storage", "deleted thread 'doomed'")
    assert "doomed" == getattr(deleted, "thread_id", None)


def test_creating_the_tables_logs_the_migration(caplog: pytest.LogCaptureFixture, store: Store) -> None:
    """A fresh store's tables created: `ilmek.storage` logs the schema versions, from 0 to the current one."""
    if store.kind == "sqlite":
        path = store.path.with_name("fresh.db")

        def migrate() -> None:
            SqliteCheckpointer(path).close()
    else:
        store.sql(
            "DROP TABLE ilmek_checkpoints, ilmek_journals, ilmek_threads, ilmek_blobs, ilmek_logs, "
            "ilmek_items, ilmek_holds, ilmek_meta"
        )

        def migrate() -> None:
            with PostgresCheckpointer.connect(store.dsn) as fresh:
                fresh.migrate()  # type: ignore[attr-defined]

    with caplog.at_level(logging.INFO, logger="ilmek"):
        migrate()
    [record] = ilmek_records(caplog, "ilmek.storage", "migrated the ilmek_* tables")
    current = (SqliteCheckpointer if store.kind == "sqlite" else PostgresCheckpointer).SCHEMA_VERSION
    assert f"from schema version 0 to {current}" in record.getMessage()


def test_recover_logs_each_thread_it_continued_with_its_checkpoint(
    caplog: pytest.LogCaptureFixture, checkpointer: Checkpointer, modules: Modules, effects: Effects
) -> None:
    """`ilmek.operations` logs each recovered thread with `thread_id` and the `checkpoint_id` it ended at."""
    flag = modules.folder / "fixed"
    reference = modules.flaky(effects, flag)
    failed_threads(checkpointer, reference, ["stalled"])
    flag.touch()
    with caplog.at_level(logging.INFO, logger="ilmek"):
        [result] = recover(load_graph(reference), checkpointer)
    [record] = ilmek_records(caplog, "ilmek.operations", "recovered thread 'stalled': done")
    assert ("stalled", result.checkpoint_id) == (
        getattr(record, "thread_id", None),
        getattr(record, "checkpoint_id", None),
    )
    assert result.checkpoint_id is not None


def test_a_cancel_is_logged_where_it_is_asked_and_where_the_run_sees_it(
    caplog: pytest.LogCaptureFixture, store: Store
) -> None:
    """request_cancel is logged by the asking side and by the run's hold (`ilmek.holds`), with the thread."""
    checkpointer, operator = store.open(), store.open()

    def tick(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.01)
        return {"n": state["n"] + 1}

    g = (
        graph("ops-tick", {"n": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .router("tick", lambda state: "tick" if state["n"] < 100_000 else END, destinations=["tick", END])
        .compile()
    )
    results: list[Any] = []
    with caplog.at_level(logging.INFO, logger="ilmek"):
        runner = threading.Thread(
            target=lambda: results.append(
                run(g, {}, thread_id="ticking", checkpointer=checkpointer, recursion_limit=10**6)
            )
        )
        runner.start()
        wait_until(lambda: request_cancel(operator, "ticking", "log me"), "the run holds its thread")
        runner.join(WAIT_SECONDS)
    [result] = results
    assert ("aborted", "log me") == (result.status, result.abort_reason)
    [asked] = [
        r
        for r in caplog.records
        if "asked the run holding thread 'ticking' to cancel: log me" in r.getMessage()
    ]
    assert asked.name.startswith("ilmek.")
    assert "ticking" == getattr(asked, "thread_id", None)
    [seen] = ilmek_records(caplog, "ilmek.holds", "cancel requested for thread 'ticking': log me")
    assert "ticking" == getattr(seen, "thread_id", None)


def test_a_retried_checkpoint_commit_is_logged_with_the_checkpoint(
    caplog: pytest.LogCaptureFixture, tmp_path: pathlib.Path
) -> None:
    """A superstep's commit meets a write lock held elsewhere: the retry's record names thread and checkpoint.

    The checkpoint being committed is known when its commit is retried, so
    the record carries its id (``checkpoint_id``), as the README promises
    operators who search their logs by checkpoint.
    """
    path = tmp_path / "locked.db"
    with SqliteCheckpointer(path, busy_timeout=0.01) as checkpointer:
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        timers: list[threading.Timer] = []

        def work(state: dict[str, Any]) -> dict[str, Any]:
            # Lock the file from another connection just before the superstep commits.
            blocker.execute("BEGIN IMMEDIATE")
            timers.append(threading.Timer(0.2, lambda: blocker.execute("COMMIT")))
            timers[-1].start()
            return {"n": 1}

        g = graph("ops-commit", {"n": channel.last_write(0)}).node("work", work).edge(START, "work").compile()
        try:
            with caplog.at_level(logging.INFO, logger="ilmek"):
                result = run(g, {}, thread_id="committing", checkpointer=checkpointer)
            for timer in timers:
                timer.join()
        finally:
            blocker.close()
    assert "done" == result.status
    retries = ilmek_records(caplog, "ilmek.storage", "retrying after a transient database error")
    assert retries, [record.getMessage() for record in caplog.records]
    assert {("committing", result.checkpoint_id)} == {
        (getattr(record, "thread_id", None), getattr(record, "checkpoint_id", None)) for record in retries
    }
