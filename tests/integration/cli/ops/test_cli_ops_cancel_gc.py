"""``ilmek cancel`` and ``ilmek gc``: a run cancelled from another process; old threads deleted or pruned.

``gc`` deletes exactly the old threads, narrows by status, prunes to the
newest checkpoints with ``--keep-last``, and never touches a held thread.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from ilmek import END, START, channel, graph, run
from ilmek.checkpoint.base import Checkpointer, checkpoints_to_keep
from tests.support.cli_ops import (
    EVIL,
    LOOP_MODULE,
    RUNNER,
    WAIT_SECONDS,
    Modules,
    Store,
    ilmek_command,
    wait_until,
)
from tests.support.cli_support import REPO_ROOT, cli, finished_order, forked_order, paused_order, raw_controls

pytestmark = pytest.mark.timeout(120)


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
    """`gc --older-than 30d` deletes every thread idle that long but a held one; --dry-run --verbose lists."""
    for thread_id in ("old-done", "old-paused", "old-held", "young"):
        forked_order(checkpointer, thread_id)
    paused_order(checkpointer, "old-waiting")
    for thread_id in ("old-done", "old-paused", "old-held", "old-waiting"):
        store.age(thread_id, 40)
    everything = thread_ids(checkpointer)

    with checkpointer.hold("old-held"):
        status, out, err = cli(
            capsys, "--db", store.db, "gc", "--older-than", "30d", "--dry-run", "--verbose"
        )
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
        capsys, "--db", store.db, "gc", "--older-than", "30d", "--keep-last", "2", "--dry-run", "--verbose"
    )
    assert (0, "") == (status, err)
    dropped_long = len(before["old-long"]) - 2
    dropped_forked = len(before["old-forked"]) - len(expected["old-forked"])
    assert f"thread 'old-long': would drop {dropped_long} checkpoints, 2 kept" in out.splitlines()
    assert before == {thread_id: lineage(thread_id) for thread_id in before}

    status, out, err = cli(
        capsys, "--db", store.db, "gc", "--older-than", "30d", "--keep-last", "2", "--verbose"
    )
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
