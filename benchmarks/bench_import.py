"""How long does ``import ilmek`` take, beyond the ``attrs`` it depends on?

Each measurement is a fresh interpreter running one statement: ``pass`` (the
interpreter's own start), ``import attrs`` and ``import ilmek``, in rotating
order, ``--runs`` of each (default 21) after one unrecorded warm-up of each
(which also writes the bytecode caches). For each: the median wall time and
the median CPU time of the child (user + system, from ``getrusage``; the
steadier figure on a busy machine). ilmek's own share is ``import ilmek``
minus ``import attrs``; the goal is at most 40 ms.

Last, what ``import ilmek`` loaded that a program may not need: sqlite3, a
backend module, a database driver (none of them, once every backend is
imported lazily).

Run it from the repository root with the project's interpreter; the children
run in the checkout's root, so they import its ``ilmek``::

    .venv/bin/python benchmarks/bench_import.py            # about 10 s
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from _common import positive_int, print_table

CHECKOUT = pathlib.Path(__file__).resolve().parent.parent

STATEMENTS = {"interpreter start": "pass", "import attrs": "import attrs", "import ilmek": "import ilmek"}

GOAL_MS = 40.0
"""ilmek's own share of an import, at most."""

UNSET_FOR_CHILDREN = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE")
"""What would point the children at another ilmek, change what they import, or
keep the warm-up from writing the bytecode caches an installed package has
(without them every import compiles every module again: 40 ms more)."""

NOT_NEEDED = (
    "sqlite3",
    "_sqlite3",
    "ilmek.checkpoint.sqlite",
    "ilmek.checkpoint.postgres",
    "ilmek.checkpoint.memory",
    "psycopg2",
    "psycopg",
)
"""Modules a program that imports ilmek may never use."""


def child_env() -> dict[str, str]:
    """This environment minus ``UNSET_FOR_CHILDREN``."""
    return {key: value for key, value in os.environ.items() if key not in UNSET_FOR_CHILDREN}


def measure(statement: str) -> tuple[float, float]:
    """Wall and CPU seconds of a fresh interpreter running ``statement``."""
    before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], cwd=CHECKOUT, env=child_env(), check=True)
    wall = time.perf_counter() - start
    after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after_cpu.ru_utime - before_cpu.ru_utime) + (after_cpu.ru_stime - before_cpu.ru_stime)
    return wall, cpu


def loaded_by_import() -> tuple[str, list[str]]:
    """Where the children's ilmek comes from, and which of ``NOT_NEEDED`` it loads."""
    probe = (
        "import sys, ilmek\n"
        "print(ilmek.__file__)\n"
        f"print(' '.join(m for m in {NOT_NEEDED!r} if m in sys.modules))"
    )
    child = [sys.executable, "-c", probe]
    out = subprocess.run(child, cwd=CHECKOUT, env=child_env(), check=True, capture_output=True, text=True)
    lines = out.stdout.splitlines()
    return lines[0], lines[1].split() if len(lines) > 1 else []


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=positive_int, default=21, help="measured runs of each statement")
    options = parser.parse_args(argv)

    where, loaded = loaded_by_import()
    print(f"bench_import: {where}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; times are medians of fresh interpreters")

    labels = list(STATEMENTS)
    for label in labels:  # warm-up: bytecode caches, the file system's cache
        measure(STATEMENTS[label])
    wall: dict[str, list[float]] = {label: [] for label in labels}
    cpu: dict[str, list[float]] = {label: [] for label in labels}
    for run in range(options.runs):
        # Rotate the order so that no statement always follows the same one.
        for label in labels[run % len(labels) :] + labels[: run % len(labels)]:
            seconds, cpu_seconds = measure(STATEMENTS[label])
            wall[label].append(seconds)
            cpu[label].append(cpu_seconds)

    def ms(samples: list[float]) -> float:
        return statistics.median(samples) * 1000.0

    print_table(
        f"a fresh interpreter running one statement ({options.runs} runs each)",
        ["statement", "wall ms", "CPU ms"],
        [[label, ms(wall[label]), ms(cpu[label])] for label in labels],
    )
    own_wall = ms(wall["import ilmek"]) - ms(wall["import attrs"])
    own_cpu = ms(cpu["import ilmek"]) - ms(cpu["import attrs"])
    print_table(
        f"ilmek's own share (import ilmek - import attrs; goal: at most {GOAL_MS:.0f} ms)",
        ["", "wall ms", "CPU ms"],
        [["ilmek", own_wall, own_cpu]],
    )
    print(f"\nimport ilmek also loads: {' '.join(loaded) if loaded else 'none of ' + ', '.join(NOT_NEEDED)}")


if __name__ == "__main__":
    main()
