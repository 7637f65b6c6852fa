"""Instructions per operation, counted by valgrind: figures the machine's noise does not move.

Time on a shared machine swings by tens of percent from one minute to the
next; the number of instructions a process executes does not (runs agree
to about 0.5%). Each workload runs in a child process under ``valgrind
--tool=cachegrind --cache-sim=no`` twice, with ``--sizes`` operations after
the same warm-up; the difference of the two counts divided by the
difference of the sizes is one operation's instructions, start-up and
imports cancelled out. The garbage collector is off in the child (it runs
when allocations say so, not per operation). Threads' instructions count
too (a pool's workers); waiting does not (disk, locks, a thread hand-off),
which is what makes the count steady and also what it leaves out: it is
the CPU work, not the time.

Workloads, on each ``--store`` (``memory``; ``sqlite``: a file in a
temporary folder, WAL, ``synchronous=FULL``, whose fsyncs cost no
instructions):

* **W1**: a 3-node chain, one run per new thread (``bench_langgraph.py``'s);
* **turn**: a run with input on one chat thread (a message in, a reply out);
* **superstep**: one superstep of a run of 100 (a node that appends a
  message and routes back to itself).

LangGraph (the ``bench`` extra; left out without it) runs W1 and the turn on
its savers, ``durability="sync"``, as ``bench_langgraph.py`` does. Printed:
instructions per operation of each, and the ratio LangGraph / ilmek.

Valgrind is a Debian package (``apt-get install valgrind``); without it the
script says so. A run takes a minute or two: valgrind runs Python about
fifty times slower.

Usage: ``python benchmarks/bench_instructions.py [--store memory sqlite] [--workload W1 turn superstep]
[--sizes 40 120]``
"""

from __future__ import annotations

import argparse
import gc
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import chat_graph, message, positive_int, print_table, ratio

from ilmek import END, START, Checkpointer, InMemoryCheckpointer, SqliteCheckpointer, channel, graph, run

STORES = ("memory", "sqlite")
WORKLOADS = ("W1", "turn", "superstep")
SUPERSTEPS_PER_RUN = 100
WARM_UP = 20
"""Operations run before the measured ones, the same number at both sizes."""

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


# --- the child: one workload, under valgrind ----------------------------------------------


def _ilmek_checkpointer(store: str, folder: Path) -> Checkpointer:
    if store == "memory":
        return InMemoryCheckpointer()
    checkpointer = SqliteCheckpointer(str(folder / "ilmek.db"))
    checkpointer.migrate()
    return checkpointer


