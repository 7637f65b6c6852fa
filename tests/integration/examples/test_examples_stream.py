"""examples/stream_checkout.py runs as a script and prints the run as it happens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "stream_checkout.py"


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the example from the repository root, as its docstring says to."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT.relative_to(ROOT)), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def event_lines(output: str) -> list[tuple[int, str]]:
    """(seq, type) of each event line, in printed order."""
    return [(int(seq), kind) for seq, kind in re.findall(r"^ *(\d+) (\w+)", output, flags=re.MULTILINE)]


def test_the_example_streams_the_run_then_the_resume() -> None:
    """One line per event; tokens share one line; the resume is a run whose seq restarts at 1."""
    done = run_example()
    assert 0 == done.returncode, done.stderr
    assert "" == done.stderr
    first, second = done.stdout.split("== resume: Charge 249.9? yes\n")
    assert first.startswith("== run\n")
    assert [
        (1, "run_start"),
        (2, "state"),
        (3, "checkpoint"),
        (4, "step_start"),
        (5, "node_start"),
        (6, "tokens"),
        (14, "node_end"),
        (15, "state"),
        (16, "checkpoint"),
        (17, "step_start"),
        (18, "node_start"),
        (19, "checkpoint"),
        (20, "interrupt"),
        (21, "run_end"),
    ] == event_lines(first)
    assert "  6 tokens      Your order of 2 items comes to 249.9. \n" in first
    assert " 20 interrupt   confirm:interrupt#0 asks {'question': 'Charge 249.9?'}\n" in first
    assert " 21 run_end     interrupted\n" in first
    kinds = [kind for _, kind in event_lines(second)]
    assert list(range(1, len(kinds) + 1)) == [seq for seq, _ in event_lines(second)]
    assert ["run_start", "step_start", "node_start", "node_end", "state", "checkpoint"] == kinds[:6]
    assert ["custom", "node_retry", "custom", "node_end"] == kinds[8:12]
    assert "charge attempt 1 failed (payment gateway timed out); retrying" in second
    assert second.endswith(" run_end     done\n")
    assert 1 == done.stdout.count("(creating an order for coffee, mug)")
    assert 1 == done.stdout.count("(charging 249.9)")


def test_declining_charges_nothing_and_a_sqlite_file_works(tmp_path: Path) -> None:
    """--answer no skips the charge; --db keeps the thread in a SQLite file."""
    database = tmp_path / "shop.db"
    declined = run_example("--answer", "no", "--db", str(database))
    assert 0 == declined.returncode, declined.stderr
    assert "== resume: Charge 249.9? no\n" in declined.stdout
    assert "charging" not in declined.stdout
    assert "node_retry" not in declined.stdout
    assert declined.stdout.endswith(" run_end     done\n")
    assert database.exists()
