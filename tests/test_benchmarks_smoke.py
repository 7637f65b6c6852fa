"""The benchmark scripts run to the end at a tiny size and print their tables.

Not a timing test: the machine may be slow or busy, so only the exit code
and the tables' headers are checked; the figures are for people to read.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def run_script(name: str, *arguments: str) -> str:
    """Run ``benchmarks/<name>`` in a fresh interpreter; return its output, failing on a non-zero exit."""
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *arguments],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert 0 == completed.returncode, completed.stderr
    return completed.stdout


def test_history_prints_both_workloads_and_the_ratios(tmp_path: pathlib.Path) -> None:
    """bench_history.py measures turns and loop supersteps on a short and a long thread."""
    output = run_script(
        "bench_history.py",
        "--history", "20", "--samples", "2", "--batch", "2", "--synchronous", "NORMAL", "--db", str(tmp_path),
    )  # fmt: skip

    for header in (
        "turns: one turn = an input checkpoint + 1 superstep",
        "loop: one superstep = 1 checkpoint",
        "ms/turn",
        "stored B/turn",
        "WAL B/turn",
        "ms/superstep",
        "long/short",
        "summary: long (20) / short (10) history",
    ):
        assert header in output


def test_floor_prints_times_ratios_and_statements(tmp_path: pathlib.Path) -> None:
    """bench_floor.py compares a superstep with a bare insert and lists the SQL it sent."""
    output = run_script("bench_floor.py", "--samples", "2", "--batch", "2", "--db", str(tmp_path))

    for header in (
        "time and bytes per operation",
        "ratio to bare",
        "bare insert + commit",
        "ilmek superstep",
        "SQL per operation",
        "write transactions",
        "the statements of one superstep, in order",
        "COMMIT",
    ):
        assert header in output