def _ilmek_operation(workload: str, store: str, folder: Path) -> Callable[[int], None]:
    from bench_langgraph import ilmek_chain

    checkpointer = _ilmek_checkpointer(store, folder)
    if workload == "W1":
        chain, start = ilmek_chain(), {"log": ["start"]}
        return lambda number: _done(run(chain, start, thread_id=f"chain-{number}", checkpointer=checkpointer))
    if workload == "turn":
        chat = chat_graph()
        return lambda number: _done(
            run(chat, {"messages": message("user", number)}, thread_id="chat", checkpointer=checkpointer)
        )

    def think(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": message("assistant", len(state["messages"]))}

    def again(state: dict[str, Any]) -> str:
        return "think" if len(state["messages"]) <= SUPERSTEPS_PER_RUN else END

    loop = (
        graph("loop", {"messages": channel.append()})
        .node("think", think)
        .edge(START, "think")
        .router("think", again)
        .compile()
    )

    def runs(number: int) -> None:
        # One operation is one superstep: a run of 100 each hundredth operation.
        if number % SUPERSTEPS_PER_RUN == 0:
            _done(
                run(
                    loop,
                    {"messages": ["go"]},
                    thread_id=f"loop-{number}",
                    checkpointer=checkpointer,
                    recursion_limit=SUPERSTEPS_PER_RUN + 1,
                )
            )

    return runs


def _langgraph_operation(workload: str, store: str, folder: Path) -> Callable[[int], None]:
    import sqlite3

    from bench_langgraph import DURABILITY, LangGraph, thread

    langgraph = LangGraph()
    if store == "memory":
        saver = langgraph.memory_saver()
    else:
        connection = sqlite3.connect(folder / "langgraph.db", check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL").fetchall()
        connection.execute("PRAGMA synchronous = FULL")
        saver = langgraph.sqlite_saver(connection)
    if workload == "W1":
        chain, start = langgraph.chain(saver), {"log": ["start"]}

        def chain_run(number: int) -> None:
            chain.invoke(start, thread(f"chain-{number}"), durability=DURABILITY)

        return chain_run

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [message("assistant", len(state["messages"]))]}

    chat = langgraph.chat(saver, reply)

    def turn(number: int) -> None:
        chat.invoke({"messages": [message("user", number)]}, thread("chat"), durability=DURABILITY)

    return turn


def _done(result: Any) -> None:
    if result.status != "done":
        raise RuntimeError(f"the benchmark's run ended {result.status!r}, not 'done'")


def child(system: str, workload: str, store: str, operations: int) -> None:
    """Run ``operations`` operations of ``workload`` after the warm-up (what valgrind counts)."""
    with tempfile.TemporaryDirectory(prefix="ilmek-instructions-") as folder:
        make = _ilmek_operation if system == "ilmek" else _langgraph_operation
        operation = make(workload, store, Path(folder))
        gc.disable()
        for number in itertools.count():
            if number == WARM_UP + operations:
                break
            operation(number)


# --- the parent: count, subtract, print ---------------------------------------------------


def count(system: str, workload: str, store: str, operations: int) -> int:
    """The instructions a child process runs for ``operations`` operations (warm-up and start-up in)."""
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        system,
        workload,
        store,
        str(operations),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_operation(system: str, workload: str, store: str, sizes: Sequence[int]) -> float:
    small, large = sizes
    if workload == "superstep":  # whole runs of SUPERSTEPS_PER_RUN, at least one more in the larger
        runs = -(-small // SUPERSTEPS_PER_RUN)
        small, large = (
            runs * SUPERSTEPS_PER_RUN,
            max(runs + 1, -(-large // SUPERSTEPS_PER_RUN)) * SUPERSTEPS_PER_RUN,
        )
    return (count(system, workload, store, large) - count(system, workload, store, small)) / (large - small)


def langgraph_installed() -> bool:
    try:
        from bench_langgraph import LangGraph

        LangGraph()
    except ImportError:
        return False
    return True


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", nargs="+", choices=STORES, default=list(STORES))
    parser.add_argument("--workload", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument(
        "--sizes",
        nargs=2,
        type=positive_int,
        default=[40, 120],
        metavar=("SMALL", "LARGE"),
        help="operations counted in the two runs of each workload (default 40 120; the superstep "
        f"rounds up to whole runs of {SUPERSTEPS_PER_RUN})",
    )
    parser.add_argument(
        "--child", nargs=4, metavar=("SYSTEM", "WORKLOAD", "STORE", "N"), help=argparse.SUPPRESS
    )
    options = parser.parse_args(argv)
    if options.sizes[0] >= options.sizes[1]:
        parser.error("--sizes: the second size must be larger than the first")
    return options


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    if options.child is not None:
        system, workload, store, operations = options.child
        child(system, workload, store, int(operations))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench_instructions: valgrind is not installed (Debian: apt-get install valgrind)")
    with_langgraph = langgraph_installed()
    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=False).stdout
    print(
        f"bench_instructions: python {sys.version.split()[0]}, {version.strip()} (cachegrind), "
        "instructions per operation",
        flush=True,
    )
    print(
        f"each figure: (count at {options.sizes[1]} operations - count at {options.sizes[0]}) / "
        f"the difference, after {WARM_UP} operations of warm-up; garbage collector off"
    )
    if not with_langgraph:
        print("LangGraph is not installed (pip install -e '.[bench]'): ilmek alone")
    rows = []
    for store in options.store:
        for workload in options.workload:
            mine = per_operation("ilmek", workload, store, options.sizes)
            theirs = (
                per_operation("langgraph", workload, store, options.sizes)
                if with_langgraph and workload != "superstep"
                else None
            )
            rows.append(
                [
                    store,
                    workload,
                    f"{mine:,.0f}",
                    "-" if theirs is None else f"{theirs:,.0f}",
                    "-" if theirs is None else f"{ratio(theirs, mine):.2f}",
                ]
            )
    print_table(
        "instructions per operation",
        ["store", "workload", "ilmek", "LangGraph", "LangGraph / ilmek"],
        rows,
    )


if __name__ == "__main__":
    main()
