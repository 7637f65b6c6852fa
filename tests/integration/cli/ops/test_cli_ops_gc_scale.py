"""``ilmek gc`` on thousands of threads: a summary (never a line per thread), a progress line on a terminal.

The store is built with plain SQL (thousands of runs would take minutes):
old threads with one checkpoint (nothing to prune), old threads with four,
young ones, and one a run holds. ``--keep-last`` prunes exactly the long
old ones; ``--verbose`` lists them; ``--json`` is one document; on a
terminal stderr carries a progress line rewritten in place.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time

import pytest

from ilmek.checkpoint.base import Checkpointer
from tests.support.cli_ops import DAY, WAIT_SECONDS, Store
from tests.support.cli_support import REPO_ROOT, cli

pytestmark = pytest.mark.timeout(120)

SHORT, LONG, YOUNG = 2000, 500, 100
OLD = SHORT + LONG  # the old threads no run holds


def add_threads(store: Store, name: str, count: int, checkpoints: int, days_old: float) -> None:
    """``count`` threads ``<name>-00000``..., each ``checkpoints`` in a line, updated ``days_old`` ago."""
    moment = time.time() - days_old * DAY
    if store.kind == "sqlite":
        thread = "printf('%s-%05d', ?, t.i)"
        rows = "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ?) SELECT i FROM s"
        checkpoint, previous, json_ = "'c' || c.i", "'c' || (c.i - 1)", "'{}'"
    else:
        thread = "? || '-' || lpad(t.i::text, 5, '0')"
        rows = "SELECT generate_series(0, ?) AS i"
        checkpoint, previous, json_ = "'c' || c.i", "'c' || (c.i - 1)", "'{}'::jsonb"
    store.sql(
        "INSERT INTO ilmek_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
        "metadata) "
        f"SELECT {thread}, ?, ? + t.i * 0.001, 'done', ?, ?, {json_} FROM ({rows}) AS t",
        name, moment, moment, checkpoints - 1, f"c{checkpoints - 1}", count - 1,
    )  # fmt: skip
    store.sql(
        "INSERT INTO ilmek_checkpoints (thread_id, checkpoint_id, parent_id, plan_id, step, ts, manifest, "
        "next, pending, task_journals, metadata, journal_chain) "
        f"SELECT {thread}, {checkpoint}, CASE WHEN c.i = 0 THEN NULL ELSE {previous} END, NULL, c.i, ?, "
        f"{json_}, {json_.replace('{}', '[]')}, {json_.replace('{}', '[]')}, {json_}, {json_}, "
        f"{json_.replace('{}', '[]')} FROM ({rows}) AS t, ({rows}) AS c",
        name, moment, count - 1, checkpoints - 1,
    )  # fmt: skip


@pytest.fixture
def crowded(store: Store, checkpointer: Checkpointer) -> Store:
    """2,000 old one-checkpoint threads, 500 old four-checkpoint ones, 100 young ones, one old held one."""
    add_threads(store, "short", SHORT, 1, 40)
    add_threads(store, "long", LONG, 4, 40)
    add_threads(store, "young", YOUNG, 4, 1)
    add_threads(store, "held", 1, 4, 40)
    assert SHORT + LONG + YOUNG + 1 == len(checkpointer.list_threads())
    return store


def checkpoint_counts(store: Store) -> dict[int, int]:
    """How many threads have each number of checkpoints."""
    rows = store.sql(
        "SELECT n, COUNT(*) FROM (SELECT COUNT(*) AS n FROM ilmek_checkpoints GROUP BY thread_id) AS x "
        "GROUP BY n"
    )
    return {int(n): int(threads) for n, threads in rows}


def test_gc_keep_last_on_thousands_of_threads_prints_a_summary_and_prunes_only_the_long_ones(
    capsys: pytest.CaptureFixture[str], crowded: Store, checkpointer: Checkpointer
) -> None:
    """Off a terminal: two summary lines, nothing on stderr; the 500 long old threads keep their newest."""
    before = checkpoint_counts(crowded)
    assert {1: SHORT, 4: LONG + YOUNG + 1} == before
    gc = ["--db", crowded.db, "gc", "--older-than", "30d", "--keep-last", "1"]
    with checkpointer.hold("held-00000"):
        status, out, err = cli(capsys, *gc, "--dry-run")
        assert (0, "") == (status, err)
        lines = out.splitlines()
        assert 2 == len(lines), out[:500]
        assert lines[0].startswith(f"would drop 1,500 checkpoints of {LONG} threads ({OLD:,} last updated ")
        assert "kept 1 thread that a run holds now" == lines[1]
        assert before == checkpoint_counts(crowded)

        status, out, err = cli(capsys, *gc)
    assert (0, "") == (status, err)
    lines = out.splitlines()
    assert 2 == len(lines), out[:500]
    assert lines[0].startswith(f"dropped 1,500 checkpoints of {LONG} threads ({OLD:,} last updated before ")
    assert "kept 1 thread that a run holds now" == lines[1]
    assert {1: SHORT + LONG, 4: YOUNG + 1} == checkpoint_counts(crowded)
    # Each kept the newest, which still reads whole.
    latest = checkpointer.get("long-00042")
    assert latest is not None
    assert "c3" == latest.id
    assert ["c3"] == [c.id for c in checkpointer.list("long-00042")]

    # Again, the run gone: only the thread it held is left to prune.
    status, out, err = cli(capsys, *gc)
    assert (0, "") == (status, err)
    assert out.startswith(f"dropped 3 checkpoints of 1 thread ({OLD + 1:,} last updated before ")
    assert {1: SHORT + LONG + 1, 4: YOUNG} == checkpoint_counts(crowded)


def test_gc_json_is_one_document_and_verbose_lists_each_thread(
    capsys: pytest.CaptureFixture[str], crowded: Store
) -> None:
    """`gc --json` carries the counts under stable keys; with --verbose, `listed` has each thread pruned."""
    gc = ["--db", crowded.db, "gc", "--older-than", "30d", "--keep-last", "1", "--json"]
    status, out, err = cli(capsys, *gc, "--dry-run")
    assert (0, "") == (status, err)
    document = json.loads(out)
    assert {
        "action": "prune",
        "dry_run": True,
        "status": None,
        "keep_last": 1,
        "threads": LONG + 1,
        "old_threads": OLD + 1,
        "checkpoints_dropped": 3 * LONG + 3,
        "running": 0,
        "skipped": [],
        "listed": None,
    } == {key: value for key, value in document.items() if key != "older_than"}
    assert document["older_than"].endswith("+00:00")

    status, out, err = cli(capsys, *gc, "--verbose")
    assert (0, "") == (status, err)
    listed = json.loads(out)["listed"]
    assert LONG + 1 == len(listed)
    assert {"thread", "status", "updated_at", "checkpoints", "dropped", "kept"} == set(listed[0])
    assert {(4, 3, 1)} == {(entry["checkpoints"], entry["dropped"], entry["kept"]) for entry in listed}
    assert sorted(listed, key=lambda entry: entry["updated_at"]) == listed

    status, out, err = cli(capsys, "--db", crowded.db, "gc", "--older-than", "30d", "--json")
    assert (0, "") == (status, err)
    deleted = json.loads(out)
    assert ("delete", OLD + 1, OLD + 1, None) == (
        deleted["action"],
        deleted["threads"],
        deleted["old_threads"],
        deleted["checkpoints_dropped"],
    )
    assert {4: YOUNG} == checkpoint_counts(crowded)


def gc_on_a_terminal(store: Store, *argv: str) -> tuple[int, str, str]:
    """`python -m ilmek gc ...`, stderr on a pseudo-terminal: exit status, stdout, what the terminal got."""
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "ilmek", "--db", store.db, "gc", *argv],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
        )
        os.close(secondary)
        secondary = -1
        out, _ = process.communicate(timeout=WAIT_SECONDS * 2)
        terminal = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the process and its terminal are gone
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    return process.returncode, out.decode(), terminal.decode()


def test_gc_on_a_terminal_shows_a_progress_line_rewritten_in_place(crowded: Store) -> None:
    """On a terminal: `\\rpruned N / 501 threads` redrawn, ending at 501 / 501; stdout stays the summary."""
    status, out, terminal = gc_on_a_terminal(crowded, "--older-than", "30d", "--keep-last", "1")
    assert 0 == status, terminal
    assert terminal.startswith("\rpruned ")
    assert terminal.rstrip().endswith(f"pruned {LONG + 1} / {LONG + 1} threads")
    assert 1 == terminal.count("\n")
    assert 1 == len(out.splitlines())
    assert out.startswith(f"dropped {3 * LONG + 3:,} checkpoints of {LONG + 1} threads ")

    status, out, terminal = gc_on_a_terminal(crowded, "--older-than", "30d")
    assert 0 == status, terminal
    assert terminal.rstrip().endswith(f"deleted {OLD + 1:,} / {OLD + 1:,} threads")
    assert 1 == len(out.splitlines())
    assert out.startswith(f"deleted {OLD + 1:,} threads last updated before ")
