"""``ilmek recover``: failed and killed threads continued without repeating a completed step.

Threads stalled for real (a worker killed with SIGKILL mid-superstep, or a
node that raised) are recovered once, even by two recoverers at once; and the
library's ``recover()`` that the command relies on, racing another recoverer.
"""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import END, START, channel, graph, recover, run
from ilmek.checkpoint.base import Checkpointer
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.graph import CompiledGraph
from tests.support.cli_ops import (
    CRASH_MODULE,
    WAIT_SECONDS,
    Modules,
    Store,
    failed_threads,
    ilmek_command,
    ilmek_process,
    wait_until,
)
from tests.support.cli_support import cli, history_rows, raw_controls
from tests.support.crash import Workers
from tests.support.crashworker import Effects

pytestmark = pytest.mark.timeout(120)


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
